//! `userdata_test.go` `#addBootstrapTokenToUserData` and `#addMachineNameToUserData` (plain
//! `It` cases). Ours substitutes both placeholders in one call, `creation::patch_user_data`; the
//! token is given only with a target cluster.

#![allow(clippy::unwrap_used)]

use crate::machine::creation::{SecretData, patch_user_data};

const MACHINE: &str = "foo-machine";
const TOKEN: &str = "abcdef.0123456789abcdef";

/// Upstream's user-data template with its two slots.
fn user_data(token: &str, name: &str) -> Vec<u8> {
    format!(
        "\"#!/bin/bash\nmkdir -p \"/var/lib/gardener-node-agent/credentials\"\ncat << EOF > \"/var/lib/gardener-node-agent/credentials/bootstrap-token\"\n{token}\n\tEOF\nchmod \"0640\" \"/var/lib/gardener-node-agent/credentials/bootstrap-token\"\nmkdir -p \"/var/lib/gardener-node-agent\"\nmkdir -p \"/var/lib/gardener-node-agent/credentials\"\ncat << EOF > \"/var/lib/gardener-node-agent/credentials/machine-name\"\n{name}\n\tEOF\nchmod \"0640\" \"/var/lib/gardener-node-agent/credentials/machine-name\"\n"
    )
    .into_bytes()
}

fn secret(data: Option<Vec<u8>>) -> SecretData {
    data.map(|bytes| ("userData".to_owned(), bytes))
        .into_iter()
        .collect()
}

fn patched(data: Option<Vec<u8>>, token: Option<&str>) -> Result<Vec<u8>, String> {
    patch_user_data(&secret(data), MACHINE, token)
        .map(|p| p.data.get("userData").cloned().unwrap())
        .map_err(|error| error.to_string())
}

#[test]
fn add_bootstrap_token_to_user_data() {
    let template = Some(user_data("<<BOOTSTRAP_TOKEN>>", "<<MACHINE_NAME>>"));
    assert_eq!(
        patched(template.clone(), Some(TOKEN)).unwrap(),
        user_data(TOKEN, MACHINE),
        "should generate a bootstrap token replace the magic string with it"
    );
    assert_eq!(
        patched(Some(b"foobar".to_vec()), Some(TOKEN)).unwrap(),
        b"foobar".to_vec(),
        "should do nothing if there is no magic string"
    );
    assert!(
        patched(None, Some(TOKEN))
            .unwrap_err()
            .contains("userdata field not found in secret for machine"),
        "should fail if the secret does not contain a userData key"
    );
    // "running without target cluster": no token.
    assert_eq!(
        patched(template, None).unwrap(),
        user_data("<<BOOTSTRAP_TOKEN>>", MACHINE),
        "should not generate a bootstrap token and keep the magic string"
    );
    assert_eq!(
        patched(Some(b"foobar".to_vec()), None).unwrap(),
        b"foobar".to_vec(),
        "running without target cluster: should do nothing if there is no magic string"
    );
}

#[test]
fn add_machine_name_to_user_data() {
    assert_eq!(
        patched(
            Some(user_data("<<BOOTSTRAP_TOKEN>>", "<<MACHINE_NAME>>")),
            None
        )
        .unwrap(),
        user_data("<<BOOTSTRAP_TOKEN>>", MACHINE),
        "should replace the magic string with the machine name"
    );
    assert_eq!(
        patched(Some(b"foobar".to_vec()), None).unwrap(),
        b"foobar".to_vec(),
        "should do nothing if there is no magic string"
    );
    assert!(
        patched(None, None)
            .unwrap_err()
            .contains("userdata field not found in secret for machine"),
        "should fail if the secret does not contain a userData key"
    );
}
