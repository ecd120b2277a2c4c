//! Overshooting safety: freeze MachineSets and MachineDeployments that have more machines than
//! allowed, unfreeze them when they are back within bounds or an operator asks.
//!
//! Pure parts (no I/O, no clock). Map of reference sections
//! (`docs/behaviour.md`) to code and tests:
//!
//! | Reference | Function | Tests |
//! |---|---|---|
//! | docs/behaviour.md#overshooting step 1 count, thresholds (`--safety-up`/`--safety-down`), docs/behaviour.md#q12 | [`mcm_decisions::safety::overshoot::machine_count`], [`mcm_decisions::safety::overshoot::high_threshold`], [`mcm_decisions::safety::overshoot::plan`] | `plan::tests::thresholds_table`, `count_*`, `freezes_*`, `unfreezes_*`, `one_overshoot_change_per_run` |
//! | docs/behaviour.md#q12 fixed: Recreate (no surge) does not abort the run | [`mcm_decisions::safety::overshoot::high_threshold`] | `plan::tests::recreate_deployment_does_not_abort_the_others`, `malformed_surge_skips_only_that_set` |
//! | docs/behaviour.md#overshooting step 2 deployment state sync | [`mcm_decisions::safety::overshoot::plan`] | `plan::tests::deployment_state_follows_its_sets` |
//! | docs/behaviour.md#overshooting steps 3–4 unfreeze annotation | [`mcm_decisions::safety::overshoot::plan`] | `plan::tests::unfreeze_annotation_*` |
//! | docs/behaviour.md#overshooting freeze/unfreeze object changes | [`mcm_decisions::safety::overshoot::freeze_machine_set`], [`mcm_decisions::safety::overshoot::unfreeze_machine_set`], [`mcm_decisions::safety::overshoot::freeze_machine_deployment`], [`mcm_decisions::safety::overshoot::unfreeze_machine_deployment`] | as above |
//! | docs/behaviour.md#q13 effect of the freeze (scale-up only) | `mcm_decisions::machine_set::scaling::manage_replicas` | `machine_set::scaling::tests::frozen_or_scale_up_disabled_*` |

//! | docs/behaviour.md#overshooting shell: live GET, UpdateStatus then Update, events, triggers (period, machine add, MachineSet and MachineDeployment changes) | [`apply::run_once`] | `it::safety::overshooting_machine_set_is_frozen_and_unfrozen_when_back_under`, `unfreeze_annotations_and_deployment_state_sync`, `unfreeze_annotation_on_a_machine_set`, `a_recreate_deployment_does_not_stop_the_check_of_other_sets` |

pub mod apply;
