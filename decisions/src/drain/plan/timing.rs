//! The drain's fixed waits and timeouts (upstream's constants).

use jiff::SignedDuration;
use mcm_api::duration::Duration;

/// Wait between eviction attempts of one pod (upstream `PodEvictionRetryInterval`).
pub const EVICTION_RETRY_INTERVAL: SignedDuration = SignedDuration::from_secs(20);
/// Poll interval while waiting for pods to go or volumes to detach.
pub const POLL_INTERVAL: SignedDuration = SignedDuration::from_secs(5);
/// How long `Ready`≠True or `ReadonlyFilesystem`≠False must last before pods are force-deleted.
pub const UNHEALTHY_NODE_FORCE_AFTER: SignedDuration = SignedDuration::from_mins(5);
/// Drain timeout in force mode.
pub const FORCE_DRAIN_TIMEOUT: Duration = Duration::from_mins(1);
/// Extra time given to an evicted pod beyond its termination grace period.
pub const TERMINATION_SLACK: SignedDuration = SignedDuration::from_secs(30);
/// Upstream's default termination grace period when a pod does not set one.
pub const DEFAULT_GRACE_SECONDS: i64 = 30;
