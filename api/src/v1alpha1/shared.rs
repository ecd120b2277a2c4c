//! Types used by more than one kind: class reference, last operation and machine summary.
//!
//! Nothing here refers to a kind's own types (the machine template lives with the machine in
//! `machine.rs`), so every kind module may import this one and none is imported back.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::enums::{MachineOperationType, MachineState};

/// Reference from a machine (or template) to its machine class.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClassSpec {
    /// API group to which it belongs
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_group: Option<String>,

    /// Kind for machine class
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,

    /// Name of machine class
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// Status of the last operation performed on a machine (or machine set).
///
/// Several description texts are matched by substring by the deletion flow: see
/// [`crate::keys::last_operation`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LastOperation {
    /// Description of the current operation
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,

    /// ErrorCode of the current operation if any
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,

    /// Last update time of current operation
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<Time>,

    /// State of operation
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<MachineState>,

    /// Type of operation
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<MachineOperationType>,
}

/// Summary of a machine, kept in the status of sets and deployments for failed machines.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineSummary {
    /// Name of the machine object
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,

    /// ProviderID represents the provider's unique ID given to a machine
    #[serde(
        default,
        rename = "providerID",
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id: Option<String>,

    /// Last operation refers to the status of the last operation performed
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_operation: Option<LastOperation>,

    /// OwnerRef
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner_ref: Option<String>,
}
