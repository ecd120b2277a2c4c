//! Prometheus metrics of the manager, served on `/metrics` of the admin servers.
//!
//! Every upstream metric of docs/behaviour.md#metrics-mc (machine-controller) and docs/behaviour.md#metrics-mcm
//! (machine-controller-manager) is registered under its upstream name and labels, so existing
//! dashboards and alerts carry over, in one registry per upstream binary ([`MetricsPort`]): the
//! machine-controller-manager's on `--port`, the machine-controller's on
//! `--machine-metrics-port`. client-go's workqueue families (docs/behaviour.md#metrics-library) are registered on both and fed
//! by the queue of each controller ([`Metrics::workqueue_added`], ...), routed to the port of that
//! controller's binary; `process_*` comes from [`super::process_metrics`]. On top of those, two
//! metrics of our own: `mcm_reconcile_duration_seconds{controller}` and
//! `mcm_driver_call_duration_seconds{method,code}`, plus the retry backoff's
//! `mcm_machine_driver_retries_total{method}` and `mcm_machine_driver_retry_backoff_seconds{method}`
//! (and a `queue` label on the workqueue families
//! repeating `name`).
//!
//! The controllers fill the values through the methods of [`Metrics`]:
//! * event-driven metrics (durations, failed joins, driver calls, reconciles) are updated where the
//!   event happens (`machine_created`, `driver_call`, ...);
//! * upstream's scrape-time metrics (`*_items_total`, `*_info`, `*_status_*`, ...) are replaced as a
//!   whole from a snapshot of the cache (`replace_machines`, `replace_machine_sets`,
//!   `replace_machine_deployments`). A controller registers an [`Metrics::on_scrape`] hook that
//!   takes the snapshot, so the values are as fresh as upstream's collectors'; series of deleted
//!   objects disappear (upstream keeps `mcm_machine_info` and the deployment's failed-machine series
//!   forever). The per-machine series, the only ones that grow with the fleet, are encoded
//!   straight from the machine snapshot, which is dropped after each scrape.
//!
//! Encoding differences, all forced by OpenMetrics and chosen to keep the upstream names:
//! * counters are written with a `_total` suffix: the upstream counters named `*_total` keep their
//!   name; `mcm_machine_num_failed_join` has no suffix upstream, so it is exposed as a gauge that
//!   only ever grows (`increase()`/`rate()` work on it the same way);
//! * upstream's `mcm_machine_set_status_replicas` reports `readyReplicas` (a bug); ours reports
//!   `status.replicas`.
//!
//! Upstream's provider-side cloud metrics (`mcm_cloud_api_requests_total`,
//! `mcm_cloud_api_requests_failed_total`, `mcm_cloud_api_api_request_duration_seconds`) measure
//! calls the provider makes to its cloud; they belong to the provider sidecar's own `/metrics`.
//! The driver-call metrics (`mcm_cloud_api_driver_request_duration_seconds`,
//! `mcm_cloud_api_driver_requests_failed_total`) are recorded here, around every gRPC driver call.
//!
//! One file per metric family, each registering its families and updating them:
//!
//! | File | Families |
//! |---|---|
//! | `machine.rs` | `mcm_machine_*` of the machine-controller (docs/behaviour.md#metrics-mc): scrape-time items, phase, info, conditions, frozen flag; lifecycle durations and failed joins |
//! | `machine_set.rs` | `mcm_machine_set_*` (docs/behaviour.md#metrics-mcm) and `mcm_machine_stale_machines_total` |
//! | `machine_deployment.rs` | `mcm_machine_deployment_*` (docs/behaviour.md#metrics-mcm) |
//! | `driver.rs` | `mcm_cloud_api_driver_*` (docs/behaviour.md#metrics-mc) and our driver call, retry and backoff families |
//! | `drain.rs` | `mcm_drain_volume_reattach_total` |
//! | `scrape_failures.rs` | `mcm_misc_scrape_failure_total` (both ports) |
//! | `leader_election.rs` | `leader_election_master_status` (both ports) |
//! | `caches.rs` | `mcm_cache_stale_since_seconds` (ours, both ports) |
//! | `work_queue.rs` | `mcm_workqueue_*` (docs/behaviour.md#metrics-library) and `mcm_reconcile_duration_seconds`, one set per port |
//! | `object_series.rs` | what the object families share: name/namespace labels, conditions, failed machines |
//! | `registration.rs` | metric types, shared buckets, `register` |
//! | `exposition.rs` | content type, [`MetricsPort`], merging the two ports' expositions |
//! | `registry.rs` | [`Metrics`]: both registries, the scrape hooks and the methods the controllers call |

mod caches;
mod drain;
mod driver;
mod exposition;
mod leader_election;
mod machine;
mod machine_deployment;
mod machine_set;
mod object_series;
mod registration;
mod registry;
mod scrape_failures;
mod work_queue;

pub use exposition::{CONTENT_TYPE, MetricsPort};
pub use machine::{DrainLabels, MachineDurationLabels, MachineSample, phase_value};
pub use machine_deployment::MachineDeploymentSample;
pub use machine_set::MachineSetSample;
pub use object_series::{ConditionSample, FailedMachineSample, condition_value};
pub use registry::{Metrics, ScrapeHook};
pub use scrape_failures::ScrapeKind;

#[cfg(test)]
mod tests;
