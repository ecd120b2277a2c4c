//! Sandbox-only fault injection: unavailability, latency, injected error codes, counters.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{ListParams, PostParams};
use mcm_sandbox::{ErrorRule, UnavailableMode, Verb};

use crate::common::{EVENTUALLY, Target, api_error, configmap, wait_for};

/// A watch of the ConfigMaps from the current resourceVersion (a minute at most).
async fn watch_from_now(
    cms: &kube::Api<ConfigMap>,
) -> futures::stream::BoxStream<'static, kube::Result<kube::api::WatchEvent<ConfigMap>>> {
    use futures::StreamExt;
    let rv = cms
        .list(&ListParams::default())
        .await
        .expect("list")
        .metadata
        .resource_version
        .expect("list resourceVersion");
    cms.watch(&kube::api::WatchParams::default().timeout(60), &rv)
        .await
        .expect("open watch")
        .boxed()
}

fn secret(name: &str) -> Secret {
    serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).expect("secret literal")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unavailable_503_then_recovery() {
    let t = Target::sandbox_or_env().await;
    let Some(sb) = t.sandbox_only(
        "unavailable_503_then_recovery",
        "fault injection is sandbox-only",
    ) else {
        return t.finish().await;
    };
    let cms = t.api::<ConfigMap>();
    sb.faults()
        .set_unavailable(Duration::from_secs(2), UnavailableMode::ServiceUnavailable);
    let err = api_error(
        cms.list(&ListParams::default()).await,
        "list while unavailable",
    );
    assert_eq!(
        err.code, 503,
        "ServiceUnavailable mode answers 503: {err:?}"
    );
    wait_for(
        "API answers again after the unavailability window",
        EVENTUALLY,
        || {
            let cms = cms.clone();
            async move { cms.list(&ListParams::default()).await.ok().map(|_| ()) }
        },
    )
    .await;
    sb.faults().set_unavailable(
        Duration::from_secs(600),
        UnavailableMode::ServiceUnavailable,
    );
    assert_eq!(
        api_error(cms.get("x").await, "get while unavailable").code,
        503
    );
    sb.faults().clear_unavailable();
    cms.create(&PostParams::default(), &configmap("after", &[], &[]))
        .await
        .expect("clear_unavailable restores service at once");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unavailable_refuse_then_recovery() {
    let t = Target::sandbox_or_env().await;
    let Some(sb) = t.sandbox_only(
        "unavailable_refuse_then_recovery",
        "fault injection is sandbox-only",
    ) else {
        return t.finish().await;
    };
    let cms = t.api::<ConfigMap>();
    sb.faults()
        .set_unavailable(Duration::from_secs(2), UnavailableMode::Refuse);
    match cms.list(&ListParams::default()).await {
        Err(kube::Error::Api(s)) => {
            panic!("Refuse mode drops connections instead of answering; got Status {s:?}")
        }
        Err(_) => {}
        Ok(_) => panic!("Refuse mode: requests must fail while unavailable"),
    }
    wait_for(
        "connections accepted again after the window",
        EVENTUALLY,
        || {
            let cms = cms.clone();
            async move { cms.list(&ListParams::default()).await.ok().map(|_| ()) }
        },
    )
    .await;
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_is_added_to_requests() {
    let t = Target::sandbox_or_env().await;
    let Some(sb) = t.sandbox_only(
        "latency_is_added_to_requests",
        "fault injection is sandbox-only",
    ) else {
        return t.finish().await;
    };
    let cms = t.api::<ConfigMap>();
    sb.faults().set_latency(Duration::from_millis(400));
    let start = Instant::now();
    cms.list(&ListParams::default())
        .await
        .expect("list still succeeds with latency");
    // A lower bound only: the injected delay can never make a request faster.
    assert!(
        start.elapsed() >= Duration::from_millis(400),
        "set_latency(400ms) delays each request by at least 400 ms"
    );
    sb.faults().set_latency(Duration::ZERO);
    cms.list(&ListParams::default())
        .await
        .expect("list after clearing latency");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injected_errors_hit_only_the_chosen_verb_and_resource() {
    let t = Target::sandbox_or_env().await;
    let Some(sb) = t.sandbox_only(
        "injected_errors_hit_only_the_chosen_verb_and_resource",
        "fault injection is sandbox-only",
    ) else {
        return t.finish().await;
    };
    let cms = t.api::<ConfigMap>();
    let secrets = t.api::<Secret>();
    cms.create(&PostParams::default(), &configmap("exists", &[], &[]))
        .await
        .expect("create before injection");
    for (status, reason) in [
        (409, "Conflict"),
        (429, "TooManyRequests"),
        (500, "InternalError"),
    ] {
        sb.faults().inject_errors(ErrorRule {
            verb: Some(Verb::Create),
            resource: Some("configmaps".to_string()),
            status,
            rate: 1.0,
            count: None,
        });
        let err = api_error(
            cms.create(
                &PostParams::default(),
                &configmap(&format!("c{status}"), &[], &[]),
            )
            .await,
            "injected create error",
        );
        assert_eq!(
            (err.code, err.reason.as_str()),
            (status, reason),
            "injected {status} is a proper Status: {err:?}"
        );
        cms.get("exists")
            .await
            .expect("other verbs on the same resource are unaffected");
        secrets
            .create(&PostParams::default(), &secret(&format!("s{status}")))
            .await
            .expect("the same verb on another resource is unaffected");
        sb.faults().clear_errors();
        cms.create(
            &PostParams::default(),
            &configmap(&format!("c{status}"), &[], &[]),
        )
        .await
        .expect("clear_errors restores normal service");
    }
    sb.faults().inject_errors(ErrorRule {
        verb: Some(Verb::Get),
        resource: Some("configmaps".to_string()),
        status: 500,
        rate: 1.0,
        count: Some(2),
    });
    assert_eq!(api_error(cms.get("exists").await, "1st").code, 500);
    assert_eq!(api_error(cms.get("exists").await, "2nd").code, 500);
    cms.get("exists")
        .await
        .expect("count: Some(2) injects exactly two errors");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_count_per_verb_resource_and_code() {
    let t = Target::sandbox_or_env().await;
    let Some(sb) = t.sandbox_only(
        "counters_count_per_verb_resource_and_code",
        "request counters are sandbox-only",
    ) else {
        return t.finish().await;
    };
    let cms = t.api::<ConfigMap>();
    let secrets = t.api::<Secret>();
    sb.faults().reset_counters();
    cms.create(&PostParams::default(), &configmap("a", &[], &[]))
        .await
        .expect("create");
    cms.create(&PostParams::default(), &configmap("b", &[], &[]))
        .await
        .expect("create");
    cms.get("a").await.expect("get");
    let _ = cms.get("missing").await;
    let _ = cms
        .create(&PostParams::default(), &configmap("a", &[], &[]))
        .await;
    secrets.list(&ListParams::default()).await.expect("list");
    let counters = sb.faults().counters();
    assert_eq!(
        counters.get(Verb::Create, "configmaps", 201),
        2,
        "two successful creates: {counters:?}"
    );
    assert_eq!(
        counters.get(Verb::Create, "configmaps", 409),
        1,
        "one AlreadyExists: {counters:?}"
    );
    assert_eq!(
        counters.get(Verb::Get, "configmaps", 200),
        1,
        "one successful get: {counters:?}"
    );
    assert_eq!(
        counters.get(Verb::Get, "configmaps", 404),
        1,
        "one NotFound: {counters:?}"
    );
    assert_eq!(
        counters.get(Verb::List, "secrets", 200),
        1,
        "one list of secrets: {counters:?}"
    );
    assert_eq!(
        counters.by_verb(Verb::Create),
        3,
        "by_verb sums over resources and codes: {counters:?}"
    );
    assert_eq!(
        counters.total(),
        6,
        "total counts every request since reset: {counters:?}"
    );
    sb.faults().reset_counters();
    assert_eq!(sb.faults().counters().total(), 0, "reset_counters clears");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_http_endpoints_control_faults_and_counters() {
    use crate::common::raw;
    use mcm_sandbox::RequestCounters;
    let t = Target::sandbox_or_env().await;
    if t.sandbox_only(
        "admin_http_endpoints_control_faults_and_counters",
        "/sandbox/admin is sandbox-only",
    )
    .is_none()
    {
        return t.finish().await;
    }
    assert_eq!(
        Verb::DeleteCollection.to_string(),
        "deletecollection",
        "verbs print as kube's lower-case names"
    );
    assert_eq!(Verb::Create.to_string(), "create");
    let json = ("content-type", "application/json");
    let cms = t.api::<ConfigMap>();
    let reset = raw(
        &t.client,
        "POST",
        "/sandbox/admin/counters/reset",
        &[],
        vec![],
    )
    .await;
    assert_eq!(reset.status, 200, "POST /sandbox/admin/counters/reset");
    cms.create(&PostParams::default(), &configmap("admin", &[], &[]))
        .await
        .expect("create");
    let counters = raw(&t.client, "GET", "/sandbox/admin/counters", &[], vec![]).await;
    assert_eq!(counters.status, 200);
    let counters: RequestCounters =
        serde_json::from_slice(&counters.body).expect("GET counters is a RequestCounters JSON");
    assert_eq!(
        counters.get(Verb::Create, "configmaps", 201),
        1,
        "{counters:?}"
    );

    let rule = r#"{"verb": "create", "resource": "configmaps", "status": 500, "rate": 1.0, "count": null}"#;
    let response = raw(
        &t.client,
        "POST",
        "/sandbox/admin/errors",
        &[json],
        rule.as_bytes().to_vec(),
    )
    .await;
    assert_eq!(
        response.status,
        200,
        "POST errors: {}",
        String::from_utf8_lossy(&response.body)
    );
    let err = api_error(
        cms.create(&PostParams::default(), &configmap("e", &[], &[]))
            .await,
        "after POST errors",
    );
    assert_eq!(err.code, 500);
    assert_eq!(
        raw(&t.client, "DELETE", "/sandbox/admin/errors", &[], vec![])
            .await
            .status,
        200
    );
    cms.create(&PostParams::default(), &configmap("e", &[], &[]))
        .await
        .expect("after DELETE errors");

    let body = r#"{"seconds": 600, "mode": "ServiceUnavailable"}"#;
    assert_eq!(
        raw(
            &t.client,
            "POST",
            "/sandbox/admin/unavailable",
            &[json],
            body.as_bytes().to_vec()
        )
        .await
        .status,
        200
    );
    assert_eq!(
        api_error(cms.get("admin").await, "while unavailable").code,
        503
    );
    let cleared = raw(
        &t.client,
        "DELETE",
        "/sandbox/admin/unavailable",
        &[],
        vec![],
    )
    .await;
    assert_eq!(
        cleared.status, 200,
        "the admin API stays reachable while the API is unavailable"
    );
    cms.get("admin").await.expect("available again");
    let bad = raw(
        &t.client,
        "POST",
        "/sandbox/admin/unavailable",
        &[json],
        br#"{"mode": "Sideways"}"#.to_vec(),
    )
    .await;
    assert_eq!(bad.status, 400, "an unknown mode is a 400");
    t.finish().await;
}

/// The watch-delay fault holds watch events back (in order) while reads see the write at once;
/// lowering the delay releases the held events. Set through `/sandbox/admin/watch-delay`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_delay_holds_events_back_in_order_until_lowered() {
    use crate::common::{raw, unique_suffix};
    use futures::TryStreamExt;
    use kube::ResourceExt;
    use kube::api::WatchEvent;
    let t = Target::sandbox_or_env().await;
    let Some(sb) = t.sandbox_only(
        "watch_delay_holds_events_back_in_order_until_lowered",
        "fault injection is sandbox-only",
    ) else {
        return t.finish().await;
    };
    let cms = t.api::<ConfigMap>();
    let prefix = format!("delayed-{}", unique_suffix());
    let mut stream = watch_from_now(&cms).await;

    // An hour: nothing can be delivered before the delay is lowered below.
    let response = raw(
        &t.client,
        "POST",
        "/sandbox/admin/watch-delay",
        &[("content-type", "application/json")],
        br#"{"millis": 3600000}"#.to_vec(),
    )
    .await;
    assert_eq!(response.status, 200, "POST /sandbox/admin/watch-delay");
    assert_eq!(sb.faults().watch_delay(), Duration::from_secs(3600));
    let names: Vec<String> = (0..3).map(|i| format!("{prefix}-{i}")).collect();
    for name in &names {
        cms.create(&PostParams::default(), &configmap(name, &[], &[]))
            .await
            .expect("create while watch events are delayed");
    }
    cms.get(&names[2])
        .await
        .expect("reads are not delayed: the object is there at once");
    // Whatever the machine's speed, an event held for an hour cannot show up in this window.
    let early = tokio::time::timeout(Duration::from_millis(500), async {
        loop {
            match stream.try_next().await {
                Ok(Some(WatchEvent::Bookmark(_))) => continue,
                other => return other.map(|o| o.map(|e| format!("{e:?}"))),
            }
        }
    })
    .await;
    assert!(
        early.is_err(),
        "a watch event was delivered while the delay holds it back: {early:?}"
    );

    sb.faults().set_watch_delay(Duration::ZERO);
    let mut seen = Vec::new();
    while seen.len() < names.len() {
        let event = tokio::time::timeout(EVENTUALLY, stream.try_next())
            .await
            .expect("held events are released once the delay is lowered")
            .expect("watch stream error")
            .expect("watch stream ended early");
        match event {
            WatchEvent::Added(cm) if cm.name_any().starts_with(&prefix) => {
                seen.push(cm.name_any());
            }
            WatchEvent::Bookmark(_) => {}
            other => panic!("unexpected watch event {other:?}"),
        }
    }
    assert_eq!(seen, names, "held events keep their order");
    t.finish().await;
}

/// An injected outage closes the open watches, as a stopped kube-apiserver does, unless the
/// request says `"closeWatches": false`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_closes_open_watches_unless_told_not_to() {
    use crate::common::raw;
    use futures::StreamExt;
    let t = Target::sandbox_or_env().await;
    if t.sandbox_only(
        "an_outage_closes_open_watches_unless_told_not_to",
        "/sandbox/admin is sandbox-only",
    )
    .is_none()
    {
        return t.finish().await;
    }
    let cms = t.api::<ConfigMap>();
    let json = ("content-type", "application/json");
    for (body, closes) in [
        (r#"{"seconds": 60, "closeWatches": false}"#, false),
        (r#"{"seconds": 60}"#, true),
    ] {
        let mut stream = watch_from_now(&cms).await;
        let response = raw(
            &t.client,
            "POST",
            "/sandbox/admin/unavailable",
            &[json],
            body.as_bytes().to_vec(),
        )
        .await;
        assert_eq!(response.status, 200, "POST unavailable {body}");
        // The stream ends at once when closed; an open one yields nothing in this window.
        let ended = tokio::time::timeout(Duration::from_secs(2), async {
            while stream.next().await.is_some() {}
        })
        .await
        .is_ok();
        assert_eq!(ended, closes, "watch closed by an outage of {body}");
        let cleared = raw(
            &t.client,
            "DELETE",
            "/sandbox/admin/unavailable",
            &[],
            vec![],
        )
        .await;
        assert_eq!(cleared.status, 200);
    }
    t.finish().await;
}
