//! The SDK over real gRPC: every machine code crosses the wire in both directions, the response of
//! an `Uninitialized` status survives, JSON objects are decoded, deadlines cut calls short and the
//! server shuts down gracefully, on a Unix socket and on TCP.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::NodeAddress;
use mcm_provider_proto::conformance::machine;
use mcm_provider_proto::pb::v1;
use mcm_provider_proto::{
    BoundServer, Capabilities, Code, CreateMachineResponse, DeleteMachineResponse, Driver,
    DriverClient, Endpoint, ListMachinesRequest, MachineError, MachineList, MachineRequest,
    MachineStatus, Method, SecretData, StatusError,
};
use tokio::sync::oneshot;

use crate::memory_driver::class;

/// Behaviour chosen by the machine name: `code-<n>` fails with code n, `uninit` is Uninitialized
/// with a status, `slow` never answers, `gate` waits for the test to open it.
struct ScriptedDriver {
    gate: tokio::sync::Mutex<Option<oneshot::Receiver<()>>>,
    entered: tokio::sync::Mutex<Option<oneshot::Sender<()>>>,
}

fn scripted_error(name: &str) -> Option<MachineError> {
    let value: i32 = name.strip_prefix("code-")?.parse().ok()?;
    Some(MachineError::new(
        Code::from_value(value)?,
        format!("scripted failure [{value}] for {name}"),
    ))
}

impl Driver for ScriptedDriver {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            provider_name: "scripted".into(),
            methods: vec![Method::CreateMachine, Method::GetMachineStatus],
            hot_updatable_paths: vec![],
            driver_version: "1".into(),
        }
    }

    async fn create_machine(
        &self,
        request: MachineRequest,
    ) -> Result<CreateMachineResponse, MachineError> {
        let name = request.machine.metadata.name.clone().unwrap_or_default();
        if let Some(error) = scripted_error(&name) {
            return Err(error);
        }
        match name.as_str() {
            "slow" => tokio::time::sleep(Duration::from_secs(600)).await,
            "gate" => {
                if let Some(entered) = self.entered.lock().await.take() {
                    let _ = entered.send(());
                }
                let gate = self.gate.lock().await.take();
                if let Some(gate) = gate {
                    let _ = gate.await;
                }
            }
            _ => {}
        }
        let user_data = String::from_utf8_lossy(
            request
                .secret
                .get("userData")
                .map(Vec::as_slice)
                .unwrap_or_default(),
        );
        Ok(CreateMachineResponse {
            provider_id: format!("scripted:///{name}"),
            node_name: name,
            last_known_state: format!(
                "class={} provider={} userData={user_data}",
                request.class.metadata.name.unwrap_or_default(),
                request.class.provider.unwrap_or_default()
            ),
            addresses: vec![NodeAddress {
                type_: "InternalIP".into(),
                address: "10.1.2.3".into(),
            }],
        })
    }

    async fn delete_machine(
        &self,
        _request: MachineRequest,
    ) -> Result<DeleteMachineResponse, MachineError> {
        Ok(DeleteMachineResponse::default())
    }

    async fn get_machine_status(
        &self,
        request: MachineRequest,
    ) -> Result<MachineStatus, StatusError> {
        let name = request.machine.metadata.name.clone().unwrap_or_default();
        if let Some(error) = scripted_error(&name) {
            return Err(error.into());
        }
        let status = MachineStatus {
            provider_id: format!("scripted:///{name}"),
            node_name: name.clone(),
            addresses: vec![NodeAddress {
                type_: "InternalIP".into(),
                address: "10.9.9.9".into(),
            }],
        };
        if name == "uninit" {
            return Err(StatusError::uninitialized(
                "waiting for network setup",
                status,
            ));
        }
        Ok(status)
    }

    async fn list_machines(
        &self,
        _request: ListMachinesRequest,
    ) -> Result<MachineList, MachineError> {
        Ok(MachineList::new())
    }
}

struct Running {
    client: DriverClient,
    stop: Option<oneshot::Sender<()>>,
    server: tokio::task::JoinHandle<Result<(), mcm_provider_proto::ServeError>>,
    gate: Option<oneshot::Sender<()>>,
    entered: Option<oneshot::Receiver<()>>,
    endpoint: Endpoint,
}

async fn start(endpoint: Endpoint) -> Running {
    let (gate_open, gate) = oneshot::channel();
    let (entered_tx, entered) = oneshot::channel();
    let driver = Arc::new(ScriptedDriver {
        gate: tokio::sync::Mutex::new(Some(gate)),
        entered: tokio::sync::Mutex::new(Some(entered_tx)),
    });
    let bound = BoundServer::bind(&endpoint).await.unwrap();
    let endpoint = bound.local_endpoint().clone();
    let (stop, stopped) = oneshot::channel::<()>();
    let server = tokio::spawn(bound.serve(driver, async move {
        let _ = stopped.await;
    }));
    let client = DriverClient::connect(&endpoint, Duration::from_secs(20))
        .await
        .unwrap();
    Running {
        client,
        stop: Some(stop),
        server,
        gate: Some(gate_open),
        entered: Some(entered),
        endpoint,
    }
}

fn loopback() -> Endpoint {
    Endpoint::Tcp("127.0.0.1:0".parse().unwrap())
}

fn secret() -> SecretData {
    SecretData::from([("userData".to_owned(), b"#!/bin/sh".to_vec())])
}

async fn every_code_crosses_the_wire(running: &Running) {
    let class = class("c", serde_json::json!({}), "scripted");
    for code in Code::ALL {
        let machine = machine("ns", &format!("code-{}", code.value()), "c", None);
        let error = running
            .client
            .create_machine(&machine, &class, &secret())
            .await
            .unwrap_err();
        assert_eq!(error.code, code, "CreateMachine {error}");
        assert_eq!(
            error.message,
            format!(
                "scripted failure [{}] for code-{}",
                code.value(),
                code.value()
            )
        );
        let error = running
            .client
            .get_machine_status(&machine, &class, &secret())
            .await
            .unwrap_err();
        assert_eq!(error.code(), code, "GetMachineStatus {error}");
        assert_eq!(error.response, None);
    }
}

#[tokio::test]
async fn every_code_crosses_a_unix_socket_and_tcp() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("sub/driver.sock");
    let unix = start(Endpoint::Unix(socket.clone())).await;
    every_code_crosses_the_wire(&unix).await;
    let tcp = start(loopback()).await;
    every_code_crosses_the_wire(&tcp).await;
    for mut running in [unix, tcp] {
        let _ = running.stop.take().map(|stop| stop.send(()));
        running.server.await.unwrap().unwrap();
    }
    assert!(!socket.exists(), "the socket file is removed on shutdown");
}

#[tokio::test]
async fn a_stale_socket_file_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("driver.sock");
    std::fs::write(&socket, b"stale").unwrap();
    let running = start(Endpoint::Unix(socket)).await;
    assert_eq!(
        running
            .client
            .get_capabilities()
            .await
            .unwrap()
            .provider_name,
        "scripted"
    );
}

#[tokio::test]
async fn success_decodes_objects_and_returns_typed_responses() {
    let running = start(loopback()).await;
    let class = class("my-class", serde_json::json!({}), "scripted");
    let created = running
        .client
        .create_machine(&machine("ns", "m1", "my-class", None), &class, &secret())
        .await
        .unwrap();
    assert_eq!(created.provider_id, "scripted:///m1");
    assert_eq!(created.node_name, "m1");
    assert_eq!(
        created.last_known_state,
        "class=my-class provider=scripted userData=#!/bin/sh"
    );
    assert_eq!(created.addresses[0].address, "10.1.2.3");
    let capabilities = running.client.get_capabilities().await.unwrap();
    assert!(capabilities.implements(Method::CreateMachine));
    assert!(!capabilities.implements(Method::UpdateMachine));
}

#[tokio::test]
async fn uninitialized_comes_back_with_the_status() {
    let running = start(loopback()).await;
    let class = class("c", serde_json::json!({}), "scripted");
    let error = running
        .client
        .get_machine_status(&machine("ns", "uninit", "c", None), &class, &secret())
        .await
        .unwrap_err();
    assert_eq!(error.code(), Code::Uninitialized);
    assert_eq!(error.error.message, "waiting for network setup");
    let status = error
        .response
        .expect("the status travels with Uninitialized");
    assert_eq!(status.provider_id, "scripted:///uninit");
    assert_eq!(status.node_name, "uninit");
    assert_eq!(status.addresses[0].address, "10.9.9.9");
}

#[tokio::test]
async fn unimplemented_methods_answer_unimplemented() {
    let running = start(loopback()).await;
    let class = class("c", serde_json::json!({}), "scripted");
    let machine = machine("ns", "m", "c", None);
    let error = running
        .client
        .initialize_machine(&machine, &class, &secret())
        .await
        .unwrap_err();
    assert_eq!(error.code, Code::Unimplemented);
    let error = running.client.get_volume_ids(&[]).await.unwrap_err();
    assert_eq!(error.code, Code::Unimplemented);
    let error = running
        .client
        .update_machine(
            "scripted:///m",
            &serde_json::json!({}),
            &class,
            &secret(),
            None,
        )
        .await
        .unwrap_err();
    assert_eq!(error.code, Code::Unimplemented);
}

#[tokio::test]
async fn malformed_json_is_invalid_argument_naming_the_object() {
    let running = start(loopback()).await;
    let Endpoint::Tcp(address) = running.endpoint else {
        unreachable!("started on TCP")
    };
    // The generated client sends bytes the typed client never produces.
    let mut raw = v1::driver_client::DriverClient::connect(format!("http://{address}"))
        .await
        .unwrap();
    let status = raw
        .create_machine(v1::CreateMachineRequest {
            machine: b"{\"metadata\": 5}".to_vec(),
            machine_class: b"{}".to_vec(),
            secret: vec![],
        })
        .await
        .unwrap_err();
    let error = MachineError::from_status(&status);
    assert_eq!(error.code, Code::InvalidArgument);
    assert!(error.message.contains("machine JSON"), "{error}");
}

#[tokio::test]
async fn a_call_past_its_deadline_is_deadline_exceeded() {
    let running = start(loopback()).await;
    let class = class("c", serde_json::json!({}), "scripted");
    let hurried = running.client.with_deadline(Duration::from_millis(200));
    let error = hurried
        .create_machine(&machine("ns", "slow", "c", None), &class, &secret())
        .await
        .unwrap_err();
    assert_eq!(error.code, Code::DeadlineExceeded, "{error}");
}

#[tokio::test]
async fn a_call_to_an_absent_provider_is_unavailable() {
    let dir = tempfile::tempdir().unwrap();
    let client = DriverClient::connect(
        &Endpoint::Unix(dir.path().join("none.sock")),
        Duration::from_secs(5),
    )
    .await
    .unwrap();
    let error = client.get_capabilities().await.unwrap_err();
    assert_eq!(error.code, Code::Unavailable, "{error}");
}

#[tokio::test]
async fn shutdown_lets_an_in_flight_call_finish() {
    let mut running = start(loopback()).await;
    let class = class("c", serde_json::json!({}), "scripted");
    let client = running.client.clone();
    let in_flight = tokio::spawn(async move {
        client
            .create_machine(
                &machine("ns", "gate", "c", None),
                &class,
                &SecretData::new(),
            )
            .await
    });
    // Stop the server only once the call is inside the driver.
    running.entered.take().unwrap().await.unwrap();
    let _ = running.stop.take().map(|stop| stop.send(()));
    let _ = running.gate.take().map(|gate| gate.send(()));
    let created = in_flight.await.unwrap().unwrap();
    assert_eq!(created.provider_id, "scripted:///gate");
    running.server.await.unwrap().unwrap();
}
