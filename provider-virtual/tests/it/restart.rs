//! A restart of the provider loses no VM and never duplicates one; injected failures and
//! GetVolumeIDs behave as documented.

use std::sync::Arc;
use std::time::Duration;

use mcm_provider_proto::conformance::machine;
use mcm_provider_proto::{BoundServer, Code, DriverClient, Endpoint, SecretData};
use mcm_provider_virtual::driver::{Fleet, VirtualDriver};
use serde_json::json;
use tokio::sync::oneshot;

use crate::common::class;

struct Provider {
    client: DriverClient,
    stop: oneshot::Sender<()>,
    server: tokio::task::JoinHandle<Result<(), mcm_provider_proto::ServeError>>,
}

async fn start(state_file: &std::path::Path, socket: &std::path::Path) -> Provider {
    let fleet = Arc::new(Fleet::open(state_file.to_owned()).unwrap());
    let bound = BoundServer::bind(&Endpoint::Unix(socket.to_owned()))
        .await
        .unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(
        bound.serve(Arc::new(VirtualDriver::new(fleet)), async move {
            let _ = stopped.await;
        }),
    );
    let client = DriverClient::connect(&Endpoint::Unix(socket.to_owned()), Duration::from_secs(20))
        .await
        .unwrap();
    Provider {
        client,
        stop,
        server,
    }
}

impl Provider {
    async fn stop(self) {
        let _ = self.stop.send(());
        self.server.await.unwrap().unwrap();
    }
}

#[tokio::test]
async fn a_restart_loses_no_vm_and_duplicates_none() {
    let dir = tempfile::tempdir().unwrap();
    let (state, socket) = (
        dir.path().join("state.json"),
        dir.path().join("driver.sock"),
    );
    let class = class("c", json!({}));
    let secret = SecretData::new();
    let provider = start(&state, &socket).await;
    let mut before = Vec::new();
    for index in 0..3 {
        let created = provider
            .client
            .create_machine(
                &machine("shoot--test", &format!("m{index}"), "c", None),
                &class,
                &secret,
            )
            .await
            .unwrap();
        before.push(created.provider_id);
    }
    provider.stop().await;

    let provider = start(&state, &socket).await;
    let listed = provider
        .client
        .list_machines(&class, &secret)
        .await
        .unwrap();
    assert_eq!(listed.keys().cloned().collect::<Vec<_>>(), {
        let mut sorted = before.clone();
        sorted.sort();
        sorted
    });
    // The controller retries a create it is unsure about: the same VM comes back.
    let again = provider
        .client
        .create_machine(&machine("shoot--test", "m1", "c", None), &class, &secret)
        .await
        .unwrap();
    assert_eq!(again.provider_id, before[1]);
    let fresh = provider
        .client
        .create_machine(&machine("shoot--test", "m3", "c", None), &class, &secret)
        .await
        .unwrap();
    assert!(
        !before.contains(&fresh.provider_id),
        "IDs are not reused after a restart"
    );
    assert_eq!(
        provider
            .client
            .list_machines(&class, &secret)
            .await
            .unwrap()
            .len(),
        4
    );
    provider.stop().await;
}

#[tokio::test]
async fn injected_failures_are_served_then_calls_succeed() {
    let dir = tempfile::tempdir().unwrap();
    let provider = start(
        &dir.path().join("state.json"),
        &dir.path().join("driver.sock"),
    )
    .await;
    let class = class(
        "c",
        json!({
            "requiresInitialization": true,
            "failures": {
                "create": {"code": "ResourceExhausted", "times": 2},
                "initialize": {"code": "Uninitialized", "times": 1},
                "delete": {"code": "Unavailable", "times": 1},
            }
        }),
    );
    let secret = SecretData::new();
    let m = machine("shoot--test", "flaky", "c", None);
    for _ in 0..2 {
        let error = provider
            .client
            .create_machine(&m, &class, &secret)
            .await
            .unwrap_err();
        assert_eq!(error.code, Code::ResourceExhausted, "{error}");
    }
    let created = provider
        .client
        .create_machine(&m, &class, &secret)
        .await
        .unwrap();
    let status = provider
        .client
        .get_machine_status(&m, &class, &secret)
        .await
        .unwrap_err();
    assert_eq!(status.code(), Code::Uninitialized);
    assert_eq!(status.response.unwrap().provider_id, created.provider_id);
    let error = provider
        .client
        .initialize_machine(&m, &class, &secret)
        .await
        .unwrap_err();
    assert_eq!(error.code, Code::Uninitialized);
    provider
        .client
        .initialize_machine(&m, &class, &secret)
        .await
        .unwrap();
    assert_eq!(
        provider
            .client
            .get_machine_status(&m, &class, &secret)
            .await
            .unwrap()
            .provider_id,
        created.provider_id
    );
    let error = provider
        .client
        .delete_machine(&m, &class, &secret)
        .await
        .unwrap_err();
    assert_eq!(error.code, Code::Unavailable);
    provider
        .client
        .delete_machine(&m, &class, &secret)
        .await
        .unwrap();
    let error = provider
        .client
        .get_machine_status(&m, &class, &secret)
        .await
        .unwrap_err();
    assert_eq!(error.code(), Code::NotFound);
    provider.stop().await;
}

#[tokio::test]
async fn get_volume_ids_over_grpc() {
    let dir = tempfile::tempdir().unwrap();
    let provider = start(
        &dir.path().join("state.json"),
        &dir.path().join("driver.sock"),
    )
    .await;
    let specs: Vec<k8s_openapi::api::core::v1::PersistentVolumeSpec> = vec![
        serde_json::from_value(json!({"csi": {"driver": "virtual.csi", "volumeHandle": "vol-a"}}))
            .unwrap(),
        serde_json::from_value(json!({"awsElasticBlockStore": {"volumeID": "vol-b"}})).unwrap(),
        serde_json::from_value(json!({"nfs": {"server": "s", "path": "/"}})).unwrap(),
    ];
    assert_eq!(
        provider.client.get_volume_ids(&specs).await.unwrap(),
        vec!["vol-a", "vol-b"]
    );
    provider.stop().await;
}

#[tokio::test]
async fn concurrent_creates_are_all_on_disk_when_answered() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state.json");
    let provider = start(&state, &dir.path().join("driver.sock")).await;
    let class = class("c", json!({}));
    let secret = SecretData::new();
    let created: Vec<String> = futures::future::join_all((0..64).map(|index| {
        let (client, class, secret) = (&provider.client, &class, &secret);
        async move {
            client
                .create_machine(
                    &machine("shoot--test", &format!("c{index}"), "c", None),
                    class,
                    secret,
                )
                .await
                .unwrap()
                .provider_id
        }
    }))
    .await;
    // Read the file while the provider still runs: every answered create is already durable.
    let on_disk = mcm_provider_virtual::state::load(&state).unwrap();
    for provider_id in &created {
        assert!(
            on_disk.vms.contains_key(provider_id),
            "{provider_id} answered but not on disk"
        );
    }
    assert_eq!(on_disk.vms.len(), 64);
    provider.stop().await;
}
