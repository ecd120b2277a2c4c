//! An API outage with the watches closed, in the middle of a scale-up, against a manager that
//! elects a leader (docs/behaviour.md#stale-caches, "After a watch break"): the leadership term
//! that starts after the API's return must not act on caches that have not caught up since the
//! break.

use std::time::Duration;

use kube::api::{ListParams, PostParams};
use mcm_api::v1alpha1::{Machine, MachineSet};
use mcm_sandbox::{ErrorRule, UnavailableMode, Verb};
use serde_json::json;

use crate::harness::{NAMESPACE, World, events_with_reason, eventually, scrape};

const LIMIT: Duration = Duration::from_secs(60);

/// The value of the first series of `name` whose labels contain `labels`.
fn metric(text: &str, name: &str, labels: &str) -> Option<f64> {
    text.lines()
        .filter(|line| line.starts_with(name) && line.contains(labels))
        .find_map(|line| line.rsplit(' ').next()?.parse().ok())
}

async fn leading(world: &World) -> bool {
    metric(
        &scrape(world).await,
        "leader_election_master_status",
        "name=\"machine-controller-manager\"",
    ) == Some(1.0)
}

async fn live_machines(world: &World) -> Vec<Machine> {
    world
        .machines()
        .list(&ListParams::default().labels("set=outage"))
        .await
        .map(|list| list.items)
        .unwrap_or_default()
}

/// Six machines are created, their watch events are held back (the cache lags 2 s) and the
/// watches close as the API goes away for long enough to lose the Lease. The next term starts
/// about a second after the API's return, while the re-established watches would still replay
/// the creations 2 s late: it must wait for its caches (a fresh list) instead of creating the six
/// machines again. Before, it created 6 more (12 for 6 replicas). The SuccessfulCreate event,
/// whose first writes fail, is written all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_term_after_an_outage_with_closed_watches_waits_for_fresh_caches() {
    let mut world = World::start().await;
    let Some(faults) = world.control_faults() else {
        println!("SKIPPED: needs the control sandbox's fault injection");
        return;
    };
    world
        .start_manager(
            mcm_controller::manager::compose::named(&["machineset"]),
            &[
                "--leader-elect=true",
                "--leader-elect-lease-duration=3s",
                "--leader-elect-renew-deadline=2s",
                "--leader-elect-retry-period=1s",
            ],
        )
        .await;
    eventually("the manager leads", LIMIT, || async {
        leading(&world).await.then_some(())
    })
    .await;

    faults.set_watch_delay(Duration::from_secs(2));
    // The SuccessfulCreate event of the creations meets the API server failing, as it would
    // when written in the last moment before an outage.
    faults.inject_errors(ErrorRule {
        verb: Some(Verb::Create),
        resource: Some("events".to_owned()),
        status: 503,
        rate: 1.0,
        count: Some(3),
    });
    let set: MachineSet = serde_json::from_value(json!({
        "apiVersion": "machine.sapcloud.io/v1alpha1",
        "kind": "MachineSet",
        "metadata": {"name": "outage", "namespace": NAMESPACE},
        "spec": {
            "replicas": 6,
            "selector": {"matchLabels": {"set": "outage"}},
            "template": {
                "metadata": {"labels": {"set": "outage"}},
                "spec": {"class": {"kind": "MachineClass", "name": "cls"}},
            },
        },
    }))
    .expect("machine set literal");
    world
        .machine_sets()
        .create(&PostParams::default(), &set)
        .await
        .expect("create the machine set");
    eventually("six machines in the API", LIMIT, || async {
        (live_machines(&world).await.len() == 6).then_some(())
    })
    .await;

    // The outage begins before the cache has seen the creations, and closes every watch.
    faults.set_unavailable(
        Duration::from_secs(120),
        UnavailableMode::ServiceUnavailable,
    );
    faults.close_all_watches();
    eventually("the machines cache reported stale", LIMIT, || async {
        metric(
            &scrape(&world).await,
            "mcm_cache_stale_since_seconds",
            "kind=\"machines\"",
        )
        .filter(|since| *since > 0.0)
    })
    .await;
    eventually("the Lease lost in the outage", LIMIT, || async {
        (!leading(&world).await).then_some(())
    })
    .await;
    // Past the SuccessfulCreate event's coalescing window (10 s), so the held one is due now.
    tokio::time::sleep(Duration::from_secs(10)).await;
    faults.clear_unavailable();

    eventually("the manager leads again", LIMIT, || async {
        leading(&world).await.then_some(())
    })
    .await;
    eventually("the machines cache caught up", LIMIT, || async {
        (metric(
            &scrape(&world).await,
            "mcm_cache_stale_since_seconds",
            "kind=\"machines\"",
        ) == Some(0.0))
        .then_some(())
    })
    .await;
    // Long enough for the replayed watch events (2 s late) and a pass on them.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let created = faults.counters().get(Verb::Create, "machines", 201);
    let machines = live_machines(&world).await;
    assert_eq!(
        created, 6,
        "machines created for 6 replicas across the outage (the new term acted on a stale cache)"
    );
    assert_eq!(machines.len(), 6, "machines of the set after the outage");

    eventually("the SuccessfulCreate event written", LIMIT, || async {
        events_with_reason(&world, "SuccessfulCreate")
            .await
            .into_iter()
            .find(|event| {
                event
                    .message
                    .as_deref()
                    .is_some_and(|message| message.starts_with("Created 6 machines"))
            })
    })
    .await;
    faults.set_watch_delay(Duration::ZERO);
    world.stop_manager().await.expect("clean stop");
}
