//! The gRPC status encoding of [`MachineError`] and [`StatusError`] (feature `grpc`).
//!
//! On the wire a failed call is a gRPC status whose details (`grpc-status-details-bin`) hold a
//! `google.rpc.Status` with a `mcm.driver.v1.MachineErrorDetail` carrying the machine code. The
//! detail is what lets `Uninitialized` (17, outside gRPC's range) cross the wire, and a
//! GetMachineStatus answer given together with `Uninitialized` travels as a second detail. A plain
//! status without the detail (from a proxy, or from tonic itself) maps to the machine code with
//! the same number.

use prost::Message;

use crate::codes::Code;
use crate::error::{MachineError, StatusError};
use crate::pb::{rpc, v1};
use crate::types::MachineStatus;

const DETAIL_TYPE_URL: &str = "type.googleapis.com/mcm.driver.v1.MachineErrorDetail";
const STATUS_RESPONSE_TYPE_URL: &str = "type.googleapis.com/mcm.driver.v1.GetMachineStatusResponse";

impl MachineError {
    /// Encodes the error as a gRPC status with the machine-code detail.
    pub fn to_status(&self) -> tonic::Status {
        encode_status(self, None)
    }

    /// Restores an error from a gRPC status: the machine-code detail wins, otherwise the gRPC code
    /// maps to the machine code with the same number.
    pub fn from_status(status: &tonic::Status) -> Self {
        decode_status(status).error
    }
}

impl StatusError {
    /// Encodes the error, and the response if any, as a gRPC status.
    pub fn to_status(&self) -> tonic::Status {
        encode_status(&self.error, self.response.as_ref())
    }

    /// Restores the error and the accompanying response from a gRPC status.
    pub fn from_status(status: &tonic::Status) -> Self {
        decode_status(status)
    }
}

fn encode_status(error: &MachineError, response: Option<&MachineStatus>) -> tonic::Status {
    let grpc_code = error.code.to_grpc();
    let detail = v1::MachineErrorDetail {
        code: error.code.value(),
        code_name: error.code.name().to_owned(),
    };
    let mut details = vec![prost_types::Any {
        type_url: DETAIL_TYPE_URL.to_owned(),
        value: detail.encode_to_vec(),
    }];
    if let Some(response) = response {
        details.push(prost_types::Any {
            type_url: STATUS_RESPONSE_TYPE_URL.to_owned(),
            value: v1::GetMachineStatusResponse::from(response.clone()).encode_to_vec(),
        });
    }
    let envelope = rpc::Status {
        code: grpc_code as i32,
        message: error.message.clone(),
        details,
    };
    tonic::Status::with_details(
        grpc_code,
        error.message.clone(),
        envelope.encode_to_vec().into(),
    )
}

fn decode_status(status: &tonic::Status) -> StatusError {
    let envelope = (!status.details().is_empty())
        .then(|| rpc::Status::decode(status.details()).ok())
        .flatten();
    let mut code = Code::from_grpc(status.code());
    let mut response = None;
    for any in envelope.iter().flat_map(|envelope| envelope.details.iter()) {
        match any.type_url.as_str() {
            DETAIL_TYPE_URL => {
                if let Some(detailed) = v1::MachineErrorDetail::decode(any.value.as_slice())
                    .ok()
                    .and_then(|detail| Code::from_value(detail.code))
                {
                    code = detailed;
                }
            }
            STATUS_RESPONSE_TYPE_URL => {
                response = v1::GetMachineStatusResponse::decode(any.value.as_slice())
                    .ok()
                    .map(MachineStatus::from);
            }
            _ => {}
        }
    }
    StatusError {
        error: MachineError::new(code, status.message()),
        response,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::NodeAddress;

    #[test]
    fn every_code_survives_status_encoding() {
        for code in Code::ALL {
            let error = MachineError::new(code, format!("failure {code}"));
            let status = error.to_status();
            assert_eq!(MachineError::from_status(&status), error, "{code}");
        }
    }

    #[test]
    fn uninitialized_travels_as_failed_precondition_with_detail() {
        let status = MachineError::new(Code::Uninitialized, "init pending").to_status();
        assert_eq!(status.code(), tonic::Code::FailedPrecondition);
        assert_eq!(MachineError::from_status(&status).code, Code::Uninitialized);
    }

    #[test]
    fn a_plain_status_maps_to_its_own_code() {
        let plain = [
            (tonic::Code::Cancelled, Code::Canceled),
            (tonic::Code::Unknown, Code::Unknown),
            (tonic::Code::InvalidArgument, Code::InvalidArgument),
            (tonic::Code::DeadlineExceeded, Code::DeadlineExceeded),
            (tonic::Code::NotFound, Code::NotFound),
            (tonic::Code::AlreadyExists, Code::AlreadyExists),
            (tonic::Code::PermissionDenied, Code::PermissionDenied),
            (tonic::Code::ResourceExhausted, Code::ResourceExhausted),
            (tonic::Code::FailedPrecondition, Code::FailedPrecondition),
            (tonic::Code::Aborted, Code::Aborted),
            (tonic::Code::OutOfRange, Code::OutOfRange),
            (tonic::Code::Unimplemented, Code::Unimplemented),
            (tonic::Code::Internal, Code::Internal),
            (tonic::Code::Unavailable, Code::Unavailable),
            (tonic::Code::DataLoss, Code::DataLoss),
            (tonic::Code::Unauthenticated, Code::Unauthenticated),
        ];
        for (grpc, machine) in plain {
            let restored = MachineError::from_status(&tonic::Status::new(grpc, "plain"));
            assert_eq!(restored, MachineError::new(machine, "plain"));
        }
    }

    #[test]
    fn garbage_details_fall_back_to_the_grpc_code() {
        let status =
            tonic::Status::with_details(tonic::Code::NotFound, "x", bytes_of(&[0xff, 0xff, 0xff]));
        assert_eq!(MachineError::from_status(&status).code, Code::NotFound);
    }

    #[test]
    fn an_out_of_range_detail_code_is_ignored() {
        let envelope = rpc::Status {
            code: tonic::Code::Aborted as i32,
            message: "m".into(),
            details: vec![prost_types::Any {
                type_url: DETAIL_TYPE_URL.into(),
                value: v1::MachineErrorDetail {
                    code: 99,
                    code_name: "Code(99)".into(),
                }
                .encode_to_vec(),
            }],
        };
        let status =
            tonic::Status::with_details(tonic::Code::Aborted, "m", envelope.encode_to_vec().into());
        assert_eq!(MachineError::from_status(&status).code, Code::Aborted);
    }

    #[test]
    fn a_status_response_returned_with_uninitialized_is_restored() {
        let response = MachineStatus {
            provider_id: "virtual:///ns/vm-1".into(),
            node_name: "machine-1".into(),
            addresses: vec![NodeAddress {
                type_: "InternalIP".into(),
                address: "10.0.0.1".into(),
            }],
        };
        let error = StatusError::uninitialized("not initialised yet", response.clone());
        let restored = StatusError::from_status(&error.to_status());
        assert_eq!(restored.code(), Code::Uninitialized);
        assert_eq!(restored.response, Some(response));
        assert_eq!(restored, error);
    }

    fn bytes_of(raw: &[u8]) -> tonic::codegen::Bytes {
        tonic::codegen::Bytes::copy_from_slice(raw)
    }
}
