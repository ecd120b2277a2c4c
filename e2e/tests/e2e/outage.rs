//! API-server outages of 20, 60 and 150 s against a manager that elects a
//! leader: how long after the API's return the manager leads again and reconciles.
//!
//! The outage is the sandbox answering 503 to everything (`POST /sandbox/admin/unavailable`),
//! or, on the real control plane, kube-apiserver stopped and started again on the same etcd and
//! port; the scenario ends it itself, so the moment of the API's return is known exactly.
//! Right after it the scenario scales the deployment up by one, and measures:
//! * **leading**: the first Lease renewal written after the return (`spec.renewTime`, written by
//!   the manager; a process that does not lead writes none);
//! * **reconciling**: the scale-up's new Machine object appears (the MachineSet controller of the
//!   leader created it).
//!
//! The manager must not exit at any point (it waits for the API at start-up and campaigns again
//! in-process after losing its Lease; `docs/operations.md`). A manager that does exit is restarted
//! the way `make run` restarts it (1 s backoff doubling to 30 s, reset after 60 s of running), so
//! the figures of a manager that exits can be measured too; the scenario fails then, after
//! printing them. The limits are generous: the figures are printed, not asserted.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use mcm_e2e::objects::{
    Kind, create, create_class, delete, delete_deployment_and_wait, deployment, machines,
    merge_patch, names, wait_running,
};
use mcm_e2e::{E2eError, Probe, Result, System, ensure, eventually};
use serde_json::json;

use crate::harness::Outcome;

/// Outage lengths, seconds.
const OUTAGES: [u64; 3] = [20, 60, 150];

/// The Lease of the manager's default share.
const LEASE: &str = "machine-controller-manager";

/// Restarts an exited manager like `make run` does and counts the exits.
struct Supervisor {
    exits: u32,
    backoff: Duration,
    restart_at: Option<Instant>,
    running_since: Instant,
}

impl Supervisor {
    fn new() -> Self {
        Self {
            exits: 0,
            backoff: Duration::from_secs(1),
            restart_at: None,
            running_since: Instant::now(),
        }
    }

    /// Notices an exit and restarts when its backoff is over. A restart waits until the manager
    /// is ready (or exits again, which counts as another exit).
    async fn tend(&mut self, s: &System) {
        if let Some(at) = self.restart_at {
            if Instant::now() < at {
                return;
            }
            self.restart_at = None;
            self.running_since = Instant::now();
            println!("outage: restarting the manager");
            if let Err(e) = s.start_manager().await {
                println!("outage: the restarted manager did not become ready: {e}");
            }
            return;
        }
        if s.check_processes().await.is_ok() {
            return;
        }
        self.exits += 1;
        if self.running_since.elapsed() >= Duration::from_secs(60) {
            self.backoff = Duration::from_secs(1);
        }
        println!(
            "outage: the manager exited (exit {}), restarting in {:?}",
            self.exits, self.backoff
        );
        self.restart_at = Some(Instant::now() + self.backoff);
        self.backoff = (self.backoff * 2).min(Duration::from_secs(30));
    }
}

/// `spec.renewTime` of the manager's Lease, when it has a holder.
async fn renewed_at(s: &System) -> Option<jiff::Timestamp> {
    let lease = Api::<Lease>::namespaced(s.client(), s.namespace())
        .get_opt(LEASE)
        .await
        .ok()??;
    let spec = lease.spec?;
    spec.holder_identity.filter(|holder| !holder.is_empty())?;
    spec.renew_time.map(|time| time.0)
}

/// One measured outage.
struct Figures {
    outage: u64,
    lost_lease: bool,
    leading: Duration,
    reconciling: Duration,
}

/// Three outages, each followed by a scale-up; prints the figures, fails if the manager exited.
pub async fn leads_again_after_outages(system: Arc<System>) -> Result<Outcome> {
    let s = &*system;
    create_class(s, "ou-class", json!({"bootDelay": "1s"}), "2").await?;
    create(
        s,
        Kind::MachineDeployment,
        deployment(s, "ou-md", 1, "ou-class", json!({})),
    )
    .await?;
    wait_running(s, "ou-md", 1, 180).await?;
    eventually("the manager holds its Lease", 60, || async move {
        Ok(match renewed_at(s).await {
            Some(_) => Probe::Done(()),
            None => Probe::Waiting("no holder".to_owned()),
        })
    })
    .await?;

    let mut supervisor = Supervisor::new();
    let mut figures = Vec::new();
    let mut replicas = 1usize;
    for seconds in OUTAGES {
        let before = names(&machines(s, "ou-md").await?);
        // Ended by the DELETE below; the margin only bounds an outage whose end got lost.
        s.begin_api_outage(seconds + 120).await?;
        println!("outage: the API server is unavailable for {seconds}s");
        let until = Instant::now() + Duration::from_secs(seconds);
        let mut lost_lease = false;
        while Instant::now() < until {
            supervisor.tend(s).await;
            // The admin port is the manager's own, reachable during the outage.
            if let Ok(text) = s.manager_metrics().await
                && mcm_e2e::admin_http::metric_value(
                    &text,
                    "leader_election_master_status",
                    Some(&format!("name=\"{LEASE}\"")),
                ) == Some(0.0)
            {
                lost_lease = true;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        s.end_api_outage().await?;
        let returned = Instant::now();
        let returned_wall = jiff::Timestamp::now();
        replicas += 1;
        let target = i64::try_from(replicas).unwrap_or(i64::MAX);
        let patch = json!({"spec": {"replicas": target}});
        eventually("the scale-up is accepted after the outage", 30, || {
            let patch = patch.clone();
            async move {
                merge_patch(s, Kind::MachineDeployment, "ou-md", patch).await?;
                Ok(Probe::Done(()))
            }
        })
        .await?;

        let mut leading: Option<Duration> = None;
        let mut reconciling: Option<Duration> = None;
        let deadline = Instant::now() + mcm_e2e::wait::limit(240);
        while leading.is_none() || reconciling.is_none() {
            if Instant::now() >= deadline {
                return Err(E2eError::Timeout {
                    what: format!("the manager leads and reconciles after a {seconds}s outage"),
                    seconds: 240,
                    last: format!(
                        "leading after {leading:?}, reconciling after {reconciling:?}, exits {}",
                        supervisor.exits
                    ),
                });
            }
            supervisor.tend(s).await;
            if leading.is_none()
                && let Some(renewed) = renewed_at(s).await
                && renewed >= returned_wall
            {
                let after = renewed.duration_since(returned_wall);
                leading = Some(Duration::try_from(after).unwrap_or_default());
            }
            if reconciling.is_none()
                && let Ok(current) = machines(s, "ou-md").await
                && current.len() > before.len()
            {
                reconciling = Some(returned.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let measured = Figures {
            outage: seconds,
            lost_lease,
            leading: leading.unwrap_or_default(),
            reconciling: reconciling.unwrap_or_default(),
        };
        println!(
            "outage: {}s outage: leading again {:.1}s and reconciling (scale-up machine created) {:.1}s after the API's return (lease lost during the outage: {}, manager exits so far: {})",
            measured.outage,
            measured.leading.as_secs_f64(),
            measured.reconciling.as_secs_f64(),
            measured.lost_lease,
            supervisor.exits
        );
        figures.push(measured);
        // The next outage starts from a settled pool.
        let mut settled = false;
        let settle_deadline = Instant::now() + mcm_e2e::wait::limit(180);
        while !settled && Instant::now() < settle_deadline {
            supervisor.tend(s).await;
            settled = wait_running(s, "ou-md", replicas, 5).await.is_ok();
        }
        ensure(settled, || {
            format!(
                "ou-md did not settle at {replicas} Running machines after the {seconds}s outage"
            )
        })?;
    }

    println!("outage: summary (seconds after the API's return)");
    for f in &figures {
        println!(
            "outage:   {:>3}s outage: leading {:>5.1}  reconciling {:>5.1}  lease lost {}",
            f.outage,
            f.leading.as_secs_f64(),
            f.reconciling.as_secs_f64(),
            f.lost_lease
        );
    }
    ensure(supervisor.exits == 0, || {
        format!(
            "the manager exited {} time(s) around the outages; it must wait for the API server and campaign again in-process",
            supervisor.exits
        )
    })?;
    delete_deployment_and_wait(s, "ou-md").await?;
    delete(s, Kind::MachineClass, "ou-class").await?;
    Ok(Outcome::Passed)
}

/// Replicas of the scale-up in flight when the API goes away.
const SCALE_TO: usize = 30;

/// How long the API server is away with the scale-up in flight.
const STALE_OUTAGE_SECONDS: u64 = 150;

/// Since-when values of the manager's caches (`mcm_cache_stale_since_seconds{kind}`): the
/// kinds that are stale now.
fn stale_caches(metrics: &str) -> Vec<String> {
    metrics
        .lines()
        .filter(|line| line.starts_with("mcm_cache_stale_since_seconds{"))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            (value.parse::<f64>().ok()? > 0.0).then(|| series.to_owned())
        })
        .collect()
}

/// A 3 → 30 scale-up in flight when the API server goes away for 150 s, closing every watch as
/// a stopped kube-apiserver does (docs/behaviour.md#stale-caches): the manager leads again about
/// a second after the return, but acts only once its caches have caught up. Asserted from the
/// API server's watch history: never more Machines than replicas + surge, no machine `Unknown`
/// or `Failed` (their nodes were healthy throughout); then all 30 Running, and the MachineSet's
/// SuccessfulCreate events written. Prints when the caches caught up and all ran.
pub async fn no_stale_view_after_an_outage_with_closed_watches(
    system: Arc<System>,
) -> Result<Outcome> {
    let s = &*system;
    create_class(s, "sv-class", json!({"bootDelay": "1s"}), "2").await?;
    create(
        s,
        Kind::MachineDeployment,
        // The creation timeout must not end machines Pending through the outage.
        deployment(
            s,
            "sv-md",
            3,
            "sv-class",
            json!({"spec": {"template": {"spec": {"creationTimeout": "10m"}}}}),
        ),
    )
    .await?;
    let before = names(&wait_running(s, "sv-md", 3, 180).await?);
    eventually("the manager holds its Lease", 60, || async move {
        Ok(match renewed_at(s).await {
            Some(_) => Probe::Done(()),
            None => Probe::Waiting("no holder".to_owned()),
        })
    })
    .await?;
    let rv = crate::heartbeat::resource_version(s).await?;
    let target = i64::try_from(SCALE_TO).unwrap_or(i64::MAX);
    merge_patch(
        s,
        Kind::MachineDeployment,
        "sv-md",
        json!({"spec": {"replicas": target}}),
    )
    .await?;
    // The scale-up is under way (MachineSet scaled, machines being created) when the API goes.
    tokio::time::sleep(Duration::from_millis(700)).await;
    // On kube-apiserver the history across the outage comes from the test's own polling (a
    // restarted kube-apiserver's watch cache starts afresh): every phase seen, twice a second.
    let polled_unhealthy = Arc::new(Mutex::new(BTreeSet::new()));
    let polling = (!s.is_sandbox())
        .then(|| tokio::spawn(poll_unhealthy(system.clone(), polled_unhealthy.clone())));
    if s.is_sandbox() {
        s.sandbox_admin(
            http::Method::POST,
            "unavailable",
            Some(json!({"seconds": STALE_OUTAGE_SECONDS + 120, "closeWatches": true})),
        )
        .await?;
    } else {
        // Stopping kube-apiserver closes every watch, as a real outage does.
        s.begin_api_outage(STALE_OUTAGE_SECONDS + 120).await?;
    }
    println!(
        "stale view: scale-up 3 → {SCALE_TO} in flight; API unavailable for {STALE_OUTAGE_SECONDS}s, watches closed"
    );
    let until = Instant::now() + Duration::from_secs(STALE_OUTAGE_SECONDS);
    let mut stale_seen = Vec::new();
    while Instant::now() < until {
        if stale_seen.is_empty()
            && let Ok(metrics) = s.manager_metrics().await
        {
            stale_seen = stale_caches(&metrics);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    if s.is_sandbox() {
        s.sandbox_admin(http::Method::DELETE, "unavailable", None)
            .await?;
    } else {
        s.end_api_outage().await?;
    }
    let returned = Instant::now();
    ensure(!stale_seen.is_empty(), || {
        "the manager never reported a stale cache during the outage (mcm_cache_stale_since_seconds)"
            .to_owned()
    })?;
    let caught_up = eventually("the manager's caches caught up", 60, || async move {
        let metrics = s.manager_metrics().await?;
        let stale = stale_caches(&metrics);
        Ok(if stale.is_empty() {
            Probe::Done(returned.elapsed())
        } else {
            Probe::Waiting(format!("stale: {stale:?}"))
        })
    })
    .await?;
    wait_running(s, "sv-md", SCALE_TO, 240).await?;
    let running = returned.elapsed();
    println!(
        "stale view: caches stale during the outage: {stale_seen:?}; caught up {:.1}s and all {SCALE_TO} Running {:.1}s after the API's return",
        caught_up.as_secs_f64(),
        running.as_secs_f64()
    );

    // What the API server stored meanwhile.
    let (most, unhealthy) = if let Some(polling) = polling {
        polling.abort();
        let unhealthy = polled_unhealthy
            .lock()
            .map(|seen| seen.clone())
            .unwrap_or_default();
        // Kube's audit log has every creation since the system started (the first 3 too): no
        // machine of the scenario is deleted before this point, so the most that existed at
        // once is the number ever created.
        let completed = s.completed_requests(201).await?;
        let created = completed
            .iter()
            // A creation from generateName has no name in the audit log; the scenario's
            // namespace holds sv-md's machines only.
            .filter(|(verb, resource, namespace, _)| {
                verb == "create" && resource == "machines" && namespace == s.namespace()
            })
            .count();
        println!("stale view: {created} Machines created in all (audit log of kube-apiserver)");
        (created, unhealthy)
    } else {
        let changes =
            crate::heartbeat::history_events(mcm_e2e::objects::api(s, Kind::Machine), &rv).await?;
        let mut live: BTreeSet<String> = before.clone();
        let mut most = live.len();
        let mut unhealthy = BTreeSet::new();
        for (change, machine) in &changes {
            if mcm_e2e::objects::label(machine, "name") != Some("sv-md") {
                continue;
            }
            let machine_name = mcm_e2e::objects::name(machine).to_owned();
            let phase = mcm_e2e::objects::phase(machine);
            if phase == "Unknown" || phase == "Failed" {
                unhealthy.insert(format!("{machine_name}={phase}"));
            }
            if *change == "DELETED" {
                live.remove(&machine_name);
            } else {
                live.insert(machine_name);
            }
            most = most.max(live.len());
        }
        (most, unhealthy)
    };
    println!(
        "stale view: at most {most} machines existed at once (replicas {SCALE_TO}, maxSurge 1)"
    );
    ensure(most <= SCALE_TO + 1, || {
        format!(
            "{most} machines existed at once for {SCALE_TO} replicas + 1 surge: created again on a stale view"
        )
    })?;
    ensure(unhealthy.is_empty(), || {
        format!(
            "machines marked unhealthy around the outage although their nodes were healthy: {unhealthy:?}"
        )
    })?;
    let sets = mcm_e2e::objects::of_deployment(s, Kind::MachineSet, "sv-md").await?;
    let mut created_events = Vec::new();
    for set in &sets {
        let events = mcm_e2e::objects::events_about(s, mcm_e2e::objects::name(set)).await?;
        created_events.extend(
            events
                .into_iter()
                .filter(|event| event.starts_with("SuccessfulCreate")),
        );
    }
    println!("stale view: SuccessfulCreate events: {created_events:?}");
    ensure(!created_events.is_empty(), || {
        "no SuccessfulCreate event of the scale-up was written".to_owned()
    })?;
    delete_deployment_and_wait(s, "sv-md").await?;
    delete(s, Kind::MachineClass, "sv-class").await?;
    Ok(Outcome::Passed)
}

/// Records the machines of `sv-md` seen Unknown or Failed, polling twice a second until
/// aborted (list errors during the outage are expected and skipped).
async fn poll_unhealthy(system: Arc<System>, seen: Arc<Mutex<BTreeSet<String>>>) {
    loop {
        if let Ok(current) = machines(&system, "sv-md").await {
            for machine in &current {
                let phase = mcm_e2e::objects::phase(machine);
                if (phase == "Unknown" || phase == "Failed")
                    && let Ok(mut seen) = seen.lock()
                {
                    seen.insert(format!("{}={phase}", mcm_e2e::objects::name(machine)));
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
