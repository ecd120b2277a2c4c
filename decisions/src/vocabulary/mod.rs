//! What every plan shares: when to come back ([`Retry`]), events, finalizer lists, status writes and the "similar
//! status" rule that suppresses redundant ones (docs/behaviour.md#machine-reconcile), time arithmetic, Machine field accessors,
//! controller settings and their per-machine resolution (docs/behaviour.md#effective-settings), failure classification (docs/behaviour.md#reaction-matrix) and
//! Go-compatible text.
//!
//! Low in the module map: the machine, drain, safety, MachineSet and MachineDeployment plans import
//! it, it imports none of them. This file only declares the modules and re-exports their items, so
//! `mcm_decisions::vocabulary::X` names each of them; the modules import each other directly.

pub mod caches;
pub mod event;
pub mod failures;
pub mod finalizers;
pub mod flag_defaults;
pub mod go_text;
pub mod machine_fields;
pub mod requeue;
pub mod settings;
pub mod status;
pub mod timestamps;

pub use caches::{Acting, CacheView, may_act, rewatch_pause};
pub use event::{Event, EventType};
pub use failures::{DriverError, WriteFailure, is_transient};
pub use finalizers::finalizers_with;
pub use go_text::{go_time_string, parse_go_bool, render_conditions};
pub use machine_fields::{
    current_of, description_of, has_finalizer, label, last_known_state_of, machine_annotation,
    name_of, node_name_of, operation_type_of, phase_of, preserve_expiry_of, provider_id_of,
    set_entries,
};
pub use requeue::Retry;
pub use settings::{BackoffSettings, ControllerSettings, EffectiveSettings, effective_settings};
pub use status::{
    SIMILARITY_FRESHNESS, SIMILARITY_RATIO, StatusWrite, byte_levenshtein, current_status,
    is_status_similar, last_operation, similarity_ratio,
};
pub use timestamps::{add, elapsed, go_duration, time};
