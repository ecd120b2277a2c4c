//! API-server health check: freeze the machine controller while the control or target API server is
//! unreachable past the timeout, unfreeze when both are back.
//!
//! | Reference | Function(s) | Tests |
//! |---|---|---|
//! | docs/behaviour.md#machine-safety freeze after `--machine-safety-apiserver-statuscheck-timeout`, checks every timeout/5 while down, every period while up | [`mcm_decisions::safety::apiserver::plan_apiserver_check`] | `plan::tests::freezes_after_timeout_and_unfreezes_with_reset`, `prop_freeze_needs_a_long_outage` |
//! | docs/behaviour.md#machine-safety unfreeze: reset `Unknown` machines to Running, re-enqueue all after 30s | [`mcm_decisions::safety::apiserver::health_timeout_reset`] | `plan::tests::reset_only_touches_unknown_machines` |
//!
//! | docs/behaviour.md#machine-safety probes, freeze switch, metric, reset by status patch | [`check::run_once`] | `it::safety::target_api_server_outage_freezes_and_recovery_unfreezes`, `control_api_server_outage_freezes_and_recovery_unfreezes` |
//!
//! The shell ([`check`]) does the two probe GETs, keeps the process-local [`mcm_decisions::safety::apiserver::FreezeState`]
//! and flips the [`crate::platform::freeze::FreezeSwitch`] it owns (which sets the `mcm_machine_controller_frozen`
//! gauge); the Machine and termination controllers hold its reader.

pub mod check;
