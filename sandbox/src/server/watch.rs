//! Watch: replay from history, bookmarks, initial events, selector transitions.

use super::common::*;
use super::read::*;
use crate::error::{ApiError, ApiResult};
use crate::faults::Faults;
use crate::resources::ResourceDef;
use crate::selector::{FieldSelector, LabelSelector};
use crate::state::AppState;
use crate::store::{Event, EventType, Store};
use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

pub(super) struct WatchFilter {
    pub(super) ns: Option<String>,
    pub(super) name: Option<String>,
    pub(super) ls: LabelSelector,
    pub(super) fs: FieldSelector,
}

impl WatchFilter {
    pub(super) fn matches(&self, o: &Value) -> bool {
        if let Some(ns) = &self.ns
            && meta(o, "namespace") != Some(ns.as_str())
        {
            return false;
        }
        if let Some(n) = &self.name
            && meta(o, "name") != Some(n.as_str())
        {
            return false;
        }
        self.ls.matches(o.pointer("/metadata/labels")) && self.fs.matches(o)
    }
    /// The event type a watcher with this filter sees, if any.
    pub(super) fn translate(&self, ev: &Event) -> Option<EventType> {
        let now = self.matches(&ev.obj);
        match ev.kind {
            EventType::Added | EventType::Deleted => now.then_some(ev.kind),
            EventType::Modified => {
                let before = ev.old.as_ref().is_some_and(|o| self.matches(o));
                match (before, now) {
                    (true, true) => Some(EventType::Modified),
                    (false, true) => Some(EventType::Added),
                    (true, false) => Some(EventType::Deleted),
                    (false, false) => None,
                }
            }
        }
    }
}

pub(super) async fn watch(ctx: &Ctx<'_>, headers: &HeaderMap) -> ApiResult<Response> {
    let (ls, mut fs) = selectors(ctx)?;
    let mut name = ctx.rp.name.clone();
    // kube clients watch single objects with fieldSelector=metadata.name=x.
    if name.is_none()
        && let Some(pos) =
            fs.0.iter()
                .position(|r| r.path == "metadata.name" && !r.negated)
    {
        name = Some(fs.0.remove(pos).value);
    }
    let filter = WatchFilter {
        ns: ctx.rp.namespace.clone(),
        name,
        ls,
        fs,
    };
    let from_rv = match ctx.query.get("resourceVersion").map(String::as_str) {
        None | Some("") | Some("0") => None,
        Some(s) => Some(s.parse::<u64>().map_err(|_| {
            ApiError::new(400, "BadRequest", format!("invalid resource version: {s}"))
        })?),
    };
    let send_initial = ctx
        .query
        .get("sendInitialEvents")
        .is_some_and(|v| v == "true");
    let from_rv = if send_initial { None } else { from_rv };
    let bookmarks = ctx
        .query
        .get("allowWatchBookmarks")
        .is_some_and(|v| v == "true");
    let timeout = ctx
        .query
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .map(Duration::from_secs)
        .unwrap_or(Duration::from_secs(1800));
    let start = ctx.state.store.watch(&ctx.gr, from_rv)?;
    let start_rv = ctx.state.store.current_rv();
    let partial_mode = render_mode(headers) == Render::Partial;
    // `kubectl get -w` watches as Table: every event carries a one-row Table, as kube-apiserver does.
    let table_mode = (render_mode(headers) == Render::Table).then(|| {
        (
            printer_columns(&ctx.def, &ctx.rp.version),
            include_object(ctx.query),
        )
    });
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::convert::Infallible>>(256);
    let store = ctx.state.store.clone();
    let def = ctx.def.clone();
    let version = ctx.rp.version.clone();
    let state_conv = ConvState {
        service_addresses: ctx.state.service_addresses.clone(),
        faults: ctx.state.faults.clone(),
        store: ctx.state.store.clone(),
        url: ctx.state.url.clone(),
    };
    let mut closer = ctx.state.faults.watch_closer();
    let api_version = def.api_version(&version);
    let kind = def.kind.clone();
    tokio::spawn(async move {
        let app = state_conv.into_app();
        let encode = encode_event;
        let mut last_rv = from_rv.unwrap_or(0);
        let send_event = |ev: Arc<Event>, last_rv: &mut u64| {
            if filter.translate(&ev).is_some() {
                *last_rv = (*last_rv).max(ev.rv);
            }
            render_event(
                &app,
                &def,
                &version,
                &filter,
                partial_mode,
                table_mode.as_ref(),
                ev,
            )
        };
        // Events held back by the watch-delay fault, with the instant they arrived; each is due at
        // arrival + the delay configured now (lowering the delay releases them early).
        let mut held: std::collections::VecDeque<(tokio::time::Instant, Arc<Event>)> =
            std::collections::VecDeque::new();
        let delay_of = |app: &AppState| app.faults.watch_delay();
        for ev in start.replay {
            let delay = delay_of(&app);
            // Initial events of a streaming list end with a bookmark sent right after them: not delayed.
            if !delay.is_zero() && !send_initial {
                held.push_back((tokio::time::Instant::now(), ev));
                continue;
            }
            if let Some(line) = send_event(ev, &mut last_rv).await
                && tx.send(Ok(line)).await.is_err()
            {
                return;
            }
        }
        last_rv = last_rv.max(if from_rv.is_none() { start_rv } else { last_rv });
        if send_initial && bookmarks {
            let bm = json!({"kind": kind, "apiVersion": api_version, "metadata": {"resourceVersion": start_rv.to_string(), "annotations": {"k8s.io/initial-events-end": "true"}}});
            if tx.send(Ok(encode("BOOKMARK", &bm))).await.is_err() {
                return;
            }
        }
        let mut rx_events = start.rx;
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.tick().await;
        loop {
            // Re-check at least every 100 ms so a changed delay takes effect on held events.
            let next_due = held.front().map(|(arrived, _)| {
                (*arrived + delay_of(&app))
                    .min(tokio::time::Instant::now() + Duration::from_millis(100))
            });
            tokio::select! {
                _ = &mut deadline => break,
                _ = closer.changed() => break,
                _ = tx.closed() => break,
                r = rx_events.recv() => match r {
                    Ok(ev) => {
                        let delay = delay_of(&app);
                        if !delay.is_zero() || !held.is_empty() {
                            held.push_back((tokio::time::Instant::now(), ev));
                        } else if let Some(line) = send_event(ev, &mut last_rv).await && tx.send(Ok(line)).await.is_err() {
                            break;
                        }
                    }
                    // A slow watcher that fell behind is closed; the client re-watches from its last version.
                    Err(_) => break,
                },
                () = tokio::time::sleep_until(next_due.unwrap_or_else(tokio::time::Instant::now)), if next_due.is_some() => {
                    let now = tokio::time::Instant::now();
                    let delay = delay_of(&app);
                    let mut closed = false;
                    while held.front().is_some_and(|(arrived, _)| *arrived + delay <= now) {
                        let Some((_, ev)) = held.pop_front() else { break };
                        if let Some(line) = send_event(ev, &mut last_rv).await && tx.send(Ok(line)).await.is_err() {
                            closed = true;
                            break;
                        }
                    }
                    if closed { break; }
                }
                _ = tick.tick(), if bookmarks => {
                    let cur = store.current_rv();
                    // Events up to `cur` are already in the channel: drain them before the bookmark.
                    let mut closed = false;
                    loop {
                        match rx_events.try_recv() {
                            Ok(ev) => {
                                let delay = delay_of(&app);
                                if !delay.is_zero() || !held.is_empty() {
                                    held.push_back((tokio::time::Instant::now(), ev));
                                } else if let Some(line) = send_event(ev, &mut last_rv).await && tx.send(Ok(line)).await.is_err() {
                                    closed = true;
                                    break;
                                }
                            }
                            Err(tokio::sync::broadcast::error::TryRecvError::Empty) => break,
                            Err(_) => { closed = true; break; }
                        }
                    }
                    if closed { break; }
                    // A bookmark must not claim versions of events still held back.
                    if !held.is_empty() { continue; }
                    last_rv = last_rv.max(cur);
                    let bm = json!({"kind": kind, "apiVersion": api_version, "metadata": {"resourceVersion": last_rv.to_string()}});
                    if tx.send(Ok(encode("BOOKMARK", &bm))).await.is_err() {
                        break;
                    }
                }
            }
        }
    });
    let body = Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx));
    let mut resp = Response::new(body);
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp.headers_mut().insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache, private"),
    );
    Ok(resp)
}

pub(super) fn encode_event(t: &str, obj: &Value) -> Bytes {
    let mut line = serde_json::to_vec(&json!({"type": t, "object": obj})).unwrap_or_default();
    line.push(b'\n');
    Bytes::from(line)
}

pub(super) async fn render_event(
    app: &AppState,
    def: &ResourceDef,
    version: &str,
    filter: &WatchFilter,
    partial_mode: bool,
    table_mode: Option<&(Vec<Value>, crate::table::IncludeObject)>,
    ev: Arc<Event>,
) -> Option<Bytes> {
    let t = filter.translate(&ev)?;
    let obj = match to_version(app, def, &ev.obj, version).await {
        Ok(o) => o,
        Err(e) => return Some(encode_event("ERROR", &e.status_body())),
    };
    let obj = if partial_mode { partial(&obj) } else { obj };
    let obj = match table_mode {
        Some((columns, include)) => crate::table::watch_row(columns, &obj, *include),
        None => obj,
    };
    Some(encode_event(t.as_str(), &obj))
}

/// The parts of the app state a watch task needs (owned, so the task outlives the request).
pub(super) struct ConvState {
    pub(super) service_addresses: HashMap<(String, String), SocketAddr>,
    pub(super) faults: Arc<Faults>,
    pub(super) store: Arc<Store>,
    pub(super) url: String,
}

impl ConvState {
    pub(super) fn into_app(self) -> AppState {
        AppState {
            store: self.store,
            faults: self.faults,
            service_addresses: self.service_addresses,
            url: self.url,
            // Conversion inside a watch task neither authenticates nor authorizes.
            authn: Default::default(),
            authorization: false,
            denials: Default::default(),
        }
    }
}
