//! Leader election's vocabulary: the Lease's name and lock, the validated timing
//! ([`LeaderElectionConfig`]) and the Lease's whole seconds.

/// Name of the Lease used for leader election (upstream's lock name) unless only the machine
/// share runs ([`Selection::lease_name`](crate::platform::selection::Selection::lease_name)).
pub const LEASE_NAME: &str = crate::platform::selection::CONTROLLER_MANAGER_LEASE;
/// The only supported `--leader-elect-resource-lock`.
pub const LEASES_RESOURCE_LOCK: &str = "leases";

/// Leader-election timing, present only with `--leader-elect=true`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderElectionConfig {
    /// Lease name ([`LEASE_NAME`]).
    pub lease_name: String,
    /// Namespace of the Lease (the control namespace).
    pub namespace: String,
    /// `--leader-elect-lease-duration`.
    pub lease_duration: std::time::Duration,
    /// `--leader-elect-renew-deadline`.
    pub renew_deadline: std::time::Duration,
    /// `--leader-elect-retry-period`.
    pub retry_period: std::time::Duration,
}

/// Seconds of `duration`, rounded up (a Lease stores `leaseDurationSeconds` as an integer).
pub fn whole_seconds_up(duration: std::time::Duration) -> u64 {
    duration.as_secs() + u64::from(duration.subsec_nanos() > 0)
}
