//! A small in-memory driver used to exercise the SDK and the conformance kit.
//!
//! providerSpec: `{"size": "<string>", "tags": {..}, "slow": bool}`; `tags` is hot-updatable.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use mcm_api::v1alpha1::MachineClass;
use mcm_provider_proto::{
    Capabilities, ClassFieldError, ClassFieldErrors, Code, CreateMachineResponse,
    DeleteMachineResponse, Driver, InitializeMachineResponse, ListMachinesRequest, MachineError,
    MachineList, MachineRequest, MachineStatus, Method, StatusError, UpdateMachineRequest,
    UpdateMachineResponse, ValidateMachineClassRequest,
};

/// Deliberate contract violations, to show the kit notices them.
#[derive(Debug, Default, Clone, Copy)]
pub struct Flaws {
    pub non_idempotent_create: bool,
    pub list_ignores_class: bool,
    pub delete_absent_is_not_found: bool,
    pub ignores_provider: bool,
    /// Implements ValidateMachineClass (and advertises it unless `hides_validation`).
    pub validates: bool,
    /// ValidateMachineClass accepts every class.
    pub validation_accepts_everything: bool,
    /// ValidateMachineClass is implemented but not advertised.
    pub hides_validation: bool,
}

#[derive(Debug, Clone)]
struct Vm {
    provider_id: String,
    machine: String,
    class: String,
    initialized: bool,
    spec: serde_json::Value,
}

#[derive(Debug, Default)]
pub struct MemoryDriver {
    flaws: Flaws,
    vms: Mutex<BTreeMap<String, Vm>>,
    next_id: AtomicU64,
}

impl MemoryDriver {
    pub fn new(flaws: Flaws) -> Self {
        Self {
            flaws,
            ..Self::default()
        }
    }

    fn field_errors(class: &MachineClass) -> Vec<ClassFieldError> {
        match class.provider_spec.get("size") {
            Some(size) if !size.is_string() => vec![ClassFieldError {
                field: "providerSpec.size".into(),
                message: "must be a string".into(),
            }],
            _ => Vec::new(),
        }
    }

    fn validate(&self, class: &MachineClass) -> Result<(), MachineError> {
        if !self.flaws.ignores_provider && class.provider.as_deref() != Some("memory") {
            return Err(MachineError::invalid_argument(format!(
                "provider: {:?} is not served by this driver (want \"memory\")",
                class.provider
            )));
        }
        if let Some(size) = class.provider_spec.get("size")
            && !size.is_string()
        {
            return Err(MachineError::invalid_argument(
                "providerSpec.size: must be a string",
            ));
        }
        Ok(())
    }

    fn find(&self, request: &MachineRequest) -> Option<Vm> {
        let vms = self.vms.lock().unwrap();
        let name = request.machine.metadata.name.clone().unwrap_or_default();
        vms.values().find(|vm| vm.machine == name).cloned()
    }
}

fn class_name(class: &MachineClass) -> String {
    class.metadata.name.clone().unwrap_or_default()
}

impl Driver for MemoryDriver {
    async fn validate_machine_class(
        &self,
        request: ValidateMachineClassRequest,
    ) -> Result<ClassFieldErrors, MachineError> {
        if !self.flaws.validates {
            return Err(MachineError::unimplemented("ValidateMachineClass"));
        }
        if self.flaws.validation_accepts_everything {
            return Ok(Vec::new());
        }
        Ok(Self::field_errors(&request.class))
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            provider_name: "memory".into(),
            methods: vec![
                Method::CreateMachine,
                Method::InitializeMachine,
                Method::DeleteMachine,
                Method::GetMachineStatus,
                Method::ListMachines,
                Method::UpdateMachine,
            ]
            .into_iter()
            .chain(
                (self.flaws.validates && !self.flaws.hides_validation)
                    .then_some(Method::ValidateMachineClass),
            )
            .collect(),
            hot_updatable_paths: vec!["tags".into()],
            driver_version: "test".into(),
        }
    }

    async fn create_machine(
        &self,
        request: MachineRequest,
    ) -> Result<CreateMachineResponse, MachineError> {
        self.validate(&request.class)?;
        if request.class.provider_spec.get("slow") == Some(&serde_json::Value::Bool(true)) {
            tokio::time::sleep(std::time::Duration::from_secs(600)).await;
        }
        let name = request.machine.metadata.name.clone().unwrap_or_default();
        let existing = if self.flaws.non_idempotent_create {
            None
        } else {
            self.find(&request)
        };
        let vm = match existing {
            Some(vm) => vm,
            None => {
                let id = self.next_id.fetch_add(1, Ordering::SeqCst);
                let vm = Vm {
                    provider_id: format!("memory:///vm-{id}"),
                    machine: name.clone(),
                    class: class_name(&request.class),
                    initialized: false,
                    spec: request.class.provider_spec.clone(),
                };
                self.vms
                    .lock()
                    .unwrap()
                    .insert(vm.provider_id.clone(), vm.clone());
                vm
            }
        };
        Ok(CreateMachineResponse {
            provider_id: vm.provider_id,
            node_name: name,
            ..CreateMachineResponse::default()
        })
    }

    async fn initialize_machine(
        &self,
        request: MachineRequest,
    ) -> Result<InitializeMachineResponse, MachineError> {
        let vm = self
            .find(&request)
            .ok_or_else(|| MachineError::not_found("no VM"))?;
        if let Some(stored) = self.vms.lock().unwrap().get_mut(&vm.provider_id) {
            stored.initialized = true;
        }
        Ok(InitializeMachineResponse {
            provider_id: vm.provider_id,
            node_name: vm.machine,
            addresses: vec![],
        })
    }

    async fn delete_machine(
        &self,
        request: MachineRequest,
    ) -> Result<DeleteMachineResponse, MachineError> {
        match self.find(&request) {
            Some(vm) => {
                self.vms.lock().unwrap().remove(&vm.provider_id);
                Ok(DeleteMachineResponse::default())
            }
            None if self.flaws.delete_absent_is_not_found => Err(MachineError::not_found("no VM")),
            None => Ok(DeleteMachineResponse::default()),
        }
    }

    async fn get_machine_status(
        &self,
        request: MachineRequest,
    ) -> Result<MachineStatus, StatusError> {
        let vm = self
            .find(&request)
            .ok_or_else(|| MachineError::not_found("no VM"))?;
        let status = MachineStatus {
            provider_id: vm.provider_id,
            node_name: vm.machine,
            addresses: vec![],
        };
        if vm.initialized {
            Ok(status)
        } else {
            Err(StatusError::uninitialized("not initialised", status))
        }
    }

    async fn list_machines(
        &self,
        request: ListMachinesRequest,
    ) -> Result<MachineList, MachineError> {
        let class = class_name(&request.class);
        Ok(self
            .vms
            .lock()
            .unwrap()
            .values()
            .filter(|vm| self.flaws.list_ignores_class || vm.class == class)
            .map(|vm| (vm.provider_id.clone(), vm.machine.clone()))
            .collect())
    }

    async fn update_machine(
        &self,
        request: UpdateMachineRequest,
    ) -> Result<UpdateMachineResponse, MachineError> {
        let mut vms = self.vms.lock().unwrap();
        let vm = vms.get_mut(&request.provider_id).ok_or_else(|| {
            MachineError::new(Code::NotFound, format!("no VM {}", request.provider_id))
        })?;
        let new = &request.class.provider_spec;
        if new.get("size") != vm.spec.get("size") {
            return Err(MachineError::invalid_argument(
                "providerSpec.size is not hot-updatable",
            ));
        }
        let changed = new.get("tags") != vm.spec.get("tags");
        vm.spec = new.clone();
        Ok(UpdateMachineResponse {
            updated_paths: if changed { vec!["tags".into()] } else { vec![] },
        })
    }
}

/// A class of the memory provider.
pub fn class(name: &str, spec: serde_json::Value, provider: &str) -> MachineClass {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "MachineClass",
        "metadata": {"name": name, "namespace": "test"},
        "provider": provider,
        "providerSpec": spec,
    }))
    .unwrap()
}
