//! The heartbeat tasks in flight of the virtual kubelet, at most one per node.

use std::collections::{HashMap, HashSet};

use tokio::task::JoinSet;

use crate::node::NodeClock;

/// The heartbeat tasks in flight, at most one per node.
#[derive(Default)]
pub(super) struct Heartbeats {
    pub(super) tasks: JoinSet<(String, NodeClock)>,
    nodes: HashMap<tokio::task::Id, String>,
    /// The nodes of `nodes`, for the per-VM check of every tick: a scan of `nodes` there made
    /// each tick cost O(VMs × running heartbeats), most of the provider's CPU at 5,000 nodes
    /// (docs/performance.md).
    busy_nodes: HashSet<String>,
}

impl Heartbeats {
    pub(super) fn busy(&self, node: &str) -> bool {
        self.busy_nodes.contains(node)
    }

    pub(super) fn started(&mut self, id: tokio::task::Id, node: String) {
        self.busy_nodes.insert(node.clone());
        self.nodes.insert(id, node);
    }

    pub(super) fn ended(&mut self, id: tokio::task::Id) -> Option<String> {
        let node = self.nodes.remove(&id)?;
        self.busy_nodes.remove(&node);
        Some(node)
    }

    /// The clocks of the heartbeats that finished since the last call.
    pub(super) fn finished(&mut self) -> Vec<(String, NodeClock)> {
        let mut done = Vec::new();
        while let Some(result) = self.tasks.try_join_next_with_id() {
            match result {
                Ok((id, (node, clock))) => {
                    self.ended(id);
                    done.push((node, clock));
                }
                Err(error) => {
                    // The node keeps its previous clock; its next heartbeat starts afresh.
                    let node = self.ended(error.id()).unwrap_or_default();
                    tracing::warn!(%node, %error, "heartbeat task failed");
                }
            }
        }
        done
    }
}
