//! Gardener's MCM pod: our manager with Gardener's exact arguments in
//! split mode, started as `./machine-controller-manager`, beside our manager in machine-only mode
//! playing the provider's `machine-controller` sidecar (`mcm_e2e::gardener`). Shows rollout,
//! scale through the scale subresource (as the cluster-autoscaler's PUT), the autoscaler's
//! `trigger-deletion-by-mcm`, the overshooting freeze, both Leases held, the dashboard's series
//! on both ports, and that every request stayed within Gardener's Role with split ownership.
//! Each process runs as ServiceAccounts bound to exactly Gardener's Role and ClusterRole, with
//! the sandbox enforcing RBAC: no request of theirs may be refused.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, PostParams};
use mcm_e2e::gardener::{
    GARDENER_ROLE, GardenerPod, Identities, Request, delete_identities, denials, granted,
    granted_in_target, requests,
};
use mcm_e2e::objects::{
    HOLD_FINALIZER, Kind, api, create, create_class, delete, delete_deployment_and_wait,
    deployment, frozen, machine_of_set, machines, must_get, name, names, of_deployment, phase,
    release_hold, terminating, wait_frozen, wait_running,
};
use mcm_e2e::{E2eError, Probe, Result, System, ensure, eventually};
use serde_json::{Value, json};

use crate::harness::Outcome;

const MD: &str = "gd-md";
const TRIGGER_DELETION: &str = "node.machine.sapcloud.io/trigger-deletion-by-mcm";

/// The whole proof; the pod's logs are printed when a step fails.
pub async fn gardener_pod(system: Arc<System>) -> Result<Outcome> {
    let s = &*system;
    // From here on every request of the two processes is recorded: start-up lists and watches,
    // the Lease's creation.
    s.sandbox_admin(::http::Method::POST, "requesters/reset", None)
        .await?;
    let mut pod = GardenerPod::start(s).await?;
    let result = proof(s, &pod, &pod.identities).await;
    let alive = pod.check_alive();
    if result.is_err() || alive.is_err() {
        eprintln!("{}", pod.tails(60));
    }
    result?;
    alive?;
    // SIGTERM: both release their Lease and exit 0 (a lost or failing lease would exit 1).
    let codes = pod.stop().await?;
    ensure(codes == (Some(0), Some(0)), || {
        format!("exit codes after SIGTERM (manager, machine controller): {codes:?}")
    })?;
    // Releasing the Leases on the way out was the last chance for a 403.
    no_denials(s, &pod.identities).await?;
    delete_identities(s).await?;
    Ok(Outcome::Passed)
}

async fn proof(s: &System, pod: &GardenerPod, identities: &Identities) -> Result<()> {
    create_class(s, "gd-a", json!({"bootDelay": "1s"}), "2").await?;
    create_class(s, "gd-b", json!({"bootDelay": "1s"}), "4").await?;
    create(
        s,
        Kind::MachineDeployment,
        deployment(s, MD, 2, "gd-a", json!({})),
    )
    .await?;
    wait_running(s, MD, 2, 120).await?;
    leases_held(s).await?;

    scale_subresource_put(s, 3).await?;
    wait_running(s, MD, 3, 120).await?;
    trigger_deletion(s).await?;
    rollout(s).await?;
    freeze(s).await?;
    metrics(pod).await?;
    manager_log(pod)?;

    delete_deployment_and_wait(s, MD).await?;
    delete(s, Kind::MachineClass, "gd-a").await?;
    delete(s, Kind::MachineClass, "gd-b").await?;
    // The classes' finalizers are removed by the machine controller; once they are gone every
    // request of the scenario is in the record.
    eventually("classes gd-a and gd-b deleted", 60, || async move {
        let left: Vec<String> = [
            mcm_e2e::objects::get(s, Kind::MachineClass, "gd-a").await?,
            mcm_e2e::objects::get(s, Kind::MachineClass, "gd-b").await?,
        ]
        .iter()
        .flatten()
        .map(|c| name(c).to_owned())
        .collect();
        Ok(if left.is_empty() {
            Probe::Done(())
        } else {
            Probe::Waiting(format!("left: {left:?}"))
        })
    })
    .await?;
    verbs_within_gardeners_role(s, identities).await?;
    no_denials(s, identities).await
}

/// The sandbox enforces RBAC, so a grant missing from Gardener's roles is a 403 that the
/// processes may retry around; any 403 of the four identities fails the scenario.
async fn no_denials(s: &System, identities: &Identities) -> Result<()> {
    let all = denials(s).await?;
    let ours: Vec<String> = identities
        .all()
        .iter()
        .filter_map(|user| all.get(*user).map(|n| format!("{user}: {n}")))
        .collect();
    ensure(ours.is_empty(), || {
        format!("Gardener's roles refused requests (403s per user, see the sandbox log): {ours:?}")
    })
}

/// Both Leases exist with a holder, renewed within their duration; the two holders are the two
/// processes (identities differ, so neither took over the other's Lease).
async fn leases_held(s: &System) -> Result<()> {
    let leases: Api<Lease> = Api::namespaced(s.client(), s.namespace());
    let mut holders = Vec::new();
    for lease_name in ["machine-controller-manager", "machine-controller"] {
        let leases = leases.clone();
        let holder = eventually(&format!("Lease {lease_name} held and renewed"), 60, || {
            let leases = leases.clone();
            async move {
                let lease = leases
                    .get_opt(lease_name)
                    .await
                    .map_err(E2eError::kube(format!("get Lease {lease_name}")))?;
                let Some(spec) = lease.and_then(|l| l.spec) else {
                    return Ok(Probe::Waiting("no Lease yet".to_owned()));
                };
                let holder = spec.holder_identity.clone().unwrap_or_default();
                let duration = i64::from(spec.lease_duration_seconds.unwrap_or(0));
                let fresh = spec.renew_time.as_ref().is_some_and(|t| {
                    let age = jiff::Timestamp::now().as_second() - t.0.as_second();
                    age <= duration
                });
                Ok(if !holder.is_empty() && fresh {
                    Probe::Done(holder)
                } else {
                    Probe::Waiting(format!("{spec:?}"))
                })
            }
        })
        .await?;
        holders.push(holder);
    }
    println!("gardener: Lease holders {holders:?}");
    ensure(holders[0] != holders[1], || {
        format!("both Leases name the same holder: {holders:?}")
    })
}

/// Runs a read-modify-write `attempt` again while it ends in 409 Conflict (the manager writes the
/// deployment concurrently; the autoscaler's MCM provider also retries its updates).
async fn retry_on_conflict<T, F, Fut>(what: &str, mut attempt: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = std::result::Result<T, kube::Error>>,
{
    let mut conflicts = 0;
    loop {
        match attempt().await {
            Err(kube::Error::Api(status)) if status.code == 409 && conflicts < 20 => {
                conflicts += 1;
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            other => return other.map_err(E2eError::kube(what)),
        }
    }
}

/// The cluster-autoscaler's scale-up: GET and PUT of `machinedeployments/<md>/scale`.
async fn scale_subresource_put(s: &System, replicas: i32) -> Result<()> {
    let mds = api(s, Kind::MachineDeployment);
    let before = mds
        .get_scale(MD)
        .await
        .map_err(E2eError::kube(format!("GET {MD}/scale")))?
        .spec
        .and_then(|s| s.replicas);
    ensure(before == Some(2), || {
        format!("{MD}/scale before: {before:?}")
    })?;
    retry_on_conflict(&format!("GET and PUT {MD}/scale"), || {
        let mds = mds.clone();
        async move {
            let mut scale = mds.get_scale(MD).await?;
            scale.spec.get_or_insert_with(Default::default).replicas = Some(replicas);
            mds.replace_scale(MD, &PostParams::default(), &scale).await
        }
    })
    .await?;
    let md = must_get(s, Kind::MachineDeployment, MD).await?;
    ensure(md["spec"]["replicas"] == replicas, || {
        format!("spec.replicas after the PUT: {}", md["spec"]["replicas"])
    })
}

/// The autoscaler's scale-down of one named machine: one Update of the deployment with
/// `replicas - 1` and `trigger-deletion-by-mcm: <machine>~<time>` (what its MCM provider does).
/// Exactly that machine goes.
async fn trigger_deletion(s: &System) -> Result<()> {
    let before = machines(s, MD).await?;
    let victim = before
        .get(1)
        .map(|m| name(m).to_owned())
        .ok_or_else(|| E2eError::Assertion(format!("{MD} has fewer than 2 machines")))?;
    let now = jiff::Timestamp::from_second(jiff::Timestamp::now().as_second())
        .map_err(|e| E2eError::Assertion(e.to_string()))?;
    let entry = format!("{victim}~{now}");
    let mds = api(s, Kind::MachineDeployment);
    retry_on_conflict(&format!("update {MD} (trigger deletion)"), || {
        let mds = mds.clone();
        let entry = entry.clone();
        async move {
            let mut md = mds.get(MD).await?;
            md.metadata
                .annotations
                .get_or_insert_with(BTreeMap::new)
                .insert(TRIGGER_DELETION.to_owned(), entry);
            md.data["spec"]["replicas"] = json!(2);
            mds.replace(MD, &PostParams::default(), &md).await
        }
    })
    .await?;
    let kept: BTreeSet<String> = names(&before)
        .into_iter()
        .filter(|n| *n != victim)
        .collect();
    let after = wait_running(s, MD, 2, 120).await?;
    ensure(names(&after) == kept, || {
        format!(
            "trigger-deletion of {victim}: expected {kept:?} to stay, got {:?}",
            names(&after)
        )
    })
}

/// A class change rolls every machine onto class B.
async fn rollout(s: &System) -> Result<()> {
    let old = names(&machines(s, MD).await?);
    mcm_e2e::objects::merge_patch(
        s,
        Kind::MachineDeployment,
        MD,
        json!({"spec": {"template": {"spec": {"class": {"name": "gd-b"}}}}}),
    )
    .await?;
    eventually(&format!("{MD} rolled onto class gd-b"), 150, || {
        let old = old.clone();
        async move {
            let current = machines(s, MD).await?;
            let md = must_get(s, Kind::MachineDeployment, MD).await?;
            let on_b = current
                .iter()
                .filter(|m| {
                    m["spec"]["class"]["name"] == "gd-b"
                        && phase(m) == "Running"
                        && !terminating(m)
                        && !old.contains(name(m))
                })
                .count();
            let status = &md["status"];
            Ok(
                if current.len() == 2
                    && on_b == 2
                    && status["updatedReplicas"] == 2
                    && status["availableReplicas"] == 2
                {
                    Probe::Done(())
                } else {
                    Probe::Waiting(format!(
                        "{} machines, {on_b} new on gd-b; status {status}",
                        current.len()
                    ))
                },
            )
        }
    })
    .await?;
    let sets = of_deployment(s, Kind::MachineSet, MD).await?;
    let old_sets: Vec<&Value> = sets
        .iter()
        .filter(|set| set["spec"]["template"]["spec"]["class"]["name"] == "gd-a")
        .collect();
    ensure(
        old_sets.iter().all(|set| set["spec"]["replicas"] == 0),
        || format!("old MachineSets not scaled to 0: {old_sets:?}"),
    )
}

/// Four extra machines owned by the 2-replica MachineSet (limit 2 + maxSurge 1 + safety-up 2 =
/// 5) freeze it (`--machine-safety-overshooting-period=1m`: the check also runs on machine
/// adds); the surplus goes and both MachineSet and deployment are unfrozen.
///
/// The extras carry [`HOLD_FINALIZER`] until the freeze is seen (why: see there). Machines being
/// deleted do not count (docs/behaviour.md#q12), and the MachineSet controller deletes a surplus
/// at once, so while the extras are created the sandbox fails every Machine DELETE: a MachineSet
/// controller that cannot remove its surplus is the case the freeze exists for, and the check
/// then sees it whatever the timing.
async fn freeze(s: &System) -> Result<()> {
    let sets = of_deployment(s, Kind::MachineSet, MD).await?;
    let set = sets
        .iter()
        .find(|set| set["spec"]["replicas"] == 2)
        .ok_or_else(|| E2eError::Assertion(format!("{MD}: no MachineSet with 2 replicas")))?
        .clone();
    let set_name = name(&set).to_owned();
    s.sandbox_admin(
        ::http::Method::POST,
        "errors",
        Some(json!({"verb": "delete", "resource": "machines", "status": 500, "rate": 1.0})),
    )
    .await?;
    for i in 0..4 {
        let extra = machine_of_set(s, &set, &format!("{MD}-extra-{i}"), &[HOLD_FINALIZER]);
        create(s, Kind::Machine, extra).await?;
    }
    let set_ref = set_name.as_str();
    let freeze_seen = wait_frozen(s, set_ref, 60).await;
    s.sandbox_admin(::http::Method::DELETE, "errors", None)
        .await?;
    freeze_seen?;
    for i in 0..4 {
        release_hold(s, &format!("{MD}-extra-{i}")).await?;
    }
    eventually(
        &format!("{MD} back to 2 machines, unfrozen"),
        120,
        || async move {
            let set = must_get(s, Kind::MachineSet, set_ref).await?;
            let md = must_get(s, Kind::MachineDeployment, MD).await?;
            let current = machines(s, MD).await?;
            let running = current
                .iter()
                .filter(|m| phase(m) == "Running" && !terminating(m))
                .count();
            Ok(
                if !frozen(&set) && !frozen(&md) && current.len() == 2 && running == 2 {
                    Probe::Done(())
                } else {
                    Probe::Waiting(format!(
                        "set frozen {}, deployment frozen {}, machines {:?}",
                        frozen(&set),
                        frozen(&md),
                        names(&current)
                    ))
                },
            )
        },
    )
    .await
}

/// The dashboard's series: the manager's port has the MachineDeployment/MachineSet families, its
/// work queues and `process_*`, and none of the machine controller's; the machine metrics port
/// has the machine-level and cloud-API families.
async fn metrics(pod: &GardenerPod) -> Result<()> {
    let main = pod.manager_metrics().await?;
    let machine = pod.machine_metrics().await?;
    // Sample lines only. `mcm_misc_scrape_failure_total` is left out: it has samples only after
    // a failed scrape (as upstream), and an empty family is not encoded.
    let has = |text: &str, series: &str| {
        text.lines()
            .any(|l| !l.starts_with('#') && l.starts_with(series))
    };
    let mut missing = Vec::new();
    for series in [
        "mcm_machine_deployment_items_total",
        "mcm_machine_deployment_info{",
        "mcm_machine_deployment_status_updated_replicas{",
        "mcm_machine_set_items_total",
        "mcm_machine_set_status_replicas{",
        "mcm_machine_stale_machines_total",
        "mcm_workqueue_adds_total{name=\"machinedeployment\"",
        "mcm_workqueue_adds_total{name=\"machineset\"",
        "mcm_workqueue_work_duration_seconds_count{name=\"machineset\"",
        "process_open_fds",
        "process_max_fds",
    ] {
        if !has(&main, series) {
            missing.push(format!("--port: {series}"));
        }
    }
    for series in [
        "mcm_machine_items_total",
        "mcm_machine_current_status_phase{",
        "mcm_machine_controller_frozen",
        "mcm_machine_info{",
        "mcm_cloud_api_driver_request_duration_seconds_count{",
        "mcm_workqueue_adds_total{name=\"machine\"",
        "process_open_fds",
    ] {
        if !has(&machine, series) {
            missing.push(format!("--machine-metrics-port: {series}"));
        }
    }
    // Split mode: the machine-level series come only from the sidecar (Gardener keeps them only
    // from `providermetrics`).
    for series in ["mcm_machine_items_total", "mcm_machine_controller_frozen"] {
        if has(&main, series) {
            missing.push(format!("--port must not serve {series}"));
        }
    }
    let items = mcm_e2e::admin_http::metric_value(&machine, "mcm_machine_items_total", None);
    if items.is_none_or(|v| v < 2.0) {
        missing.push(format!("mcm_machine_items_total is {items:?}, want >= 2"));
    }
    ensure(missing.is_empty(), || {
        format!(
            "metrics: {missing:?}\n--- --port ---\n{main}\n--- --machine-metrics-port ---\n{machine}"
        )
    })
}

/// With Gardener's arguments the manager logs klog text lines (Gardener's log pipeline parses
/// them), says it runs the split-mode share, and opens no machine metrics port: 10259 belongs to
/// the provider's sidecar in the same pod network.
fn manager_log(pod: &GardenerPod) -> Result<()> {
    let log = pod.manager_log()?;
    let klog = |line: &str| {
        let b = line.as_bytes();
        b.len() > 22
            && matches!(b[0], b'I' | b'W' | b'E' | b'F')
            && b[1..5].iter().all(u8::is_ascii_digit)
            && b[5] == b' '
            && b[8] == b':'
            && b[14] == b'.'
    };
    let not_klog: Vec<&str> = log
        .lines()
        .filter(|l| !l.trim().is_empty() && !klog(l))
        .take(3)
        .collect();
    ensure(not_klog.is_empty(), || {
        format!("manager log lines not in klog format: {not_klog:?}")
    })?;
    ensure(
        log.contains("running upstream's machine-controller-manager share only"),
        || "the manager did not log the split-mode share".to_owned(),
    )?;
    ensure(!log.contains("machine metrics listening"), || {
        "the split-mode manager opened a machine metrics port".to_owned()
    })
}

fn of_user<'a>(all: &'a [Request], user: &str) -> Vec<&'a Request> {
    all.iter().filter(|r| r.user == user).collect()
}

fn print_requests(who: &str, requests: &[&Request]) {
    println!("gardener: requests of {who}:");
    for r in requests {
        println!("  {}", r.describe());
    }
}

/// Every request of the manager stays within Gardener's Role (control, the shoot namespace only)
/// and the target ClusterRole, and the split manager writes nothing the machine controller owns:
/// no Machine status, no MachineClass (finalizers), no Secret, no Node. The machine controller's
/// requests fit the same grants (in Gardener both containers share them).
async fn verbs_within_gardeners_role(s: &System, identities: &Identities) -> Result<()> {
    let all = requests(s).await?;
    let ns = s.namespace();
    let mut problems = Vec::new();
    let manager_control = of_user(&all, &identities.manager_control);
    let manager_target = of_user(&all, &identities.manager_target);
    let mc_control = of_user(&all, &identities.machine_controller_control);
    let mc_target = of_user(&all, &identities.machine_controller_target);
    print_requests("the manager (control, service account)", &manager_control);
    print_requests("the manager (target kubeconfig)", &manager_target);
    print_requests("the machine controller (control)", &mc_control);
    print_requests("the machine controller (target)", &mc_target);
    for (who, list) in [
        ("manager control", &manager_control),
        ("manager target", &manager_target),
        ("machine controller control", &mc_control),
        ("machine controller target", &mc_target),
    ] {
        if list.is_empty() {
            problems.push(format!("no request recorded for the {who} identity"));
        }
    }
    for (who, list) in [
        ("manager", &manager_control),
        ("machine controller", &mc_control),
    ] {
        for r in list.iter() {
            if !granted(GARDENER_ROLE, r) {
                problems.push(format!("{who}: outside Gardener's Role: {}", r.describe()));
            }
            if r.namespace != ns {
                problems.push(format!(
                    "{who}: outside the namespace {ns} (the Role is namespaced): {}",
                    r.describe()
                ));
            }
        }
    }
    for (who, list) in [
        ("manager", &manager_target),
        ("machine controller", &mc_target),
    ] {
        for r in list.iter() {
            if !granted_in_target(r) {
                problems.push(format!(
                    "{who}: outside the target ClusterRole: {}",
                    r.describe()
                ));
            }
        }
    }
    // What the machine controller owns: MachineClasses (finalizers), Secrets, Node status and
    // Node lifecycle, Machine status. Two writes stay with the manager, as upstream's
    // machine-controller-manager does them: the MachineDeployment's autoscaler
    // `scale-down-disabled` annotation on Nodes during a rollout (an Update of the Node), and the
    // MachineSet's "Deleting machine from cloud provider" status just before it deletes a Machine
    // (at most one per deleted Machine).
    let count = |verb: &str, resource: &str, sub: &str| -> u64 {
        manager_control
            .iter()
            .chain(manager_target.iter())
            .filter(|r| r.verb == verb && r.resource == resource && r.subresource == sub)
            .map(|r| r.count)
            .sum()
    };
    for r in manager_control.iter().chain(manager_target.iter()) {
        let owned = r.is_write()
            && match (r.resource.as_str(), r.subresource.as_str(), r.verb.as_str()) {
                ("machineclasses", _, _) | ("secrets", _, _) => true,
                ("nodes", "", "update") => false,
                ("nodes", _, _) => true,
                ("machines", "status", "update") => false,
                ("machines", "status", _) => true,
                _ => false,
            };
        if owned {
            problems.push(format!(
                "split-mode manager wrote what the machine controller owns: {}",
                r.describe()
            ));
        }
    }
    let status_marks = count("update", "machines", "status");
    let deletions = count("delete", "machines", "");
    if status_marks > deletions {
        problems.push(format!(
            "split-mode manager: {status_marks} Machine status updates for {deletions} Machine deletions"
        ));
    }
    // Leader election of both: get/create/update on Leases, never patch (Gardener's Role).
    for (who, list) in [
        ("manager", &manager_control),
        ("machine controller", &mc_control),
    ] {
        let lease_verbs: BTreeSet<&str> = list
            .iter()
            .filter(|r| r.resource == "leases")
            .map(|r| r.verb.as_str())
            .collect();
        if !lease_verbs.contains("create")
            || !lease_verbs.contains("update")
            || lease_verbs.contains("patch")
        {
            problems.push(format!("{who}: Lease verbs {lease_verbs:?}"));
        }
    }
    // The manager did its share: MachineSets created Machines, the deployment wrote status.
    let wrote = |resource: &str, sub: &str, verb: &str| {
        manager_control
            .iter()
            .any(|r| r.resource == resource && r.subresource == sub && r.verb == verb)
    };
    for (resource, sub, verb) in [
        ("machines", "", "create"),
        ("machinesets", "", "create"),
        ("machinedeployments", "status", "update"),
    ] {
        if !wrote(resource, sub, verb) {
            problems.push(format!("manager never did {verb} {resource}/{sub}"));
        }
    }
    ensure(problems.is_empty(), || problems.join("\n"))
}
