//! Sandbox-only configuration: plain HTTP, a chosen kubeconfig path, and several independent
//! sandboxes in one process (control and target clusters).

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use mcm_sandbox::{Sandbox, SandboxConfig};

use crate::common::{REAL_CLUSTER_ENV, client_from_kubeconfig, configmap, install_crypto};

fn skip_on_real_cluster(test: &str) -> bool {
    let real = std::env::var_os(REAL_CLUSTER_ENV).is_some();
    if real {
        eprintln!("SKIPPED (real cluster): {test}: tests the sandbox's own configuration");
    }
    real
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_with_chosen_kubeconfig_path() {
    if skip_on_real_cluster("plain_http_with_chosen_kubeconfig_path") {
        return;
    }
    install_crypto();
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("nested").join("kubeconfig.yaml");
    let sb = Sandbox::start(SandboxConfig {
        tls: false,
        kubeconfig_path: Some(path.clone()),
        name: "plain".into(),
        ..Default::default()
    })
    .await
    .expect("start plain-HTTP sandbox");
    assert!(
        sb.url().starts_with("http://127.0.0.1:"),
        "tls: false serves plain HTTP: {}",
        sb.url()
    );
    assert_eq!(
        sb.kubeconfig_path(),
        path.as_path(),
        "the kubeconfig is written where configured"
    );
    let text = std::fs::read_to_string(&path).expect("kubeconfig file exists");
    assert_eq!(
        text,
        sb.kubeconfig_yaml(),
        "file and kubeconfig_yaml() agree"
    );
    assert!(
        text.contains("plain"),
        "the configured name is the context/cluster name"
    );
    let client = client_from_kubeconfig(&path).await;
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    cms.create(&PostParams::default(), &configmap("over-http", &[], &[]))
        .await
        .expect("a client from the written kubeconfig works over plain HTTP");
    sb.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sandboxes_in_one_process_are_independent() {
    if skip_on_real_cluster("two_sandboxes_in_one_process_are_independent") {
        return;
    }
    install_crypto();
    let control = Sandbox::start(SandboxConfig {
        name: "control".into(),
        ..Default::default()
    })
    .await
    .expect("control sandbox");
    let target = Sandbox::start(SandboxConfig {
        name: "target".into(),
        ..Default::default()
    })
    .await
    .expect("target sandbox");
    assert_ne!(
        control.address(),
        target.address(),
        "each sandbox has its own port"
    );
    let in_control: Api<ConfigMap> = Api::namespaced(control.client(), "default");
    let in_target: Api<ConfigMap> = Api::namespaced(target.client(), "default");
    in_control
        .create(&PostParams::default(), &configmap("only-here", &[], &[]))
        .await
        .expect("create in control");
    assert!(
        matches!(in_target.get("only-here").await, Err(kube::Error::Api(s)) if s.code == 404),
        "objects of one sandbox are invisible in another"
    );
    control.shutdown().await;
    in_target
        .create(
            &PostParams::default(),
            &configmap("still-serving", &[], &[]),
        )
        .await
        .expect("shutting one sandbox down leaves the other serving");
    let after = tokio::time::timeout(
        std::time::Duration::from_secs(20),
        in_control.get("only-here"),
    )
    .await
    .expect("requests to a shut-down sandbox fail promptly instead of hanging");
    assert!(
        after.is_err(),
        "a shut-down sandbox no longer answers: {after:?}"
    );
    target.shutdown().await;
}
