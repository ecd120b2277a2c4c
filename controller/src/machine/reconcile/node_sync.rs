//! Executes the node metadata sync (docs/behaviour.md#node-sync): the machine-name label, the node template's labels,
//! annotations and taints (tracked by the last-applied annotation) and the virtual capacity.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use mcm_api::v1alpha1::Machine;

use super::error::ReconcileError;
use super::{ClassContext, MachineController, Step, writes};
use mcm_decisions::machine as plan;
use mcm_decisions::vocabulary::{Event, Retry, name_of, node_name_of};

impl MachineController {
    /// `syncMachineNameToNode`. The node as stored by its write is left in `written` for the
    /// node-template step of the same pass.
    pub(crate) async fn sync_machine_name(
        &self,
        machine: &Machine,
        written: &mut Option<Arc<Node>>,
    ) -> Result<Step, ReconcileError> {
        let Some(node) = self.node_of(machine, written.as_ref()) else {
            return Ok(Step::Continue(None));
        };
        if let Some(updated) = plan::node_sync::sync_machine_name_label(machine, &node) {
            let stored = writes::replace_node(&self.context, &updated).await?;
            tracing::info!(
                machine = name_of(machine),
                "machine-name label set on the node"
            );
            // Upstream ends the pass here (ShortRetry) because its next step would read the
            // older cached node; ours hands the stored node on instead.
            *written = Some(Arc::new(stored));
            return Ok(Step::Continue(Some(Retry::Short)));
        }
        Ok(Step::Continue(None))
    }

    /// The machine's node: as written earlier in this pass, else from the cache.
    fn node_of(&self, machine: &Machine, written: Option<&Arc<Node>>) -> Option<Arc<Node>> {
        let name = node_name_of(machine)?;
        match written {
            Some(node) if node.metadata.name.as_deref() == Some(name) => Some(Arc::clone(node)),
            _ => self.context.nodes.get(name),
        }
    }

    /// `syncNodeTemplates`, on the node as written earlier in this pass (`written`) or cached.
    pub(crate) async fn sync_node_templates(
        &self,
        machine: &Machine,
        class: Option<&ClassContext>,
        written: Option<&Arc<Node>>,
    ) -> Result<Step, ReconcileError> {
        let node = self.node_of(machine, written);
        let update = match plan::node_sync::sync_node_templates_if_present(
            machine,
            class.map(|class| class.class.as_ref()),
            node.as_deref(),
        ) {
            Ok(Some(update)) => update,
            Ok(None) => return Ok(Step::Continue(None)),
            Err(error) => {
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
        if update.object_changed {
            writes::replace_node(&self.context, &desired).await?;
        }
        tracing::info!(
            machine = name_of(machine),
            "machine ALTs have been reconciled"
        );
        Ok(Step::End(Retry::Short))
    }
}
