//! Fault injection (unavailability, latency, injected error codes, dropped or delayed watches) and
//! request counters per verb, resource and status code.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub use crate::verb::Verb;

/// How an unavailable API server behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum UnavailableMode {
    /// Answer 503 ServiceUnavailable.
    ServiceUnavailable,
    /// Close connections right after accepting them.
    Refuse,
}

/// A rule injecting error answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorRule {
    /// Only this verb (any when None).
    pub verb: Option<Verb>,
    /// Only this resource, plural, with subresource as `machines/status` (any when None).
    pub resource: Option<String>,
    /// Status code: 409, 429 or 500 (others are answered as given).
    pub status: u16,
    /// Fraction of matching requests that fail (0..=1).
    pub rate: f64,
    /// Stop after this many injected errors.
    pub count: Option<u64>,
}

/// Snapshot of request counters.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RequestCounters {
    /// (verb, resource, status code) -> count.
    #[serde(with = "counter_map")]
    pub counts: BTreeMap<(Verb, String, u16), u64>,
}

mod counter_map {
    use super::Verb;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use std::collections::BTreeMap;

    #[derive(Serialize, Deserialize)]
    struct Entry {
        verb: Verb,
        resource: String,
        code: u16,
        count: u64,
    }

    pub fn serialize<S: Serializer>(
        m: &BTreeMap<(Verb, String, u16), u64>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        let v: Vec<Entry> = m
            .iter()
            .map(|((verb, resource, code), count)| Entry {
                verb: *verb,
                resource: resource.clone(),
                code: *code,
                count: *count,
            })
            .collect();
        v.serialize(s)
    }

    type Counts = BTreeMap<(Verb, String, u16), u64>;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Counts, D::Error> {
        let v: Vec<Entry> = Vec::deserialize(d)?;
        Ok(v.into_iter()
            .map(|e| ((e.verb, e.resource, e.code), e.count))
            .collect())
    }
}

impl RequestCounters {
    /// Requests with exactly this verb, resource and status code.
    pub fn get(&self, verb: Verb, resource: &str, code: u16) -> u64 {
        self.counts
            .get(&(verb, resource.to_string(), code))
            .copied()
            .unwrap_or(0)
    }
    /// All requests counted.
    pub fn total(&self) -> u64 {
        self.counts.values().sum()
    }
    /// Requests with this verb.
    pub fn by_verb(&self, verb: Verb) -> u64 {
        self.counts
            .iter()
            .filter(|((v, _, _), _)| *v == verb)
            .map(|(_, c)| c)
            .sum()
    }
    /// Requests for this resource (e.g. `machines` or `machines/status`).
    pub fn by_resource(&self, resource: &str) -> u64 {
        self.counts
            .iter()
            .filter(|((_, r, _), _)| r == resource)
            .map(|(_, c)| c)
            .sum()
    }
    /// Requests with this verb on this resource.
    pub fn by_verb_resource(&self, verb: Verb, resource: &str) -> u64 {
        self.counts
            .iter()
            .filter(|((v, r, _), _)| *v == verb && r == resource)
            .map(|(_, c)| c)
            .sum()
    }
    /// Requests answered with this status code.
    pub fn by_status(&self, code: u16) -> u64 {
        self.counts
            .iter()
            .filter(|((_, _, c), _)| *c == code)
            .map(|(_, n)| n)
            .sum()
    }
}

#[derive(Debug, Default)]
struct FaultState {
    unavailable_until: Option<(Instant, UnavailableMode)>,
    latency: Duration,
    watch_delay: Duration,
    rules: Vec<(ErrorRule, u64)>,
    counters: BTreeMap<(Verb, String, u16), u64>,
    rng: u64,
}

/// Fault injection controls and counters of one sandbox.
#[derive(Debug)]
pub struct Faults {
    state: Mutex<FaultState>,
    watch_generation: tokio::sync::watch::Sender<u64>,
    refuse_generation: tokio::sync::watch::Sender<u64>,
    /// Resource requests per requester (kept here so every handler that sees the faults sees it).
    pub requesters: crate::requesters::RequestLog,
}

impl Default for Faults {
    fn default() -> Self {
        let (tx, _) = tokio::sync::watch::channel(0);
        let (refuse, _) = tokio::sync::watch::channel(0);
        Faults {
            state: Mutex::new(FaultState {
                rng: 0x9E37_79B9_7F4A_7C15,
                ..Default::default()
            }),
            watch_generation: tx,
            refuse_generation: refuse,
            requesters: crate::requesters::RequestLog::default(),
        }
    }
}

/// What the server should do with a request before handling it.
#[derive(Debug, Clone, PartialEq)]
pub enum Injected {
    /// Handle normally.
    None,
    /// Answer this status code instead.
    Error(u16),
}

impl Faults {
    fn lock(&self) -> std::sync::MutexGuard<'_, FaultState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
    /// Makes the API unavailable for `duration`.
    pub fn set_unavailable(&self, duration: Duration, mode: UnavailableMode) {
        self.lock().unavailable_until = Some((Instant::now() + duration, mode));
        if mode == UnavailableMode::Refuse {
            // Open keep-alive connections are dropped too, so clients see connection errors.
            self.refuse_generation.send_modify(|g| *g += 1);
        }
    }
    /// Receiver that changes when open connections must be dropped (Refuse mode).
    pub fn connection_closer(&self) -> tokio::sync::watch::Receiver<u64> {
        self.refuse_generation.subscribe()
    }
    /// Ends unavailability.
    pub fn clear_unavailable(&self) {
        self.lock().unavailable_until = None;
    }
    /// Current unavailability mode, if any.
    pub fn unavailable(&self) -> Option<UnavailableMode> {
        let mut st = self.lock();
        match st.unavailable_until {
            Some((until, mode)) if Instant::now() < until => Some(mode),
            Some(_) => {
                st.unavailable_until = None;
                None
            }
            None => None,
        }
    }
    /// Adds latency to every request.
    pub fn set_latency(&self, latency: Duration) {
        self.lock().latency = latency;
    }
    /// The configured latency.
    pub fn latency(&self) -> Duration {
        self.lock().latency
    }
    /// Holds back every event delivered to a watch by `delay` (order is kept), so clients see a
    /// cache lagging behind their own writes. Zero turns it off. Applies to open watches too.
    pub fn set_watch_delay(&self, delay: Duration) {
        self.lock().watch_delay = delay;
    }
    /// The configured watch delay.
    pub fn watch_delay(&self) -> Duration {
        self.lock().watch_delay
    }
    /// Adds an error injection rule.
    pub fn inject_errors(&self, rule: ErrorRule) {
        self.lock().rules.push((rule, 0));
    }
    /// Removes all error injection rules.
    pub fn clear_errors(&self) {
        self.lock().rules.clear();
    }
    /// Closes every open watch (clients see the stream end and re-watch).
    pub fn close_all_watches(&self) {
        self.watch_generation.send_modify(|g| *g += 1);
    }
    /// Receiver that changes when watches must close.
    pub fn watch_closer(&self) -> tokio::sync::watch::Receiver<u64> {
        self.watch_generation.subscribe()
    }
    /// Snapshot of the counters.
    pub fn counters(&self) -> RequestCounters {
        RequestCounters {
            counts: self.lock().counters.clone(),
        }
    }
    /// Zeroes the counters.
    pub fn reset_counters(&self) {
        self.lock().counters.clear();
    }
    /// Records one answered request.
    pub fn count(&self, verb: Verb, resource: &str, code: u16) {
        *self
            .lock()
            .counters
            .entry((verb, resource.to_string(), code))
            .or_insert(0) += 1;
    }
    /// Decides whether this request gets an injected error.
    pub fn decide(&self, verb: Verb, resource: &str) -> Injected {
        let mut st = self.lock();
        let mut chosen = None;
        for i in 0..st.rules.len() {
            let (rule, used) = &st.rules[i];
            if rule.verb.is_some_and(|v| v != verb)
                || rule.resource.as_deref().is_some_and(|r| r != resource)
            {
                continue;
            }
            if rule.count.is_some_and(|c| *used >= c) {
                continue;
            }
            let rate = rule.rate;
            // xorshift64: deterministic, good enough to spread injected errors.
            let mut x = st.rng;
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            st.rng = x;
            let draw = (x >> 11) as f64 / (1u64 << 53) as f64;
            if rate >= 1.0 || draw < rate {
                chosen = Some(i);
                break;
            }
        }
        match chosen {
            Some(i) => {
                st.rules[i].1 += 1;
                Injected::Error(st.rules[i].0.status)
            }
            None => Injected::None,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn rules_match_verb_resource_and_count() {
        let f = Faults::default();
        f.inject_errors(ErrorRule {
            verb: Some(Verb::Update),
            resource: Some("machines".into()),
            status: 409,
            rate: 1.0,
            count: Some(2),
        });
        assert_eq!(f.decide(Verb::Get, "machines"), Injected::None);
        assert_eq!(f.decide(Verb::Update, "pods"), Injected::None);
        assert_eq!(f.decide(Verb::Update, "machines"), Injected::Error(409));
        assert_eq!(f.decide(Verb::Update, "machines"), Injected::Error(409));
        assert_eq!(f.decide(Verb::Update, "machines"), Injected::None);
        f.clear_errors();
        f.inject_errors(ErrorRule {
            verb: None,
            resource: None,
            status: 500,
            rate: 0.5,
            count: None,
        });
        let hits = (0..1000)
            .filter(|_| f.decide(Verb::Get, "x") != Injected::None)
            .count();
        assert!((300..700).contains(&hits), "{hits}");
    }

    #[test]
    fn counters_aggregate() {
        let f = Faults::default();
        f.count(Verb::Get, "pods", 200);
        f.count(Verb::Get, "pods", 404);
        f.count(Verb::Create, "machines", 201);
        let c = f.counters();
        assert_eq!(c.total(), 3);
        assert_eq!(c.by_verb(Verb::Get), 2);
        assert_eq!(c.by_resource("machines"), 1);
        assert_eq!(c.by_status(404), 1);
        let round: RequestCounters =
            serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
        assert_eq!(round, c);
        f.reset_counters();
        assert_eq!(f.counters().total(), 0);
        assert_eq!(Verb::DeleteCollection.to_string(), "deletecollection");
    }

    #[test]
    fn watch_delay_is_settable() {
        let f = Faults::default();
        assert_eq!(f.watch_delay(), Duration::ZERO);
        f.set_watch_delay(Duration::from_millis(250));
        assert_eq!(f.watch_delay(), Duration::from_millis(250));
        f.set_watch_delay(Duration::ZERO);
        assert_eq!(f.watch_delay(), Duration::ZERO);
    }

    #[test]
    fn unavailability_expires() {
        let f = Faults::default();
        f.set_unavailable(Duration::from_secs(60), UnavailableMode::ServiceUnavailable);
        assert_eq!(f.unavailable(), Some(UnavailableMode::ServiceUnavailable));
        f.clear_unavailable();
        assert_eq!(f.unavailable(), None);
        f.set_unavailable(Duration::ZERO, UnavailableMode::Refuse);
        assert_eq!(f.unavailable(), None);
    }
}
