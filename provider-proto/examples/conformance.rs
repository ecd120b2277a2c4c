//! Runs the driver conformance kit against any running provider (in any language).
//!
//! ```text
//! cargo run -p mcm-provider-proto --example conformance -- unix:///run/mcm/driver.sock fixture.json
//! ```
//!
//! `fixture.json`:
//!
//! ```json
//! {
//!   "namespace": "test", "machinePrefix": "conformance-1",
//!   "class": { MachineClass }, "otherClass": { MachineClass },
//!   "secret": {"userData": "..."},
//!   "invalid": {"class": { MachineClass }, "fieldPath": "providerSpec.x"},
//!   "hotUpdate": {"hotClass": {..}, "coldClass": {..}, "coldPath": "providerSpec.y"},
//!   "slowCreate": {"class": {..}, "deadlineMillis": 300}
//! }
//! ```
//! `invalid`, `hotUpdate` and `slowCreate` are optional. `invalid` also serves the
//! ValidateMachineClass check of a driver that advertises it (at least one field error under
//! `fieldPath`). Exit code 1 when a check fails.

use std::collections::BTreeMap;
use std::time::Duration;

use mcm_api::v1alpha1::MachineClass;
use mcm_provider_proto::conformance::{Fixture, HotUpdate, InvalidSpec, SlowCreate, run};
use mcm_provider_proto::{DriverClient, Endpoint};
use serde::Deserialize;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct InvalidFile {
    class: MachineClass,
    field_path: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct HotUpdateFile {
    hot_class: MachineClass,
    cold_class: MachineClass,
    cold_path: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SlowCreateFile {
    class: MachineClass,
    deadline_millis: u64,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct FixtureFile {
    namespace: String,
    machine_prefix: String,
    class: MachineClass,
    other_class: MachineClass,
    #[serde(default)]
    secret: BTreeMap<String, String>,
    invalid: Option<InvalidFile>,
    hot_update: Option<HotUpdateFile>,
    slow_create: Option<SlowCreateFile>,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(endpoint), Some(fixture_path)) = (args.next(), args.next()) else {
        return Err("usage: conformance <endpoint> <fixture.json>".into());
    };
    let endpoint: Endpoint = endpoint.parse()?;
    let file: FixtureFile = serde_json::from_slice(&std::fs::read(&fixture_path)?)?;
    let fixture = Fixture {
        namespace: file.namespace,
        machine_prefix: file.machine_prefix,
        class: file.class,
        other_class: file.other_class,
        secret: file
            .secret
            .into_iter()
            .map(|(key, value)| (key, value.into_bytes()))
            .collect(),
        invalid: file.invalid.map(|invalid| InvalidSpec {
            class: invalid.class,
            field_path: invalid.field_path,
        }),
        hot_update: file.hot_update.map(|update| HotUpdate {
            hot_class: update.hot_class,
            cold_class: update.cold_class,
            cold_path: update.cold_path,
        }),
        slow_create: file.slow_create.map(|slow| SlowCreate {
            class: slow.class,
            deadline: Duration::from_millis(slow.deadline_millis),
        }),
    };
    let client = DriverClient::connect(&endpoint, Duration::from_secs(30)).await?;
    let report = run(&client, &fixture).await;
    print!("{report}");
    if report.failures().is_empty() {
        println!("driver at {endpoint} conforms");
        Ok(())
    } else {
        std::process::exit(1);
    }
}
