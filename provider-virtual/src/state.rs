//! The provider's VMs and their state transitions (pure), and the state file they live in.
//!
//! All VMs are kept in one JSON file written atomically (temporary file, fsync, rename), so a
//! restart of the provider loses no VM and never duplicates one: CreateMachine answers only after
//! the VM is on disk, and a retried CreateMachine finds the VM by machine name.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use jiff::Timestamp;
use mcm_api::v1alpha1::ResourceList;
use mcm_provider_proto::{Code, MachineError};
use serde::{Deserialize, Serialize};

use crate::spec::{FailingMethod, Initialization, VirtualSpec};

/// The state file format version written by this build.
pub const STATE_VERSION: u32 = 1;

/// What a Node needs from the machine class's `nodeTemplate`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeTemplateInfo {
    /// Capacity (and allocatable) of the Node.
    pub capacity: ResourceList,
    /// `node.kubernetes.io/instance-type`.
    pub instance_type: String,
    /// `topology.kubernetes.io/region`.
    pub region: String,
    /// `topology.kubernetes.io/zone`.
    pub zone: String,
    /// `kubernetes.io/arch` (default amd64).
    pub architecture: Option<String>,
}

/// A simulated VM.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Vm {
    /// Short unique ID (`vm-0000002a`), never reused.
    pub id: String,
    /// `virtual:///<namespace>/<id>`.
    #[serde(rename = "providerID")]
    pub provider_id: String,
    /// Namespace of the machine.
    pub namespace: String,
    /// The machine it backs (unique per namespace).
    pub machine_name: String,
    /// Its Node's name (= machine name).
    pub node_name: String,
    /// Namespace of the class it was created from.
    pub class_namespace: String,
    /// Name of that class (ListMachines filters on it).
    pub class_name: String,
    /// The providerSpec currently applied.
    pub spec: VirtualSpec,
    /// Node template of the class at creation.
    pub node_template: NodeTemplateInfo,
    /// When CreateMachine created it.
    pub created_at: Timestamp,
    /// Whether InitializeMachine succeeded.
    pub initialized: bool,
    /// How many InitializeMachine calls reached this VM (including injected failures): a
    /// controller initialises each VM it creates exactly once, unless GetMachineStatus answers
    /// `Uninitialized` later.
    #[serde(default)]
    pub initialize_calls: u32,
    /// Its InternalIP.
    #[serde(rename = "internalIP")]
    pub internal_ip: String,
}

impl Vm {
    /// When the VM has booted (its Node registers from then on).
    pub fn booted_at(&self) -> Timestamp {
        self.created_at
            .saturating_add(self.spec.boot_delay.to_signed_duration())
            .unwrap_or(self.created_at)
    }

    /// Whether GetMachineStatus must answer Uninitialized.
    pub fn awaits_initialization(&self) -> bool {
        self.spec.requires_initialization && !self.initialized
    }

    /// Whether the VM still needs InitializeMachine (reported or not).
    pub fn needs_initialization(&self) -> bool {
        self.spec.initialization() != Initialization::None && !self.initialized
    }

    /// Whether its Node should be registered and kept alive at `now`.
    pub fn runs_node(&self, now: Timestamp) -> bool {
        now >= self.booted_at() && !self.needs_initialization()
    }
}

/// Everything in the state file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FleetState {
    /// Format version.
    pub version: u32,
    /// The next VM number (persisted so IDs are never reused).
    pub next_id: u64,
    /// VMs by providerID.
    pub vms: BTreeMap<String, Vm>,
    /// Injected failures already served, by `<namespace>/<machine>/<method>`.
    pub failures_served: BTreeMap<String, u32>,
}

/// What CreateMachine knows about the VM to create.
#[derive(Debug, Clone)]
pub struct CreateInput {
    /// Machine namespace.
    pub namespace: String,
    /// Machine name.
    pub machine_name: String,
    /// Class namespace.
    pub class_namespace: String,
    /// Class name.
    pub class_name: String,
    /// Validated providerSpec.
    pub spec: VirtualSpec,
    /// Class node template.
    pub node_template: NodeTemplateInfo,
}

impl FleetState {
    /// The VM backing a machine.
    pub fn by_machine(&self, namespace: &str, machine_name: &str) -> Option<&Vm> {
        self.vms
            .values()
            .find(|vm| vm.namespace == namespace && vm.machine_name == machine_name)
    }

    /// The VM with a providerID.
    pub fn by_provider_id(&self, provider_id: &str) -> Option<&Vm> {
        self.vms.get(provider_id)
    }

    /// The VM a request refers to: by providerID when the machine has one (like a cloud lookup by
    /// instance ID: a VM that vanished is not replaced by another one of the same name), else by
    /// machine name.
    pub fn lookup(
        &self,
        namespace: &str,
        machine_name: &str,
        provider_id: Option<&str>,
    ) -> Option<&Vm> {
        match provider_id.filter(|id| !id.is_empty()) {
            Some(id) => self.by_provider_id(id),
            None => self.by_machine(namespace, machine_name),
        }
    }

    /// Serves an injected failure if one is due for this machine and method (counting it).
    pub fn take_injected_failure(
        &mut self,
        namespace: &str,
        machine_name: &str,
        method: FailingMethod,
        spec: &VirtualSpec,
    ) -> Option<MachineError> {
        let injection = spec.failures.get(&method)?;
        let key = format!("{namespace}/{machine_name}/{}", method.key());
        let served = self.failures_served.entry(key).or_insert(0);
        if *served >= injection.times {
            return None;
        }
        *served += 1;
        Some(MachineError::new(
            injection.code,
            format!(
                "injected failure {}/{} of {} for machine {namespace}/{machine_name} (providerSpec.failures.{})",
                *served,
                injection.times,
                method.key(),
                method.key()
            ),
        ))
    }

    /// Creates the VM of a machine, or returns the existing one (idempotent by machine name).
    /// The flag says whether a VM was created.
    pub fn create(&mut self, input: CreateInput, now: Timestamp) -> (Vm, bool) {
        if let Some(existing) = self.by_machine(&input.namespace, &input.machine_name) {
            return (existing.clone(), false);
        }
        let number = self.next_id;
        self.next_id += 1;
        let id = format!("vm-{number:08x}");
        let vm = Vm {
            provider_id: format!("virtual:///{}/{id}", input.namespace),
            id,
            node_name: input.machine_name.clone(),
            namespace: input.namespace,
            machine_name: input.machine_name,
            class_namespace: input.class_namespace,
            class_name: input.class_name,
            spec: input.spec,
            node_template: input.node_template,
            created_at: now,
            initialized: false,
            initialize_calls: 0,
            internal_ip: internal_ip(number),
        };
        self.vms.insert(vm.provider_id.clone(), vm.clone());
        (vm, true)
    }

    /// Counts an InitializeMachine call that reached a VM.
    pub fn record_initialize_call(&mut self, provider_id: &str) {
        if let Some(vm) = self.vms.get_mut(provider_id) {
            vm.initialize_calls = vm.initialize_calls.saturating_add(1);
        }
    }

    /// How many VMs received how many InitializeMachine calls.
    pub fn initialize_call_counts(&self) -> BTreeMap<u32, usize> {
        let mut counts = BTreeMap::new();
        for vm in self.vms.values() {
            *counts.entry(vm.initialize_calls).or_insert(0) += 1;
        }
        counts
    }

    /// Marks a VM initialised.
    pub fn initialize(&mut self, provider_id: &str) -> Result<Vm, MachineError> {
        let vm = self
            .vms
            .get_mut(provider_id)
            .ok_or_else(|| MachineError::new(Code::NotFound, format!("no VM {provider_id}")))?;
        vm.initialized = true;
        Ok(vm.clone())
    }

    /// Removes a VM; `None` if it was already gone. Its served-failure counters go too, so a new
    /// machine with the same name starts afresh.
    pub fn delete(&mut self, provider_id: &str) -> Option<Vm> {
        let vm = self.vms.remove(provider_id)?;
        let prefix = format!("{}/{}/", vm.namespace, vm.machine_name);
        self.failures_served
            .retain(|key, _| !key.starts_with(&prefix));
        Some(vm)
    }

    /// providerID → machine name for the VMs of a class.
    pub fn list(&self, class_namespace: &str, class_name: &str) -> BTreeMap<String, String> {
        self.vms
            .values()
            .filter(|vm| vm.class_name == class_name && vm.class_namespace == class_namespace)
            .map(|vm| (vm.provider_id.clone(), vm.machine_name.clone()))
            .collect()
    }

    /// Applies a new spec to a VM (the caller checked that only hot fields differ).
    pub fn apply_spec(&mut self, provider_id: &str, spec: VirtualSpec) -> Result<Vm, MachineError> {
        let vm = self
            .vms
            .get_mut(provider_id)
            .ok_or_else(|| MachineError::new(Code::NotFound, format!("no VM {provider_id}")))?;
        vm.spec = spec;
        Ok(vm.clone())
    }
}

/// A deterministic, unique-per-VM address in 10.0.0.0/8.
fn internal_ip(number: u64) -> String {
    let host = number % (1 << 24);
    format!(
        "10.{}.{}.{}",
        (host >> 16) & 0xff,
        (host >> 8) & 0xff,
        host & 0xff
    )
}

/// Failures reading or writing the state file.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The file exists but cannot be read.
    #[error("cannot read the state file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not a state file of a known version (refusing to start rather than forget VMs).
    #[error("the state file {path} is corrupt or of an unknown format: {reason}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Writing failed (the previous file is intact).
    #[error("cannot write the state file {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
}

/// Loads the state file; a missing file is an empty fleet.
pub fn load(path: &Path) -> Result<FleetState, StateError> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Ok(FleetState {
                version: STATE_VERSION,
                ..FleetState::default()
            });
        }
        Err(source) => {
            return Err(StateError::Read {
                path: path.to_owned(),
                source,
            });
        }
    };
    let state: FleetState =
        serde_json::from_slice(&bytes).map_err(|error| StateError::Corrupt {
            path: path.to_owned(),
            reason: error.to_string(),
        })?;
    if state.version != STATE_VERSION {
        return Err(StateError::Corrupt {
            path: path.to_owned(),
            reason: format!(
                "version {} (this build reads {STATE_VERSION})",
                state.version
            ),
        });
    }
    Ok(state)
}

/// Writes bytes to `path` atomically: a temporary file in the same directory, fsync, rename,
/// fsync of the directory. A crash leaves either the old or the new file, never a torn one.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), StateError> {
    let write_error = |source| StateError::Write {
        path: path.to_owned(),
        source,
    };
    let directory = path
        .parent()
        .filter(|parent| !parent.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    std::fs::create_dir_all(directory).map_err(write_error)?;
    let mut temporary = path.as_os_str().to_owned();
    temporary.push(".tmp");
    let temporary = PathBuf::from(temporary);
    let mut file = std::fs::File::create(&temporary).map_err(write_error)?;
    file.write_all(bytes).map_err(write_error)?;
    file.sync_all().map_err(write_error)?;
    drop(file);
    std::fs::rename(&temporary, path).map_err(write_error)?;
    // Make the rename itself durable.
    std::fs::File::open(directory)
        .and_then(|dir| dir.sync_all())
        .map_err(write_error)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use mcm_provider_proto::Code;
    use serde_json::json;

    fn input(machine: &str, class: &str) -> CreateInput {
        CreateInput {
            namespace: "ns".into(),
            machine_name: machine.into(),
            class_namespace: "ns".into(),
            class_name: class.into(),
            spec: VirtualSpec::default(),
            node_template: NodeTemplateInfo::default(),
        }
    }

    fn now() -> Timestamp {
        "2026-01-01T00:00:00Z".parse().unwrap()
    }

    #[test]
    fn create_is_idempotent_by_machine_name_and_ids_are_unique() {
        let mut state = FleetState::default();
        let (first, created) = state.create(input("m1", "c"), now());
        assert!(created);
        assert_eq!(first.provider_id, "virtual:///ns/vm-00000000");
        assert_eq!(first.node_name, "m1");
        let (again, created) = state.create(input("m1", "c"), now());
        assert!(!created);
        assert_eq!(again, first);
        let (second, _) = state.create(input("m2", "c"), now());
        assert_ne!(second.provider_id, first.provider_id);
        assert_ne!(second.internal_ip, first.internal_ip);
        // A deleted VM's ID is never reused.
        state.delete(&second.provider_id);
        let (third, _) = state.create(input("m2", "c"), now());
        assert_eq!(third.id, "vm-00000002");
    }

    #[test]
    fn lookup_prefers_the_provider_id() {
        let mut state = FleetState::default();
        let (vm, _) = state.create(input("m1", "c"), now());
        assert_eq!(
            state
                .lookup("ns", "other-name", Some(&vm.provider_id))
                .map(|v| &v.id),
            Some(&vm.id)
        );
        assert_eq!(state.lookup("ns", "m1", None).map(|v| &v.id), Some(&vm.id));
        assert_eq!(
            state.lookup("ns", "m1", Some("")).map(|v| &v.id),
            Some(&vm.id)
        );
        assert!(state.lookup("other-ns", "m1", None).is_none());
    }

    #[test]
    fn list_is_per_class() {
        let mut state = FleetState::default();
        let (a, _) = state.create(input("a", "c1"), now());
        state.create(input("b", "c2"), now());
        assert_eq!(
            state.list("ns", "c1"),
            BTreeMap::from([(a.provider_id, "a".to_owned())])
        );
        assert!(state.list("other", "c1").is_empty());
    }

    #[test]
    fn injected_failures_are_served_n_times_per_machine_then_reset_on_delete() {
        let spec = crate::spec::parse_provider_spec(
            &json!({"failures": {"create": {"code": "ResourceExhausted", "times": 2}}}),
        )
        .unwrap();
        let mut state = FleetState::default();
        for attempt in 1..=2 {
            let error = state
                .take_injected_failure("ns", "m", FailingMethod::Create, &spec)
                .unwrap();
            assert_eq!(error.code, Code::ResourceExhausted);
            assert!(
                error.message.contains(&format!("{attempt}/2")),
                "{}",
                error.message
            );
        }
        assert!(
            state
                .take_injected_failure("ns", "m", FailingMethod::Create, &spec)
                .is_none()
        );
        assert!(
            state
                .take_injected_failure("ns", "m", FailingMethod::Delete, &spec)
                .is_none()
        );
        assert!(
            state
                .take_injected_failure("ns", "other", FailingMethod::Create, &spec)
                .is_some()
        );
        let (vm, _) = state.create(input("m", "c"), now());
        state.delete(&vm.provider_id);
        assert!(
            state
                .take_injected_failure("ns", "m", FailingMethod::Create, &spec)
                .is_some()
        );
    }

    #[test]
    fn boot_and_initialisation_gate_the_node() {
        let mut state = FleetState::default();
        let mut spec_input = input("m", "c");
        spec_input.spec = crate::spec::parse_provider_spec(
            &json!({"bootDelay": "30s", "requiresInitialization": true}),
        )
        .unwrap();
        let (vm, _) = state.create(spec_input, now());
        let later = now() + jiff::SignedDuration::from_secs(31);
        assert!(!vm.runs_node(now()));
        assert!(!vm.runs_node(later), "not initialised yet");
        let vm = state.initialize(&vm.provider_id).unwrap();
        assert!(!vm.runs_node(now() + jiff::SignedDuration::from_secs(29)));
        assert!(vm.runs_node(later));
        assert_eq!(
            state.initialize("virtual:///ns/none").unwrap_err().code,
            Code::NotFound
        );
    }

    #[test]
    fn silent_initialisation_gates_the_node_but_not_the_status() {
        let mut state = FleetState::default();
        let mut spec_input = input("m", "c");
        spec_input.spec =
            crate::spec::parse_provider_spec(&json!({"initialization": "silent"})).unwrap();
        let (vm, _) = state.create(spec_input, now());
        assert!(
            !vm.awaits_initialization(),
            "GetMachineStatus reports it normally"
        );
        assert!(vm.needs_initialization());
        assert!(!vm.runs_node(now()), "no Node before InitializeMachine");
        state.record_initialize_call(&vm.provider_id);
        let vm = state.initialize(&vm.provider_id).unwrap();
        assert!(vm.runs_node(now()));
        assert_eq!(vm.initialize_calls, 1);
        let (other, _) = state.create(input("n", "c"), now());
        state.record_initialize_call("virtual:///ns/none");
        assert_eq!(
            state.initialize_call_counts(),
            BTreeMap::from([(0, 1), (1, 1)])
        );
        assert_eq!(
            state
                .by_provider_id(&other.provider_id)
                .map(|vm| vm.initialize_calls),
            Some(0)
        );
    }

    #[test]
    fn the_state_file_round_trips_and_missing_means_empty() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/state.json");
        assert_eq!(load(&path).unwrap().vms.len(), 0);
        let mut state = load(&path).unwrap();
        state.create(input("m", "c"), now());
        write_atomically(&path, &serde_json::to_vec(&state).unwrap()).unwrap();
        assert_eq!(load(&path).unwrap(), state);
        assert!(!dir.path().join("sub/state.json.tmp").exists());
    }

    #[test]
    fn a_corrupt_or_foreign_state_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        std::fs::write(&path, b"{\"vms\": 3").unwrap();
        assert!(matches!(load(&path), Err(StateError::Corrupt { .. })));
        std::fs::write(
            &path,
            br#"{"version": 99, "nextId": 0, "vms": {}, "failuresServed": {}}"#,
        )
        .unwrap();
        let error = load(&path).unwrap_err();
        assert!(error.to_string().contains("version 99"), "{error}");
    }
}
