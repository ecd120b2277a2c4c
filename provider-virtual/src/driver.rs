//! The virtual provider's [`Driver`]: VMs in a [`Fleet`] persisted to the state file.
//!
//! Every call checks `MachineClass.provider`; CreateMachine and UpdateMachine validate the
//! providerSpec and answer `InvalidArgument` naming the field; ValidateMachineClass reports the same
//! field errors from the same parser without creating anything. A call answers only after its change
//! is on disk; concurrent calls share one write (group commit), so creating a thousand VMs does not
//! write the file a thousand times.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use jiff::Timestamp;
use mcm_api::v1alpha1::{Machine, MachineClass};
use mcm_provider_proto::{
    Capabilities, ClassFieldError, ClassFieldErrors, Code, CreateMachineResponse,
    DeleteMachineResponse, Driver, GetVolumeIdsRequest, InitializeMachineResponse,
    ListMachinesRequest, MachineError, MachineList, MachineRequest, MachineStatus, Method,
    StatusError, UpdateMachineRequest, UpdateMachineResponse, ValidateMachineClassRequest,
};

use crate::node::{ConditionOverrides, node_addresses};
use crate::pods::volume_id;
use crate::spec::{
    FailingMethod, HOT_UPDATABLE_PATHS, PROVIDER_NAME, VirtualSpec, check_provider, cold_changes,
    describe, hot_changes, parse_provider_spec,
};
use crate::state::{
    CreateInput, FleetState, NodeTemplateInfo, StateError, Vm, load, write_atomically,
};

struct Versioned {
    state: FleetState,
    generation: u64,
}

/// The VMs, their persistence, and runtime condition overrides set through the admin endpoint.
pub struct Fleet {
    current: Mutex<Versioned>,
    persisted: tokio::sync::Mutex<u64>,
    path: Option<PathBuf>,
    overrides: Mutex<HashMap<String, ConditionOverrides>>,
    /// Nodes whose heartbeat is stopped through the admin endpoint.
    silent: Mutex<std::collections::HashSet<String>>,
}

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock cannot leave FleetState half-updated (every mutation is a
    // single insert/remove/assign), so the data is still consistent.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Fleet {
    /// A fleet kept only in memory (tests, benchmarks).
    pub fn in_memory() -> Self {
        Self::with_state(
            FleetState {
                version: crate::state::STATE_VERSION,
                ..FleetState::default()
            },
            None,
        )
    }

    /// The fleet of a state file (created on first write).
    pub fn open(path: PathBuf) -> Result<Self, StateError> {
        let state = load(&path)?;
        tracing::info!(path = %path.display(), vms = state.vms.len(), "loaded VM state");
        Ok(Self::with_state(state, Some(path)))
    }

    fn with_state(state: FleetState, path: Option<PathBuf>) -> Self {
        Self {
            current: Mutex::new(Versioned {
                state,
                generation: 0,
            }),
            persisted: tokio::sync::Mutex::new(0),
            path,
            overrides: Mutex::new(HashMap::new()),
            silent: Mutex::new(std::collections::HashSet::new()),
        }
    }

    /// A copy of every VM.
    pub fn vms(&self) -> Vec<Vm> {
        locked(&self.current).state.vms.values().cloned().collect()
    }

    /// Whether a VM of this fleet has the Node `node`.
    pub fn has_node(&self, node: &str) -> bool {
        locked(&self.current)
            .state
            .vms
            .values()
            .any(|vm| vm.node_name == node)
    }

    /// How many VMs received how many InitializeMachine calls.
    pub fn initialize_call_counts(&self) -> std::collections::BTreeMap<u32, usize> {
        locked(&self.current).state.initialize_call_counts()
    }

    /// The number of VMs.
    pub fn len(&self) -> usize {
        locked(&self.current).state.vms.len()
    }

    /// Whether there is no VM.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn read<R>(&self, read: impl FnOnce(&FleetState) -> R) -> R {
        read(&locked(&self.current).state)
    }

    /// Applies a change; returns its result and the generation to commit.
    fn mutate<R>(&self, change: impl FnOnce(&mut FleetState) -> R) -> (R, u64) {
        let mut current = locked(&self.current);
        let result = change(&mut current.state);
        current.generation += 1;
        (result, current.generation)
    }

    /// Makes every change up to `generation` durable. Whoever holds the writer lock writes the
    /// newest state, so callers queued behind it usually find their change already written.
    async fn commit(&self, generation: u64) -> Result<(), StateError> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        let mut persisted = self.persisted.lock().await;
        if *persisted >= generation {
            return Ok(());
        }
        let (bytes, snapshot_generation) = {
            let current = locked(&self.current);
            let bytes = serde_json::to_vec(&current.state).map_err(|error| StateError::Write {
                path: path.clone(),
                source: std::io::Error::other(error),
            })?;
            (bytes, current.generation)
        };
        let target = path.clone();
        tokio::task::spawn_blocking(move || write_atomically(&target, &bytes))
            .await
            .map_err(|error| StateError::Write {
                path: path.clone(),
                source: std::io::Error::other(error),
            })??;
        *persisted = snapshot_generation;
        Ok(())
    }

    /// Sets runtime condition overrides of a node (admin endpoint).
    pub fn set_overrides(&self, node: &str, overrides: ConditionOverrides) {
        let mut all = locked(&self.overrides);
        if overrides.is_empty() {
            all.remove(node);
        } else {
            all.insert(node.to_owned(), overrides);
        }
    }

    /// The runtime condition overrides of a node.
    pub fn overrides(&self, node: &str) -> ConditionOverrides {
        locked(&self.overrides)
            .get(node)
            .cloned()
            .unwrap_or_default()
    }

    /// Stops (`true`) or resumes the heartbeat of a node (admin endpoint).
    pub fn set_heartbeat_stopped(&self, node: &str, stopped: bool) {
        let mut silent = locked(&self.silent);
        if stopped {
            silent.insert(node.to_owned());
        } else {
            silent.remove(node);
        }
    }

    /// Whether the heartbeat of a node is stopped through the admin endpoint.
    pub fn heartbeat_stopped(&self, node: &str) -> bool {
        locked(&self.silent).contains(node)
    }
}

/// The virtual provider's driver.
#[derive(Clone)]
pub struct VirtualDriver {
    fleet: Arc<Fleet>,
}

fn persist_error(error: StateError) -> MachineError {
    tracing::error!(%error, "VM state not persisted");
    MachineError::internal(error.to_string())
}

struct MachineRef {
    namespace: String,
    name: String,
    provider_id: Option<String>,
}

fn machine_ref(machine: &Machine) -> Result<MachineRef, MachineError> {
    let name = machine
        .metadata
        .name
        .clone()
        .filter(|name| !name.is_empty())
        .ok_or_else(|| {
            MachineError::invalid_argument("machine metadata.name: must not be empty")
        })?;
    Ok(MachineRef {
        namespace: machine.metadata.namespace.clone().unwrap_or_default(),
        name,
        provider_id: machine.spec.provider_id.clone().filter(|id| !id.is_empty()),
    })
}

fn validate_provider(class: &MachineClass) -> Result<(), MachineError> {
    check_provider(class.provider.as_deref())
        .map_err(|error| MachineError::invalid_argument(error.to_string()))
}

fn validate_spec(class: &MachineClass) -> Result<VirtualSpec, MachineError> {
    validate_provider(class)?;
    parse_provider_spec(&class.provider_spec).map_err(|errors| {
        MachineError::invalid_argument(format!(
            "invalid providerSpec of machine class {}: {}",
            class.metadata.name.as_deref().unwrap_or_default(),
            describe(&errors)
        ))
    })
}

/// Every field error of a class, from the very checks CreateMachine runs ([`validate_spec`]):
/// the provider, then the providerSpec.
fn class_field_errors(class: &MachineClass) -> ClassFieldErrors {
    let provider = check_provider(class.provider.as_deref()).err();
    let spec = parse_provider_spec(&class.provider_spec).err();
    provider
        .into_iter()
        .chain(spec.into_iter().flatten())
        .map(|error| ClassFieldError {
            field: error.path,
            message: error.message,
        })
        .collect()
}

fn node_template(class: &MachineClass) -> NodeTemplateInfo {
    class
        .node_template
        .as_ref()
        .map(|template| NodeTemplateInfo {
            capacity: template.capacity.clone(),
            instance_type: template.instance_type.clone(),
            region: template.region.clone(),
            zone: template.zone.clone(),
            architecture: template.architecture.clone(),
        })
        .unwrap_or_default()
}

fn status_of(vm: &Vm) -> MachineStatus {
    MachineStatus {
        provider_id: vm.provider_id.clone(),
        node_name: vm.node_name.clone(),
        addresses: node_addresses(vm),
    }
}

fn last_known_state(vm: &Vm) -> String {
    serde_json::json!({"vm": vm.id}).to_string()
}

impl VirtualDriver {
    /// A driver over `fleet`.
    pub fn new(fleet: Arc<Fleet>) -> Self {
        Self { fleet }
    }

    /// The fleet.
    pub fn fleet(&self) -> &Arc<Fleet> {
        &self.fleet
    }

    async fn injected(
        &self,
        machine: &MachineRef,
        method: FailingMethod,
        spec: &VirtualSpec,
    ) -> Result<(), MachineError> {
        if !spec.failures.contains_key(&method) {
            return Ok(());
        }
        let (failure, generation) = self.fleet.mutate(|state| {
            state.take_injected_failure(&machine.namespace, &machine.name, method, spec)
        });
        self.fleet.commit(generation).await.map_err(persist_error)?;
        match failure {
            Some(error) => {
                tracing::info!(machine = %machine.name, namespace = %machine.namespace, method = method.key(), code = %error.code, "serving injected failure");
                Err(error)
            }
            None => Ok(()),
        }
    }

    fn lookup(&self, machine: &MachineRef) -> Option<Vm> {
        self.fleet.read(|state| {
            state
                .lookup(
                    &machine.namespace,
                    &machine.name,
                    machine.provider_id.as_deref(),
                )
                .cloned()
        })
    }
}

impl Driver for VirtualDriver {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            provider_name: PROVIDER_NAME.into(),
            methods: vec![
                Method::CreateMachine,
                Method::InitializeMachine,
                Method::DeleteMachine,
                Method::GetMachineStatus,
                Method::ListMachines,
                Method::GetVolumeIds,
                Method::UpdateMachine,
                Method::ValidateMachineClass,
            ],
            hot_updatable_paths: HOT_UPDATABLE_PATHS
                .iter()
                .map(|path| (*path).to_owned())
                .collect(),
            driver_version: env!("CARGO_PKG_VERSION").into(),
        }
    }

    async fn create_machine(
        &self,
        request: MachineRequest,
    ) -> Result<CreateMachineResponse, MachineError> {
        let spec = validate_spec(&request.class)?;
        let machine = machine_ref(&request.machine)?;
        self.injected(&machine, FailingMethod::Create, &spec)
            .await?;
        if let Some(latency) = spec
            .create_latency
            .to_std()
            .filter(|latency| !latency.is_zero())
        {
            // Dropped (with nothing created) if the caller's deadline expires first.
            tokio::time::sleep(latency).await;
        }
        let input = CreateInput {
            namespace: machine.namespace.clone(),
            machine_name: machine.name.clone(),
            class_namespace: request.class.metadata.namespace.clone().unwrap_or_default(),
            class_name: request.class.metadata.name.clone().unwrap_or_default(),
            spec,
            node_template: node_template(&request.class),
        };
        let ((vm, created), generation) = self
            .fleet
            .mutate(|state| state.create(input, Timestamp::now()));
        self.fleet.commit(generation).await.map_err(persist_error)?;
        if created {
            tracing::info!(machine = %machine.name, namespace = %machine.namespace, provider_id = %vm.provider_id, "created VM");
        }
        Ok(CreateMachineResponse {
            provider_id: vm.provider_id.clone(),
            node_name: vm.node_name.clone(),
            last_known_state: last_known_state(&vm),
            addresses: node_addresses(&vm),
        })
    }

    async fn initialize_machine(
        &self,
        request: MachineRequest,
    ) -> Result<InitializeMachineResponse, MachineError> {
        validate_provider(&request.class)?;
        let machine = machine_ref(&request.machine)?;
        let vm = self.lookup(&machine).ok_or_else(|| {
            MachineError::not_found(format!(
                "no VM for machine {}/{}",
                machine.namespace, machine.name
            ))
        })?;
        let ((), generation) = self
            .fleet
            .mutate(|state| state.record_initialize_call(&vm.provider_id));
        self.fleet.commit(generation).await.map_err(persist_error)?;
        tracing::info!(machine = %machine.name, namespace = %machine.namespace, provider_id = %vm.provider_id, calls = vm.initialize_calls + 1, "InitializeMachine");
        self.injected(&machine, FailingMethod::Initialize, &vm.spec)
            .await?;
        let (initialized, generation) =
            self.fleet.mutate(|state| state.initialize(&vm.provider_id));
        let vm = initialized?;
        self.fleet.commit(generation).await.map_err(persist_error)?;
        Ok(InitializeMachineResponse {
            provider_id: vm.provider_id.clone(),
            node_name: vm.node_name.clone(),
            addresses: node_addresses(&vm),
        })
    }

    async fn delete_machine(
        &self,
        request: MachineRequest,
    ) -> Result<DeleteMachineResponse, MachineError> {
        validate_provider(&request.class)?;
        let machine = machine_ref(&request.machine)?;
        let Some(vm) = self.lookup(&machine) else {
            return Ok(DeleteMachineResponse::default());
        };
        self.injected(&machine, FailingMethod::Delete, &vm.spec)
            .await?;
        let (deleted, generation) = self.fleet.mutate(|state| state.delete(&vm.provider_id));
        self.fleet.commit(generation).await.map_err(persist_error)?;
        if deleted.is_some() {
            tracing::info!(machine = %machine.name, namespace = %machine.namespace, provider_id = %vm.provider_id, "deleted VM");
        }
        Ok(DeleteMachineResponse {
            last_known_state: String::new(),
        })
    }

    async fn get_machine_status(
        &self,
        request: MachineRequest,
    ) -> Result<MachineStatus, StatusError> {
        validate_provider(&request.class)?;
        let machine = machine_ref(&request.machine)?;
        let vm = self.lookup(&machine).ok_or_else(|| {
            MachineError::not_found(format!(
                "no VM for machine {}/{}",
                machine.namespace, machine.name
            ))
        })?;
        if vm.awaits_initialization() {
            return Err(StatusError::uninitialized(
                format!(
                    "VM {} of machine {} is not initialised yet",
                    vm.provider_id, machine.name
                ),
                status_of(&vm),
            ));
        }
        Ok(status_of(&vm))
    }

    async fn list_machines(
        &self,
        request: ListMachinesRequest,
    ) -> Result<MachineList, MachineError> {
        validate_provider(&request.class)?;
        let namespace = request.class.metadata.namespace.clone().unwrap_or_default();
        let name = request.class.metadata.name.clone().unwrap_or_default();
        Ok(self.fleet.read(|state| state.list(&namespace, &name)))
    }

    async fn get_volume_ids(
        &self,
        request: GetVolumeIdsRequest,
    ) -> Result<Vec<String>, MachineError> {
        Ok(request.pv_specs.iter().filter_map(volume_id).collect())
    }

    async fn update_machine(
        &self,
        request: UpdateMachineRequest,
    ) -> Result<UpdateMachineResponse, MachineError> {
        let wanted = validate_spec(&request.class)?;
        let vm = self
            .fleet
            .read(|state| state.by_provider_id(&request.provider_id).cloned())
            .ok_or_else(|| {
                MachineError::new(Code::NotFound, format!("no VM {}", request.provider_id))
            })?;
        let cold = cold_changes(&vm.spec, &wanted);
        if !cold.is_empty() {
            return Err(MachineError::invalid_argument(format!(
                "{} cannot be changed on a running VM (hot-updatable: {}); roll the machines instead",
                cold.join(", "),
                HOT_UPDATABLE_PATHS.join(", ")
            )));
        }
        let updated_paths = hot_changes(&vm.spec, &wanted);
        if updated_paths.is_empty() {
            return Ok(UpdateMachineResponse::default());
        }
        let (applied, generation) = self
            .fleet
            .mutate(|state| state.apply_spec(&vm.provider_id, wanted));
        applied?;
        self.fleet.commit(generation).await.map_err(persist_error)?;
        tracing::info!(provider_id = %vm.provider_id, paths = ?updated_paths, "updated VM in place");
        Ok(UpdateMachineResponse { updated_paths })
    }

    async fn validate_machine_class(
        &self,
        request: ValidateMachineClassRequest,
    ) -> Result<ClassFieldErrors, MachineError> {
        Ok(class_field_errors(&request.class))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn class(spec: Value) -> MachineClass {
        serde_json::from_value(json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1",
            "kind": "MachineClass",
            "metadata": {"name": "small", "namespace": "shoot--test"},
            "provider": PROVIDER_NAME,
            "providerSpec": spec,
        }))
        .unwrap_or_else(|error| panic!("test class: {error}"))
    }

    async fn validate(class: MachineClass) -> ClassFieldErrors {
        let driver = VirtualDriver::new(Arc::new(Fleet::in_memory()));
        driver
            .validate_machine_class(ValidateMachineClassRequest {
                class,
                secret: Default::default(),
            })
            .await
            .unwrap_or_else(|error| panic!("ValidateMachineClass failed: {error}"))
    }

    fn fields(errors: &ClassFieldErrors) -> Vec<&str> {
        errors.iter().map(|error| error.field.as_str()).collect()
    }

    #[tokio::test]
    async fn a_valid_spec_has_no_field_error() {
        let errors = validate(class(json!({
            "bootDelay": "5s",
            "initialization": "silent",
            "tags": {"team": "a"},
        })))
        .await;
        assert_eq!(errors, Vec::new());
    }

    #[tokio::test]
    async fn an_unknown_field_is_named() {
        let errors = validate(class(json!({"colour": "blue"}))).await;
        assert_eq!(fields(&errors), vec!["providerSpec.colour"]);
        assert!(errors[0].message.contains("unknown field"), "{errors:?}");
    }

    #[tokio::test]
    async fn a_bad_duration_is_named() {
        let errors = validate(class(json!({"bootDelay": "soon"}))).await;
        assert_eq!(fields(&errors), vec!["providerSpec.bootDelay"]);
        assert!(errors[0].message.contains("not a duration"), "{errors:?}");
    }

    #[tokio::test]
    async fn a_bad_enum_value_is_named() {
        let errors = validate(class(json!({"initialization": "sometimes"}))).await;
        assert_eq!(fields(&errors), vec!["providerSpec.initialization"]);
        assert!(
            errors[0].message.contains("none, reported, silent"),
            "{errors:?}"
        );
    }

    #[tokio::test]
    async fn tags_as_a_list_are_named() {
        let errors = validate(class(json!({"tags": ["team=a"]}))).await;
        assert_eq!(fields(&errors), vec!["providerSpec.tags"]);
        assert!(
            errors[0].message.contains("must be an object"),
            "{errors:?}"
        );
    }

    #[tokio::test]
    async fn a_wrong_provider_is_named() {
        let mut wrong = class(json!({}));
        wrong.provider = Some("aws".into());
        let errors = validate(wrong).await;
        assert_eq!(fields(&errors), vec!["provider"]);
    }

    /// One parser: whatever ValidateMachineClass refuses, CreateMachine refuses naming the same
    /// fields, and what it accepts CreateMachine reads.
    #[tokio::test]
    async fn validation_agrees_with_creation() {
        for spec in [
            json!({}),
            json!({"bootDelay": "soon"}),
            json!({"colour": "blue", "tags": ["x"]}),
            json!({"initialization": "sometimes", "createLatency": 5}),
            json!({"failures": {"create": {"code": "Nope"}}}),
            json!({"requiresInitialization": true, "tags": {"a": "b"}}),
        ] {
            let class = class(spec.clone());
            let errors = validate(class.clone()).await;
            match validate_spec(&class) {
                Ok(_) => assert!(errors.is_empty(), "{spec}: {errors:?}"),
                Err(error) => {
                    assert!(!errors.is_empty(), "{spec}: creation refuses: {error}");
                    for field in fields(&errors) {
                        assert!(error.message.contains(field), "{spec}: {field} in {error}");
                    }
                }
            }
        }
    }
}
