//! `Machine`: one VM backing one Node of the target cluster, and the machine template that sets
//! and deployments stamp machines from.

// The repeated `printcolumn(type_ = ...)` arguments of the kube derive look like duplicated
// attributes to clippy.
#![allow(clippy::duplicated_attributes)]

use k8s_openapi::api::core::v1::{NodeAddress, NodeCondition, NodeSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::enums::MachinePhase;
use super::shared::{ClassSpec, LastOperation};
use crate::duration::Duration;

/// Specification of a Machine.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[kube(
    group = "machine.sapcloud.io",
    version = "v1alpha1",
    kind = "Machine",
    plural = "machines",
    singular = "machine",
    shortname = "mc",
    namespaced,
    status = "MachineStatus",
    derive = "PartialEq",
    derive = "Default",
    doc = "Machine is the representation of a physical or virtual machine.",
    printcolumn(
        name = "Status",
        type_ = "string",
        json_path = ".status.currentStatus.phase",
        description = "Current status of the machine."
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp",
        description = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"
    ),
    printcolumn(
        name = "Node",
        type_ = "string",
        json_path = ".metadata.labels.node",
        description = "Node backing the machine object"
    ),
    printcolumn(
        name = "ProviderID",
        type_ = "string",
        json_path = ".spec.providerID",
        description = "ProviderID of the infra instance backing the machine object",
        priority = 1
    )
)]
#[serde(rename_all = "camelCase")]
pub struct MachineSpec {
    /// Class contains the machineclass attributes of a machine
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<ClassSpec>,

    /// ProviderID represents the provider's unique ID given to a machine
    #[serde(
        default,
        rename = "providerID",
        skip_serializing_if = "Option::is_none"
    )]
    pub provider_id: Option<String>,

    /// NodeTemplateSpec describes the data a node should have when created from a template
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_template: Option<NodeTemplateSpec>,

    /// Configuration for the machine-controller, inlined into the spec on the wire.
    #[serde(flatten)]
    pub configuration: MachineConfiguration,
}

/// Per-machine settings of the machine controller, inlined into [`MachineSpec`].
///
/// Every field is optional; an absent field means "use the controller's flag".
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineConfiguration {
    /// MachineDraintimeout is the timeout after which machine is forcefully deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain_timeout: Option<Duration>,

    /// MachineHealthTimeout is the timeout after which machine is declared unhealhty/failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub health_timeout: Option<Duration>,

    /// MachineCreationTimeout is the timeout after which machinie creation is declared failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub creation_timeout: Option<Duration>,

    /// MachineInPlaceUpdateTimeout is the timeout after which in-place update is declared failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_place_update_timeout: Option<Duration>,

    /// MachinePreserveTimeout is the timeout after which the machine preservation is stopped
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine_preserve_timeout: Option<Duration>,

    /// DisableHealthTimeout if set to true, health timeout will be ignored. Leading to machine never being declared failed.
    /// This is intended to be used only for in-place updates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_health_timeout: Option<bool>,

    /// MaxEvictRetries is the number of retries that will be attempted while draining the node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_evict_retries: Option<i32>,

    /// NodeConditions are the set of conditions if set to true for MachineHealthTimeOut, machine will be declared failed.
    ///
    /// Comma separated, case-sensitive, not trimmed (as upstream).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_conditions: Option<String>,
}

/// The data a node should have when created from a template.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NodeTemplateSpec {
    /// Labels and annotations to put on the Node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::schema::preserve_unknown_object")]
    pub metadata: Option<ObjectMeta>,

    /// NodeSpec describes the attributes that a node is created with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::schema::node_spec")]
    pub spec: Option<NodeSpec>,
}

/// The data a machine should have when created from a template.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MachineTemplateSpec {
    /// Standard object's metadata.
    /// More info: <https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata>
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::schema::preserve_unknown_object")]
    pub metadata: Option<ObjectMeta>,

    /// Specification of the desired behavior of the machine.
    /// More info: <https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#spec-and-status>
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<MachineSpec>,
}

/// Most recently observed status of a Machine.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineStatus {
    /// Addresses of this machines. This field is only present if the MCM provider runs without a target cluster and may
    /// be used by clients to determine how to connect to the machine, instead of the `Node.status.addresses` field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addresses: Option<Vec<NodeAddress>>,

    /// Conditions of this machine, same as node
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<NodeCondition>>,

    /// Last operation refers to the status of the last operation performed
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_operation: Option<LastOperation>,

    /// Current status of the machine object
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_status: Option<CurrentStatus>,

    /// LastKnownState can store details of the last known state of the VM by the plugins.
    /// It can be used by future operation calls to determine current infrastucture state
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_known_state: Option<String>,
}

/// Current status of a machine: phase, timeout flag and times.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CurrentStatus {
    /// MachinePhase is a label for the condition of a machine at the current time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<MachinePhase>,

    /// Whether a timeout (creation or health) is running for the machine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_active: Option<bool>,

    /// Last update time of current status
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_update_time: Option<Time>,

    /// PreserveExpiryTime is the time at which MCM will stop preserving the machine
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preserve_expiry_time: Option<Time>,
}

impl Machine {
    /// The phase of `status.currentStatus`, `None` when not set (machine not created yet).
    #[must_use]
    pub fn phase(&self) -> Option<&MachinePhase> {
        self.status
            .as_ref()?
            .current_status
            .as_ref()?
            .phase
            .as_ref()
    }

    /// `status.lastOperation`, if any.
    #[must_use]
    pub fn last_operation(&self) -> Option<&LastOperation> {
        self.status.as_ref()?.last_operation.as_ref()
    }

    /// The name of the backing Node (label `node`), if set.
    #[must_use]
    pub fn node_name(&self) -> Option<&str> {
        self.metadata
            .labels
            .as_ref()?
            .get(crate::keys::label::NODE)
            .map(String::as_str)
    }

    /// The zone of the machine's node: label `topology.kubernetes.io/zone` of
    /// `spec.nodeTemplate.metadata`, if set.
    #[must_use]
    pub fn zone(&self) -> Option<&str> {
        self.spec
            .node_template
            .as_ref()?
            .metadata
            .as_ref()?
            .labels
            .as_ref()?
            .get(crate::keys::label::ZONE)
            .map(String::as_str)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn accessors_read_status_and_labels() {
        let mut machine = Machine::new("m", MachineSpec::default());
        assert_eq!(machine.phase(), None);
        assert_eq!(machine.node_name(), None);
        machine.status = Some(MachineStatus {
            current_status: Some(CurrentStatus {
                phase: Some(MachinePhase::Failed),
                ..CurrentStatus::default()
            }),
            ..MachineStatus::default()
        });
        machine.metadata.labels = Some([("node".to_owned(), "n1".to_owned())].into());
        assert_eq!(machine.phase(), Some(&MachinePhase::Failed));
        assert_eq!(machine.node_name(), Some("n1"));
        assert!(machine.last_operation().is_none());
    }

    #[test]
    fn machine_configuration_is_inlined_in_the_spec() {
        let spec = MachineSpec {
            configuration: MachineConfiguration {
                drain_timeout: Some(Duration::from_mins(10)),
                ..MachineConfiguration::default()
            },
            ..MachineSpec::default()
        };
        assert_eq!(
            serde_json::to_value(&spec).unwrap(),
            serde_json::json!({ "drainTimeout": "10m0s" })
        );
    }
}
