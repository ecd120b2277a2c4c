//! `MachineClass`: reusable provider configuration. Unlike the other kinds it has no spec/status
//! split (its fields sit at the top level), so the kube traits are implemented here by hand.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::SecretReference;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::{NamespaceResourceScope, Resource};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A `core/v1` `ResourceList`: resource name to quantity.
pub type ResourceList = BTreeMap<String, Quantity>;

/// API group of every kind in this crate.
pub const GROUP: &str = "machine.sapcloud.io";
/// Version of this module.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` of this module's kinds.
pub const API_VERSION: &str = "machine.sapcloud.io/v1alpha1";

/// MachineClass can be used to templatize and re-use provider configuration
/// across multiple Machines / MachineSets / MachineDeployments.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MachineClass {
    /// APIVersion defines the versioned schema of this representation of an object.
    /// Servers should convert recognized schemas to the latest internal value, and
    /// may reject unrecognized values.
    /// More info: <https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources>
    #[serde(default = "default_api_version")]
    pub api_version: String,

    /// Kind is a string value representing the REST resource this object represents.
    /// Servers may infer this from the endpoint the client submits requests to.
    /// Cannot be updated.
    /// In CamelCase.
    /// More info: <https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds>
    #[serde(default = "default_kind")]
    pub kind: String,

    /// Standard object metadata.
    #[serde(default)]
    #[schemars(schema_with = "super::schema::plain_object")]
    pub metadata: ObjectMeta,

    /// NodeTemplate contains subfields to track all node resources and other node info required to scale nodegroup from zero
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_template: Option<NodeTemplate>,

    /// CredentialsSecretRef can optionally store the credentials (in this case the SecretRef does not need to store them).
    /// This might be useful if multiple machine classes with the same credentials but different user-datas are used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::schema::secret_reference")]
    pub credentials_secret_ref: Option<SecretReference>,

    /// Provider-specific configuration to use during node creation.
    #[schemars(schema_with = "super::schema::preserve_unknown_object")]
    pub provider_spec: Value,

    /// Provider is the combination of name and location of cloud-specific drivers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,

    /// SecretRef stores the necessary secrets such as credentials or userdata.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::schema::secret_reference")]
    pub secret_ref: Option<SecretReference>,
}

fn default_api_version() -> String {
    API_VERSION.to_owned()
}

fn default_kind() -> String {
    "MachineClass".to_owned()
}

impl Default for MachineClass {
    /// An empty class with `apiVersion`/`kind` set and an empty `providerSpec` object.
    fn default() -> Self {
        Self {
            api_version: default_api_version(),
            kind: default_kind(),
            metadata: ObjectMeta::default(),
            node_template: None,
            credentials_secret_ref: None,
            provider_spec: Value::Object(serde_json::Map::new()),
            provider: None,
            secret_ref: None,
        }
    }
}

impl MachineClass {
    /// A class named `name` with the given provider configuration.
    #[must_use]
    pub fn new(name: &str, provider_spec: Value) -> Self {
        Self {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..ObjectMeta::default()
            },
            provider_spec,
            ..Self::default()
        }
    }
}

impl Resource for MachineClass {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "MachineClass".into()
    }

    fn group(_: &()) -> Cow<'_, str> {
        GROUP.into()
    }

    fn version(_: &()) -> Cow<'_, str> {
        VERSION.into()
    }

    fn api_version(_: &()) -> Cow<'_, str> {
        API_VERSION.into()
    }

    fn plural(_: &()) -> Cow<'_, str> {
        "machineclasses".into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// Node resources and placement of a class, used by the cluster-autoscaler to scale a node group
/// from zero.
///
/// The API server keeps unknown fields here (`x-kubernetes-preserve-unknown-fields`); they are
/// kept in [`NodeTemplate::extra`] so that writing the class back does not drop them.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-preserve-unknown-fields" = true))]
pub struct NodeTemplate {
    /// Capacity contains subfields to track all node resources required to scale nodegroup from zero
    #[schemars(schema_with = "super::schema::resource_list")]
    pub capacity: ResourceList,

    /// VirtualCapacity represents the expected Node 'virtual' capacity ie comprising virtual extended resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::schema::resource_list")]
    pub virtual_capacity: Option<ResourceList>,

    /// Instance type of the node belonging to nodeGroup
    pub instance_type: String,

    /// Region of the expected node belonging to nodeGroup
    pub region: String,

    /// Zone of the expected node belonging to nodeGroup
    pub zone: String,

    /// CPU Architecture of the node belonging to nodeGroup
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub architecture: Option<String>,

    /// Fields this version does not know, kept verbatim.
    #[serde(flatten)]
    #[schemars(skip)]
    pub extra: BTreeMap<String, Value>,
}
