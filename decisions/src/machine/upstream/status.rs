//! `machine_util_test.go` `#isMachineStatusSimilar`.

#![allow(clippy::unwrap_used)]

use mcm_api::v1alpha1::{LastOperation, MachineStatus};

use crate::test_support::at;
use crate::vocabulary::{is_status_similar, time};

const AWS_401: &str = "Error occurred with decoding machine error status while getting VM status, aborting without retry. gRPC code: AuthFailure: AWS was not able to validate the provided access credentials\n\tstatus code: 401, request id: fbc513f0-ca27-4a42-a203-42048d5773a2 Set machine status to termination. Now, getting VM Status";
const AWS_401_OTHER_ID: &str = "Error occurred with decoding machine error status while getting VM status, aborting without retry. gRPC code: AuthFailure: AWS was not able to validate the provided access credentials\n\tstatus code: 401, request id: dsfddsfd-dsfdfd-dsfdsfds-dsfdkjljl32 Set machine status to termination. Now, getting VM Status";
const SHORT_1: &str = "AWS was not able to validate the provided access credentials\n\tstatus code: 401, request id: fbc513f0-ca27-4a42-a203-42048d5773a2";
const SHORT_2: &str = "AWS was not able to validate the provided access credentials\n\tstatus code: 401, request id: 23423424-342f-sdff-45cs-3242sdfsdfd";

/// `(entry, (description, age in seconds) of m1, same of m2, similar?)`.
#[allow(clippy::type_complexity)]
const TABLE: &[(&str, (&str, i64), (&str, i64), bool)] = &[
    (
        "when status description is exact match",
        (AWS_401, 0),
        (AWS_401, 0),
        true,
    ),
    (
        "when status description is exact match but timeout has occurred",
        (AWS_401, 0),
        (AWS_401, 3600),
        false,
    ),
    (
        "when status description is exact match but timeout has not occurred",
        (AWS_401, 0),
        (AWS_401, 60),
        true,
    ),
    (
        "when status description is long similar",
        (AWS_401, 0),
        (AWS_401_OTHER_ID, 0),
        true,
    ),
    (
        "when status description is short similar",
        (SHORT_1, 0),
        (SHORT_2, 0),
        true,
    ),
    (
        "when status description is different",
        ("Initiate node object deletion", 0),
        ("Initiate machine object finalizer removal", 0),
        false,
    ),
];

#[test]
fn is_machine_status_similar_table() {
    let now = at(10_000);
    let status = |(description, age): (&str, i64)| MachineStatus {
        last_operation: Some(LastOperation {
            description: Some(description.to_owned()),
            last_update_time: Some(time(at(10_000 - age))),
            ..LastOperation::default()
        }),
        ..MachineStatus::default()
    };
    for (entry, m1, m2, expected) in TABLE {
        assert_eq!(
            is_status_similar(&status(*m1), &status(*m2), now),
            *expected,
            "{entry}"
        );
    }
}
