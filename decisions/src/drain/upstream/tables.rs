//! Upstream conformance tables of `pkg/util/provider/drain/drain_test.go` (see
//! `docs/upstream-conformance.md`): `isMisconfiguredPdb` (its `Good PDB` / `Bad PDB` contexts are
//! ordered steps on one budget) and the pure half of `getPodVolumeInfos`.

#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PersistentVolumeClaimVolumeSource, Pod, PodSpec, Volume};
use k8s_openapi::api::policy::v1::{
    PodDisruptionBudget, PodDisruptionBudgetSpec, PodDisruptionBudgetStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::drain::pdb::is_misconfigured;
use crate::drain::plan::{
    claim_volume_names, exclude_shared_volumes, pod_key, pod_volume_ids, pvc_claims,
};

fn budget(
    spec: PodDisruptionBudgetSpec,
    expected: i32,
    desired: i32,
    healthy: i32,
    allowed: i32,
) -> PodDisruptionBudget {
    PodDisruptionBudget {
        metadata: ObjectMeta::default(),
        spec: Some(spec),
        status: Some(PodDisruptionBudgetStatus {
            expected_pods: expected,
            desired_healthy: desired,
            current_healthy: healthy,
            disruptions_allowed: allowed,
            ..PodDisruptionBudgetStatus::default()
        }),
    }
}

#[test]
fn is_misconfigured_pdb_good_pdb_steps() {
    // Context "Good PDB": minAvailable 2 of 3, one disruption allowed.
    let mut pdb = budget(
        PodDisruptionBudgetSpec {
            min_available: Some(IntOrString::Int(2)),
            ..PodDisruptionBudgetSpec::default()
        },
        3,
        2,
        3,
        1,
    );
    assert!(!is_misconfigured(&pdb), "Good PDB / normal");
    // "Pod getting evicted": the eviction consumed the disruption and is recorded.
    let status = pdb.status.as_mut().unwrap();
    status.disruptions_allowed = 0;
    status.disrupted_pods = Some(BTreeMap::from([(
        "pod-a".to_owned(),
        Time(jiff::Timestamp::UNIX_EPOCH),
    )]));
    assert!(!is_misconfigured(&pdb), "Good PDB / Pod getting evicted");
    // "Next PDB controller reconcile": one pod less healthy.
    pdb.status.as_mut().unwrap().current_healthy = 2;
    assert!(
        !is_misconfigured(&pdb),
        "Good PDB / Next PDB controller reconcile"
    );
}

#[test]
fn is_misconfigured_pdb_bad_pdb_steps() {
    // Context "Bad PDB": maxUnavailable 0 of 3 blocks every eviction.
    let mut pdb = budget(
        PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(0)),
            ..PodDisruptionBudgetSpec::default()
        },
        3,
        3,
        3,
        0,
    );
    assert!(is_misconfigured(&pdb), "Bad PDB / normal");
    // "Pod was force deleted, next PDB controller reconcile".
    let status = pdb.status.as_mut().unwrap();
    status.current_healthy = 2;
    status.disruptions_allowed = 2 - 3;
    assert!(
        !is_misconfigured(&pdb),
        "Bad PDB / Pod was force deleted, next PDB controller reconcile"
    );
}

#[test]
fn is_misconfigured_pdb_waits_for_the_controller_to_observe_the_generation() {
    // Not an upstream case: upstream's first check, a budget not yet observed is not judged.
    let mut pdb = budget(
        PodDisruptionBudgetSpec {
            max_unavailable: Some(IntOrString::Int(0)),
            ..PodDisruptionBudgetSpec::default()
        },
        3,
        3,
        3,
        0,
    );
    pdb.metadata.generation = Some(2);
    pdb.status.as_mut().unwrap().observed_generation = Some(1);
    assert!(!is_misconfigured(&pdb));
}

fn pod(name: &str, claims: &[&str]) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some("foo".to_owned()),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            volumes: Some(
                claims
                    .iter()
                    .map(|claim| Volume {
                        name: (*claim).to_owned(),
                        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                            claim_name: (*claim).to_owned(),
                            read_only: None,
                        }),
                        ..Volume::default()
                    })
                    .collect(),
            ),
            ..PodSpec::default()
        }),
        status: None,
    }
}

/// The pure half of `getPodVolumeInfos`: pod key -> its claims, shared volumes removed. The PVC ->
/// PV -> volume-ID resolution (and so upstream's "non-existing PVC/PV" and "provider-unrelated
/// volume" cases) is done by the drain shell; here a claim stands for its volume.
fn volume_infos(pods: &[Pod]) -> BTreeMap<String, Vec<String>> {
    exclude_shared_volumes(&pods.iter().map(|p| (pod_key(p), pvc_claims(p))).collect())
}

#[test]
fn get_pod_volume_infos_table() {
    assert!(
        volume_infos(&[]).is_empty(),
        "should return empty map for empty pod list"
    );

    let infos = volume_infos(&[pod("bar0", &[]), pod("bar1", &[])]);
    assert_eq!(
        infos,
        BTreeMap::from([
            ("foo/bar0".to_owned(), vec![]),
            ("foo/bar1".to_owned(), vec![])
        ]),
        "should return empty volume list for pods without volumes"
    );

    let infos = volume_infos(&[pod("bar", &["exclusive-0"])]);
    assert_eq!(
        infos,
        BTreeMap::from([("foo/bar".to_owned(), vec!["exclusive-0".to_owned()])]),
        "should return list of exclusive volumes"
    );

    // Two pods, each with an exclusive volume, sharing one volume.
    let infos = volume_infos(&[
        pod("bar0", &["exclusive0-0", "shared-0"]),
        pod("bar1", &["exclusive1-0", "shared-0"]),
    ]);
    assert_eq!(
        infos,
        BTreeMap::from([
            ("foo/bar0".to_owned(), vec!["exclusive0-0".to_owned()]),
            ("foo/bar1".to_owned(), vec!["exclusive1-0".to_owned()]),
        ]),
        "should filter out shared volumes"
    );
}

/// The whole of `getPodVolumeInfos` through `claim_volume_names` (claim -> PV, as the shell reads
/// the claims) and `pod_volume_ids` (shared volumes dropped, PV -> GetVolumeIDs answer): `bound`
/// lists the claims that exist with their volume, `ids` the driver's answer per existing PV
/// (upstream's fake driver answers `<pv>-id` for CSI volumes and nothing for others).
fn volume_ids_of(
    pods: &[Pod],
    bound: &[(&str, &str)],
    ids: &[(&str, &[&str])],
) -> BTreeMap<String, Vec<String>> {
    let bound: BTreeMap<String, String> = bound
        .iter()
        .map(|(claim, volume)| ((*claim).to_owned(), (*volume).to_owned()))
        .collect();
    let ids: BTreeMap<String, Vec<String>> = ids
        .iter()
        .map(|(volume, ids)| {
            (
                (*volume).to_owned(),
                ids.iter().map(|id| (*id).to_owned()).collect(),
            )
        })
        .collect();
    let volumes = pods
        .iter()
        .map(|p| (pod_key(p), claim_volume_names(&pvc_claims(p), &bound)))
        .collect();
    pod_volume_ids(&volumes, &ids)
}

#[test]
fn get_pod_volume_infos_resolution_table() {
    // Upstream's getPVCs/getPVs: claim "exclusive-0" is bound to the PV "exclusive-0".
    let pods = [pod("bar", &["exclusive-0"])];
    assert_eq!(
        volume_ids_of(
            &pods,
            &[("exclusive-0", "exclusive-0")],
            &[("exclusive-0", &["exclusive-0-id"])]
        ),
        BTreeMap::from([("foo/bar".to_owned(), vec!["exclusive-0-id".to_owned()])]),
        "should return list of exclusive volumes (volume IDs)"
    );
    // The PV is an NFS volume: the driver returns no ID for it, nothing to wait for.
    assert!(
        volume_ids_of(
            &pods,
            &[("exclusive-0", "exclusive-0")],
            &[("exclusive-0", &[])]
        )
        .is_empty(),
        "should filter out provider-unrelated volumes"
    );
    // No PVC objects at all.
    assert!(
        volume_ids_of(&pods, &[], &[("exclusive-0", &["exclusive-0-id"])]).is_empty(),
        "should filter out non-existing PVCs"
    );
    assert!(
        claim_volume_names(&pvc_claims(&pods[0]), &BTreeMap::new()).is_empty(),
        "should filter out non-existing PVCs (no volume names)"
    );
    // PVCs exist, the PVs do not (the shell records a missing PV as an empty answer, or not at
    // all when it cannot be read).
    assert!(
        volume_ids_of(&pods, &[("exclusive-0", "exclusive-0")], &[]).is_empty(),
        "should filter out non-existing persistent volumes"
    );
    // Shared volumes are dropped before the driver is asked; exclusive ones of the same pods stay.
    let pods = [
        pod("bar0", &["exclusive0-0", "shared-0"]),
        pod("bar1", &["exclusive1-0", "shared-0"]),
    ];
    assert_eq!(
        volume_ids_of(
            &pods,
            &[
                ("exclusive0-0", "pv-e0"),
                ("exclusive1-0", "pv-e1"),
                ("shared-0", "pv-s")
            ],
            &[("pv-e0", &["e0"]), ("pv-e1", &["e1"]), ("pv-s", &["s"])],
        ),
        BTreeMap::from([
            ("foo/bar0".to_owned(), vec!["e0".to_owned()]),
            ("foo/bar1".to_owned(), vec!["e1".to_owned()]),
        ]),
        "should filter out shared volumes (volume IDs)"
    );
}
