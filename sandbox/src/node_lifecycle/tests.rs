use super::*;

fn t(s: &str) -> Timestamp {
    s.parse().unwrap()
}

const T0: &str = "2026-01-01T00:00:00Z";

fn node(name: &str, ready: Option<(&str, &str)>) -> Value {
    let mut n = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "uid": format!("uid-{name}"), "creationTimestamp": "2025-12-31T23:00:00Z"},
        "spec": {},
        "status": {"conditions": []}
    });
    if let Some((status, heartbeat)) = ready {
        n["status"]["conditions"] = json!([
            {"type": "Ready", "status": status, "reason": "KubeletReady", "message": "kubelet is posting ready status",
             "lastHeartbeatTime": heartbeat, "lastTransitionTime": "2025-12-31T23:00:10Z"},
            {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory",
             "message": "m", "lastHeartbeatTime": heartbeat, "lastTransitionTime": "2025-12-31T23:00:10Z"},
            {"type": "NetworkUnavailable", "status": "False", "reason": "RouteCreated",
             "message": "n", "lastHeartbeatTime": heartbeat, "lastTransitionTime": "2025-12-31T23:00:10Z"}
        ]);
    }
    n
}

fn lease(renew: &str) -> Value {
    json!({"spec": {"holderIdentity": "n", "leaseDurationSeconds": 40, "renewTime": renew}})
}

fn cfg() -> NodeMonitorConfig {
    NodeMonitorConfig::default()
}

fn secs(n: i64) -> jiff::SignedDuration {
    jiff::SignedDuration::from_secs(n)
}

#[test]
fn a_node_first_seen_counts_from_now_and_one_that_never_posted_from_its_creation() {
    let now = t(T0);
    let (p, grace) = observe(
        None,
        &node("a", Some(("True", "2025-12-31T23:59:00Z"))),
        None,
        now,
        &cfg(),
    );
    assert_eq!(p.at, now);
    assert_eq!(grace, Duration::from_secs(40));
    let (p, grace) = observe(None, &node("b", None), None, now, &cfg());
    assert_eq!(p.at, t("2025-12-31T23:00:00Z"));
    assert_eq!(grace, Duration::from_secs(60));
    assert!(
        lapsed(&p, grace, now),
        "created an hour ago and never posted"
    );
}

#[test]
fn a_new_status_heartbeat_or_a_newer_lease_renews_the_probe_and_nothing_else_does() {
    let n = node("a", Some(("True", "2026-01-01T00:00:00Z")));
    let (p0, _) = observe(
        None,
        &n,
        Some(&lease("2026-01-01T00:00:00.000000Z")),
        t(T0),
        &cfg(),
    );
    // Same heartbeat, same lease 30 s later: the probe stays.
    let later = t(T0) + secs(30);
    let (p1, grace) = observe(
        Some(&p0),
        &n,
        Some(&lease("2026-01-01T00:00:00.000000Z")),
        later,
        &cfg(),
    );
    assert_eq!(p1.at, t(T0));
    assert!(!lapsed(&p1, grace, later));
    // An older lease renewTime does not count either.
    let (p1b, _) = observe(
        Some(&p1),
        &n,
        Some(&lease("2025-12-31T00:00:00.000000Z")),
        later,
        &cfg(),
    );
    assert_eq!(p1b.at, t(T0));
    // A newer lease renewal does.
    let (p2, _) = observe(
        Some(&p1),
        &n,
        Some(&lease("2026-01-01T00:00:20.000000Z")),
        later,
        &cfg(),
    );
    assert_eq!(p2.at, later);
    // A new status heartbeat does (even with the lease unchanged).
    let n2 = node("a", Some(("True", "2026-01-01T00:00:45Z")));
    let much_later = t(T0) + secs(50);
    let (p3, _) = observe(
        Some(&p2),
        &n2,
        Some(&lease("2026-01-01T00:00:20.000000Z")),
        much_later,
        &cfg(),
    );
    assert_eq!(p3.at, much_later);
    // Exactly at the grace period it has not lapsed yet; a second later it has.
    assert!(!lapsed(&p3, Duration::from_secs(40), much_later + secs(40)));
    assert!(lapsed(&p3, Duration::from_secs(40), much_later + secs(41)));
}

#[test]
fn a_recreated_node_starts_afresh() {
    let n = node("a", Some(("True", "2026-01-01T00:00:00Z")));
    let (mut p, _) = observe(None, &n, None, t(T0), &cfg());
    p.uid = "an-older-node".into();
    let later = t(T0) + secs(100);
    let (p2, _) = observe(Some(&p), &n, None, later, &cfg());
    assert_eq!(p2.at, later);
    assert_eq!(p2.uid, "uid-a");
}

#[test]
fn lapsed_nodes_get_every_monitored_condition_unknown_like_kube() {
    let n = node("a", Some(("True", "2026-01-01T00:00:00Z")));
    let now = "2026-01-01T00:01:00Z";
    let c = unknown_conditions(&n, now).unwrap();
    let by_type = |ty: &str| c.iter().find(|c| c["type"] == ty).unwrap().clone();
    let ready = by_type("Ready");
    assert_eq!(ready["status"], "Unknown");
    assert_eq!(ready["reason"], "NodeStatusUnknown");
    assert_eq!(ready["message"], "Kubelet stopped posting node status.");
    assert_eq!(ready["lastHeartbeatTime"], "2026-01-01T00:00:00Z", "kept");
    assert_eq!(ready["lastTransitionTime"], now);
    assert_eq!(by_type("MemoryPressure")["status"], "Unknown");
    // Missing standard conditions are added as never updated.
    for ty in ["DiskPressure", "PIDPressure"] {
        let added = by_type(ty);
        assert_eq!(added["status"], "Unknown");
        assert_eq!(added["reason"], "NodeStatusNeverUpdated");
        assert_eq!(added["message"], "Kubelet never posted node status.");
        assert_eq!(added["lastHeartbeatTime"], "2025-12-31T23:00:00Z");
        assert_eq!(added["lastTransitionTime"], now);
    }
    // NetworkUnavailable belongs to the network plugin.
    assert_eq!(by_type("NetworkUnavailable")["status"], "False");
    assert_eq!(c.len(), 5);
    // Already Unknown: nothing to write.
    let mut marked = n.clone();
    marked["status"]["conditions"] = json!(c);
    assert_eq!(unknown_conditions(&marked, now), None);
    // A node without any condition gets all four.
    let bare = unknown_conditions(&node("b", None), now).unwrap();
    assert_eq!(bare.len(), 4);
    assert!(bare.iter().all(|c| c["reason"] == "NodeStatusNeverUpdated"));
}

#[test]
fn taints_follow_the_ready_condition() {
    let now = "2026-01-01T00:01:00Z";
    let mut n = node("a", Some(("Unknown", "2026-01-01T00:00:00Z")));
    n["spec"]["taints"] = json!([{"key": "dedicated", "value": "x", "effect": "NoSchedule"}]);
    let unreachable = taints(&n, true, now).unwrap();
    assert_eq!(
        unreachable,
        vec![
            json!({"key": "dedicated", "value": "x", "effect": "NoSchedule"}),
            json!({"key": UNREACHABLE_TAINT, "effect": "NoSchedule", "timeAdded": now}),
            json!({"key": UNREACHABLE_TAINT, "effect": "NoExecute", "timeAdded": now}),
        ]
    );
    n["spec"]["taints"] = json!(unreachable);
    assert_eq!(
        taints(&n, true, "2026-01-01T00:05:00Z"),
        None,
        "kept with their timeAdded"
    );
    // Full disruption: no NoExecute taint.
    let calm = taints(&n, false, now).unwrap();
    assert_eq!(calm.len(), 2);
    assert!(calm.iter().all(|t| t["effect"] != "NoExecute"));
    // Ready=False swaps unreachable for not-ready.
    n["status"]["conditions"][0]["status"] = json!("False");
    let later = "2026-01-01T00:02:00Z";
    let not_ready = taints(&n, true, later).unwrap();
    assert_eq!(
        not_ready,
        vec![
            json!({"key": "dedicated", "value": "x", "effect": "NoSchedule"}),
            json!({"key": NOT_READY_TAINT, "effect": "NoSchedule", "timeAdded": later}),
            json!({"key": NOT_READY_TAINT, "effect": "NoExecute", "timeAdded": later}),
        ]
    );
    // Ready=True removes the lifecycle taints only.
    n["status"]["conditions"][0]["status"] = json!("True");
    assert_eq!(
        taints(&n, true, later).unwrap(),
        vec![json!({"key": "dedicated", "value": "x", "effect": "NoSchedule"})]
    );
    // A healthy untainted node needs nothing.
    assert_eq!(taints(&node("b", Some(("True", T0))), true, now), None);
    // A node that never posted Ready gets no taint from this pass.
    assert_eq!(taints(&node("c", None), true, now), None);
}

fn nodes_gr() -> (String, String) {
    (String::new(), "nodes".into())
}

fn leases_gr() -> (String, String) {
    ("coordination.k8s.io".into(), "leases".into())
}

fn stored(store: &Store, name: &str) -> Value {
    (*store.get(&nodes_gr(), "", name).unwrap()).clone()
}

fn put_lease(store: &Store, name: &str, renew: &str) {
    let obj = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name, "namespace": LEASE_NAMESPACE},
        "spec": {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": renew}});
    match store.get(&leases_gr(), LEASE_NAMESPACE, name) {
        Some(cur) => {
            let mut next = (*cur).clone();
            next["spec"]["renewTime"] = json!(renew);
            store
                .update(&leases_gr(), LEASE_NAMESPACE, name, next, None, false)
                .unwrap();
        }
        None => {
            store.create(&leases_gr(), obj, false).unwrap();
        }
    }
}

#[test]
fn a_pass_marks_the_silent_node_only_and_clears_it_when_the_kubelet_posts_ready_again() {
    let store = Store::new(1000);
    for name in ["alive", "silent"] {
        store
            .create(&nodes_gr(), node(name, Some(("True", T0))), false)
            .unwrap();
    }
    let config = NodeMonitorConfig::default();
    let mut monitor = NodeMonitor::default();
    let t0 = t(T0);
    assert!(monitor.pass(&store, &config, t0).is_empty());
    // "alive" renews its Lease every 10 s; "silent" does nothing.
    for step in 1..=5 {
        let now = t0 + secs(10 * step);
        put_lease(
            &store,
            "alive",
            &format!("{}.000000Z", format_time(now).trim_end_matches('Z')),
        );
        let written = monitor.pass(&store, &config, now);
        if step < 5 {
            assert!(
                written.is_empty(),
                "nothing lapsed at {step}0 s: {written:?}"
            );
        } else {
            assert_eq!(written, vec!["silent".to_owned()]);
        }
    }
    let silent = stored(&store, "silent");
    assert_eq!(ready_status(&silent), Some("Unknown"));
    assert_eq!(silent["status"]["conditions"][0]["reason"], UNKNOWN_REASON);
    let keys: Vec<(String, String)> = silent["spec"]["taints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["key"].as_str().unwrap().to_owned(),
                t["effect"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        keys,
        vec![
            (UNREACHABLE_TAINT.to_owned(), "NoSchedule".to_owned()),
            (UNREACHABLE_TAINT.to_owned(), "NoExecute".to_owned())
        ]
    );
    assert_eq!(ready_status(&stored(&store, "alive")), Some("True"));
    assert!(stored(&store, "alive")["spec"].get("taints").is_none());
    // A second pass writes nothing more.
    assert!(monitor.pass(&store, &config, t0 + secs(55)).is_empty());
    // The kubelet posts Ready=True again: the taints go, the node stays Ready.
    let mut back = stored(&store, "silent");
    back["status"]["conditions"] =
        node("silent", Some(("True", "2026-01-01T00:01:00Z")))["status"]["conditions"].clone();
    store
        .update(&nodes_gr(), "", "silent", back, None, false)
        .unwrap();
    assert_eq!(
        monitor.pass(&store, &config, t0 + secs(60)),
        vec!["silent".to_owned()]
    );
    let silent = stored(&store, "silent");
    assert_eq!(ready_status(&silent), Some("True"));
    assert!(silent["spec"].get("taints").is_none(), "{silent}");
    // And that heartbeat counts: 40 s later it has not lapsed again ("alive" keeps renewing).
    put_lease(&store, "alive", "2026-01-01T00:01:30.000000Z");
    assert!(monitor.pass(&store, &config, t0 + secs(100)).is_empty());
    assert_eq!(
        monitor.pass(&store, &config, t0 + secs(101)),
        vec!["silent".to_owned()]
    );
}

#[test]
fn when_every_node_lapses_no_noexecute_taint_is_added() {
    let store = Store::new(1000);
    for name in ["a", "b"] {
        store
            .create(&nodes_gr(), node(name, Some(("True", T0))), false)
            .unwrap();
    }
    let config = NodeMonitorConfig::default();
    let mut monitor = NodeMonitor::default();
    monitor.pass(&store, &config, t(T0));
    let mut written = monitor.pass(&store, &config, t(T0) + secs(41));
    written.sort();
    assert_eq!(written, vec!["a".to_owned(), "b".to_owned()]);
    for name in ["a", "b"] {
        let n = stored(&store, name);
        assert_eq!(ready_status(&n), Some("Unknown"));
        let effects: Vec<&str> = n["spec"]["taints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["effect"].as_str().unwrap())
            .collect();
        assert_eq!(effects, vec!["NoSchedule"], "{name}");
    }
}

#[test]
fn short_grace_periods_shorten_the_period() {
    let c = NodeMonitorConfig::with_grace_period(Duration::from_secs(2));
    assert_eq!(c.period, Duration::from_millis(400));
    assert_eq!(c.startup_grace_period, Duration::from_secs(60));
    assert_eq!(
        NodeMonitorConfig::with_grace_period(Duration::from_secs(40)).period,
        Duration::from_secs(5)
    );
}
