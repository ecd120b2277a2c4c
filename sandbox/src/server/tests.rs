#![allow(clippy::unwrap_used)]
//! Unit tests of the request handlers.

use super::common::*;
use super::watch::*;
use super::write::*;
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{Event, EventType};
use serde_json::{Value, json};
use std::sync::Arc;

#[test]
fn query_decoding() {
    let q = parse_query(Some(
        "labelSelector=app%3Dweb%2Ctier+in+%28a%29&watch=true&x",
    ));
    assert_eq!(q["labelSelector"], "app=web,tier in (a)");
    assert_eq!(q["watch"], "true");
    assert_eq!(q["x"], "");
    assert_eq!(percent_decode("%zz"), "%zz");
    assert_eq!(percent_decode("%"), "%");
}

#[test]
fn bodies() {
    assert!(decode_body("application/json", b"{").unwrap_err().code == 400);
    assert_eq!(
        decode_body("application/vnd.kubernetes.protobuf", b"x")
            .unwrap_err()
            .code,
        400
    );
    assert_eq!(decode_body("text/plain", b"x").unwrap_err().code, 415);
    assert_eq!(
        decode_body("application/yaml", b"a: 1\nb: [x]\n").unwrap(),
        json!({"a": 1, "b": ["x"]})
    );
    assert_eq!(
        decode_body("application/yaml", b"a: [").unwrap_err().code,
        400
    );
}

#[test]
fn status_subresource_rules() {
    let def = crate::resources::builtins()
        .into_iter()
        .find(|d| d.plural == "deployments")
        .unwrap();
    let old =
        json!({"metadata": {"name": "d"}, "spec": {"replicas": 1}, "status": {"replicas": 1}});
    let main = merge_for_subresource(
        &def,
        None,
        &old,
        json!({"metadata": {"name": "d"}, "spec": {"replicas": 2}, "status": {"replicas": 9}}),
    );
    assert_eq!(main["status"]["replicas"], 1);
    assert_eq!(main["spec"]["replicas"], 2);
    let st = merge_for_subresource(
        &def,
        Some("status"),
        &old,
        json!({"metadata": {"name": "d"}, "spec": {"replicas": 5}, "status": {"replicas": 3}}),
    );
    assert_eq!(st["status"]["replicas"], 3);
    assert_eq!(st["spec"]["replicas"], 1);
}

#[test]
fn scale_view() {
    let def = crate::resources::builtins()
        .into_iter()
        .find(|d| d.plural == "replicasets")
        .unwrap();
    let o = json!({"metadata": {"name": "r", "namespace": "n"}, "spec": {"replicas": 3, "selector": {"matchLabels": {"a": "b"}}}, "status": {"replicas": 2}});
    let s = scale_of(&def, &o);
    assert_eq!(
        (
            s["spec"]["replicas"].as_i64(),
            s["status"]["replicas"].as_i64()
        ),
        (Some(3), Some(2))
    );
    assert_eq!(s["status"]["selector"], "a=b");
    let mut o2 = o.clone();
    set_path(&mut o2, ".spec.replicas", json!(7)).unwrap();
    assert_eq!(o2["spec"]["replicas"], 7);
}

#[test]
fn watch_filter_transitions() {
    let f = WatchFilter {
        ns: None,
        name: None,
        ls: LabelSelector::parse("a=1").unwrap(),
        fs: FieldSelector::default(),
    };
    let inside = Arc::new(json!({"metadata": {"labels": {"a": "1"}}}));
    let outside = Arc::new(json!({"metadata": {"labels": {"a": "2"}}}));
    let ev = |old: &Arc<Value>, new: &Arc<Value>| Event {
        rv: 1,
        kind: EventType::Modified,
        obj: new.clone(),
        old: Some(old.clone()),
    };
    assert_eq!(f.translate(&ev(&outside, &inside)), Some(EventType::Added));
    assert_eq!(
        f.translate(&ev(&inside, &outside)),
        Some(EventType::Deleted)
    );
    assert_eq!(
        f.translate(&ev(&inside, &inside)),
        Some(EventType::Modified)
    );
    assert_eq!(f.translate(&ev(&outside, &outside)), None);
}

#[tokio::test]
async fn an_oversized_chunked_body_is_413_after_being_read_to_the_end() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let sent = std::sync::Arc::new(AtomicUsize::new(0));
    let counter = sent.clone();
    // 8 MiB in 64 KiB chunks, no length announced.
    let chunks = futures::stream::iter((0..128).map(move |_| {
        counter.fetch_add(1, Ordering::Relaxed);
        Ok::<_, std::io::Error>(bytes::Bytes::from(vec![b'x'; 64 * 1024]))
    }));
    let err = super::common::read_body(axum::body::Body::from_stream(chunks))
        .await
        .unwrap_err();
    assert_eq!(err.code, 413);
    assert_eq!(err.reason, "RequestEntityTooLarge");
    assert_eq!(
        sent.load(Ordering::Relaxed),
        128,
        "the rest of the body was read, not left unread"
    );
    let small = super::common::read_body(axum::body::Body::from("{}"))
        .await
        .unwrap();
    assert_eq!(&small[..], b"{}");
}
