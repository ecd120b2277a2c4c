//! Health endpoints, `/version` and API discovery (core, named groups, CRD groups).

use kube::Discovery;
use kube::discovery::Scope;

use crate::common::{
    EVENTUALLY, Target, discover, install_widget_crd, raw, wait_for, widget_group,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_endpoints_answer_ok() {
    let t = Target::sandbox_or_env().await;
    for path in ["/healthz", "/livez", "/readyz"] {
        let response = raw(&t.client, "GET", path, &[], vec![]).await;
        assert_eq!(
            response.status, 200,
            "GET {path}: kube-apiserver answers 200 when healthy"
        );
        assert_eq!(
            String::from_utf8_lossy(&response.body),
            "ok",
            "GET {path}: kube-apiserver answers the plain text body \"ok\""
        );
    }
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn version_reports_a_kubernetes_version() {
    let t = Target::sandbox_or_env().await;
    let info = t.client.apiserver_version().await.expect("GET /version");
    assert_eq!(info.major, "1", "/version major is \"1\": {info:?}");
    assert!(!info.minor.is_empty(), "/version minor is set: {info:?}");
    assert!(
        info.git_version.starts_with("v1."),
        "/version gitVersion looks like v1.x.y: {info:?}"
    );
    assert!(
        !info.platform.is_empty(),
        "/version platform is set: {info:?}"
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn core_v1_discovery_lists_resources_scope_verbs_and_short_names() {
    let t = Target::sandbox_or_env().await;
    let versions = t.client.list_core_api_versions().await.expect("GET /api");
    assert!(
        versions.versions.contains(&"v1".to_string()),
        "/api lists v1: {versions:?}"
    );
    let list = t
        .client
        .list_core_api_resources("v1")
        .await
        .expect("GET /api/v1");
    assert_eq!(list.group_version, "v1");
    let find = |name: &str| {
        list.resources
            .iter()
            .find(|r| r.name == name)
            .unwrap_or_else(|| panic!("/api/v1 lists resource {name:?}"))
    };
    let expectations: &[(&str, &str, bool, &[&str])] = &[
        ("namespaces", "Namespace", false, &["ns"]),
        ("pods", "Pod", true, &["po"]),
        ("nodes", "Node", false, &["no"]),
        ("configmaps", "ConfigMap", true, &["cm"]),
        ("secrets", "Secret", true, &[]),
        ("services", "Service", true, &["svc"]),
        ("events", "Event", true, &["ev"]),
        ("persistentvolumes", "PersistentVolume", false, &["pv"]),
        (
            "persistentvolumeclaims",
            "PersistentVolumeClaim",
            true,
            &["pvc"],
        ),
        ("serviceaccounts", "ServiceAccount", true, &["sa"]),
    ];
    for (name, kind, namespaced, short) in expectations {
        let r = find(name);
        assert_eq!(&r.kind, kind, "{name}: kind");
        assert_eq!(r.namespaced, *namespaced, "{name}: namespaced flag");
        for s in *short {
            assert!(
                r.short_names
                    .as_ref()
                    .is_some_and(|v| v.iter().any(|x| x == s)),
                "{name}: kube-apiserver lists short name {s:?}; got {:?}",
                r.short_names
            );
        }
        for verb in [
            "create", "delete", "get", "list", "patch", "update", "watch",
        ] {
            assert!(
                r.verbs.iter().any(|v| v == verb),
                "{name}: verb {verb} listed; got {:?}",
                r.verbs
            );
        }
        assert!(
            !r.singular_name.is_empty(),
            "{name}: singularName is set (kubectl uses it)"
        );
    }
    let pods = find("pods");
    assert!(
        pods.verbs.iter().any(|v| v == "deletecollection"),
        "pods: deletecollection verb"
    );
    let status = find("pods/status");
    assert!(
        status.verbs.iter().any(|v| v == "patch"),
        "pods/status supports patch"
    );
    let eviction = find("pods/eviction");
    assert_eq!(eviction.kind, "Eviction", "pods/eviction kind");
    assert_eq!(
        eviction.group.as_deref(),
        Some("policy"),
        "pods/eviction is served as policy/v1 Eviction"
    );
    assert_eq!(
        eviction.verbs,
        vec!["create".to_string()],
        "pods/eviction only supports create"
    );
    find("pods/binding");
    find("nodes/status");
    find("namespaces/status");
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn named_groups_are_discovered_with_preferred_versions() {
    let t = Target::sandbox_or_env().await;
    let discovery = discover(&t.client).await;
    let expect: &[(&str, &str, &str, Scope)] = &[
        ("apps", "deployments", "Deployment", Scope::Namespaced),
        ("apps", "replicasets", "ReplicaSet", Scope::Namespaced),
        ("apps", "statefulsets", "StatefulSet", Scope::Namespaced),
        ("apps", "daemonsets", "DaemonSet", Scope::Namespaced),
        ("coordination.k8s.io", "leases", "Lease", Scope::Namespaced),
        (
            "policy",
            "poddisruptionbudgets",
            "PodDisruptionBudget",
            Scope::Namespaced,
        ),
        (
            "storage.k8s.io",
            "volumeattachments",
            "VolumeAttachment",
            Scope::Cluster,
        ),
        (
            "storage.k8s.io",
            "storageclasses",
            "StorageClass",
            Scope::Cluster,
        ),
        (
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            Scope::Cluster,
        ),
        (
            "admissionregistration.k8s.io",
            "validatingwebhookconfigurations",
            "ValidatingWebhookConfiguration",
            Scope::Cluster,
        ),
        (
            "admissionregistration.k8s.io",
            "mutatingwebhookconfigurations",
            "MutatingWebhookConfiguration",
            Scope::Cluster,
        ),
        ("events.k8s.io", "events", "Event", Scope::Namespaced),
    ];
    for (group, plural, kind, scope) in expect {
        let g = discovery
            .get(group)
            .unwrap_or_else(|| panic!("group {group} is discovered (GET /apis lists it)"));
        assert_eq!(
            g.preferred_version(),
            Some("v1"),
            "{group}: preferred version is v1"
        );
        let (ar, caps) = g
            .recommended_resources()
            .into_iter()
            .find(|(ar, _)| ar.plural == *plural)
            .unwrap_or_else(|| panic!("{group}/v1 lists {plural}"));
        assert_eq!(ar.kind, *kind, "{group}/{plural} kind");
        assert_eq!(&caps.scope, scope, "{group}/{plural} scope");
        assert!(
            caps.supports_operation("watch"),
            "{group}/{plural} supports watch"
        );
    }
    let (_, deployments) = discovery
        .get("apps")
        .and_then(|g| g.recommended_kind("Deployment"))
        .expect("apps/v1 Deployment");
    let subs: Vec<_> = deployments
        .subresources
        .iter()
        .map(|(ar, _)| ar.plural.clone())
        .collect();
    for s in ["status", "scale"] {
        assert!(
            subs.iter().any(|x| x == s),
            "deployments have subresource {s}: {subs:?}"
        );
    }
    let apps = t
        .client
        .list_api_group_resources("apps/v1")
        .await
        .expect("GET /apis/apps/v1");
    let deploy = apps
        .resources
        .iter()
        .find(|r| r.name == "deployments")
        .expect("deployments");
    assert!(
        deploy
            .short_names
            .as_ref()
            .is_some_and(|v| v.iter().any(|x| x == "deploy")),
        "deployments short name deploy: {:?}",
        deploy.short_names
    );
    let scale = apps
        .resources
        .iter()
        .find(|r| r.name == "deployments/scale")
        .expect("deployments/scale");
    assert_eq!(scale.kind, "Scale");
    assert_eq!(
        scale.group.as_deref(),
        Some("autoscaling"),
        "deployments/scale is autoscaling/v1 Scale"
    );
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crd_group_is_discovered_after_creation() {
    let t = Target::sandbox_or_env().await;
    let group = widget_group(&t);
    let before = discover(&t.client).await;
    assert!(
        !before.has_group(&group),
        "group {group} must not exist before the CRD is created"
    );
    install_widget_crd(&t).await;
    // kube-apiserver publishes a new CRD's discovery shortly after Established, not with it.
    let discovery = wait_for("the CRD group appears in discovery", EVENTUALLY, || async {
        let discovery = discover(&t.client).await;
        discovery.has_group(&group).then_some(discovery)
    })
    .await;
    let g = discovery.get(&group).unwrap_or_else(|| {
        panic!("CRD group {group} appears in /apis once the CRD is Established")
    });
    let versions: Vec<_> = g.versions().collect();
    assert_eq!(
        versions,
        vec!["v1", "v1beta1"],
        "served versions by kube version priority"
    );
    assert_eq!(g.preferred_version(), Some("v1"), "preferred version");
    let (ar, caps) = g
        .recommended_kind("Widget")
        .expect("Widget in recommended resources");
    assert_eq!(ar.plural, "widgets");
    assert_eq!(caps.scope, Scope::Namespaced);
    for verb in [
        "create",
        "delete",
        "deletecollection",
        "get",
        "list",
        "patch",
        "update",
        "watch",
    ] {
        assert!(
            caps.supports_operation(verb),
            "widgets verb {verb}: {:?}",
            caps.operations
        );
    }
    let list = t
        .client
        .list_api_group_resources(&format!("{group}/v1"))
        .await
        .expect("GET /apis/<group>/v1");
    let widgets = list
        .resources
        .iter()
        .find(|r| r.name == "widgets")
        .expect("widgets listed");
    assert_eq!(
        widgets.short_names.clone().unwrap_or_default(),
        vec!["wg".to_string()],
        "short names"
    );
    assert_eq!(
        widgets.categories.clone().unwrap_or_default(),
        vec!["conformance".to_string()],
        "categories"
    );
    assert_eq!(widgets.singular_name, "widget");
    let status = list
        .resources
        .iter()
        .find(|r| r.name == "widgets/status")
        .expect("widgets/status listed");
    assert_eq!(status.kind, "Widget");
    let scale = list
        .resources
        .iter()
        .find(|r| r.name == "widgets/scale")
        .expect("widgets/scale listed");
    assert_eq!(scale.kind, "Scale");
    assert_eq!(
        scale.group.as_deref(),
        Some("autoscaling"),
        "widgets/scale is autoscaling/v1 Scale"
    );
    assert_eq!(scale.version.as_deref(), Some("v1"));
    t.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aggregated_discovery_lists_groups_and_crds() {
    let t = Target::sandbox_or_env().await;
    install_widget_crd(&t).await;
    let discovery = Discovery::new(t.client.clone())
        .run_aggregated()
        .await
        .expect("aggregated discovery (apidiscovery.k8s.io/v2) is served on /api and /apis");
    for group in [
        "",
        "apps",
        "policy",
        "coordination.k8s.io",
        "apiextensions.k8s.io",
    ] {
        assert!(
            discovery.has_group(group),
            "aggregated discovery lists group {group:?}"
        );
    }
    let g = discovery
        .get(&widget_group(&t))
        .expect("the CRD group is in aggregated discovery");
    let (ar, caps) = g.recommended_kind("Widget").expect("Widget");
    assert_eq!(ar.plural, "widgets");
    let subs: Vec<String> = caps
        .subresources
        .iter()
        .map(|(r, _)| r.plural.clone())
        .collect();
    assert!(
        subs.contains(&"status".to_string()) && subs.contains(&"scale".to_string()),
        "aggregated discovery lists subresources: {subs:?}"
    );
    let (_, pods) = discovery
        .get("")
        .and_then(|g| g.recommended_kind("Pod"))
        .expect("core Pod");
    assert_eq!(pods.scope, Scope::Namespaced);
    t.finish().await;
}
