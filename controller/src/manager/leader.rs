//! Leader election on a `coordination.k8s.io/v1` Lease of the control namespace, with **get,
//! create and update only** (client-go's `LeaseLock`).
//!
//! Gardener's Role grants Leases `create`, and `get`/`watch`/`update` on the two lock names
//! (`machine-controller-manager`, `machine-controller`); no `patch`. So the lock is taken the way
//! client-go's `leaderelection` package takes it:
//! * every retry period, GET the Lease; absent ⇒ CREATE it naming us; held by someone else whose
//!   record has not changed for its `leaseDurationSeconds` (measured on the local monotonic
//!   clock since we first saw that record, so clock skew between nodes does not matter) ⇒ take it
//!   over with an UPDATE (PUT carrying the read `resourceVersion`, so two candidates cannot both
//!   win); ours ⇒ renew with an UPDATE;
//! * the leader gives up when no renewal succeeded for the renew deadline, or at once when the
//!   Lease names someone else;
//! * two signals: [`LeaderElector::became_leader`] and [`LeaderElector::lost`]. On a loss the
//!   manager stops its controllers at once and campaigns again in-process with a new elector
//!   (`docs/operations.md`, "Leader election and API outages");
//! * with a [`WriteGate`] ([`LeaderElector::start_gated`]) the election opens it when it becomes
//!   leader and closes it **before** it signals a loss, so no write of the controllers leaves the
//!   process once the loss is decided;
//! * a candidate whose attempt failed (API unreachable) tries again after 250 ms, doubling up to
//!   [`FAILED_ATTEMPT_RETRY_CAP`] instead of waiting a whole retry period, so it leads again within
//!   about a second of the API's return when the Lease names it ([`default_identity`] is stable
//!   across restarts of the same pod, so this also holds for a restarted process).
//!
//! [`LeaderElector::stop`] releases the Lease (empty holder, 1 s duration), as client-go's
//! `ReleaseOnCancel` does, so a standby takes over at its next retry. A loss releases nothing:
//! the Lease is either someone else's or still names us, and then we take it again at once.
//!
//! The decision of each attempt is the pure [`plan_attempt`]; the task around it only reads,
//! writes and keeps time.

use std::hash::BuildHasher;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::gate::WriteGate;
use crate::platform::config::{LeaderElectionConfig, whole_seconds_up};
use crate::platform::informer::Rewatch;

/// Longest pause between two failed acquisition attempts (the API server was unreachable).
pub const FAILED_ATTEMPT_RETRY_CAP: Duration = Duration::from_secs(1);

/// First pause after a failed acquisition attempt.
const FAILED_ATTEMPT_RETRY: Duration = Duration::from_millis(250);

/// How leader election runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderSettings {
    /// Lease name.
    pub lease_name: String,
    /// Lease namespace.
    pub namespace: String,
    /// Our identity in `spec.holderIdentity` ([`default_identity`]).
    pub identity: String,
    /// How long the lease is valid after a renewal.
    pub lease_duration: Duration,
    /// The leader gives up when no renewal succeeded for this long.
    pub renew_deadline: Duration,
    /// Interval of acquisition attempts and renewals.
    pub retry_period: Duration,
}

impl LeaderSettings {
    /// Settings from the validated flags and an identity.
    pub fn new(config: &LeaderElectionConfig, identity: impl Into<String>) -> Self {
        Self {
            lease_name: config.lease_name.clone(),
            namespace: config.namespace.clone(),
            identity: identity.into(),
            lease_duration: config.lease_duration,
            renew_deadline: config.renew_deadline,
            retry_period: config.retry_period,
        }
    }
}

/// Where this replica stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaderState {
    /// Waiting to acquire the lease.
    Candidate,
    /// Holding the lease.
    Leader,
    /// Held the lease or took part in the election, and lost it (the reason). Final.
    Lost(String),
    /// Stopped on request (lease released). Final.
    Stopped,
}

/// Leader election failed to start or ended.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    /// Timings that a Lease (whole seconds) cannot express.
    #[error(
        "leader election timing unusable: lease duration {lease_duration:?} must exceed the retry period {retry_period:?} by at least one whole second"
    )]
    InvalidTiming {
        /// Lease duration.
        lease_duration: Duration,
        /// Retry period.
        retry_period: Duration,
    },
    /// The leadership was lost (or never gained because the election ended).
    #[error("leader election lost: {0}")]
    Lost(String),
    /// Leader election was stopped on request.
    #[error("leader election stopped")]
    Stopped,
}

/// What one acquire-or-renew attempt does, decided by [`plan_attempt`].
#[derive(Clone, Debug, PartialEq)]
pub enum Attempt {
    /// No Lease yet: create it with this spec.
    Create(LeaseSpec),
    /// Renew ours or take over an expired one: replace the spec with this one (the write carries
    /// the read `resourceVersion`).
    Update(LeaseSpec),
    /// Someone else holds a lease that has not expired yet.
    HeldBy(String),
}

/// Decides one acquire-or-renew attempt (client-go's `tryAcquireOrRenew`).
///
/// `current` is the Lease's spec as just read (`None`: no Lease); `unchanged_for` is how long
/// this replica has seen exactly that spec (zero when it just changed). `now` becomes the
/// renew (and, on acquisition, acquire) time. Pure: no clock reads.
pub fn plan_attempt(
    current: Option<&LeaseSpec>,
    unchanged_for: Duration,
    identity: &str,
    lease_duration_seconds: i32,
    now: jiff::Timestamp,
) -> Attempt {
    let Some(current) = current else {
        return Attempt::Create(LeaseSpec {
            holder_identity: Some(identity.to_owned()),
            lease_duration_seconds: Some(lease_duration_seconds),
            acquire_time: Some(MicroTime(now)),
            renew_time: Some(MicroTime(now)),
            lease_transitions: Some(0),
            ..LeaseSpec::default()
        });
    };
    let holder = current
        .holder_identity
        .as_deref()
        .filter(|holder| !holder.is_empty());
    let ours = holder == Some(identity);
    if let Some(holder) = holder.filter(|_| !ours) {
        // The holder's own promise, as client-go reads it; a missing or broken value falls back
        // to ours so a malformed Lease cannot block the election forever nor be stolen at once.
        let promised = current
            .lease_duration_seconds
            .filter(|seconds| *seconds > 0)
            .unwrap_or(lease_duration_seconds);
        let valid_for = Duration::from_secs(u64::try_from(promised).unwrap_or_default());
        if unchanged_for < valid_for {
            return Attempt::HeldBy(holder.to_owned());
        }
    }
    let transitions = current.lease_transitions.unwrap_or(0);
    Attempt::Update(LeaseSpec {
        holder_identity: Some(identity.to_owned()),
        lease_duration_seconds: Some(lease_duration_seconds),
        acquire_time: if ours {
            current.acquire_time.clone().or(Some(MicroTime(now)))
        } else {
            Some(MicroTime(now))
        },
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(if ours {
            transitions
        } else {
            transitions.saturating_add(1)
        }),
        ..current.clone()
    })
}

/// The spec that releases a lease we hold (client-go's `release`): no holder, a one-second
/// duration so standbys take over at their next attempt; `None` when it is not ours.
pub fn release_spec(
    current: &LeaseSpec,
    identity: &str,
    now: jiff::Timestamp,
) -> Option<LeaseSpec> {
    (current.holder_identity.as_deref() == Some(identity)).then(|| LeaseSpec {
        holder_identity: None,
        lease_duration_seconds: Some(1),
        acquire_time: Some(MicroTime(now)),
        renew_time: Some(MicroTime(now)),
        ..current.clone()
    })
}

/// A running leader election. Dropping it without [`LeaderElector::stop`] also ends it, but
/// without waiting for the lease release.
pub struct LeaderElector {
    state: watch::Receiver<LeaderState>,
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
    settings: LeaderSettings,
}

impl LeaderElector {
    /// Starts competing for the lease (the first attempt creates it if needed).
    pub async fn start(client: Client, settings: LeaderSettings) -> Result<Self, LeaderError> {
        Self::start_gated(client, settings, None, None).await
    }

    /// [`LeaderElector::start`], opening `gate` while this replica leads and closing it the
    /// moment the leadership is lost or the election stops (before either is signalled), and
    /// kicking `rewatch` when an attempt reaches the API server after failed ones (the API is
    /// back: broken watches start over at once).
    pub async fn start_gated(
        client: Client,
        settings: LeaderSettings,
        gate: Option<WriteGate>,
        rewatch: Option<Rewatch>,
    ) -> Result<Self, LeaderError> {
        let duration = whole_seconds_up(settings.lease_duration);
        let retry = whole_seconds_up(settings.retry_period);
        if retry == 0 || duration <= retry || i32::try_from(duration).is_err() {
            return Err(LeaderError::InvalidTiming {
                lease_duration: settings.lease_duration,
                retry_period: settings.retry_period,
            });
        }
        let (state_tx, state_rx) = watch::channel(LeaderState::Candidate);
        let stop = CancellationToken::new();
        let lease_api = Api::<Lease>::namespaced(client, &settings.namespace);
        let task = tokio::spawn(elect(
            Election {
                lease_api,
                settings: settings.clone(),
                state_tx,
                observed: None,
                gate,
                rewatch,
                failing: false,
            },
            stop.clone(),
        ));
        tracing::info!(
            lease = %settings.lease_name,
            namespace = %settings.namespace,
            identity = %settings.identity,
            "leader election started"
        );
        Ok(Self {
            state: state_rx,
            stop,
            task: Some(task),
            settings,
        })
    }

    /// The identity competing for the lease.
    pub fn identity(&self) -> &str {
        &self.settings.identity
    }

    /// A receiver of state changes.
    pub fn state(&self) -> watch::Receiver<LeaderState> {
        self.state.clone()
    }

    /// Resolves once this replica holds the lease; fails if the election ended first.
    pub async fn became_leader(&mut self) -> Result<(), LeaderError> {
        let state = self
            .state
            .wait_for(|state| *state != LeaderState::Candidate)
            .await
            .map(|state| state.clone())
            .unwrap_or_else(|_| LeaderState::Lost("leader election task ended".to_owned()));
        match state {
            LeaderState::Leader => Ok(()),
            LeaderState::Lost(reason) => Err(LeaderError::Lost(reason)),
            LeaderState::Stopped => Err(LeaderError::Stopped),
            LeaderState::Candidate => Err(LeaderError::Lost("unreachable state".to_owned())),
        }
    }

    /// Resolves with the reason once the leadership (or the election) is lost. Never resolves
    /// after [`LeaderElector::stop`] was requested.
    pub async fn lost(&mut self) -> String {
        let state = self
            .state
            .wait_for(|state| matches!(state, LeaderState::Lost(_) | LeaderState::Stopped))
            .await
            .map(|state| state.clone())
            .unwrap_or_else(|_| LeaderState::Lost("leader election task ended".to_owned()));
        match state {
            LeaderState::Lost(reason) => reason,
            _ => std::future::pending().await,
        }
    }

    /// Stops competing and releases the lease if held; waits (bounded) for the release.
    pub async fn stop(mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            let bound = self.settings.retry_period.max(Duration::from_secs(1)) * 3;
            if tokio::time::timeout(bound, task).await.is_err() {
                tracing::warn!(
                    "the lease was not released within {bound:?}; a standby takes over once it expires"
                );
            }
        }
    }
}

impl Drop for LeaderElector {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// The election task's state: its API, settings, the state it publishes, and the Lease spec it
/// last saw with the local instant it first saw it.
struct Election {
    lease_api: Api<Lease>,
    settings: LeaderSettings,
    state_tx: watch::Sender<LeaderState>,
    observed: Option<(LeaseSpec, Instant)>,
    gate: Option<WriteGate>,
    rewatch: Option<Rewatch>,
    /// Whether the last attempt failed (the API server may be down).
    failing: bool,
}

/// How one attempt ended.
enum Outcome {
    /// We hold the lease (created, renewed or taken over).
    Held,
    /// Someone else holds it.
    HeldBy(String),
    /// The read or the write failed (conflict, API error, timeout).
    Failed(String),
}

impl Election {
    fn lease_duration_seconds(&self) -> i32 {
        i32::try_from(whole_seconds_up(self.settings.lease_duration)).unwrap_or(i32::MAX)
    }

    /// One acquire-or-renew attempt: GET, decide, then CREATE or UPDATE (never PATCH).
    async fn attempt(&mut self) -> Outcome {
        let name = self.settings.lease_name.clone();
        let current = match self.lease_api.get_opt(&name).await {
            Ok(current) => current,
            Err(error) => return Outcome::Failed(format!("reading the lease failed: {error}")),
        };
        let spec = current
            .as_ref()
            .map(|lease| lease.spec.clone().unwrap_or_default());
        let now = Instant::now();
        let unchanged_for = match (&self.observed, &spec) {
            (Some((seen, since)), Some(spec)) if seen == spec => now.duration_since(*since),
            (_, Some(spec)) => {
                self.observed = Some((spec.clone(), now));
                Duration::ZERO
            }
            (_, None) => {
                self.observed = None;
                Duration::ZERO
            }
        };
        let plan = plan_attempt(
            spec.as_ref(),
            unchanged_for,
            &self.settings.identity,
            self.lease_duration_seconds(),
            jiff::Timestamp::now(),
        );
        let written = match plan {
            Attempt::HeldBy(holder) => return Outcome::HeldBy(holder),
            Attempt::Create(spec) => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        namespace: Some(self.settings.namespace.clone()),
                        ..ObjectMeta::default()
                    },
                    spec: Some(spec),
                };
                self.lease_api.create(&PostParams::default(), &lease).await
            }
            Attempt::Update(spec) => {
                let Some(mut lease) = current else {
                    return Outcome::Failed("the lease vanished".to_owned());
                };
                lease.spec = Some(spec);
                self.lease_api
                    .replace(&name, &PostParams::default(), &lease)
                    .await
            }
        };
        match written {
            Ok(lease) => {
                self.observed = Some((lease.spec.unwrap_or_default(), Instant::now()));
                Outcome::Held
            }
            Err(error) => Outcome::Failed(format!("writing the lease failed: {error}")),
        }
    }

    /// An attempt bounded by the retry period, so a hanging request cannot outlive the renew
    /// deadline unnoticed. The first attempt that reaches the API server after failed ones
    /// kicks the informers' re-watch (docs/behaviour.md#stale-caches).
    async fn bounded_attempt(&mut self) -> Outcome {
        let bound = self.settings.retry_period.max(Duration::from_secs(1));
        let outcome = match tokio::time::timeout(bound, self.attempt()).await {
            Ok(outcome) => outcome,
            Err(_) => Outcome::Failed(format!("the attempt took longer than {bound:?}")),
        };
        let failing = matches!(outcome, Outcome::Failed(_));
        if self.failing
            && !failing
            && let Some(rewatch) = &self.rewatch
        {
            tracing::info!("the API server answers again: re-establishing broken watches now");
            rewatch.kick();
        }
        self.failing = failing;
        outcome
    }

    /// Releases the lease if this replica still holds it.
    async fn release(&self) {
        let name = &self.settings.lease_name;
        let result = async {
            let Some(mut lease) = self.lease_api.get_opt(name).await? else {
                return Ok(false);
            };
            let Some(spec) = release_spec(
                &lease.spec.clone().unwrap_or_default(),
                &self.settings.identity,
                jiff::Timestamp::now(),
            ) else {
                return Ok(false);
            };
            lease.spec = Some(spec);
            self.lease_api
                .replace(name, &PostParams::default(), &lease)
                .await
                .map(|_| true)
        };
        let bound = self.settings.retry_period.max(Duration::from_secs(1)) * 2;
        match tokio::time::timeout(bound, result).await {
            Ok(Ok(true)) => tracing::debug!(lease = %name, "lease released"),
            Ok(Ok(false)) => {}
            Ok(Err(error)) => tracing::warn!(%error, "releasing the lease failed"),
            Err(_) => tracing::warn!("releasing the lease timed out"),
        }
    }
}

async fn elect(mut election: Election, stop: CancellationToken) {
    let retry = election.settings.retry_period;
    let outcome = async {
        // Phase 1: candidate. The first attempt is immediate; after a failed one (API server
        // unreachable) the next comes sooner than a retry period, so the Lease is taken within
        // about a second of the API's return.
        let mut failed_pause = FAILED_ATTEMPT_RETRY;
        loop {
            let pause = match election.bounded_attempt().await {
                Outcome::Held => break,
                Outcome::HeldBy(holder) => {
                    tracing::debug!(%holder, "the lease is held by another replica");
                    failed_pause = FAILED_ATTEMPT_RETRY;
                    retry
                }
                Outcome::Failed(reason) => {
                    tracing::info!(%reason, retry_in = ?failed_pause.min(retry), "acquiring the lease failed; retrying");
                    let pause = failed_pause.min(retry);
                    failed_pause = (failed_pause * 2).min(FAILED_ATTEMPT_RETRY_CAP);
                    pause
                }
            };
            tokio::select! {
                () = stop.cancelled() => return LeaderState::Stopped,
                () = tokio::time::sleep(pause) => {}
            }
        }
        let settings = &election.settings;
        tracing::info!(identity = %settings.identity, lease = %settings.lease_name, "became leader");
        if let Some(gate) = &election.gate {
            gate.open();
        }
        election.state_tx.send_replace(LeaderState::Leader);

        // Phase 2: leader; renew every retry period, give up after the renew deadline.
        let mut ticker = tokio::time::interval_at(Instant::now() + retry, retry);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut renewed_at = Instant::now();
        loop {
            tokio::select! {
                () = stop.cancelled() => return LeaderState::Stopped,
                _ = ticker.tick() => {}
            }
            match election.bounded_attempt().await {
                Outcome::Held => renewed_at = Instant::now(),
                Outcome::HeldBy(holder) => {
                    return LeaderState::Lost(format!("the lease is now held by {holder:?}"));
                }
                Outcome::Failed(reason) => tracing::warn!(%reason, "renewing the lease failed"),
            }
            let deadline = election.settings.renew_deadline;
            if renewed_at.elapsed() > deadline {
                return LeaderState::Lost(format!(
                    "the lease was not renewed within the renew deadline ({deadline:?})"
                ));
            }
        }
    }
    .await;

    // No write of the controllers may leave the process from here on: close first, then tell.
    if let Some(gate) = &election.gate {
        gate.close();
    }
    let identity = election.settings.identity.clone();
    match &outcome {
        LeaderState::Lost(reason) => {
            tracing::error!(%identity, %reason, "leader election lost");
        }
        _ => {
            tracing::info!(%identity, "leader election stopped");
            election.release().await;
        }
    }
    election.state_tx.send_replace(outcome);
}

/// Our Lease holder identity: `<hostname>_<admin port>`, stable across restarts of the same pod
/// (its hostname is the pod name, its `--port` the same), so a restarted manager finds the Lease
/// still naming it and takes it at once instead of waiting for it to expire; a random suffix when
/// the port is 0 (tests).
///
/// Unique while it is in use: two pods never share a name in a namespace, and two processes on one
/// host (same hostname, `hostNetwork` pods included) cannot both listen on one port. client-go
/// uses `hostname_<uuid>`, new on every start, which is what made a restarted leader wait for its
/// own Lease to expire.
pub fn default_identity(admin_port: u16) -> String {
    let hostname = std::env::var("HOSTNAME")
        .ok()
        .filter(|name| !name.trim().is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|name| name.trim().to_owned())
                .filter(|name| !name.is_empty())
        })
        .unwrap_or_else(|| "unknown-host".to_owned());
    if admin_port == 0 {
        format!("{hostname}_{}", random_suffix())
    } else {
        format!("{hostname}_{admin_port}")
    }
}

/// 16 hex digits from the process's random hasher keys (std seeds them from the OS).
fn random_suffix() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|elapsed| elapsed.as_nanos())
        .unwrap_or_default();
    let value =
        std::collections::hash_map::RandomState::new().hash_one((std::process::id(), nanos));
    format!("{value:016x}")
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const ME: &str = "me_1";
    const DURATION: i32 = 15;

    fn at(seconds: i64) -> jiff::Timestamp {
        jiff::Timestamp::from_second(1_700_000_000 + seconds).unwrap()
    }

    fn held_by(holder: &str, seconds: i32, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.to_owned()),
            lease_duration_seconds: Some(seconds),
            acquire_time: Some(MicroTime(at(0))),
            renew_time: Some(MicroTime(at(5))),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }

    #[test]
    fn a_missing_lease_is_created_naming_us() {
        let Attempt::Create(spec) = plan_attempt(None, Duration::ZERO, ME, DURATION, at(10)) else {
            panic!("expected a create");
        };
        assert_eq!(spec.holder_identity.as_deref(), Some(ME));
        assert_eq!(spec.lease_duration_seconds, Some(DURATION));
        assert_eq!(spec.acquire_time, Some(MicroTime(at(10))));
        assert_eq!(spec.renew_time, Some(MicroTime(at(10))));
        assert_eq!(spec.lease_transitions, Some(0));
    }

    #[test]
    fn another_holders_lease_is_respected_until_unchanged_for_its_duration() {
        let other = held_by("other", DURATION, 3);
        assert_eq!(
            plan_attempt(Some(&other), Duration::from_secs(14), ME, DURATION, at(20)),
            Attempt::HeldBy("other".to_owned())
        );
        let Attempt::Update(spec) =
            plan_attempt(Some(&other), Duration::from_secs(15), ME, DURATION, at(20))
        else {
            panic!("expected a take-over");
        };
        assert_eq!(spec.holder_identity.as_deref(), Some(ME));
        assert_eq!(spec.acquire_time, Some(MicroTime(at(20))));
        assert_eq!(spec.renew_time, Some(MicroTime(at(20))));
        assert_eq!(spec.lease_transitions, Some(4));
    }

    #[test]
    fn the_holders_own_duration_counts_not_ours() {
        let other = held_by("other", 60, 0);
        assert_eq!(
            plan_attempt(Some(&other), Duration::from_secs(30), ME, DURATION, at(40)),
            Attempt::HeldBy("other".to_owned())
        );
        // A broken duration falls back to ours.
        let broken = held_by("other", -1, 0);
        assert_eq!(
            plan_attempt(Some(&broken), Duration::from_secs(10), ME, DURATION, at(40)),
            Attempt::HeldBy("other".to_owned())
        );
        assert!(matches!(
            plan_attempt(Some(&broken), Duration::from_secs(16), ME, DURATION, at(40)),
            Attempt::Update(_)
        ));
    }

    #[test]
    fn renewing_keeps_acquire_time_and_transitions() {
        let ours = held_by(ME, DURATION, 2);
        let Attempt::Update(spec) = plan_attempt(Some(&ours), Duration::ZERO, ME, DURATION, at(30))
        else {
            panic!("expected a renewal");
        };
        assert_eq!(spec.acquire_time, Some(MicroTime(at(0))));
        assert_eq!(spec.renew_time, Some(MicroTime(at(30))));
        assert_eq!(spec.lease_transitions, Some(2));
    }

    #[test]
    fn a_released_lease_is_taken_at_once() {
        let ours = held_by(ME, DURATION, 2);
        let released = release_spec(&ours, ME, at(50)).unwrap();
        assert_eq!(released.holder_identity, None);
        assert_eq!(released.lease_duration_seconds, Some(1));
        assert_eq!(released.lease_transitions, Some(2));
        let Attempt::Update(spec) =
            plan_attempt(Some(&released), Duration::ZERO, "next", DURATION, at(51))
        else {
            panic!("expected a take-over");
        };
        assert_eq!(spec.holder_identity.as_deref(), Some("next"));
        assert_eq!(spec.lease_transitions, Some(3));
        // Only the holder releases.
        assert_eq!(
            release_spec(&held_by("other", DURATION, 0), ME, at(50)),
            None
        );
    }

    proptest::proptest! {
        /// Whatever was read, an attempt never writes another holder, always renews at `now`, and
        /// never takes a lease from a holder whose promise is still running.
        #[test]
        fn attempts_only_ever_claim_for_us(
            holder in proptest::option::of("[a-z]{0,3}"),
            promised in -5i32..100,
            transitions in proptest::option::of(0i32..1000),
            unchanged in 0u64..200,
        ) {
            let current = LeaseSpec {
                holder_identity: holder.clone(),
                lease_duration_seconds: Some(promised),
                lease_transitions: transitions,
                ..LeaseSpec::default()
            };
            let unchanged_for = Duration::from_secs(unchanged);
            match plan_attempt(Some(&current), unchanged_for, ME, DURATION, at(99)) {
                Attempt::Update(spec) => {
                    proptest::prop_assert_eq!(spec.holder_identity.as_deref(), Some(ME));
                    proptest::prop_assert_eq!(spec.renew_time, Some(MicroTime(at(99))));
                    let effective = if promised > 0 { promised } else { DURATION };
                    let other = holder.as_deref().is_some_and(|h| !h.is_empty() && h != ME);
                    proptest::prop_assert!(!other || unchanged >= u64::try_from(effective).unwrap());
                }
                Attempt::HeldBy(other) => {
                    proptest::prop_assert_eq!(Some(other.as_str()), holder.as_deref());
                    proptest::prop_assert_ne!(other.as_str(), ME);
                }
                Attempt::Create(_) => proptest::prop_assert!(false, "a read lease is never created"),
            }
        }
    }

    #[test]
    fn identities_are_stable_per_port_and_carry_the_hostname() {
        // The same pod (hostname) and port: the same identity after a restart.
        assert_eq!(default_identity(10258), default_identity(10258));
        assert_ne!(default_identity(10258), default_identity(10259));
        let identity = default_identity(10258);
        let (host, port) = identity.rsplit_once('_').unwrap();
        assert!(!host.is_empty());
        assert_eq!(port, "10258");
        // Port 0 (tests bind any port): unique per call.
        let first = default_identity(0);
        assert_ne!(first, default_identity(0));
        let (_, suffix) = first.rsplit_once('_').unwrap();
        assert_eq!(suffix.len(), 16);
        assert!(suffix.chars().all(|c| c.is_ascii_hexdigit()));
    }
}
