//! Typed conversions between each served version (a "spoke") and the internal hub.
//!
//! `v1alpha1` can hold everything the hub holds, so its conversions are field moves.
//! `v1beta1` has no `MachineDeployment.spec.rollbackTo` and no `MachineSet.spec.machineClass`;
//! converting the hub to `v1beta1` stores them as JSON in the
//! [`CONVERSION_DATA`] annotation, and converting back restores them and removes the
//! annotation, so it never reaches the hub or `v1alpha1`.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use mcm_api::internal::{self, ConversionData, MachineConfiguration};
use mcm_api::keys::annotation::CONVERSION_DATA;
use mcm_api::{v1alpha1, v1beta1};

/// A hub type: the internal representation of one kind.
pub trait Hub: Sized {}

impl Hub for internal::Machine {}
impl Hub for internal::MachineSet {}
impl Hub for internal::MachineDeployment {}
impl Hub for internal::MachineClass {}

/// A served version of a kind, convertible to and from its hub type without loss.
pub trait Spoke: Sized {
    /// The hub type of the kind.
    type Hub: Hub;
    /// Converts this object into the hub.
    fn into_hub(self) -> Self::Hub;
    /// Converts a hub object into this version.
    fn from_hub(hub: &Self::Hub) -> Self;
}

// ---------------------------------------------------------------- conversion-data annotation

/// Writes `data` into the annotation.
fn store_conversion_data(metadata: &mut ObjectMeta, data: &ConversionData) {
    let mut data = data.clone();
    if metadata.annotations.is_none() {
        data.no_annotations = Some(true);
    }
    // Serialising a struct of plain data cannot fail; fall back to nothing rather than panic.
    let Ok(text) = serde_json::to_string(&data) else {
        return;
    };
    metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(CONVERSION_DATA.to_owned(), text);
}

/// Reads and removes the annotation. Text that is not ours (not parseable) stays in place
/// untouched, so a user's value is never lost.
fn take_conversion_data(metadata: &mut ObjectMeta) -> ConversionData {
    let Some(annotations) = metadata.annotations.as_mut() else {
        return ConversionData::default();
    };
    let Some(text) = annotations.get(CONVERSION_DATA) else {
        return ConversionData::default();
    };
    match serde_json::from_str::<ConversionData>(text) {
        Ok(data) => {
            annotations.remove(CONVERSION_DATA);
            if annotations.is_empty() && data.no_annotations == Some(true) {
                metadata.annotations = None;
            }
            data
        }
        Err(_) => ConversionData::default(),
    }
}

/// Hub metadata going into `v1beta1`, with the annotation only when there is something to keep.
fn meta_with_data(metadata: &ObjectMeta, data: &ConversionData) -> ObjectMeta {
    let mut metadata = metadata.clone();
    if !data.is_empty() {
        store_conversion_data(&mut metadata, data);
    }
    metadata
}

// ---------------------------------------------------------------- shared pieces

fn configuration_into_beta(configuration: &MachineConfiguration) -> Option<MachineConfiguration> {
    (configuration != &MachineConfiguration::default()).then(|| configuration.clone())
}

fn alpha_machine_spec_into_hub(spec: v1alpha1::MachineSpec) -> internal::MachineSpec {
    internal::MachineSpec {
        class: spec.class,
        provider_id: spec.provider_id,
        node_template: spec.node_template,
        configuration: spec.configuration,
    }
}

fn hub_machine_spec_into_alpha(spec: &internal::MachineSpec) -> v1alpha1::MachineSpec {
    v1alpha1::MachineSpec {
        class: spec.class.clone(),
        provider_id: spec.provider_id.clone(),
        node_template: spec.node_template.clone(),
        configuration: spec.configuration.clone(),
    }
}

fn beta_machine_spec_into_hub(spec: v1beta1::MachineSpec) -> internal::MachineSpec {
    internal::MachineSpec {
        class: spec.class,
        provider_id: spec.provider_id,
        node_template: spec.node_template,
        configuration: spec.configuration.unwrap_or_default(),
    }
}

fn hub_machine_spec_into_beta(spec: &internal::MachineSpec) -> v1beta1::MachineSpec {
    v1beta1::MachineSpec {
        class: spec.class.clone(),
        provider_id: spec.provider_id.clone(),
        node_template: spec.node_template.clone(),
        configuration: configuration_into_beta(&spec.configuration),
    }
}

fn alpha_template_into_hub(
    template: v1alpha1::MachineTemplateSpec,
) -> internal::MachineTemplateSpec {
    internal::MachineTemplateSpec {
        metadata: template.metadata,
        spec: template.spec.map(alpha_machine_spec_into_hub),
    }
}

fn hub_template_into_alpha(
    template: &internal::MachineTemplateSpec,
) -> v1alpha1::MachineTemplateSpec {
    v1alpha1::MachineTemplateSpec {
        metadata: template.metadata.clone(),
        spec: template.spec.as_ref().map(hub_machine_spec_into_alpha),
    }
}

fn beta_template_into_hub(template: v1beta1::MachineTemplateSpec) -> internal::MachineTemplateSpec {
    internal::MachineTemplateSpec {
        metadata: template.metadata,
        spec: template.spec.map(beta_machine_spec_into_hub),
    }
}

fn hub_template_into_beta(
    template: &internal::MachineTemplateSpec,
) -> v1beta1::MachineTemplateSpec {
    v1beta1::MachineTemplateSpec {
        metadata: template.metadata.clone(),
        spec: template.spec.as_ref().map(hub_machine_spec_into_beta),
    }
}

// ---------------------------------------------------------------- Machine

impl Spoke for v1alpha1::Machine {
    type Hub = internal::Machine;

    fn into_hub(self) -> internal::Machine {
        internal::Machine {
            metadata: self.metadata,
            spec: Some(alpha_machine_spec_into_hub(self.spec)),
            status: self.status,
        }
    }

    fn from_hub(hub: &internal::Machine) -> Self {
        Self {
            metadata: hub.metadata.clone(),
            spec: hub
                .spec
                .as_ref()
                .map(hub_machine_spec_into_alpha)
                .unwrap_or_default(),
            status: hub.status.clone(),
        }
    }
}

impl Spoke for v1beta1::Machine {
    type Hub = internal::Machine;

    fn into_hub(self) -> internal::Machine {
        internal::Machine {
            metadata: self.metadata,
            spec: Some(beta_machine_spec_into_hub(self.spec)),
            status: self.status,
        }
    }

    fn from_hub(hub: &internal::Machine) -> Self {
        Self {
            metadata: hub.metadata.clone(),
            spec: hub
                .spec
                .as_ref()
                .map(hub_machine_spec_into_beta)
                .unwrap_or_default(),
            status: hub.status.clone(),
        }
    }
}

// ---------------------------------------------------------------- MachineSet

impl Spoke for v1alpha1::MachineSet {
    type Hub = internal::MachineSet;

    fn into_hub(self) -> internal::MachineSet {
        let spec = self.spec;
        internal::MachineSet {
            metadata: self.metadata,
            spec: Some(internal::MachineSetSpec {
                replicas: spec.replicas,
                selector: spec.selector,
                legacy_machine_class: spec.machine_class,
                template: spec.template.map(alpha_template_into_hub),
                min_ready_seconds: spec.min_ready_seconds,
                auto_preserve_failed_machine_max: spec.auto_preserve_failed_machine_max,
            }),
            status: self.status,
        }
    }

    fn from_hub(hub: &internal::MachineSet) -> Self {
        let spec = hub
            .spec
            .as_ref()
            .map(|spec| v1alpha1::MachineSetSpec {
                replicas: spec.replicas,
                selector: spec.selector.clone(),
                machine_class: spec.legacy_machine_class.clone(),
                template: spec.template.as_ref().map(hub_template_into_alpha),
                min_ready_seconds: spec.min_ready_seconds,
                auto_preserve_failed_machine_max: spec.auto_preserve_failed_machine_max,
            })
            .unwrap_or_default();
        Self {
            metadata: hub.metadata.clone(),
            spec,
            status: hub.status.clone(),
        }
    }
}

impl Spoke for v1beta1::MachineSet {
    type Hub = internal::MachineSet;

    fn into_hub(mut self) -> internal::MachineSet {
        let data = take_conversion_data(&mut self.metadata);
        let spec = self.spec;
        internal::MachineSet {
            metadata: self.metadata,
            spec: Some(internal::MachineSetSpec {
                replicas: spec.replicas,
                selector: spec.selector,
                legacy_machine_class: data.machine_class,
                template: spec.template.map(beta_template_into_hub),
                min_ready_seconds: spec.min_ready_seconds,
                auto_preserve_failed_machine_max: spec.auto_preserve_failed_machine_max,
            }),
            status: self.status,
        }
    }

    fn from_hub(hub: &internal::MachineSet) -> Self {
        let data = ConversionData {
            machine_class: hub
                .spec
                .as_ref()
                .and_then(|spec| spec.legacy_machine_class.clone()),
            ..ConversionData::default()
        };
        let spec = hub
            .spec
            .as_ref()
            .map(|spec| v1beta1::MachineSetSpec {
                replicas: spec.replicas,
                selector: spec.selector.clone(),
                template: spec.template.as_ref().map(hub_template_into_beta),
                min_ready_seconds: spec.min_ready_seconds,
                auto_preserve_failed_machine_max: spec.auto_preserve_failed_machine_max,
            })
            .unwrap_or_default();
        Self {
            metadata: meta_with_data(&hub.metadata, &data),
            spec,
            status: hub.status.clone(),
        }
    }
}

// ---------------------------------------------------------------- MachineDeployment

impl Spoke for v1alpha1::MachineDeployment {
    type Hub = internal::MachineDeployment;

    fn into_hub(self) -> internal::MachineDeployment {
        let spec = self.spec;
        internal::MachineDeployment {
            metadata: self.metadata,
            spec: Some(internal::MachineDeploymentSpec {
                replicas: spec.replicas,
                selector: spec.selector,
                template: alpha_template_into_hub(spec.template),
                strategy: spec.strategy,
                min_ready_seconds: spec.min_ready_seconds,
                revision_history_limit: spec.revision_history_limit,
                paused: spec.paused,
                rollback_to: spec.rollback_to,
                progress_deadline_seconds: spec.progress_deadline_seconds,
                auto_preserve_failed_machine_max: spec.auto_preserve_failed_machine_max,
            }),
            status: self.status,
        }
    }

    fn from_hub(hub: &internal::MachineDeployment) -> Self {
        let spec = hub
            .spec
            .as_ref()
            .map(|spec| v1alpha1::MachineDeploymentSpec {
                replicas: spec.replicas,
                selector: spec.selector.clone(),
                template: hub_template_into_alpha(&spec.template),
                strategy: spec.strategy.clone(),
                min_ready_seconds: spec.min_ready_seconds,
                revision_history_limit: spec.revision_history_limit,
                paused: spec.paused,
                rollback_to: spec.rollback_to.clone(),
                progress_deadline_seconds: spec.progress_deadline_seconds,
                auto_preserve_failed_machine_max: spec.auto_preserve_failed_machine_max,
            })
            .unwrap_or_default();
        Self {
            metadata: hub.metadata.clone(),
            spec,
            status: hub.status.clone(),
        }
    }
}

impl Spoke for v1beta1::MachineDeployment {
    type Hub = internal::MachineDeployment;

    fn into_hub(mut self) -> internal::MachineDeployment {
        let data = take_conversion_data(&mut self.metadata);
        let spec = self.spec;
        internal::MachineDeployment {
            metadata: self.metadata,
            spec: Some(internal::MachineDeploymentSpec {
                replicas: spec.replicas,
                selector: spec.selector,
                template: beta_template_into_hub(spec.template),
                strategy: spec.strategy,
                min_ready_seconds: spec.min_ready_seconds,
                revision_history_limit: spec.revision_history_limit,
                paused: spec.paused,
                rollback_to: data.rollback_to,
                progress_deadline_seconds: spec.progress_deadline_seconds,
                auto_preserve_failed_machine_max: spec.auto_preserve_failed_machine_max,
            }),
            status: self.status,
        }
    }

    fn from_hub(hub: &internal::MachineDeployment) -> Self {
        let data = ConversionData {
            rollback_to: hub.spec.as_ref().and_then(|spec| spec.rollback_to.clone()),
            ..ConversionData::default()
        };
        let spec = hub
            .spec
            .as_ref()
            .map(|spec| v1beta1::MachineDeploymentSpec {
                replicas: spec.replicas,
                selector: spec.selector.clone(),
                template: hub_template_into_beta(&spec.template),
                strategy: spec.strategy.clone(),
                min_ready_seconds: spec.min_ready_seconds,
                revision_history_limit: spec.revision_history_limit,
                paused: spec.paused,
                progress_deadline_seconds: spec.progress_deadline_seconds,
                auto_preserve_failed_machine_max: spec.auto_preserve_failed_machine_max,
            })
            .unwrap_or_default();
        Self {
            metadata: meta_with_data(&hub.metadata, &data),
            spec,
            status: hub.status.clone(),
        }
    }
}

// ---------------------------------------------------------------- MachineClass

impl Spoke for v1alpha1::MachineClass {
    type Hub = internal::MachineClass;

    fn into_hub(self) -> internal::MachineClass {
        internal::MachineClass {
            metadata: self.metadata,
            spec: Some(internal::MachineClassSpec {
                node_template: self.node_template,
                credentials_secret_ref: self.credentials_secret_ref,
                provider_spec: self.provider_spec,
                provider: self.provider,
                secret_ref: self.secret_ref,
            }),
        }
    }

    fn from_hub(hub: &internal::MachineClass) -> Self {
        let mut class = Self {
            metadata: hub.metadata.clone(),
            ..Self::default()
        };
        if let Some(spec) = &hub.spec {
            class.node_template = spec.node_template.clone();
            class.credentials_secret_ref = spec.credentials_secret_ref.clone();
            class.provider_spec = spec.provider_spec.clone();
            class.provider = spec.provider.clone();
            class.secret_ref = spec.secret_ref.clone();
        }
        class
    }
}

impl Spoke for v1beta1::MachineClass {
    type Hub = internal::MachineClass;

    fn into_hub(self) -> internal::MachineClass {
        let spec = self.spec;
        internal::MachineClass {
            metadata: self.metadata,
            spec: Some(internal::MachineClassSpec {
                node_template: spec.node_template,
                credentials_secret_ref: spec.credentials_secret_ref,
                provider_spec: spec.provider_spec,
                provider: spec.provider,
                secret_ref: spec.secret_ref,
            }),
        }
    }

    fn from_hub(hub: &internal::MachineClass) -> Self {
        let spec = hub
            .spec
            .as_ref()
            .map(|spec| v1beta1::MachineClassSpec {
                node_template: spec.node_template.clone(),
                credentials_secret_ref: spec.credentials_secret_ref.clone(),
                provider_spec: spec.provider_spec.clone(),
                provider: spec.provider.clone(),
                secret_ref: spec.secret_ref.clone(),
            })
            .unwrap_or_default();
        Self {
            metadata: hub.metadata.clone(),
            spec,
        }
    }
}
