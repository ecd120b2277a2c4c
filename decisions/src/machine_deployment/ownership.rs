//! Which MachineDeployment a machine belongs to (upstream `getMachineDeploymentForMachine`),
//! for routing machine events to the deployment that must be synced.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use mcm_api::v1alpha1::{MachineDeployment, MachineSet};

use crate::machine_deployment::revision::KIND;
use crate::machine_set::claim::controller_ref;

/// The deployment managing a machine (upstream `getMachineDeploymentForMachine`): the machine's
/// controlling MachineSet, then that set's controlling MachineDeployment, each looked up by name
/// and accepted only when its UID is the one the reference names (a reference to a deleted and
/// recreated object of the same name resolves to nothing).
pub fn deployment_for_machine(
    machine: &ObjectMeta,
    set_named: impl FnOnce(&str) -> Option<Arc<MachineSet>>,
    deployment_named: impl FnOnce(&str) -> Option<Arc<MachineDeployment>>,
) -> Option<String> {
    let set_ref = controller_ref(machine).filter(|r| r.kind == "MachineSet")?;
    let set = set_named(&set_ref.name)?;
    if set.metadata.uid.as_deref() != Some(set_ref.uid.as_str()) {
        return None;
    }
    let md_ref = controller_ref(&set.metadata).filter(|r| r.kind == KIND)?;
    let md = deployment_named(&md_ref.name)?;
    (md.metadata.uid.as_deref() == Some(md_ref.uid.as_str())).then(|| md_ref.name.clone())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use mcm_api::v1alpha1::Machine;

    fn owner(kind: &str, name: &str, uid: &str) -> OwnerReference {
        OwnerReference {
            api_version: "machine.sapcloud.io/v1alpha1".to_owned(),
            kind: kind.to_owned(),
            name: name.to_owned(),
            uid: uid.to_owned(),
            controller: Some(true),
            block_owner_deletion: None,
        }
    }

    /// Upstream `deployment_test.go` `#getMachineDeploymentForMachine` ("MachineDeployment
    /// should"), row by row: the fixture's deployment, set and machine (every UID `1234567`),
    /// each row's change applied, then the deployment the machine routes to (`None` = nil).
    #[test]
    fn upstream_get_machine_deployment_for_machine() {
        type Preset = fn(&mut Machine, &mut MachineSet);
        let rows: [(&str, Preset, Option<&str>); 4] = [
            (
                "return the expected machine deployment",
                |_, _| {},
                Some("MachineDeployment-test"),
            ),
            (
                "return nil as machine's controller-ref is buggy",
                |m, _| {
                    m.metadata.owner_references.as_mut().unwrap()[0].kind =
                        "MachineSetDummy".to_owned()
                },
                None,
            ),
            (
                "return nil as machine's controller-ref has different UID",
                |m, _| {
                    m.metadata.owner_references.as_mut().unwrap()[0].uid = "000-dummy".to_owned()
                },
                None,
            ),
            (
                "return nil as machine-set's controller-ref is nil",
                |_, s| s.metadata.owner_references = None,
                None,
            ),
        ];
        for (row, preset, expected) in rows {
            let mut md = MachineDeployment::default();
            md.metadata.name = Some("MachineDeployment-test".to_owned());
            md.metadata.uid = Some("1234567".to_owned());
            let mut set = MachineSet::default();
            set.metadata.name = Some("MachineSet-test".to_owned());
            set.metadata.uid = Some("1234567".to_owned());
            set.metadata.owner_references = Some(vec![owner(
                "MachineDeployment",
                "MachineDeployment-test",
                "1234567",
            )]);
            let mut machine = Machine::default();
            machine.metadata.name = Some("Machine-test".to_owned());
            machine.metadata.owner_references =
                Some(vec![owner("MachineSet", "MachineSet-test", "1234567")]);
            preset(&mut machine, &mut set);
            let (set, md) = (Arc::new(set), Arc::new(md));
            let got = deployment_for_machine(
                &machine.metadata,
                |n| (set.metadata.name.as_deref() == Some(n)).then(|| Arc::clone(&set)),
                |n| (md.metadata.name.as_deref() == Some(n)).then(|| Arc::clone(&md)),
            );
            assert_eq!(got.as_deref(), expected, "{row}");
        }
    }

    #[test]
    fn a_set_reference_to_a_recreated_deployment_routes_nowhere() {
        // Upstream `resolveDeploymentControllerRef`: name found, UID differs => nil.
        let mut md = MachineDeployment::default();
        md.metadata.name = Some("d".to_owned());
        md.metadata.uid = Some("new".to_owned());
        let mut set = MachineSet::default();
        set.metadata.name = Some("s".to_owned());
        set.metadata.uid = Some("s-uid".to_owned());
        set.metadata.owner_references = Some(vec![owner("MachineDeployment", "d", "old")]);
        let mut machine = Machine::default();
        machine.metadata.owner_references = Some(vec![owner("MachineSet", "s", "s-uid")]);
        let (set, md) = (Arc::new(set), Arc::new(md));
        let route = |md: Arc<MachineDeployment>| {
            deployment_for_machine(&machine.metadata, |_| Some(Arc::clone(&set)), |_| Some(md))
        };
        assert_eq!(route(Arc::clone(&md)), None);
        let mut same = (*md).clone();
        same.metadata.uid = Some("old".to_owned());
        assert_eq!(route(Arc::new(same)), Some("d".to_owned()));
    }
}
