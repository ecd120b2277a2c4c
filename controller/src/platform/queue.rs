//! A de-duplicating work queue with delayed and rate-limited re-adds and a bounded worker pool,
//! with client-go's workqueue guarantees: a key is never processed by two workers at once, a key
//! added while it is being processed runs again afterwards, and a key queued several times runs
//! once.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::platform::caches::CacheGate;
use crate::platform::metrics::Metrics;
use mcm_decisions::vocabulary::Retry;

/// First retry delay after a failure (doubles per consecutive failure of the same key).
pub const RETRY_BASE: Duration = Duration::from_millis(5);
/// Longest retry delay after repeated failures (client-go's default controller rate limiter).
pub const RETRY_MAX: Duration = Duration::from_secs(1000);

/// How long a MachineSet or MachineDeployment waits before the sync that a change of one of its
/// machines asks for, so that the changes of that time share one sync.
///
/// A sync reads every machine of its owner, so one sync per machine change made a scale-up of N
/// machines cost O(N²) CPU: at 3,000 machines the two controllers' syncs were half the manager's
/// CPU (docs/performance.md). Upstream syncs at every change; ours at most once per this period
/// for machine updates (timing only: MachineSet and MachineDeployment changes, and a MachineSet's
/// machines appearing and disappearing, which its creation and deletion bookkeeping waits for,
/// are handled at once).
pub const OWNER_SYNC_DEBOUNCE: Duration = Duration::from_millis(200);

/// What a worker asks the queue to do with the key after a pass that did not fail (kube-runtime's
/// `Action`). Either way the key's failure history is forgotten.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Wait for the next event.
    AwaitChange,
    /// Process the key again when this retry is due.
    Requeue(Retry),
}

/// A pass that failed; the worker has logged why, with its context. The queue's one error policy
/// brings the key back after its exponential per-key backoff ([`RETRY_BASE`] doubling per
/// consecutive failure up to [`RETRY_MAX`]). A worker that wants a failure back at a fixed time
/// (e.g. [`Retry::Conflict`] after a conflict, see `platform::error::ApiError::retry`) returns
/// that as an [`Action::Requeue`] instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Failed;

/// What one pass of a worker returns.
pub type Pass = Result<Action, Failed>;

#[derive(Default)]
struct State {
    order: VecDeque<String>,
    queued: HashSet<String>,
    processing: HashSet<String>,
    dirty: HashSet<String>,
    failures: HashMap<String, u32>,
    /// When the pending delayed add of each key is due.
    delayed: HashMap<String, tokio::time::Instant>,
    /// The same adds in due order, served by one timer task per queue (one task per delayed add
    /// would cost a task, a timer entry and a key per machine, kept until due).
    timers: BTreeSet<(tokio::time::Instant, String)>,
    timer_task: bool,
    /// When each waiting key was added (client-go's queue duration starts here).
    added_at: HashMap<String, Instant>,
    /// When each running key was handed to its worker (work duration, in-progress metrics).
    started_at: HashMap<String, Instant>,
}

struct Inner {
    name: String,
    state: Mutex<State>,
    ready: Notify,
    /// Wakes the timer task when a delayed add is due earlier than every pending one.
    timer_wake: Notify,
    metrics: Option<Metrics>,
}

/// A named work queue of object keys. Clone freely.
#[derive(Clone)]
pub struct WorkQueue {
    inner: Arc<Inner>,
}

impl WorkQueue {
    /// A queue called `name` (used for the `workqueue depth` metric and logs).
    pub fn new(name: impl Into<String>, metrics: Option<Metrics>) -> Self {
        let queue = Self {
            inner: Arc::new(Inner {
                name: name.into(),
                state: Mutex::new(State::default()),
                ready: Notify::new(),
                timer_wake: Notify::new(),
                metrics,
            }),
        };
        if let Some(metrics) = &queue.inner.metrics {
            // The in-progress gauges are computed at scrape time, as client-go's are refreshed
            // periodically; the hook holds the queue weakly so a stopped queue is not kept.
            let weak = Arc::downgrade(&queue.inner);
            let name = queue.inner.name.clone();
            metrics.on_scrape(Box::new(move |metrics| {
                let (unfinished, longest) = weak.upgrade().map_or((0.0, 0.0), |inner| {
                    let state = inner
                        .state
                        .lock()
                        .unwrap_or_else(|poisoned| poisoned.into_inner());
                    in_progress(state.started_at.values().copied(), Instant::now())
                });
                metrics.set_workqueue_in_progress(&name, unfinished, longest);
            }));
        }
        queue
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Keys waiting to be processed (not counting delayed ones).
    pub fn len(&self) -> usize {
        self.lock().order.len()
    }

    /// True when no key is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Queues `key` now (a no-op if it is already waiting).
    pub fn add(&self, key: impl Into<String>) {
        let key = key.into();
        let mut state = self.lock();
        if state.processing.contains(&key) {
            if state.dirty.insert(key.clone()) {
                state.added_at.entry(key).or_insert_with(Instant::now);
                drop(state);
                self.count(Metrics::workqueue_added);
            }
            return;
        }
        if state.queued.insert(key.clone()) {
            state.added_at.insert(key.clone(), Instant::now());
            self.count(Metrics::workqueue_added);
            state.order.push_back(key);
            let depth = state.order.len();
            drop(state);
            self.report_depth(depth);
            self.inner.ready.notify_one();
        }
    }

    /// Queues `key` after `delay`. An earlier pending delayed add of the same key wins.
    pub fn add_after(&self, key: impl Into<String>, delay: Duration) {
        let key = key.into();
        if delay.is_zero() {
            self.add(key);
            return;
        }
        let due = tokio::time::Instant::now() + delay;
        let (earliest, start_task) = {
            let mut state = self.lock();
            if let Some(pending) = state.delayed.get(&key).copied() {
                if pending <= due {
                    return;
                }
                state.timers.remove(&(pending, key.clone()));
            }
            let earliest = state.timers.first().is_none_or(|(at, _)| due < *at);
            state.timers.insert((due, key.clone()));
            state.delayed.insert(key, due);
            let start_task = !state.timer_task;
            state.timer_task = true;
            (earliest, start_task)
        };
        if start_task {
            tokio::spawn(self.clone().serve_timers());
        } else if earliest {
            self.inner.timer_wake.notify_one();
        }
    }

    /// The queue's timer task: adds each delayed key when it is due. It lives as long as the
    /// runtime (a queue lives as long as its controller).
    async fn serve_timers(self) {
        loop {
            let next = self.add_due_keys();
            match next {
                Some(at) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(at) => {}
                        () = self.inner.timer_wake.notified() => {}
                    }
                }
                None => self.inner.timer_wake.notified().await,
            }
        }
    }

    /// Adds the keys whose delayed add is due; returns when the next one is due.
    fn add_due_keys(&self) -> Option<tokio::time::Instant> {
        let now = tokio::time::Instant::now();
        let mut due = Vec::new();
        let next = {
            let mut state = self.lock();
            while state.timers.first().is_some_and(|(at, _)| *at <= now) {
                if let Some((_, key)) = state.timers.pop_first() {
                    state.delayed.remove(&key);
                    due.push(key);
                }
            }
            state.timers.first().map(|(at, _)| *at)
        };
        for key in due {
            self.add(key);
        }
        next
    }

    /// Queues `key` after its exponential backoff and counts one more failure for it.
    pub fn add_rate_limited(&self, key: impl Into<String>) {
        let key = key.into();
        let failures = {
            let mut state = self.lock();
            let failures = state.failures.entry(key.clone()).or_insert(0);
            *failures = failures.saturating_add(1);
            *failures
        };
        self.count(Metrics::workqueue_retried);
        self.add_after(key, backoff(failures));
    }

    /// Forgets the failure history of `key`.
    pub fn forget(&self, key: &str) {
        self.lock().failures.remove(key);
    }

    /// Consecutive failures recorded for `key`.
    pub fn failures(&self, key: &str) -> u32 {
        self.lock().failures.get(key).copied().unwrap_or(0)
    }

    fn count(&self, record: fn(&Metrics, &str)) {
        if let Some(metrics) = &self.inner.metrics {
            record(metrics, &self.inner.name);
        }
    }

    fn report_depth(&self, depth: usize) {
        if let Some(metrics) = &self.inner.metrics {
            metrics.set_workqueue_depth(&self.inner.name, depth);
        }
    }

    fn take(&self) -> Option<String> {
        let mut state = self.lock();
        let key = state.order.pop_front()?;
        state.queued.remove(&key);
        state.processing.insert(key.clone());
        let now = Instant::now();
        let waited = state.added_at.remove(&key).map(|at| now.duration_since(at));
        state.started_at.insert(key.clone(), now);
        let depth = state.order.len();
        drop(state);
        self.report_depth(depth);
        if let (Some(metrics), Some(waited)) = (&self.inner.metrics, waited) {
            metrics.workqueue_started(&self.inner.name, waited);
        }
        Some(key)
    }

    fn done(&self, key: &str) {
        let mut state = self.lock();
        state.processing.remove(key);
        if let (Some(started), Some(metrics)) = (state.started_at.remove(key), &self.inner.metrics)
        {
            metrics.workqueue_finished(&self.inner.name, started.elapsed());
        }
        if state.dirty.remove(key) && state.queued.insert(key.to_owned()) {
            state.order.push_back(key.to_owned());
            drop(state);
            self.inner.ready.notify_one();
        }
    }

    /// Runs `workers` workers calling `process(key)` until `shutdown`; in-flight calls finish
    /// before it returns.
    pub async fn run<F, Fut>(&self, workers: usize, shutdown: CancellationToken, process: F)
    where
        F: Fn(String) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Pass> + Send + 'static,
    {
        self.run_gated(workers, shutdown, None, process).await;
    }

    /// [`WorkQueue::run`] whose workers take a key only while `gate` allows acting: while a
    /// cache of the controller is stale, keys wait in the queue (docs/behaviour.md#stale-caches).
    pub async fn run_gated<F, Fut>(
        &self,
        workers: usize,
        shutdown: CancellationToken,
        gate: Option<CacheGate>,
        process: F,
    ) where
        F: Fn(String) -> Fut + Clone + Send + Sync + 'static,
        Fut: Future<Output = Pass> + Send + 'static,
    {
        let mut pool = tokio::task::JoinSet::new();
        for _ in 0..workers.max(1) {
            let queue = self.clone();
            let shutdown = shutdown.clone();
            let process = process.clone();
            let gate = gate.clone();
            pool.spawn(async move {
                loop {
                    if let Some(gate) = &gate
                        && !gate.wait(&shutdown).await
                    {
                        return;
                    }
                    let Some(key) = queue.take() else {
                        tokio::select! {
                            () = shutdown.cancelled() => return,
                            () = queue.inner.ready.notified() => continue,
                        }
                    };
                    if !queue.is_empty() {
                        // Wake an idle worker for the next key while this one is busy.
                        queue.inner.ready.notify_one();
                    }
                    let started = Instant::now();
                    // Boxed: a reconcile's future is many KiB, and inline it would make every
                    // idle worker (`--concurrent-syncs` per queue) that large for good.
                    let pass = Box::pin(process(key.clone())).await;
                    if let Some(metrics) = &queue.inner.metrics {
                        metrics.reconcile_finished(&queue.inner.name, started.elapsed());
                    }
                    match pass {
                        Ok(Action::AwaitChange) => queue.forget(&key),
                        Ok(Action::Requeue(retry)) => {
                            queue.forget(&key);
                            queue.add_after(key.clone(), retry.delay());
                        }
                        Err(Failed) => queue.add_rate_limited(key.clone()),
                    }
                    queue.done(&key);
                    if shutdown.is_cancelled() {
                        return;
                    }
                }
            });
        }
        while pool.join_next().await.is_some() {}
    }
}

/// The sum of the running keys' ages and the oldest one's, in seconds, at `now`.
fn in_progress(started: impl Iterator<Item = Instant>, now: Instant) -> (f64, f64) {
    started.fold((0.0, 0.0), |(sum, longest), at| {
        let age = now.duration_since(at).as_secs_f64();
        (sum + age, f64::max(longest, age))
    })
}

/// The retry delay after `failures` consecutive failures: 5 ms doubling, capped at 1000 s.
pub fn backoff(failures: u32) -> Duration {
    let exponent = failures.saturating_sub(1).min(30);
    RETRY_BASE.saturating_mul(1u32 << exponent).min(RETRY_MAX)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn backoff_doubles_and_caps() {
        assert_eq!(backoff(1), Duration::from_millis(5));
        assert_eq!(backoff(2), Duration::from_millis(10));
        assert_eq!(backoff(11), Duration::from_millis(5 * 1024));
        assert_eq!(backoff(40), RETRY_MAX);
    }

    #[test]
    fn duplicate_adds_are_processed_once() {
        let queue = WorkQueue::new("test", None);
        queue.add("a");
        queue.add("a");
        queue.add("b");
        assert_eq!(queue.len(), 2);
        assert_eq!(queue.take().as_deref(), Some("a"));
        // Added again while processing: not handed to another worker, queued after done.
        queue.add("a");
        assert_eq!(queue.take().as_deref(), Some("b"));
        assert_eq!(queue.take(), None);
        queue.done("a");
        assert_eq!(queue.take().as_deref(), Some("a"));
    }

    #[tokio::test]
    async fn client_go_workqueue_metrics_are_recorded() {
        let metrics = Metrics::new();
        let queue = WorkQueue::new("machineset", Some(metrics.clone()));
        queue.add("a");
        queue.add("a"); // de-duplicated: not an add
        queue.add("b");
        assert_eq!(queue.take().as_deref(), Some("a"));
        queue.add("a"); // while processing: an add, run again after done
        let text = metrics
            .encode_port(crate::platform::metrics::MetricsPort::ControllerManager)
            .unwrap();
        let labels = r#"{name="machineset",queue="machineset"}"#;
        assert!(
            text.contains(&format!("mcm_workqueue_adds_total{labels} 3\n")),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "mcm_workqueue_queue_duration_seconds_count{labels} 1\n"
            )),
            "{text}"
        );
        // One key is running: the in-progress gauges are set at scrape time.
        assert!(
            text.contains("mcm_workqueue_longest_running_processor_seconds{"),
            "{text}"
        );
        queue.done("a");
        queue.add_rate_limited("b");
        let text = metrics
            .encode_port(crate::platform::metrics::MetricsPort::ControllerManager)
            .unwrap();
        assert!(
            text.contains(&format!(
                "mcm_workqueue_work_duration_seconds_count{labels} 1\n"
            )),
            "{text}"
        );
        assert!(
            text.contains(&format!("mcm_workqueue_retries_total{labels} 1\n")),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "mcm_workqueue_unfinished_work_seconds{labels} 0.0\n"
            )) || text.contains(&format!(
                "mcm_workqueue_unfinished_work_seconds{labels} 0\n"
            )),
            "nothing runs any more: {text}"
        );
    }

    #[tokio::test]
    async fn delayed_adds_fire_once_in_due_order_and_the_earlier_add_wins() {
        let queue = WorkQueue::new("test", None);
        queue.add_after("late", Duration::from_millis(400));
        queue.add_after("a", Duration::from_millis(300));
        // An earlier add of the same key replaces the later one; a later one is ignored.
        queue.add_after("a", Duration::from_millis(50));
        queue.add_after("a", Duration::from_millis(350));
        queue.add_after("b", Duration::from_millis(120));
        assert_eq!(queue.take(), None, "nothing is due yet");
        let mut seen = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        while seen.len() < 3 && Instant::now() < deadline {
            if let Some(key) = queue.take() {
                queue.done(&key);
                seen.push(key);
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(seen, ["a", "b", "late"]);
        // Nothing else fires: the replaced and the ignored adds of "a" are gone.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(queue.take(), None);
        let state = queue.lock();
        assert!(state.timers.is_empty() && state.delayed.is_empty());
    }

    #[tokio::test]
    async fn workers_process_every_key_and_retry_failures() {
        let queue = WorkQueue::new("test", None);
        let calls = Arc::new(AtomicUsize::new(0));
        let shutdown = CancellationToken::new();
        for key in ["a", "b", "c"] {
            queue.add(key);
        }
        let runner = {
            let queue = queue.clone();
            let calls = Arc::clone(&calls);
            let shutdown = shutdown.clone();
            tokio::spawn(async move {
                queue
                    .run(2, shutdown, move |key| {
                        let calls = Arc::clone(&calls);
                        async move {
                            let n = calls.fetch_add(1, Ordering::SeqCst);
                            // The first call of "b" fails once and is retried.
                            if key == "b" && n < 3 {
                                Err(Failed)
                            } else {
                                Ok(Action::AwaitChange)
                            }
                        }
                    })
                    .await;
            })
        };
        for _ in 0..200 {
            if calls.load(Ordering::SeqCst) >= 4 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        shutdown.cancel();
        runner.await.unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 4);
        assert_eq!(
            queue.failures("b"),
            0,
            "a later success forgets the failures"
        );
    }

    #[tokio::test]
    async fn a_requeued_key_comes_back_when_its_retry_is_due() {
        let queue = WorkQueue::new("test", None);
        let calls = Arc::new(AtomicUsize::new(0));
        let shutdown = CancellationToken::new();
        queue.add("a");
        let runner = {
            let queue = queue.clone();
            let calls = Arc::clone(&calls);
            let shutdown = shutdown.clone();
            tokio::spawn(async move {
                queue
                    .run(1, shutdown, move |_key| {
                        let calls = Arc::clone(&calls);
                        async move {
                            match calls.fetch_add(1, Ordering::SeqCst) {
                                0 => Ok(Action::Requeue(Retry::After(
                                    mcm_api::duration::Duration::from_millis(20),
                                ))),
                                // A period already past is due at once, not dropped.
                                1 => Ok(Action::Requeue(Retry::After(
                                    mcm_api::duration::Duration::from_secs(-1),
                                ))),
                                2 => Ok(Action::Requeue(Retry::Immediate)),
                                _ => Ok(Action::AwaitChange),
                            }
                        }
                    })
                    .await;
            })
        };
        for _ in 0..500 {
            if calls.load(Ordering::SeqCst) >= 4 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        shutdown.cancel();
        runner.await.unwrap();
        assert_eq!(calls.load(Ordering::SeqCst), 4);
        assert_eq!(queue.failures("a"), 0, "a requeue is not a failure");
    }
}
