//! Leader election on the `machine-controller-manager` Lease of the control namespace.
//!
//! A thin wrapper over `kube-lease-manager` (which acquires and renews the Lease with server-side
//! apply) that adds what the manager needs:
//! * upstream's three timings. kube-lease-manager renews `grace` seconds before expiry; with
//!   `grace = lease duration - retry period` the leader renews every retry period, as client-go
//!   does, and candidates take over an unrenewed lease once it expired;
//! * a **renew deadline**: kube-lease-manager keeps retrying a failing renewal forever and never
//!   reports the loss, so a watchdog reads the Lease every retry period and declares the
//!   leadership lost when it no longer names us, or when our renewals have not shown up in it for
//!   the renew deadline (API unreachable, writes failing). It compares the renew time it last saw
//!   change against the local monotonic clock, so clock skew between nodes does not matter;
//! * two signals: [`LeaderElector::became_leader`] and [`LeaderElector::lost`]. The manager
//!   treats a loss as fatal and exits (DESIGN §4): controllers are never paused and resumed.
//!
//! [`LeaderElector::stop`] releases the Lease (empties its holder), as client-go's
//! `ReleaseOnCancel` does. A standby acquires it at its next check, which kube-lease-manager
//! schedules for the expiry it last observed: so the hand-over still takes up to one lease
//! duration, but no replica ever has to force an unexpired lease.

use std::hash::BuildHasher;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::{Api, Client};
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder, LeaseParams};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::config::{LeaderElectionConfig, whole_seconds_up};

/// How leader election runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderSettings {
    /// Lease name.
    pub lease_name: String,
    /// Lease namespace.
    pub namespace: String,
    /// Our identity in `spec.holderIdentity` (hostname plus a random suffix).
    pub identity: String,
    /// How long the lease is valid after a renewal.
    pub lease_duration: Duration,
    /// The leader gives up when its renewals have not been seen for this long.
    pub renew_deadline: Duration,
    /// Interval of renewals and of the watchdog's reads.
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
    /// Creating or reading the Lease failed.
    #[error("cannot set up the Lease {namespace}/{name}: {source}")]
    Setup {
        /// Lease namespace.
        namespace: String,
        /// Lease name.
        name: String,
        /// Cause.
        #[source]
        source: kube_lease_manager::LeaseManagerError,
    },
    /// The leadership was lost (or never gained because the election ended).
    #[error("leader election lost: {0}")]
    Lost(String),
    /// Leader election was stopped on request.
    #[error("leader election stopped")]
    Stopped,
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
    /// Creates the Lease if needed and starts competing for it.
    pub async fn start(client: Client, settings: LeaderSettings) -> Result<Self, LeaderError> {
        let duration = whole_seconds_up(settings.lease_duration);
        let retry = whole_seconds_up(settings.retry_period);
        // LeaseParams::new panics on these; refuse them as an error instead.
        if retry == 0 || duration <= retry {
            return Err(LeaderError::InvalidTiming {
                lease_duration: settings.lease_duration,
                retry_period: settings.retry_period,
            });
        }
        let params = LeaseParams::new(settings.identity.clone(), duration, duration - retry);
        let manager = LeaseManagerBuilder::new(client.clone(), settings.lease_name.clone())
            .with_namespace(settings.namespace.clone())
            .with_parameters(params)
            .build()
            .await
            .map_err(|source| LeaderError::Setup {
                namespace: settings.namespace.clone(),
                name: settings.lease_name.clone(),
                source,
            })?;
        let (leader_rx, manager_task) = manager.watch().await;
        let (state_tx, state_rx) = watch::channel(LeaderState::Candidate);
        let stop = CancellationToken::new();
        let lease_api = Api::<Lease>::namespaced(client, &settings.namespace);
        let task = tokio::spawn(elect(
            Election {
                leader_rx,
                manager_task,
                lease_api,
                settings: settings.clone(),
                state_tx,
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

struct Election {
    leader_rx: watch::Receiver<bool>,
    manager_task: JoinHandle<kube_lease_manager::Result<LeaseManager>>,
    lease_api: Api<Lease>,
    settings: LeaderSettings,
    state_tx: watch::Sender<LeaderState>,
}

async fn elect(election: Election, stop: CancellationToken) {
    let Election {
        mut leader_rx,
        manager_task,
        lease_api,
        settings,
        state_tx,
    } = election;
    let outcome = async {
        // Phase 1: candidate.
        loop {
            tokio::select! {
                () = stop.cancelled() => return LeaderState::Stopped,
                changed = leader_rx.changed() => {
                    if changed.is_err() {
                        return LeaderState::Lost("the lease manager ended".to_owned());
                    }
                    if *leader_rx.borrow_and_update() {
                        break;
                    }
                }
            }
        }
        tracing::info!(identity = %settings.identity, lease = %settings.lease_name, "became leader");
        state_tx.send_replace(LeaderState::Leader);

        // Phase 2: leader, with the renew-deadline watchdog.
        let mut last_renew_seen: Option<MicroTime> = None;
        let mut confirmed_at = tokio::time::Instant::now();
        let mut ticker = tokio::time::interval(settings.retry_period);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = stop.cancelled() => return LeaderState::Stopped,
                changed = leader_rx.changed() => {
                    if changed.is_err() {
                        return LeaderState::Lost("the lease manager ended".to_owned());
                    }
                    if !*leader_rx.borrow_and_update() {
                        return LeaderState::Lost("another replica holds the lease".to_owned());
                    }
                }
                _ = ticker.tick() => {
                    let read = tokio::time::timeout(settings.retry_period, lease_api.get(&settings.lease_name)).await;
                    match read {
                        Ok(Ok(lease)) => {
                            let spec = lease.spec.unwrap_or_default();
                            match spec.holder_identity.as_deref() {
                                Some(holder) if holder == settings.identity => {
                                    if spec.renew_time != last_renew_seen {
                                        last_renew_seen = spec.renew_time;
                                        confirmed_at = tokio::time::Instant::now();
                                    }
                                }
                                holder => {
                                    return LeaderState::Lost(format!(
                                        "the lease is now held by {:?}",
                                        holder.unwrap_or_default()
                                    ));
                                }
                            }
                        }
                        Ok(Err(error)) => tracing::warn!(%error, "reading the lease failed"),
                        Err(_) => tracing::warn!("reading the lease timed out"),
                    }
                    if confirmed_at.elapsed() > settings.renew_deadline {
                        return LeaderState::Lost(format!(
                            "the lease was not renewed within the renew deadline ({:?})",
                            settings.renew_deadline
                        ));
                    }
                }
            }
        }
    }
    .await;

    match &outcome {
        LeaderState::Lost(reason) => {
            tracing::error!(identity = %settings.identity, %reason, "leader election lost");
            // Signal at once: the controllers must stop before anything else happens.
            state_tx.send_replace(outcome.clone());
        }
        _ => tracing::info!(identity = %settings.identity, "leader election stopped"),
    }
    // Closing the channel makes kube-lease-manager release the lease (if still ours) and end.
    drop(leader_rx);
    let bound = settings.retry_period.max(Duration::from_secs(1)) * 2;
    match tokio::time::timeout(bound, manager_task).await {
        Ok(Ok(Ok(_))) => tracing::debug!("lease released"),
        Ok(Ok(Err(error))) => tracing::warn!(%error, "releasing the lease failed"),
        Ok(Err(error)) => tracing::warn!(%error, "the lease manager task failed"),
        Err(_) => tracing::warn!("releasing the lease timed out"),
    }
    state_tx.send_replace(outcome);
}

/// `hostname_<random hex>`: unique per process even when two replicas share a hostname, as
/// client-go's `hostname + "_" + uuid`.
pub fn default_identity() -> String {
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
    format!("{hostname}_{}", random_suffix())
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

    #[test]
    fn identities_are_unique_and_carry_the_hostname() {
        let first = default_identity();
        let second = default_identity();
        assert_ne!(first, second);
        let (host, suffix) = first.rsplit_once('_').unwrap();
        assert!(!host.is_empty());
        assert_eq!(suffix.len(), 16);
        assert!(suffix.chars().all(|c| c.is_ascii_hexdigit()));
    }
}
