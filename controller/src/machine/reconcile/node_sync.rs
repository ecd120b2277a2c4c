//! Executes the node metadata sync (docs/behaviour.md#node-sync): the machine-name label, the node template's labels,
//! annotations and taints (tracked by the last-applied annotation) and the virtual capacity, in
//! one Node update per pass where upstream writes the label and the templates apart.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use mcm_api::v1alpha1::Machine;

use super::error::ReconcileError;
use super::{ClassContext, MachineController, PassNode, Step, writes};
use mcm_decisions::machine as plan;
use mcm_decisions::vocabulary::{Event, Retry, name_of, node_name_of};

impl MachineController {
    /// `syncMachineNameToNode`: sets the label on the pass's node; the node-template step writes
    /// it.
    pub(crate) async fn sync_machine_name(
        &self,
        machine: &Machine,
        pass_node: &mut PassNode,
    ) -> Result<Step, ReconcileError> {
        let Some(node) = self.node_of(machine, pass_node.node.as_ref()) else {
            return Ok(Step::Continue(None));
        };
        if let Some(updated) = plan::node_sync::sync_machine_name_label(machine, &node) {
            pass_node.node = Some(Arc::new(updated));
            pass_node.unwritten_label = true;
            return Ok(Step::Continue(Some(Retry::Short)));
        }
        Ok(Step::Continue(None))
    }

    /// The machine's node: as changed earlier in this pass, else from the cache.
    fn node_of(&self, machine: &Machine, changed: Option<&Arc<Node>>) -> Option<Arc<Node>> {
        let name = node_name_of(machine)?;
        match changed {
            Some(node) if node.metadata.name.as_deref() == Some(name) => Some(Arc::clone(node)),
            _ => self.context.nodes.get(name),
        }
    }

    /// Stores the machine-name label set earlier in this pass, when nothing else writes it.
    async fn write_label(
        &self,
        machine: &Machine,
        pass_node: &mut PassNode,
    ) -> Result<(), ReconcileError> {
        if !std::mem::take(&mut pass_node.unwritten_label) {
            return Ok(());
        }
        if let Some(node) = pass_node.node.take() {
            let stored = writes::replace_node(&self.context, &node).await?;
            pass_node.node = Some(Arc::new(stored));
            tracing::info!(
                machine = name_of(machine),
                "machine-name label set on the node"
            );
        }
        Ok(())
    }

    /// `syncNodeTemplates`, on the node as changed earlier in this pass or cached; writes the
    /// machine-name label of [`Self::sync_machine_name`] with its own changes.
    pub(crate) async fn sync_node_templates(
        &self,
        machine: &Machine,
        class: Option<&ClassContext>,
        pass_node: &mut PassNode,
    ) -> Result<Step, ReconcileError> {
        let node = self.node_of(machine, pass_node.node.as_ref());
        let update = match plan::node_sync::sync_node_templates_if_present(
            machine,
            class.map(|class| class.class.as_ref()),
            node.as_deref(),
        ) {
            Ok(Some(update)) => update,
            Ok(None) => {
                self.write_label(machine, pass_node).await?;
                return Ok(Step::Continue(None));
            }
            Err(error) => {
                self.write_label(machine, pass_node).await?;
                self.event(
                    machine,
                    &Event::warning("NodeTemplateSyncFailed", error.to_string()),
                );
                return Err(error.into());
            }
        };
        let mut desired = update.node;
        if update.status_changed {
            let stored = writes::replace_node_status(&self.context, &desired).await?;
            desired.metadata.resource_version = stored.metadata.resource_version;
        }
        let with_label = std::mem::take(&mut pass_node.unwritten_label);
        if update.object_changed || with_label {
            writes::replace_node(&self.context, &desired).await?;
        }
        if with_label {
            tracing::info!(
                machine = name_of(machine),
                "machine-name label set on the node"
            );
        }
        tracing::info!(
            machine = name_of(machine),
            "machine ALTs have been reconciled"
        );
        Ok(Step::End(Retry::Short))
    }
}
