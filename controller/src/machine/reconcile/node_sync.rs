//! Executes the node metadata sync (docs/behaviour.md#node-sync): the machine-name label, the node template's labels,
//! annotations and taints (tracked by the last-applied annotation) and the virtual capacity.

use mcm_api::v1alpha1::Machine;

use super::error::ReconcileError;
use super::{ClassContext, MachineController, Step, writes};
use mcm_decisions::machine as plan;
use mcm_decisions::vocabulary::{Event, Retry, name_of, node_name_of};

impl MachineController {
    /// `syncMachineNameToNode`.
    pub(crate) async fn sync_machine_name(
        &self,
        machine: &Machine,
    ) -> Result<Step, ReconcileError> {
        let Some(node) = node_name_of(machine).and_then(|node| self.context.nodes.get(node)) else {
            return Ok(Step::Continue(None));
        };
        if let Some(updated) = plan::node_sync::sync_machine_name_label(machine, &node) {
            writes::replace_node(&self.context, &updated).await?;
            tracing::info!(
                machine = name_of(machine),
                "machine-name label set on the node"
            );
            // The next step would compute from the cached (older) node: end the pass.
            return Ok(Step::End(Retry::Short));
        }
        Ok(Step::Continue(None))
    }

    /// `syncNodeTemplates`.
    pub(crate) async fn sync_node_templates(
        &self,
        machine: &Machine,
        class: Option<&ClassContext>,
    ) -> Result<Step, ReconcileError> {
        let node = node_name_of(machine).and_then(|node| self.context.nodes.get(node));
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
