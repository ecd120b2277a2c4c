//! Publishing `events.k8s.io/v1` Events without flooding the API server.
//!
//! Two rules keep the writes down while every message a user needs still reaches them:
//! - an event identical to one written before (same object, type, reason and note) is counted on
//!   that Event, as client-go's recorder does: its `series` (`count`, `lastObservedTime`) is
//!   patched (the deprecated core/v1 fields stay unset: see [`event_object`]), at most once per
//!   [`EVENT_REPEAT_SUPPRESSION`] (repeats in between are written with the next patch), so a
//!   requeue loop cannot flood the API and `kubectl describe` shows `x2 over 5m`;
//! - Normal events of the same object and reason within [`NORMAL_EVENT_WINDOW`] are coalesced
//!   like a kube event series: the first is written at once, the later ones are held and only
//!   the latest is written when the window ends, saying how many it stands for. A rollout of
//!   1,000 machines scales its old MachineSet down a few hundred times; a user reading
//!   `kubectl describe` wants the latest size, not a few hundred writes. Warnings are never held.
//!
//! kube's own `Recorder` folds every event with the same reason and action into one series
//! whatever its note, which hid messages like "scaled down to 0" behind an earlier "scaled down
//! to 5"; here the latest note always wins.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};

/// The shortest time between two writes of one Event's repeat count (same object, type, reason
/// and note).
pub const EVENT_REPEAT_SUPPRESSION: Duration = Duration::from_secs(60);

/// How long after its last write an Event still takes repeats; later ones start a new Event (the
/// API server's default event TTL is 1 h from the last write).
pub const SERIES_LIFETIME: Duration = Duration::from_secs(50 * 60);

/// A repeat count to write on an Event already written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeriesUpdate {
    /// Namespace of the Event.
    pub namespace: String,
    /// Name of the Event.
    pub name: String,
    /// Occurrences, the first included.
    pub count: i32,
    /// When the latest occurred.
    pub last: jiff::Timestamp,
}

#[derive(Debug)]
struct Series {
    namespace: String,
    name: String,
    count: i32,
    last: jiff::Timestamp,
    written: Instant,
    /// Repeats not yet written.
    dirty: bool,
}

impl Series {
    fn update(&self) -> SeriesUpdate {
        SeriesUpdate {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            count: self.count,
            last: self.last,
        }
    }
}

/// Normal events of one object and reason are written at most once per this window; the latest
/// one held in a window is written when it ends.
pub const NORMAL_EVENT_WINDOW: Duration = Duration::from_secs(10);

/// One event to publish.
#[derive(Debug, Clone, PartialEq)]
pub struct Pending {
    /// The object the event is about.
    pub regarding: ObjectReference,
    /// Warning or Normal.
    pub warning: bool,
    /// The `kubectl describe` reason.
    pub reason: String,
    /// PascalCase verb.
    pub action: String,
    /// The message.
    pub note: String,
}

/// What [`Coalescer::offer`] decided.
#[derive(Debug, Clone, PartialEq)]
pub enum Offer {
    /// Write this event now (named for the wall time it was offered at).
    Publish(Box<Pending>),
    /// A repeat: write this count on the Event already written.
    Update(SeriesUpdate),
    /// Held: a later [`Coalescer::due`] writes the latest held event of its window, or
    /// [`Coalescer::due_updates`] the repeat count.
    Held,
}

#[derive(Debug)]
struct Window {
    opened: Instant,
    held: Option<Pending>,
    /// Events the held one stands for (itself included).
    merged: u32,
}

/// The pure part of the publisher: which events to write, and when (time is a parameter).
#[derive(Debug, Default)]
pub struct Coalescer {
    series: HashMap<(String, bool, String, String), Series>,
    windows: HashMap<(String, String), Window>,
}

/// client-go's Event name: the object's name and the time in hex nanoseconds.
#[must_use]
pub fn event_name(regarding: &ObjectReference, at: jiff::Timestamp) -> String {
    format!(
        "{}.{:x}",
        regarding.name.clone().unwrap_or_default(),
        at.as_nanosecond()
    )
}

fn identity(regarding: &ObjectReference) -> String {
    regarding
        .uid
        .clone()
        .unwrap_or_else(|| regarding.name.clone().unwrap_or_default())
}

impl Coalescer {
    /// Decides about `event` offered at `now` (`wall`: the same moment on the wall clock, which
    /// names a published Event and dates a repeat).
    pub fn offer(&mut self, event: Pending, now: Instant, wall: jiff::Timestamp) -> Offer {
        let object = identity(&event.regarding);
        let key = (
            object.clone(),
            event.warning,
            event.reason.clone(),
            event.note.clone(),
        );
        if let Some(series) = self
            .series
            .get_mut(&key)
            .filter(|s| now.duration_since(s.written) < SERIES_LIFETIME)
        {
            series.count = series.count.saturating_add(1);
            series.last = wall;
            if now.duration_since(series.written) < EVENT_REPEAT_SUPPRESSION {
                series.dirty = true;
                return Offer::Held;
            }
            series.written = now;
            series.dirty = false;
            return Offer::Update(series.update());
        }
        if self.series.len() > 10_000 {
            self.series
                .retain(|_, s| s.dirty || now.duration_since(s.written) < SERIES_LIFETIME);
        }
        // Only an Event written now can take repeats: a held one is written under another name.
        let start_series = |series: &mut HashMap<_, Series>, event: &Pending| {
            series.insert(
                key.clone(),
                Series {
                    namespace: event
                        .regarding
                        .namespace
                        .clone()
                        .unwrap_or_else(|| "default".to_owned()),
                    name: event_name(&event.regarding, wall),
                    count: 1,
                    last: wall,
                    written: now,
                    dirty: false,
                },
            );
        };
        if event.warning {
            start_series(&mut self.series, &event);
            return Offer::Publish(Box::new(event));
        }
        let window_key = (object, event.reason.clone());
        match self.windows.get_mut(&window_key) {
            Some(window) if now.duration_since(window.opened) < NORMAL_EVENT_WINDOW => {
                window.held = Some(event);
                window.merged += 1;
                Offer::Held
            }
            _ => {
                self.windows.insert(
                    window_key,
                    Window {
                        opened: now,
                        held: None,
                        merged: 0,
                    },
                );
                start_series(&mut self.series, &event);
                Offer::Publish(Box::new(event))
            }
        }
    }

    /// The held events whose window has ended at `now`, each the latest of its window with the
    /// count it stands for in its note; each opens a new window. Windows that ended with nothing
    /// held are forgotten.
    pub fn due(&mut self, now: Instant) -> Vec<Pending> {
        let mut out = Vec::new();
        self.windows.retain(|_, window| {
            if now.duration_since(window.opened) < NORMAL_EVENT_WINDOW {
                return true;
            }
            let Some(mut event) = window.held.take() else {
                return false;
            };
            if window.merged > 1 {
                event.note = format!(
                    "{} ({} similar events in {}s, this is the latest)",
                    event.note,
                    window.merged,
                    NORMAL_EVENT_WINDOW.as_secs()
                );
            }
            out.push(event);
            window.opened = now;
            window.merged = 0;
            true
        });
        out
    }

    /// The repeat counts not yet written whose Event was last written
    /// [`EVENT_REPEAT_SUPPRESSION`] ago or more.
    pub fn due_updates(&mut self, now: Instant) -> Vec<SeriesUpdate> {
        self.series
            .values_mut()
            .filter(|s| s.dirty && now.duration_since(s.written) >= EVENT_REPEAT_SUPPRESSION)
            .map(|s| {
                s.dirty = false;
                s.written = now;
                s.update()
            })
            .collect()
    }

    /// Whether anything is held.
    pub fn holds_events(&self) -> bool {
        self.windows.values().any(|w| w.held.is_some()) || self.series.values().any(|s| s.dirty)
    }
}

/// Publishes Events through a [`Coalescer`]; writes are best effort (failures are logged) and
/// never awaited by the caller.
pub(crate) struct EventSink {
    client: Client,
    instance: String,
    reporting_controller: &'static str,
    coalescer: Arc<std::sync::Mutex<Coalescer>>,
    flusher_running: Arc<AtomicBool>,
}

impl EventSink {
    /// A publisher writing through `client` as `reporting_controller`.
    pub(crate) fn new(client: Client, reporting_controller: &'static str) -> Self {
        Self {
            client,
            instance: std::env::var("POD_NAME").unwrap_or_else(|_| reporting_controller.to_owned()),
            reporting_controller,
            coalescer: Arc::default(),
            flusher_running: Arc::default(),
        }
    }

    /// Offers an event; writes it now, later (coalesced) or not at all (a recent duplicate).
    pub(crate) fn publish(
        &self,
        regarding: ObjectReference,
        warning: bool,
        reason: &str,
        action: &str,
        note: String,
    ) {
        let pending = Pending {
            regarding,
            warning,
            reason: reason.to_owned(),
            action: action.to_owned(),
            note: truncate_note(note),
        };
        let wall = jiff::Timestamp::now();
        let offer = self
            .coalescer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .offer(pending, Instant::now(), wall);
        match offer {
            Offer::Publish(event) => self.write_at(*event, wall),
            Offer::Update(update) => self.update(update),
            Offer::Held => self.ensure_flusher(),
        }
    }

    /// Starts the task that writes held events when their window ends; it stops once nothing
    /// is held.
    fn ensure_flusher(&self) {
        if self.flusher_running.swap(true, Ordering::AcqRel) {
            return;
        }
        let coalescer = Arc::clone(&self.coalescer);
        let running = Arc::clone(&self.flusher_running);
        let writer = Self {
            client: self.client.clone(),
            instance: self.instance.clone(),
            reporting_controller: self.reporting_controller,
            coalescer: Arc::clone(&self.coalescer),
            flusher_running: Arc::clone(&self.flusher_running),
        };
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let (due, updates, more) = {
                    let mut c = coalescer
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    let due = c.due(Instant::now());
                    let updates = c.due_updates(Instant::now());
                    (due, updates, c.holds_events())
                };
                for event in due {
                    writer.write_at(event, jiff::Timestamp::now());
                }
                for update in updates {
                    writer.update(update);
                }
                if !more {
                    running.store(false, Ordering::Release);
                    // An event held between the check and the store restarts the flusher.
                    let held = coalescer
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .holds_events();
                    if !held || running.swap(true, Ordering::AcqRel) {
                        return;
                    }
                }
            }
        });
    }

    /// Writes the repeat count on an Event already written (a merge patch of `series` and the
    /// core/v1 view's `count` and `lastTimestamp`).
    pub(crate) fn update(&self, update: SeriesUpdate) {
        let api: Api<Event> = Api::namespaced(self.client.clone(), &update.namespace);
        tokio::spawn(async move {
            let patch = series_patch(&update);
            if let Err(error) = api
                .patch(&update.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                tracing::debug!(%error, event = update.name, "cannot count a repeated event");
            }
        });
    }

    pub(crate) fn write_at(&self, pending: Pending, at: jiff::Timestamp) {
        let event = event_object(pending, at, self.reporting_controller, &self.instance);
        let namespace = event.metadata.namespace.clone().unwrap_or_default();
        let api: Api<Event> = Api::namespaced(self.client.clone(), &namespace);
        tokio::spawn(async move {
            // An event recorded just before an API outage (a MachineSet's SuccessfulCreate) is
            // written once the API server answers again, not dropped; it keeps its time.
            let mut pause = EVENT_RETRY_FIRST;
            let started = Instant::now();
            loop {
                let error = match api.create(&Default::default(), &event).await {
                    Ok(_) => return,
                    // The name carries the event's time: an earlier attempt got through.
                    Err(kube::Error::Api(status)) if status.code == 409 => return,
                    Err(error) => error,
                };
                if !event_write_retryable(&error) || started.elapsed() >= EVENT_RETRY_WINDOW {
                    tracing::debug!(%error, reason = event.reason, "cannot record an event");
                    return;
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(EVENT_RETRY_CAP);
            }
        });
    }
}

/// How long a failed event write is retried while the API server is unreachable or overloaded.
pub const EVENT_RETRY_WINDOW: Duration = Duration::from_secs(300);
/// First pause before an event write is tried again.
const EVENT_RETRY_FIRST: Duration = Duration::from_millis(250);
/// Longest pause between two attempts to write one event.
const EVENT_RETRY_CAP: Duration = Duration::from_secs(2);

/// Whether a failed event write may succeed later: the API server unreachable (transport
/// errors, the write gate of a replica that leads again later), overloaded (429) or failing
/// (5xx). A refusal (4xx) is final.
fn event_write_retryable(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(status) => status.code == 429 || status.code >= 500,
        _ => true,
    }
}

/// The events.k8s.io/v1 Event written for `pending` at `timestamp`.
///
/// The deprecated fields (`deprecatedFirstTimestamp`, `deprecatedLastTimestamp`,
/// `deprecatedCount`) stay unset: kube-apiserver refuses an Event created through
/// events.k8s.io/v1 that sets them (422 "needs to be unset"). `kubectl get events` prints such
/// an Event from `eventTime` and `series`.
#[must_use]
pub fn event_object(
    pending: Pending,
    timestamp: jiff::Timestamp,
    reporting_controller: &str,
    instance: &str,
) -> Event {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    let namespace = pending
        .regarding
        .namespace
        .clone()
        .unwrap_or_else(|| "default".to_owned());
    Event {
        metadata: kube::api::ObjectMeta {
            name: Some(event_name(&pending.regarding, timestamp)),
            namespace: Some(namespace),
            ..Default::default()
        },
        event_time: Some(MicroTime(timestamp)),
        type_: Some(if pending.warning { "Warning" } else { "Normal" }.to_owned()),
        reason: Some(pending.reason),
        action: Some(pending.action),
        note: Some(pending.note),
        regarding: Some(pending.regarding),
        reporting_controller: Some(reporting_controller.to_owned()),
        reporting_instance: Some(instance.to_owned()),
        ..Default::default()
    }
}

/// The merge patch of [`EventSink::update`].
#[must_use]
pub fn series_patch(update: &SeriesUpdate) -> serde_json::Value {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
    // Only the series: the deprecated fields of an events.k8s.io/v1 Event are immutable.
    serde_json::json!({
        "series": {"count": update.count, "lastObservedTime": MicroTime(update.last)},
    })
}

/// Event notes are limited to 1 kB by the API server.
fn truncate_note(mut note: String) -> String {
    const LIMIT: usize = 1000;
    if note.len() > LIMIT {
        let mut end = LIMIT;
        while !note.is_char_boundary(end) {
            end -= 1;
        }
        note.truncate(end);
    }
    note
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn event(uid: &str, warning: bool, reason: &str, note: &str) -> Pending {
        Pending {
            regarding: ObjectReference {
                uid: Some(uid.to_owned()),
                name: Some(uid.to_owned()),
                ..ObjectReference::default()
            },
            warning,
            reason: reason.to_owned(),
            action: "Scale".to_owned(),
            note: note.to_owned(),
        }
    }

    #[test]
    fn events_leave_the_deprecated_fields_unset_as_kube_demands() {
        let at = jiff::Timestamp::from_second(1_700_000_000).unwrap();
        let written = event_object(event("m1", true, "Blocked", "why"), at, "mcm", "host");
        assert_eq!(written.deprecated_last_timestamp, None);
        assert_eq!(written.deprecated_first_timestamp, None);
        assert_eq!(written.deprecated_count, None);
        assert_eq!(written.event_time.map(|t| t.0), Some(at));
        assert_eq!(written.metadata.namespace.as_deref(), Some("default"));
        assert_eq!(written.type_.as_deref(), Some("Warning"));
    }

    #[test]
    fn normal_events_of_one_object_and_reason_are_coalesced_to_the_latest() {
        let mut c = Coalescer::default();
        let t0 = Instant::now();
        let first = event("ms", false, "ScalingMachineSet", "Scaled down to 9");
        assert_eq!(
            c.offer(first.clone(), t0, wall()),
            Offer::Publish(Box::new(first))
        );
        for (i, size) in [8, 7, 6].into_iter().enumerate() {
            let at = t0 + Duration::from_secs(u64::try_from(i).unwrap() + 1);
            let e = event(
                "ms",
                false,
                "ScalingMachineSet",
                &format!("Scaled down to {size}"),
            );
            assert_eq!(c.offer(e, at, wall()), Offer::Held);
        }
        assert!(
            c.due(t0 + Duration::from_secs(5)).is_empty(),
            "window still open"
        );
        let due = c.due(t0 + NORMAL_EVENT_WINDOW);
        assert_eq!(due.len(), 1);
        assert_eq!(
            due[0].note,
            "Scaled down to 6 (3 similar events in 10s, this is the latest)"
        );
        // The flush opened a new window: a fresh event right after is held again.
        let later = t0 + NORMAL_EVENT_WINDOW + Duration::from_secs(1);
        let e = event("ms", false, "ScalingMachineSet", "Scaled down to 5");
        assert_eq!(c.offer(e, later, wall()), Offer::Held);
        assert!(c.holds_events());
        // A window that ends with nothing held is forgotten; the next event is written at once.
        let much_later = later + NORMAL_EVENT_WINDOW * 3;
        assert_eq!(c.due(much_later).len(), 1);
        assert!(c.due(much_later + NORMAL_EVENT_WINDOW).is_empty());
        let e = event("ms", false, "ScalingMachineSet", "Scaled down to 0");
        assert_eq!(
            c.offer(e.clone(), much_later + NORMAL_EVENT_WINDOW * 2, wall()),
            Offer::Publish(Box::new(e))
        );
    }

    #[test]
    fn warnings_other_objects_and_other_reasons_are_not_held() {
        let mut c = Coalescer::default();
        let t0 = Instant::now();
        for e in [
            event("a", false, "ScalingMachineSet", "up to 3"),
            event("b", false, "ScalingMachineSet", "up to 3"),
            event("a", false, "SuccessfulCreate", "Created Machine: a-1"),
            event("a", true, "FailedCreate", "quota"),
            event("a", true, "FailedCreate", "quota exceeded again"),
        ] {
            assert_eq!(c.offer(e.clone(), t0, wall()), Offer::Publish(Box::new(e)));
        }
    }

    fn wall() -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_700_000_000).unwrap()
    }

    #[test]
    fn identical_events_are_counted_on_the_event_written_first() {
        let mut c = Coalescer::default();
        let t0 = Instant::now();
        let at = |s: i64| wall() + jiff::SignedDuration::from_secs(s);
        let e = event("a", true, "MachineClassChangeNotHotUpdatable", "image");
        assert_eq!(
            c.offer(e.clone(), t0, at(0)),
            Offer::Publish(Box::new(e.clone()))
        );
        let name = event_name(&e.regarding, at(0));
        // Five minutes later (a second hot update): the same Event, count 2, its time.
        let t1 = t0 + Duration::from_secs(300);
        assert_eq!(
            c.offer(e.clone(), t1, at(300)),
            Offer::Update(SeriesUpdate {
                namespace: "default".into(),
                name: name.clone(),
                count: 2,
                last: at(300),
            })
        );
        // A requeue loop: repeats within the minute are held and written together.
        assert_eq!(
            c.offer(e.clone(), t1 + Duration::from_secs(5), at(305)),
            Offer::Held
        );
        assert_eq!(
            c.offer(e.clone(), t1 + Duration::from_secs(10), at(310)),
            Offer::Held
        );
        assert!(c.holds_events());
        assert!(c.due_updates(t1 + Duration::from_secs(30)).is_empty());
        assert_eq!(
            c.due_updates(t1 + EVENT_REPEAT_SUPPRESSION),
            vec![SeriesUpdate {
                namespace: "default".into(),
                name,
                count: 4,
                last: at(310),
            }]
        );
        assert!(!c.holds_events());
        // Long after its last write the Event may be gone: a new one is written.
        let late = t1 + EVENT_REPEAT_SUPPRESSION + SERIES_LIFETIME;
        assert_eq!(
            c.offer(e.clone(), late, at(4000)),
            Offer::Publish(Box::new(e))
        );
    }

    #[test]
    fn the_series_patch_changes_only_the_series() {
        let update = SeriesUpdate {
            namespace: "ns".into(),
            name: "m1.1".into(),
            count: 3,
            last: wall(),
        };
        let patch = series_patch(&update);
        assert_eq!(patch["series"]["count"], 3);
        assert!(patch["series"]["lastObservedTime"].is_string());
        assert_eq!(patch.as_object().map(serde_json::Map::len), Some(1));
    }

    /// The patch is accepted by the API server and the core/v1 view shows the count and time.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_repeat_count_reaches_the_core_v1_view() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let sandbox = mcm_sandbox::Sandbox::start(mcm_sandbox::SandboxConfig::default())
            .await
            .unwrap();
        let sink = EventSink::new(sandbox.client(), "test");
        let mut e = event("m1", true, "MachineClassChangeNotHotUpdatable", "image");
        e.regarding.namespace = Some("default".into());
        sink.write_at(e.clone(), wall());
        let name = event_name(&e.regarding, wall());
        let core: Api<k8s_openapi::api::core::v1::Event> =
            Api::namespaced(sandbox.client(), "default");
        let mut seen = None;
        for _ in 0..100 {
            if core.get_opt(&name).await.unwrap().is_some() {
                seen = Some(());
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(seen.is_some(), "the event was written");
        let last = wall() + jiff::SignedDuration::from_secs(300);
        sink.update(SeriesUpdate {
            namespace: "default".into(),
            name: name.clone(),
            count: 2,
            last,
        });
        let mut counted = None;
        for _ in 0..100 {
            let event = core.get(&name).await.unwrap();
            if event.series.as_ref().and_then(|s| s.count) == Some(2) {
                counted = Some(event);
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let event = counted.expect("series count 2 in the core/v1 view");
        let series = event.series.expect("series");
        assert_eq!(series.last_observed_time.map(|t| t.0), Some(last));
        assert_eq!(event.event_time.map(|t| t.0), Some(wall()));
    }

    #[test]
    fn long_notes_are_cut_at_a_character_boundary() {
        let note = "é".repeat(600);
        let cut = truncate_note(note);
        assert!(cut.len() <= 1000);
        assert!(cut.chars().all(|c| c == 'é'));
    }
}
