//! Well-known keys and texts of machine-controller-manager, exactly as upstream writes and reads
//! them: finalizers, labels, annotations, taints, condition types and reasons, annotation values,
//! the load-bearing `lastOperation` descriptions and the retry periods.
//!
//! Other tools (Gardener, the cluster-autoscaler, node agents, dashboards) match these strings, so
//! they must never change. Grouped in submodules by what they are.

/// Finalizers.
pub mod finalizer {
    /// On Machines (by the machine controller, first thing in every reconcile), on MachineClasses
    /// (only while at least one Machine references the class) and on MachineSets and
    /// MachineDeployments (removed once they own nothing).
    pub const MACHINE_CONTROLLER_MANAGER: &str = "machine.sapcloud.io/machine-controller-manager";

    /// On Secrets of the control namespace referenced by a MachineClass (`secretRef` or
    /// `credentialsSecretRef`), matched by name.
    pub const MACHINE_CONTROLLER: &str = "machine.sapcloud.io/machine-controller";

    /// On Nodes of the target cluster that have a Machine (label `node=<name>`) not being deleted.
    pub const NODE: &str = "node.machine.sapcloud.io/machine-controller";
}

/// Labels.
pub mod label {
    /// On a Machine: name of its Node (also a printer column). Not set without a target cluster.
    pub const NODE: &str = "node";

    /// On a Machine: conventionally the MachineDeployment name (set by Gardener in the template).
    /// Keys the Unknown→Failed rate limit ("meltdown protection") and metrics.
    pub const NAME: &str = "name";

    /// In a Machine's node template: the zone of its node (zone metric label, per-zone meltdown
    /// guard).
    pub const ZONE: &str = "topology.kubernetes.io/zone";

    /// On MachineSets, their selector and template, and Machines: hash of the template.
    pub const MACHINE_TEMPLATE_HASH: &str = "machine-template-hash";

    /// On a Machine: forces drain and deletion; parsed like Go's `strconv.ParseBool`
    /// (`1`, `t`, `T`, `TRUE`, `true`, `True` mean true).
    pub const FORCE_DELETION: &str = "force-deletion";

    /// On a Machine: must equal exactly [`super::value::TRUE_CAPITALISED`] to force drain during
    /// in-place updates and preservation (not used by deletion).
    pub const FORCE_DRAIN: &str = "force-drain";

    /// On MachineSets and MachineDeployments: [`super::value::TRUE_CAPITALISED`] while frozen by
    /// the overshooting safety controller.
    pub const FREEZE: &str = "freeze";

    /// On a Node: name of its Machine (written by the machine controller; used to find a node by
    /// machine name).
    pub const NODE_MACHINE_NAME: &str = "node.gardener.cloud/machine-name";

    /// On a MachineSet: presence (any value; written as `"true"`) blocks its scale-up. An in-place
    /// rollout puts it on old MachineSets.
    pub const SCALE_UP_DISABLED: &str = "node.machine.sapcloud.io/scale-up-disabled";

    /// On a Node: `"true"` when the node belongs to an old MachineSet of an in-place rollout.
    pub const CANDIDATE_FOR_UPDATE: &str = "node.machine.sapcloud.io/candidate-for-update";

    /// On a Node: `"true"` when the node was chosen to be drained and updated in place.
    pub const SELECTED_FOR_UPDATE: &str = "node.machine.sapcloud.io/selected-for-update";

    /// On Nodes and Machines: result of an in-place update, [`super::value::UPDATE_SUCCESSFUL`] or
    /// [`super::value::UPDATE_FAILED`] (written on nodes by an external agent).
    pub const UPDATE_RESULT: &str = "node.machine.sapcloud.io/update-result";

    /// Label key the MachineDeployment controller adds to distinguish its MachineSets
    /// (upstream `DefaultMachineDeploymentUniqueLabelKey`).
    pub const DEFAULT_MACHINE_DEPLOYMENT_UNIQUE: &str = MACHINE_TEMPLATE_HASH;
}

/// Annotations.
pub mod annotation {
    /// On a Machine: deletion priority, an integer; the machine controller writes
    /// [`super::value::MACHINE_PRIORITY_DEFAULT`] at creation; lower is deleted first;
    /// [`super::value::MACHINE_PRIORITY_TRIGGERED_FOR_DELETION`] means "triggered for deletion".
    pub const MACHINE_PRIORITY: &str = "machinepriority.machine.sapcloud.io";

    /// On a Machine: RFC 3339 time at which it was marked for deletion (cluster-autoscaler
    /// integration).
    pub const MARKED_FOR_DELETION_TIME: &str = "machine.sapcloud.io/marked-for-deletion-time";

    /// On a MachineDeployment (copied to its MachineSet): RFC 3339 time of the last replica change
    /// made by a scaler.
    pub const LAST_DEPLOYMENT_REPLICA_CHANGE_BY_SCALER_TIME: &str =
        "machine.sapcloud.io/last-deployment-replica-change-by-scaler-time";

    /// On a MachineDeployment: `m1~t1,m2~t2,...` (machine name `~` RFC 3339 time), written by
    /// the cluster-autoscaler to delete specific machines. No longer honoured on Nodes.
    pub const TRIGGER_DELETION_BY_MCM: &str = "node.machine.sapcloud.io/trigger-deletion-by-mcm";

    /// On a Node: presence makes the node controller ignore it; written as `"1"` on orphan nodes.
    pub const NOT_MANAGED_BY_MCM: &str = "node.machine.sapcloud.io/not-managed-by-mcm";

    /// On a Node: JSON of the last applied `machine.spec.nodeTemplate`
    /// (`{"metadata":{...},"spec":{...}}`).
    pub const LAST_APPLIED_ANNO_LABELS_TAINTS: &str =
        "node.machine.sapcloud.io/last-applied-anno-labels-taints";

    /// On a Node: JSON ResourceList of the last applied `MachineClass.nodeTemplate.virtualCapacity`.
    pub const LAST_APPLIED_VIRTUAL_CAPACITY: &str =
        "node.machine.sapcloud.io/last-applied-virtual-capacity";

    /// On a MachineDeployment (copied to MachineSets, then to new Machines): Go duration that
    /// overrides the creation timeout of newly created machines.
    pub const EFFECTIVE_CREATION_TIMEOUT: &str =
        "node.machine.sapcloud.io/effective-creation-timeout";

    /// On a Machine: Go duration from creation to the node's first join.
    pub const MACHINE_JOIN_DURATION: &str = "node.machine.sapcloud.io/machine-join-duration";

    /// On a Node: reason of an in-place update failure (set by an external agent).
    pub const UPDATE_FAILED_REASON: &str = "node.machine.sapcloud.io/update-failed-reason";

    /// On a Node or Machine: preservation request, one of the values in [`super::preserve`].
    pub const PRESERVE: &str = "node.machine.sapcloud.io/preserve";

    /// On a Machine: the node preserve value last adopted by the machine controller.
    pub const LAST_APPLIED_NODE_PRESERVE_VALUE: &str =
        "node.machine.sapcloud.io/last-applied-node-preserve-value";

    /// On a Node: `"true"` keeps the cluster-autoscaler from scaling it down (set during rollouts
    /// when enabled, and on preserved nodes).
    pub const CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED: &str =
        "cluster-autoscaler.kubernetes.io/scale-down-disabled";

    /// On a Node: `"true"` marks that MCM added
    /// [`CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED`]; only then does MCM remove it.
    pub const CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED_BY_MCM: &str =
        "cluster-autoscaler.kubernetes.io/scale-down-disabled-by-mcm";

    /// On MachineSets and MachineDeployments: revision number (decimal string).
    pub const REVISION: &str = "deployment.kubernetes.io/revision";

    /// On a MachineSet: comma separated older revisions.
    pub const REVISION_HISTORY: &str = "deployment.kubernetes.io/revision-history";

    /// On a MachineSet: the MachineDeployment's `spec.replicas` at the last scale.
    pub const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";

    /// On a MachineSet: `spec.replicas + maxSurge` at the last scale.
    pub const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";

    /// On a MachineSet (value [`super::value::TRUE_CAPITALISED`]): its nodes were tainted
    /// PreferNoSchedule; the same key is the taint key [`super::taint::PREFER_NO_SCHEDULE`].
    pub const PREFER_NO_SCHEDULE: &str = "deployment.machine.sapcloud.io/prefer-no-schedule";

    /// On MachineSets and MachineDeployments: presence requests an unfreeze from the operator.
    pub const UNFREEZE: &str = "safety.machine.sapcloud.io/unfreeze";

    /// On a MachineDeployment: kubectl's last applied configuration, never copied to MachineSets.
    pub const LAST_APPLIED_CONFIGURATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

    /// Stores fields a served version cannot hold, so conversions are lossless.
    pub const CONVERSION_DATA: &str = "machine.sapcloud.io/conversion-data";

    /// On a MachineClass (ours, not upstream's): the driver's last ValidateMachineClass verdict,
    /// `valid` or `invalid: <field>: <message>; ...` (docs/upstream-conformance.md#our-own-keys).
    pub const CLASS_VALIDATION: &str = "machine.sapcloud.io/class-validation";

    /// Annotations of a MachineDeployment that are not copied to its MachineSets.
    pub const NOT_COPIED_TO_MACHINE_SET: &[&str] = &[
        LAST_APPLIED_CONFIGURATION,
        REVISION,
        REVISION_HISTORY,
        DESIRED_REPLICAS,
        MAX_REPLICAS,
        PREFER_NO_SCHEDULE,
        UNFREEZE,
        TRIGGER_DELETION_BY_MCM,
    ];
}

/// Values of the [`annotation::PRESERVE`] annotation.
pub mod preserve {
    /// Preserve the machine now.
    pub const NOW: &str = "now";
    /// Preserve the machine only when it fails.
    pub const WHEN_FAILED: &str = "when-failed";
    /// Written only by MCM: the machine was auto-preserved on failure (counts towards
    /// `autoPreserveFailedMachineMax`).
    pub const AUTO_PRESERVED: &str = "auto-preserved";
    /// Do not auto-preserve the machine; stops a running preservation.
    pub const FALSE: &str = "false";
    /// Every value the annotation may have.
    pub const ALLOWED: &[&str] = &[NOW, WHEN_FAILED, AUTO_PRESERVED, FALSE];
}

/// Taint keys (taint identity is key plus effect).
pub mod taint {
    /// PreferNoSchedule, value `True`: put by MCM on nodes of old MachineSets during rolling and
    /// in-place updates.
    pub const PREFER_NO_SCHEDULE: &str = "deployment.machine.sapcloud.io/prefer-no-schedule";

    /// NoSchedule, set by Gardener on new nodes: a Pending machine does not become Running while
    /// it is present; MCM adds it back after a successful in-place update.
    pub const CRITICAL_COMPONENTS_NOT_READY: &str =
        "node.gardener.cloud/critical-components-not-ready";

    /// NoSchedule: put before draining a preserved Failed machine (instead of cordoning).
    pub const PRESERVED: &str = "node.machine.sapcloud.io/preserved";

    /// Startup taint of the InitializeMachine proposal: the provider puts it on a new node and MCM
    /// removes it (any effect) once the machine becomes Running.
    pub const INSTANCE_NOT_READY: &str = "node.machine.sapcloud.io/instance-not-ready";

    /// Taints whose addition or removal on a Node triggers a machine reconcile.
    pub const ESSENTIAL: &[&str] = &[CRITICAL_COMPONENTS_NOT_READY];
}

/// Node condition types, reasons and messages written by MCM (and mirrored into
/// `Machine.status.conditions`).
pub mod condition {
    /// Condition type of in-place updates on a Node.
    pub const IN_PLACE_UPDATE: &str = "InPlaceUpdate";
    /// In-place reason: the node belongs to an old MachineSet.
    pub const CANDIDATE_FOR_UPDATE: &str = "CandidateForUpdate";
    /// In-place reason: the node was selected for the update.
    pub const SELECTED_FOR_UPDATE: &str = "SelectedForUpdate";
    /// In-place reason: the node is drained and ready to be updated.
    pub const READY_FOR_UPDATE: &str = "ReadyForUpdate";
    /// In-place reason: the drain succeeded.
    pub const DRAIN_SUCCESSFUL: &str = "DrainSuccessful";
    /// In-place reason: the update succeeded.
    pub const UPDATE_SUCCESSFUL: &str = "UpdateSuccessful";
    /// In-place reason: the update failed.
    pub const UPDATE_FAILED: &str = "UpdateFailed";

    /// Condition type of preservation on a Node.
    pub const PRESERVED: &str = "Preserved";
    /// Preserved reason: auto-preserved by MCM.
    pub const PRESERVED_BY_MCM: &str = "Preserved by MCM.";
    /// Preserved reason: preserved on the user's request (annotation).
    pub const PRESERVED_BY_USER: &str = "Preserved by user.";
    /// Preserved reason: preservation stopped (annotation change or timeout).
    pub const PRESERVATION_STOPPED: &str = "Preservation stopped.";
    /// Preserved message fragment, matched by substring: the preserved node was drained.
    pub const PRESERVED_NODE_DRAIN_SUCCESSFUL: &str = "Preserved node drained successfully.";
    /// Preserved message fragment, matched by substring: draining the preserved node failed.
    pub const PRESERVED_NODE_DRAIN_UNSUCCESSFUL: &str = "Preserved node could not be drained.";

    /// Condition type put on a Node while its machine is being deleted.
    pub const TERMINATING: &str = "Terminating";
    /// Terminating reason: a failed machine is being replaced.
    pub const REASON_UNHEALTHY: &str = "Unhealthy";
    /// Terminating reason: the machine is removed by a scale-down.
    pub const REASON_SCALE_DOWN: &str = "ScaleDown";
    /// Terminating message for [`REASON_UNHEALTHY`].
    pub const MESSAGE_TERMINATING_FAILED: &str = "Machine Controller is terminating failed machine";
    /// Terminating message for [`REASON_SCALE_DOWN`].
    pub const MESSAGE_SCALING_DOWN: &str = "Machine Controller is scaling down machine";
}

/// Reasons of MachineDeployment conditions.
pub mod deployment_reason {
    /// Progressing: a new MachineSet was found.
    pub const FOUND_NEW_MACHINE_SET: &str = "FoundNewMachineSet";
    /// Progressing: the new MachineSet is progressing.
    pub const MACHINE_SET_UPDATED: &str = "MachineSetUpdated";
    /// Progressing: the new MachineSet is available (rollout complete).
    pub const NEW_MACHINE_SET_AVAILABLE: &str = "NewMachineSetAvailable";
    /// Progressing (False): the progress deadline passed.
    pub const PROGRESS_DEADLINE_EXCEEDED: &str = "ProgressDeadlineExceeded";
    /// Progressing (Unknown): the deployment is paused.
    pub const DEPLOYMENT_PAUSED: &str = "DeploymentPaused";
    /// Progressing (Unknown): the deployment was resumed.
    pub const DEPLOYMENT_RESUMED: &str = "DeploymentResumed";
    /// Available (True).
    pub const MINIMUM_REPLICAS_AVAILABLE: &str = "MinimumReplicasAvailable";
    /// Available (False).
    pub const MINIMUM_REPLICAS_UNAVAILABLE: &str = "MinimumReplicasUnavailable";
}

/// `status.lastOperation.description` texts.
///
/// The deletion flow is a state machine driven by `description.contains(<text>)` in the order of
/// upstream's `triggerDeletionFlow`; these texts are therefore load-bearing and must be written
/// exactly (usually as the tail of a longer description).
pub mod last_operation {
    /// Deletion step: set the termination status, then get the VM status.
    pub const GET_VM_STATUS: &str = "Set machine status to termination. Now, getting VM Status";
    /// Creation step: initialise the VM.
    pub const INSTANCE_INITIALIZATION: &str = "Initialize VM Instance";
    /// Deletion step: drain the node.
    pub const INITIATE_DRAIN: &str = "Initiate node drain";
    /// In-place update: the drain succeeded and the node can be updated.
    pub const NODE_READY_FOR_UPDATE: &str = "Node drain successful. Node is ready for update";
    /// Deletion step: delete the node's volume attachments.
    pub const DEL_VOLUMES_ATTACHMENTS: &str = "Delete Volume Attachments";
    /// Deletion step: delete the VM.
    pub const INITIATE_VM_DELETION: &str = "Initiate VM deletion";
    /// Deletion step: delete the Node object.
    pub const INITIATE_NODE_DELETION: &str = "Initiate node object deletion";
    /// Deletion step: remove the machine's finalizer.
    pub const INITIATE_FINALIZER_REMOVAL: &str = "Initiate machine object finalizer removal";
    /// Written by the MachineSet controller when it deletes a machine; matches no deletion step on
    /// purpose, so the machine controller restarts the deletion flow.
    pub const DELETING_MACHINE_FROM_CLOUD_PROVIDER: &str = "Deleting machine from cloud provider";
}

/// Retry periods (upstream `machineutils.RetryPeriod`).
pub mod retry {
    use crate::duration::Duration;

    /// After an API conflict: 200ms.
    pub const CONFLICT: Duration = Duration::from_millis(200);
    /// After a successful write or a transient error: 5s.
    pub const SHORT: Duration = Duration::from_secs(5);
    /// Medium: 3m.
    pub const MEDIUM: Duration = Duration::from_mins(3);
    /// Steady state: 10m.
    pub const LONG: Duration = Duration::from_mins(10);
}

/// Common annotation and label values.
pub mod value {
    /// `"True"`, the value of `freeze`, `force-drain` and the prefer-no-schedule marker.
    pub const TRUE_CAPITALISED: &str = "True";
    /// `"true"`, the value of scale-down-disabled, scale-up-disabled and update candidate labels.
    pub const TRUE: &str = "true";
    /// Default machine priority written at creation.
    pub const MACHINE_PRIORITY_DEFAULT: &str = "3";
    /// Machine priority meaning "triggered for deletion".
    pub const MACHINE_PRIORITY_TRIGGERED_FOR_DELETION: &str = "1";
    /// Value of [`super::annotation::NOT_MANAGED_BY_MCM`] written on orphan nodes.
    pub const NOT_MANAGED_BY_MCM: &str = "1";
    /// [`super::label::UPDATE_RESULT`]: the in-place update succeeded.
    pub const UPDATE_SUCCESSFUL: &str = "successful";
    /// [`super::label::UPDATE_RESULT`]: the in-place update failed.
    pub const UPDATE_FAILED: &str = "failed";
    /// Separator of machine name and time in [`super::annotation::TRIGGER_DELETION_BY_MCM`].
    pub const TRIGGER_DELETION_SEPARATOR: char = '~';
}

/// Other constants: placeholders, well-known names.
pub mod misc {
    /// Placeholder in user data replaced by the bootstrap token.
    pub const BOOTSTRAP_TOKEN_PLACEHOLDER: &str = "<<BOOTSTRAP_TOKEN>>";
    /// URL-query-escaped form of [`BOOTSTRAP_TOKEN_PLACEHOLDER`], replaced as well.
    pub const BOOTSTRAP_TOKEN_PLACEHOLDER_ESCAPED: &str = "%3C%3CBOOTSTRAP_TOKEN%3E%3E";
    /// Placeholder in user data replaced by the machine name.
    pub const MACHINE_NAME_PLACEHOLDER: &str = "<<MACHINE_NAME>>";
    /// URL-query-escaped form of [`MACHINE_NAME_PLACEHOLDER`], replaced as well.
    pub const MACHINE_NAME_PLACEHOLDER_ESCAPED: &str = "%3C%3CMACHINE_NAME%3E%3E";
    /// Secret data key holding the user data.
    pub const USER_DATA_KEY: &str = "userData";
    /// `--target-kubeconfig` value that disables the target cluster.
    pub const TARGET_KUBECONFIG_NONE: &str = "none";
    /// The machine class kind handled (`spec.class.kind`).
    pub const MACHINE_CLASS_KIND: &str = "MachineClass";
    /// Leader election lock and user agent of the MachineSet/MachineDeployment manager.
    pub const LOCK_MACHINE_CONTROLLER_MANAGER: &str = "machine-controller-manager";
    /// Leader election lock and user agent of the machine controller.
    pub const LOCK_MACHINE_CONTROLLER: &str = "machine-controller";
    /// User agent of leader election clients.
    pub const USER_AGENT_LEADER_ELECTION: &str = "machine-leader-election";
    /// Event source of the manager's default recorder.
    pub const COMPONENT_MACHINE_CONTROLLER_MANAGER: &str = "machine-controller-manager";
    /// Event source of machine writes by the MachineSet controller.
    pub const COMPONENT_MACHINE_SET_CONTROLLER: &str = "machineset-controller";
    /// Event source of MachineSet writes by the MachineDeployment controller.
    pub const COMPONENT_MACHINE_DEPLOYMENT_CONTROLLER: &str = "machinedeployment-controller";
    /// Event source of the machine controller.
    pub const COMPONENT_MACHINE_CONTROLLER: &str = "machine-controller";
}
