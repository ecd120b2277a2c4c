//! Publishing `events.k8s.io/v1` Events without flooding the API server.
//!
//! Two rules keep the writes down while every message a user needs still reaches them:
//! - an event identical to one recorded in the last [`EVENT_REPEAT_SUPPRESSION`] (same object,
//!   type, reason and note) is dropped, so a requeue loop cannot flood the API;
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
use kube::{Api, Client};

/// How long an identical event (same object, type, reason and note) is not recorded again.
pub const EVENT_REPEAT_SUPPRESSION: Duration = Duration::from_secs(60);

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
    /// Write this event now.
    Publish(Box<Pending>),
    /// Held: a later [`Coalescer::due`] writes the latest held event of its window.
    Held,
    /// Dropped: identical to one written or held recently.
    Dropped,
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
    recent: HashMap<(String, bool, String, String), Instant>,
    windows: HashMap<(String, String), Window>,
}

fn identity(regarding: &ObjectReference) -> String {
    regarding
        .uid
        .clone()
        .unwrap_or_else(|| regarding.name.clone().unwrap_or_default())
}

impl Coalescer {
    /// Decides about `event` offered at `now`.
    pub fn offer(&mut self, event: Pending, now: Instant) -> Offer {
        let object = identity(&event.regarding);
        let key = (
            object.clone(),
            event.warning,
            event.reason.clone(),
            event.note.clone(),
        );
        if self
            .recent
            .get(&key)
            .is_some_and(|at| now.duration_since(*at) < EVENT_REPEAT_SUPPRESSION)
        {
            return Offer::Dropped;
        }
        if self.recent.len() > 10_000 {
            self.recent
                .retain(|_, at| now.duration_since(*at) < EVENT_REPEAT_SUPPRESSION);
        }
        self.recent.insert(key, now);
        if event.warning {
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

    /// Whether anything is held.
    pub fn holds_events(&self) -> bool {
        self.windows.values().any(|w| w.held.is_some())
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
        let offer = self
            .coalescer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .offer(pending, Instant::now());
        match offer {
            Offer::Publish(event) => self.write(*event),
            Offer::Held => self.ensure_flusher(),
            Offer::Dropped => {}
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
                let (due, more) = {
                    let mut c = coalescer
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    let due = c.due(Instant::now());
                    (due, c.holds_events())
                };
                for event in due {
                    writer.write(event);
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

    fn write(&self, pending: Pending) {
        let event = event_object(
            pending,
            jiff::Timestamp::now(),
            self.reporting_controller,
            &self.instance,
        );
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
/// The deprecated fields are filled too: the core/v1 view of an events.k8s.io Event takes
/// `lastTimestamp`, `firstTimestamp` and `count` from them, and `kubectl get events` (which reads
/// core/v1) sorts and prints by `lastTimestamp`; without them `--sort-by=.lastTimestamp` shows
/// nothing and the LAST SEEN column is empty.
#[must_use]
pub fn event_object(
    pending: Pending,
    timestamp: jiff::Timestamp,
    reporting_controller: &str,
    instance: &str,
) -> Event {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
    let namespace = pending
        .regarding
        .namespace
        .clone()
        .unwrap_or_else(|| "default".to_owned());
    Event {
        metadata: kube::api::ObjectMeta {
            // client-go's naming: the object's name and the time in hex nanoseconds.
            name: Some(format!(
                "{}.{:x}",
                pending.regarding.name.clone().unwrap_or_default(),
                timestamp.as_nanosecond()
            )),
            namespace: Some(namespace),
            ..Default::default()
        },
        event_time: Some(MicroTime(timestamp)),
        deprecated_first_timestamp: Some(Time(timestamp)),
        deprecated_last_timestamp: Some(Time(timestamp)),
        deprecated_count: Some(1),
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
    fn events_fill_the_fields_kubectl_get_events_sorts_and_prints_by() {
        let at = jiff::Timestamp::from_second(1_700_000_000).unwrap();
        let written = event_object(event("m1", true, "Blocked", "why"), at, "mcm", "host");
        assert_eq!(written.deprecated_last_timestamp.map(|t| t.0), Some(at));
        assert_eq!(written.deprecated_first_timestamp.map(|t| t.0), Some(at));
        assert_eq!(written.deprecated_count, Some(1));
        assert_eq!(written.event_time.map(|t| t.0), Some(at));
        assert_eq!(written.metadata.namespace.as_deref(), Some("default"));
        assert_eq!(written.type_.as_deref(), Some("Warning"));
    }

    #[test]
    fn normal_events_of_one_object_and_reason_are_coalesced_to_the_latest() {
        let mut c = Coalescer::default();
        let t0 = Instant::now();
        let first = event("ms", false, "ScalingMachineSet", "Scaled down to 9");
        assert_eq!(c.offer(first.clone(), t0), Offer::Publish(Box::new(first)));
        for (i, size) in [8, 7, 6].into_iter().enumerate() {
            let at = t0 + Duration::from_secs(u64::try_from(i).unwrap() + 1);
            let e = event(
                "ms",
                false,
                "ScalingMachineSet",
                &format!("Scaled down to {size}"),
            );
            assert_eq!(c.offer(e, at), Offer::Held);
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
        assert_eq!(c.offer(e, later), Offer::Held);
        assert!(c.holds_events());
        // A window that ends with nothing held is forgotten; the next event is written at once.
        let much_later = later + NORMAL_EVENT_WINDOW * 3;
        assert_eq!(c.due(much_later).len(), 1);
        assert!(c.due(much_later + NORMAL_EVENT_WINDOW).is_empty());
        let e = event("ms", false, "ScalingMachineSet", "Scaled down to 0");
        assert_eq!(
            c.offer(e.clone(), much_later + NORMAL_EVENT_WINDOW * 2),
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
            assert_eq!(c.offer(e.clone(), t0), Offer::Publish(Box::new(e)));
        }
    }

    #[test]
    fn identical_events_are_dropped_for_a_minute() {
        let mut c = Coalescer::default();
        let t0 = Instant::now();
        let e = event("a", true, "DrainFailed", "pdb");
        assert_eq!(c.offer(e.clone(), t0), Offer::Publish(Box::new(e.clone())));
        assert_eq!(
            c.offer(e.clone(), t0 + Duration::from_secs(30)),
            Offer::Dropped
        );
        assert_eq!(
            c.offer(e.clone(), t0 + EVENT_REPEAT_SUPPRESSION),
            Offer::Publish(Box::new(e))
        );
    }

    #[test]
    fn long_notes_are_cut_at_a_character_boundary() {
        let note = "é".repeat(600);
        let cut = truncate_note(note);
        assert!(cut.len() <= 1000);
        assert!(cut.chars().all(|c| c == 'é'));
    }
}
