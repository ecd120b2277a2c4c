//! Executes the actions of a deployment plan against the control and target clusters.
//!
//! Deployment and MachineSet writes carry the resourceVersion they were planned on (409 ends the
//! pass); node taints and annotations are best effort (logged, as upstream) and retried a few
//! times on conflicts because nodes change all the time (kubelet heartbeats).

use futures::StreamExt as _;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, Taint};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Api, Client};
use mcm_api::keys::{annotation, finalizer, label, taint, value};
use mcm_api::v1alpha1::{Machine, MachineDeployment, MachineSet};
use serde_json::{Value, json};

use super::reconciler::Reconciler;
use crate::platform::finalizers;
use mcm_decisions::machine_deployment::plan::{self, CreateConflict, DeploymentAction};
use mcm_decisions::machine_set::plan::MachineRef;
use mcm_decisions::vocabulary::{Event, EventType};

/// A failed write of a deployment pass.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// An API call on a control-cluster object failed.
    #[error("MachineDeployment {deployment}: cannot {what} {kind} {name}: {source}")]
    Api {
        /// The deployment being reconciled.
        deployment: String,
        /// What was attempted (`update`, `create`, ...).
        what: &'static str,
        /// Kind of the object written.
        kind: &'static str,
        /// Its name.
        name: String,
        /// API error.
        source: kube::Error,
    },
    /// The new MachineSet's name is taken; the collision count was bumped for the next pass.
    #[error(
        "MachineDeployment {deployment}: MachineSet name {name} is taken; collision count bumped"
    )]
    NameCollision {
        /// The deployment being reconciled.
        deployment: String,
        /// The MachineSet name.
        name: String,
    },
}

impl ApplyError {
    /// Whether this is an optimistic-concurrency conflict.
    #[must_use]
    pub fn is_conflict(&self) -> bool {
        match self {
            ApplyError::Api {
                source: kube::Error::Api(s),
                ..
            } => s.code == 409,
            ApplyError::NameCollision { .. } => true,
            ApplyError::Api { .. } => false,
        }
    }
}

fn is_code(error: &kube::Error, code: u16) -> bool {
    matches!(error, kube::Error::Api(s) if s.code == code)
}

/// Executes actions in order, keeping the latest deployment returned by the API server.
pub(crate) struct Executor<'a> {
    reconciler: &'a Reconciler,
    md: MachineDeployment,
    name: String,
    sets: BTreeMap<String, MachineSet>,
    machines: BTreeMap<String, &'a Machine>,
}

impl<'a> Executor<'a> {
    pub(crate) fn new(
        reconciler: &'a Reconciler,
        md: MachineDeployment,
        sets: &[MachineSet],
        machines: &'a [std::sync::Arc<Machine>],
    ) -> Self {
        let name = md.metadata.name.clone().unwrap_or_default();
        Self {
            reconciler,
            md,
            name,
            sets: sets
                .iter()
                .filter_map(|s| Some((s.metadata.name.clone()?, s.clone())))
                .collect(),
            machines: machines
                .iter()
                .filter_map(|m| Some((m.metadata.name.clone()?, &**m)))
                .collect(),
        }
    }

    fn err(
        &self,
        what: &'static str,
        kind: &'static str,
        name: &str,
        source: kube::Error,
    ) -> ApplyError {
        ApplyError::Api {
            deployment: self.name.clone(),
            what,
            kind,
            name: name.to_owned(),
            source,
        }
    }

    fn deployments(&self) -> Api<MachineDeployment> {
        self.reconciler.context.namespaced()
    }

    fn machine_sets(&self) -> Api<MachineSet> {
        self.reconciler.context.namespaced()
    }

    fn machines_api(&self) -> Api<Machine> {
        self.reconciler.context.namespaced()
    }

    pub(crate) async fn execute(&mut self, action: DeploymentAction) -> Result<(), ApplyError> {
        match action {
            DeploymentAction::AddFinalizer => self.set_finalizer(true).await,
            DeploymentAction::RemoveFinalizer => self.set_finalizer(false).await,
            DeploymentAction::AdoptMachineSet { machine_set, owner } => {
                let Some(ms) = self.sets.get(&machine_set.name) else {
                    return Ok(());
                };
                let mut refs = ms.metadata.owner_references.clone().unwrap_or_default();
                refs.push(owner);
                self.patch_set_owners(
                    &machine_set,
                    ms.metadata.resource_version.clone(),
                    refs,
                    "adopt",
                )
                .await
            }
            DeploymentAction::ReleaseMachineSet { machine_set } => {
                let Some(ms) = self.sets.get(&machine_set.name) else {
                    return Ok(());
                };
                let uid = self.md.metadata.uid.clone().unwrap_or_default();
                let refs: Vec<_> = ms
                    .metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .filter(|r| r.uid != uid)
                    .cloned()
                    .collect();
                self.patch_set_owners(
                    &machine_set,
                    ms.metadata.resource_version.clone(),
                    refs,
                    "release",
                )
                .await
            }
            DeploymentAction::CreateMachineSet(ms) => self.create_set(*ms).await,
            DeploymentAction::UpdateMachineSet(ms) => {
                let name = ms.metadata.name.clone().unwrap_or_default();
                let written = self
                    .machine_sets()
                    .replace(&name, &PostParams::default(), &ms)
                    .await
                    .map_err(|e| self.err("update", "MachineSet", &name, e))?;
                self.reconciler.remember(written.clone());
                self.sets.insert(name, written);
                Ok(())
            }
            DeploymentAction::DeleteMachineSet(r) => self.delete_set(&r).await,
            DeploymentAction::UpdateDeployment(d) => {
                let mut d = *d;
                d.metadata.resource_version = self.md.metadata.resource_version.clone();
                d.metadata.finalizers = self.md.metadata.finalizers.clone();
                let name = self.name.clone();
                self.md = self
                    .deployments()
                    .replace(&name, &PostParams::default(), &d)
                    .await
                    .map_err(|e| self.err("update", "MachineDeployment", &name, e))?;
                Ok(())
            }
            DeploymentAction::UpdateDeploymentStatus(st) => self.write_status(*st).await,
            DeploymentAction::AnnotateMachine {
                machine,
                annotations,
            } => {
                let mut meta = json!({"annotations": annotations});
                if !machine.uid.is_empty() {
                    meta["uid"] = json!(machine.uid);
                }
                self.patch_machine(&machine, json!({"metadata": meta}), "annotate")
                    .await
            }
            DeploymentAction::RemoveMachineLabel { machine, label } => {
                let patch = json!({"metadata": {"labels": {label: Value::Null}}});
                self.patch_machine(&machine, patch, "unlabel").await
            }
            DeploymentAction::TransferMachine {
                machine,
                owner,
                labels,
            } => {
                let mut new_labels: serde_json::Map<String, Value> = labels
                    .iter()
                    .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                    .collect();
                if let Some(m) = self.machines.get(&machine.name) {
                    for k in m.metadata.labels.iter().flatten().map(|(k, _)| k) {
                        if !labels.contains_key(k) {
                            new_labels.insert(k.clone(), Value::Null);
                        }
                    }
                }
                let patch = json!({"metadata": {
                    "uid": machine.uid,
                    "ownerReferences": [owner],
                    "labels": new_labels,
                }});
                self.patch_machine(&machine, patch, "transfer").await
            }
            DeploymentAction::TaintNodesPreferNoSchedule(nodes) => {
                self.nodes(&nodes, "taint", |n| set_prefer_no_schedule(n, true))
                    .await;
                Ok(())
            }
            DeploymentAction::UntaintNodesPreferNoSchedule(nodes) => {
                self.nodes(&nodes, "untaint", |n| set_prefer_no_schedule(n, false))
                    .await;
                Ok(())
            }
            DeploymentAction::DisableAutoscalerScaleDown(nodes) => {
                self.nodes(
                    &nodes,
                    "disable autoscaler scale-down on",
                    disable_scale_down,
                )
                .await;
                Ok(())
            }
            DeploymentAction::EnableAutoscalerScaleDown(nodes) => {
                self.nodes(
                    &nodes,
                    "re-enable autoscaler scale-down on",
                    enable_scale_down,
                )
                .await;
                Ok(())
            }
            DeploymentAction::LabelNodes {
                nodes,
                label,
                value,
            } => {
                self.nodes(&nodes, "label", |n| {
                    let labels = n.metadata.labels.get_or_insert_with(BTreeMap::new);
                    labels.insert(label.clone(), value.clone()) != Some(value.clone())
                })
                .await;
                Ok(())
            }
            DeploymentAction::CompleteNodeInPlaceUpdate(node) => {
                self.nodes(
                    &[node],
                    "complete the in-place update of",
                    complete_in_place,
                )
                .await;
                Ok(())
            }
            DeploymentAction::UncordonNode(node) => {
                self.nodes(&[node], "uncordon", |n| {
                    let spec = n.spec.get_or_insert_with(Default::default);
                    let changed = spec.unschedulable == Some(true);
                    spec.unschedulable = Some(false);
                    changed
                })
                .await;
                Ok(())
            }
            DeploymentAction::Event(e) => {
                self.record(&e);
                Ok(())
            }
        }
    }

    fn record(&self, e: &Event) {
        let warning = e.type_ == EventType::Warning;
        tracing::info!(
            machine_deployment = %self.name,
            reason = %e.reason,
            message = %e.message,
            warning,
            "event"
        );
        self.reconciler.context.event(
            &self.md,
            warning,
            &e.reason,
            action_of(e),
            e.message.clone(),
        );
    }

    async fn set_finalizer(&mut self, present: bool) -> Result<(), ApplyError> {
        let Some(patch) = finalizers::patch(
            &self.md.metadata,
            finalizer::MACHINE_CONTROLLER_MANAGER,
            present,
        ) else {
            return Ok(());
        };
        let name = self.name.clone();
        let what = if present {
            "add the finalizer to"
        } else {
            "remove the finalizer from"
        };
        self.md = self
            .deployments()
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| self.err(what, "MachineDeployment", &name, e))?;
        Ok(())
    }

    async fn write_status(
        &mut self,
        st: mcm_api::v1alpha1::MachineDeploymentStatus,
    ) -> Result<(), ApplyError> {
        let mut obj = self.md.clone();
        obj.status = Some(st);
        let name = self.name.clone();
        self.md = self
            .deployments()
            .replace_status(&name, &PostParams::default(), &obj)
            .await
            .map_err(|e| self.err("update the status of", "MachineDeployment", &name, e))?;
        Ok(())
    }

    async fn patch_set_owners(
        &mut self,
        r: &MachineRef,
        resource_version: Option<String>,
        refs: Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>,
        what: &'static str,
    ) -> Result<(), ApplyError> {
        let patch = json!({"metadata": {
            "resourceVersion": resource_version,
            "ownerReferences": refs,
        }});
        let written = self
            .machine_sets()
            .patch(&r.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|e| self.err(what, "MachineSet", &r.name, e))?;
        self.reconciler.remember(written.clone());
        self.sets.insert(r.name.clone(), written);
        Ok(())
    }

    async fn create_set(&mut self, ms: MachineSet) -> Result<(), ApplyError> {
        let name = ms.metadata.name.clone().unwrap_or_default();
        match self
            .machine_sets()
            .create(&PostParams::default(), &ms)
            .await
        {
            Ok(created) => {
                tracing::info!(machine_deployment = %self.name, machine_set = %name, "created MachineSet");
                self.reconciler.remember(created.clone());
                self.sets.insert(name, created);
                Ok(())
            }
            Err(error) if is_code(&error, 409) => {
                let existing = self
                    .machine_sets()
                    .get(&name)
                    .await
                    .map_err(|e| self.err("read", "MachineSet", &name, e))?;
                match plan::create_conflict(&self.md, &existing) {
                    CreateConflict::UseExisting => {
                        self.reconciler.remember(existing.clone());
                        self.sets.insert(name, existing);
                        Ok(())
                    }
                    CreateConflict::BumpCollisionCount(st) => {
                        self.write_status(*st).await?;
                        Err(ApplyError::NameCollision {
                            deployment: self.name.clone(),
                            name,
                        })
                    }
                }
            }
            Err(error) => {
                let (st, event) = plan::create_failure(
                    &self.md,
                    &name,
                    &error.to_string(),
                    jiff::Timestamp::now(),
                );
                self.record(&event);
                if let Err(status_error) = self.write_status(st).await {
                    tracing::warn!(machine_deployment = %self.name, error = %status_error, "cannot record the create failure");
                }
                Err(self.err("create", "MachineSet", &name, error))
            }
        }
    }

    async fn delete_set(&mut self, r: &MachineRef) -> Result<(), ApplyError> {
        let params = DeleteParams {
            preconditions: (!r.uid.is_empty()).then(|| Preconditions {
                uid: Some(r.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::background()
        };
        match self.machine_sets().delete(&r.name, &params).await {
            Ok(either) => {
                tracing::info!(machine_deployment = %self.name, machine_set = %r.name, "deleted MachineSet");
                // The answer is the object while finalizers hold it, else it is gone (the API
                // server may still answer with its last state).
                match either.left().filter(|ms| {
                    ms.metadata.deletion_timestamp.is_some()
                        && ms
                            .metadata
                            .finalizers
                            .as_ref()
                            .is_some_and(|f| !f.is_empty())
                }) {
                    Some(ms) => self.reconciler.remember(ms),
                    None => self.reconciler.written.remember_deleted(&r.name, &r.uid),
                }
                Ok(())
            }
            Err(e) if is_code(&e, 404) => Ok(()),
            Err(e) => Err(self.err("delete", "MachineSet", &r.name, e)),
        }
    }

    async fn patch_machine(
        &self,
        r: &MachineRef,
        patch: Value,
        what: &'static str,
    ) -> Result<(), ApplyError> {
        match self
            .machines_api()
            .patch(&r.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if is_code(&e, 404) => Ok(()),
            Err(e) => Err(self.err(what, "Machine", &r.name, e)),
        }
    }

    /// Applies `change` to each node (GET, change, Update; a few attempts on conflicts). Errors
    /// are logged: node bookkeeping never blocks a rollout (as upstream).
    async fn nodes<F>(&self, nodes: &[String], what: &'static str, change: F)
    where
        F: Fn(&mut Node) -> bool,
    {
        let Some(target) = self.reconciler.context.target.clone() else {
            return;
        };
        // A rollout of a large deployment touches every node of its old sets: sequential
        // round trips made the first pass after a template change take over a minute for 1,000
        // nodes, delaying the new MachineSet. The cached node saves the GET when it is current.
        let change = &change;
        let target = &target;
        let cache = &self.reconciler.context.nodes;
        futures::stream::iter(nodes)
            .for_each_concurrent(NODE_UPDATE_CONCURRENCY, |node| async move {
                let cached = cache.get(node).map(|node| (*node).clone());
                if let Err(error) = update_node(target, node, cached, change).await {
                    tracing::warn!(machine_deployment = %self.name, node = %node, %error, "cannot {what} node");
                }
            })
            .await;
    }
}

/// How many node updates of one deployment pass run at once.
const NODE_UPDATE_CONCURRENCY: usize = 32;

/// GET (unless `cached` is given), change, Update with the read resourceVersion; a conflict
/// re-reads the node, a few times at most.
async fn update_node<F>(
    target: &Client,
    name: &str,
    mut cached: Option<Node>,
    change: &F,
) -> Result<(), kube::Error>
where
    F: Fn(&mut Node) -> bool,
{
    let api: Api<Node> = Api::all(target.clone());
    let mut attempt = 0;
    loop {
        let node = match cached.take() {
            Some(node) => Some(node),
            None => api.get_opt(name).await?,
        };
        let Some(mut node) = node else {
            return Ok(());
        };
        if !change(&mut node) {
            return Ok(());
        }
        match api.replace(name, &PostParams::default(), &node).await {
            Ok(_) => return Ok(()),
            Err(e) if is_code(&e, 409) && attempt < 4 => attempt += 1,
            Err(e) => return Err(e),
        }
    }
}

fn prefer_no_schedule_taint() -> Taint {
    Taint {
        key: taint::PREFER_NO_SCHEDULE.to_owned(),
        value: Some(value::TRUE_CAPITALISED.to_owned()),
        effect: "PreferNoSchedule".to_owned(),
        time_added: None,
    }
}

/// Adds or removes the PreferNoSchedule taint of old MachineSets' nodes; identity is (key, effect).
pub(crate) fn set_prefer_no_schedule(node: &mut Node, present: bool) -> bool {
    let wanted = prefer_no_schedule_taint();
    let spec = node.spec.get_or_insert_with(Default::default);
    let taints = spec.taints.get_or_insert_with(Vec::new);
    let has = taints
        .iter()
        .any(|t| t.key == wanted.key && t.effect == wanted.effect);
    match (present, has) {
        (true, false) => {
            taints.push(wanted);
            true
        }
        (false, true) => {
            taints.retain(|t| !(t.key == wanted.key && t.effect == wanted.effect));
            true
        }
        _ => false,
    }
}

/// Adds or overwrites `wanted` on the node's annotations (upstream `AddOrUpdateAnnotation`);
/// true when something changed, so an unchanged node costs no write.
pub(crate) fn add_or_update_annotations(
    node: &mut Node,
    wanted: &BTreeMap<String, String>,
) -> bool {
    let a = node.metadata.annotations.get_or_insert_with(BTreeMap::new);
    let mut changed = false;
    for (k, v) in wanted {
        if a.get(k) != Some(v) {
            a.insert(k.clone(), v.clone());
            changed = true;
        }
    }
    changed
}

/// Removes the `keys` whatever their values (upstream `RemoveAnnotation`); true when one was
/// there.
pub(crate) fn remove_annotations(node: &mut Node, keys: &[&str]) -> bool {
    let Some(a) = node.metadata.annotations.as_mut() else {
        return false;
    };
    let before = a.len();
    a.retain(|k, _| !keys.contains(&k.as_str()));
    a.len() != before
}

/// The scale-down-disabled annotation and MCM's marker, both `"true"`.
fn scale_down_annotations() -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            annotation::CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED.to_owned(),
            value::TRUE.to_owned(),
        ),
        (
            annotation::CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED_BY_MCM.to_owned(),
            value::TRUE.to_owned(),
        ),
    ])
}

/// Sets the cluster-autoscaler scale-down-disabled annotation and MCM's marker, unless the
/// annotation is already `"true"` (then it belongs to someone else and stays theirs: upstream
/// adds the marker there too and later removes the user's annotation with it, deviation D6 of
/// `docs/upstream-conformance.md` (part 2)).
pub(crate) fn disable_scale_down(node: &mut Node) -> bool {
    if node
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(annotation::CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED))
        .is_some_and(|v| v == value::TRUE)
    {
        return false;
    }
    add_or_update_annotations(node, &scale_down_annotations())
}

/// Removes both annotations, only where MCM's marker (any value, as upstream) says MCM set them.
pub(crate) fn enable_scale_down(node: &mut Node) -> bool {
    if !node
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(annotation::CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED_BY_MCM))
    {
        return false;
    }
    remove_annotations(
        node,
        &[
            annotation::CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED,
            annotation::CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED_BY_MCM,
        ],
    )
}

/// docs/behaviour.md#in-place-rollout step 5: a node whose in-place update succeeded goes back into service.
fn complete_in_place(node: &mut Node) -> bool {
    if let Some(l) = node.metadata.labels.as_mut() {
        l.remove(label::CANDIDATE_FOR_UPDATE);
        l.remove(label::SELECTED_FOR_UPDATE);
        l.remove(label::UPDATE_RESULT);
    }
    if let Some(a) = node.metadata.annotations.as_mut() {
        a.remove(annotation::UPDATE_FAILED_REASON);
    }
    set_prefer_no_schedule(node, false);
    let spec = node.spec.get_or_insert_with(Default::default);
    spec.unschedulable = Some(false);
    let taints = spec.taints.get_or_insert_with(Vec::new);
    if !taints
        .iter()
        .any(|t| t.key == taint::CRITICAL_COMPONENTS_NOT_READY && t.effect == "NoSchedule")
    {
        taints.push(Taint {
            key: taint::CRITICAL_COMPONENTS_NOT_READY.to_owned(),
            value: None,
            effect: "NoSchedule".to_owned(),
            time_added: None,
        });
    }
    true
}

/// The PascalCase action of an Event. kube's recorder aggregates events by reason and action
/// (not note), so scale-ups and scale-downs get their own actions to stay visible apart.
fn action_of(e: &Event) -> &'static str {
    match e.reason.as_str() {
        "ScalingMachineSet" if e.message.starts_with("Scaled down") => "ScaleDown",
        "ScalingMachineSet" => "ScaleUp",
        "DeploymentRollback"
        | "DeploymentRollbackRevisionNotFound"
        | "DeploymentRollbackTemplateUnchanged" => "Rollback",
        plan::REASON_MACHINE_SET_CREATE_ERROR => "Create",
        "SelectingAll" => "Select",
        _ => "Reconcile",
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::NodeSpec;

    #[test]
    fn the_prefer_no_schedule_taint_is_added_once_and_removed_by_key_and_effect() {
        let mut node = Node::default();
        assert!(set_prefer_no_schedule(&mut node, true));
        assert!(!set_prefer_no_schedule(&mut node, true));
        let foreign = Taint {
            key: taint::PREFER_NO_SCHEDULE.to_owned(),
            value: None,
            effect: "NoSchedule".to_owned(),
            time_added: None,
        };
        node.spec
            .as_mut()
            .unwrap()
            .taints
            .as_mut()
            .unwrap()
            .push(foreign.clone());
        assert!(set_prefer_no_schedule(&mut node, false));
        assert_eq!(node.spec.unwrap().taints.unwrap(), vec![foreign]);
    }

    #[test]
    fn scale_down_annotations_of_others_are_left_alone() {
        let mut theirs = Node::default();
        theirs.metadata.annotations = Some(BTreeMap::from([(
            annotation::CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED.to_owned(),
            "true".to_owned(),
        )]));
        assert!(!disable_scale_down(&mut theirs));
        assert!(!enable_scale_down(&mut theirs));
        assert_eq!(theirs.metadata.annotations.as_ref().unwrap().len(), 1);

        let mut ours = Node {
            spec: Some(NodeSpec::default()),
            ..Node::default()
        };
        assert!(disable_scale_down(&mut ours));
        assert_eq!(ours.metadata.annotations.as_ref().unwrap().len(), 2);
        assert!(enable_scale_down(&mut ours));
        assert!(ours.metadata.annotations.unwrap().is_empty());
    }
    fn annotations(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    /// How a row changes the node: upstream `annotateNodesBackingMachineSets` (a merge of the
    /// given annotations) or `removeAutoscalerAnnotationsIfRequired` (our `EnableAutoscalerScaleDown`).
    enum NodeWrite {
        Annotate(BTreeMap<String, String>),
        RemoveAutoscaler,
    }

    /// Upstream row name, existing annotations (None: no node), write, expected annotations.
    type Row = (
        &'static str,
        Option<BTreeMap<String, String>>,
        NodeWrite,
        BTreeMap<String, String>,
    );

    /// Upstream `deployment_rolling_test.go` `#annotateNodesBackingMachineSets` and
    /// `#removeAutoscalerAnnotationsIfRequired`, row by row, through the shell's node write
    /// (`update_node`: GET, change, Update) against the sandbox, then the node read back as
    /// upstream reads it from its fake client. The machine → node selection (machines of the
    /// sets carrying the `node` label) is the plan's, tested in mcm-decisions'
    /// `machine_deployment/rolling/tests.rs`.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn upstream_annotate_and_deannotate_nodes_backing_machine_sets() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let sandbox = mcm_sandbox::Sandbox::start(mcm_sandbox::SandboxConfig::default())
            .await
            .unwrap();
        let client = sandbox.client();
        let nodes: Api<Node> = Api::all(client.clone());
        let ca = annotation::CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED;
        let by_mcm = annotation::CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED_BY_MCM;
        let rows: Vec<Row> = vec![
            (
                "annotate nodes backing machineSets when there are annotations present",
                Some(annotations(&[("anno1", "anno1")])),
                NodeWrite::Annotate(annotations(&[("anno2", "anno2")])),
                annotations(&[("anno1", "anno1"), ("anno2", "anno2")]),
            ),
            (
                "annotate nodes backing machineSets when there are not other annotations",
                Some(annotations(&[("anno1", "anno1")])),
                NodeWrite::Annotate(annotations(&[("anno1", "anno1")])),
                annotations(&[("anno1", "anno1")]),
            ),
            (
                "annotate nodes backing machineSets when there are same annotations but different value",
                Some(annotations(&[("anno1", "annoDummy")])),
                NodeWrite::Annotate(annotations(&[("anno1", "anno1")])),
                annotations(&[("anno1", "anno1")]),
            ),
            (
                "when there are no nodes backiing the machinesets",
                None,
                NodeWrite::Annotate(annotations(&[("anno1", "anno1")])),
                BTreeMap::new(),
            ),
            (
                "remove autoscaler annotation when by-mcm annotation is present",
                Some(annotations(&[
                    ("anno1", "anno1"),
                    (by_mcm, "true"),
                    (ca, "true"),
                ])),
                NodeWrite::RemoveAutoscaler,
                annotations(&[("anno1", "anno1")]),
            ),
            (
                "do not remove autoscaler annotation when by-mcm annotation is not present",
                Some(annotations(&[("anno1", "anno1"), (ca, "true")])),
                NodeWrite::RemoveAutoscaler,
                annotations(&[("anno1", "anno1"), (ca, "true")]),
            ),
            (
                "when there are no autoscaler annotations present",
                Some(annotations(&[("anno1", "anno1")])),
                NodeWrite::RemoveAutoscaler,
                annotations(&[("anno1", "anno1")]),
            ),
        ];
        for (i, (row, existing, write, expected)) in rows.into_iter().enumerate() {
            let name = format!("node-{i}");
            if let Some(existing) = existing.clone() {
                let mut node = Node::default();
                node.metadata.name = Some(name.clone());
                node.metadata.annotations = Some(existing);
                node.spec = Some(NodeSpec {
                    taints: Some(Vec::new()),
                    ..NodeSpec::default()
                });
                nodes.create(&PostParams::default(), &node).await.unwrap();
            }
            let result = match &write {
                NodeWrite::Annotate(wanted) => {
                    update_node(&client, &name, None, &|n: &mut Node| {
                        add_or_update_annotations(n, wanted)
                    })
                    .await
                }
                NodeWrite::RemoveAutoscaler => {
                    update_node(&client, &name, None, &enable_scale_down).await
                }
            };
            assert!(result.is_ok(), "{row}: {result:?}");
            let read = nodes.get_opt(&name).await.unwrap();
            match existing {
                Some(_) => assert_eq!(
                    read.and_then(|n| n.metadata.annotations)
                        .unwrap_or_default(),
                    expected,
                    "{row}"
                ),
                None => assert!(read.is_none(), "{row}: no node is created"),
            }
        }
        sandbox.shutdown().await;
    }

    #[test]
    fn scale_down_marker_of_any_value_lets_mcm_remove_its_annotations() {
        // Upstream tests the marker by presence (`_, exists := ...`), not by value.
        let mut node = Node::default();
        node.metadata.annotations = Some(annotations(&[
            (annotation::CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED, "true"),
            (
                annotation::CLUSTER_AUTOSCALER_SCALE_DOWN_DISABLED_BY_MCM,
                "",
            ),
        ]));
        assert!(enable_scale_down(&mut node));
        assert_eq!(node.metadata.annotations, Some(BTreeMap::new()));
    }
}
