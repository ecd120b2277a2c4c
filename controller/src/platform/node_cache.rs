//! What the Node cache keeps of a Node (docs/performance.md#where-the-managers-memory-goes).
//!
//! The controllers read a Node's metadata, its spec, and four parts of its status: the
//! conditions (health checks), the capacity (virtual capacity of the node template), the
//! addresses, and the attached and in-use volumes (drain). A kubelet also reports its images
//! (up to 50, each with its names), its system info, its allocatable resources, its daemon
//! endpoints, its runtime handlers and features: the larger part of a real Node, and nothing a
//! controller reads. The cache leaves them out.
//!
//! A Node written back from the cache must not lose them:
//! - an `Update` of the Node itself ignores `status` (the API server keeps the stored one);
//! - an `UpdateStatus` puts them back from a live read first ([`restore_pruned_status`]).

use k8s_openapi::api::core::v1::{Node, NodeStatus};

/// Leaves out of `node` what no controller reads: `metadata.managedFields` and the status
/// fields named in the module documentation.
pub fn prune(node: &mut Node) {
    node.metadata.managed_fields = None;
    if let Some(status) = node.status.as_mut() {
        let NodeStatus {
            addresses: _,
            capacity: _,
            conditions: _,
            volumes_attached: _,
            volumes_in_use: _,
            allocatable,
            config,
            daemon_endpoints,
            features,
            images,
            node_info,
            phase,
            runtime_handlers,
        } = status;
        *allocatable = None;
        *config = None;
        *daemon_endpoints = None;
        *features = None;
        *images = None;
        *node_info = None;
        *phase = None;
        *runtime_handlers = None;
    }
}

/// Puts back into `outgoing` (a Node from the cache, about to be sent with `UpdateStatus`) the
/// status fields [`prune`] leaves out, as `live` has them. `outgoing` keeps its own
/// resourceVersion: if `live` is newer, the update is refused with a conflict as it would have
/// been without the cache.
pub fn restore_pruned_status(outgoing: &mut Node, live: &Node) {
    let Some(live) = live.status.as_ref() else {
        return;
    };
    let status = outgoing.status.get_or_insert_with(NodeStatus::default);
    status.allocatable.clone_from(&live.allocatable);
    status.config.clone_from(&live.config);
    status.daemon_endpoints.clone_from(&live.daemon_endpoints);
    status.features.clone_from(&live.features);
    status.images.clone_from(&live.images);
    status.node_info.clone_from(&live.node_info);
    status.phase.clone_from(&live.phase);
    status.runtime_handlers.clone_from(&live.runtime_handlers);
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// A Node as a kubelet reports it, with every status field set.
    fn reported_node() -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "n1",
                "resourceVersion": "7",
                "labels": {"kubernetes.io/hostname": "n1"},
                "managedFields": [{"manager": "kubelet", "operation": "Update"}]
            },
            "spec": {"providerID": "virtual:///n1", "unschedulable": true},
            "status": {
                "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                "allocatable": {"cpu": "1900m"},
                "capacity": {"cpu": "2", "example.com/dongle": "3"},
                "conditions": [{"type": "Ready", "status": "True"}],
                "config": {"error": "none"},
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                "features": {"supplementalGroupsPolicy": true},
                "images": [{"names": ["registry.example/app:1"], "sizeBytes": 1000}],
                "nodeInfo": {
                    "architecture": "amd64", "bootID": "b", "containerRuntimeVersion": "c",
                    "kernelVersion": "k", "kubeProxyVersion": "", "kubeletVersion": "v1.33.0",
                    "machineID": "m", "operatingSystem": "linux", "osImage": "o", "systemUUID": "s"
                },
                "phase": "Running",
                "runtimeHandlers": [{"name": "runc"}],
                "volumesAttached": [{"name": "vol-1", "devicePath": "/dev/xvdb"}],
                "volumesInUse": ["vol-1"]
            }
        }))
        .unwrap()
    }

    #[test]
    fn prune_keeps_what_the_controllers_read_and_drops_the_rest() {
        let full = reported_node();
        let mut pruned = full.clone();
        prune(&mut pruned);

        assert_eq!(pruned.metadata.managed_fields, None);
        assert_eq!(pruned.metadata.labels, full.metadata.labels);
        assert_eq!(pruned.spec, full.spec);
        let (kept, all) = (pruned.status.unwrap(), full.status.unwrap());
        assert_eq!(kept.addresses, all.addresses);
        assert_eq!(kept.capacity, all.capacity);
        assert_eq!(kept.conditions, all.conditions);
        assert_eq!(kept.volumes_attached, all.volumes_attached);
        assert_eq!(kept.volumes_in_use, all.volumes_in_use);
        let dropped = NodeStatus {
            addresses: kept.addresses.clone(),
            capacity: kept.capacity.clone(),
            conditions: kept.conditions.clone(),
            volumes_attached: kept.volumes_attached.clone(),
            volumes_in_use: kept.volumes_in_use.clone(),
            ..NodeStatus::default()
        };
        assert_eq!(kept, dropped, "only the five read status fields are kept");
    }

    #[test]
    fn restore_brings_back_every_pruned_field_and_keeps_the_local_changes() {
        let live = reported_node();
        let mut outgoing = live.clone();
        prune(&mut outgoing);
        // What a controller changes before `UpdateStatus`: a condition and the capacity.
        let status = outgoing.status.as_mut().unwrap();
        status.conditions.as_mut().unwrap()[0].status = "False".into();
        status
            .capacity
            .as_mut()
            .unwrap()
            .remove("example.com/dongle");
        let changed = outgoing.status.clone().unwrap();

        restore_pruned_status(&mut outgoing, &live);

        let mut expected = live.status.clone().unwrap();
        expected.conditions = changed.conditions;
        expected.capacity = changed.capacity;
        assert_eq!(outgoing.status.unwrap(), expected);
        assert_eq!(outgoing.metadata.resource_version.as_deref(), Some("7"));
    }

    #[test]
    fn restore_from_a_node_without_status_changes_nothing() {
        let mut outgoing = reported_node();
        prune(&mut outgoing);
        let before = outgoing.clone();
        let mut live = reported_node();
        live.status = None;
        restore_pruned_status(&mut outgoing, &live);
        assert_eq!(outgoing, before);
    }
}
