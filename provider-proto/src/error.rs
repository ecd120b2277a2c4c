//! [`MachineError`] (a machine code plus message) and [`StatusError`] (GetMachineStatus's error,
//! which may carry the status of a VM that is not initialised). Their gRPC status encoding is in
//! `status.rs` (feature `grpc`).

use crate::codes::{Code, format_machine_error};
use crate::types::MachineStatus;

/// A driver error: a machine code and a message. `Display` is the upstream text
/// `machine codes error: code = [<CodeName>] message = [<message>]`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", format_machine_error(*.code, .message))]
pub struct MachineError {
    /// The machine code.
    pub code: Code,
    /// What failed, for which machine.
    pub message: String,
}

impl MachineError {
    /// An error with the given code and message.
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// `InvalidArgument`, e.g. for a bad providerSpec field (name the field path in the message).
    pub fn invalid_argument(message: impl Into<String>) -> Self {
        Self::new(Code::InvalidArgument, message)
    }

    /// `NotFound`: the VM does not exist.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(Code::NotFound, message)
    }

    /// `Internal`: a provider-side failure.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(Code::Internal, message)
    }

    /// `Unimplemented`: the driver does not implement the method.
    pub fn unimplemented(method: &str) -> Self {
        Self::new(
            Code::Unimplemented,
            format!("{method} is not implemented by this driver"),
        )
    }
}

/// The error of GetMachineStatus: a [`MachineError`] and, for `Uninitialized`, the status of the VM
/// that exists but is not initialised (the controller needs its providerID and node name).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{error}")]
pub struct StatusError {
    /// The machine error.
    pub error: MachineError,
    /// The VM's status returned together with the error (meaningful with `Uninitialized`).
    pub response: Option<MachineStatus>,
}

impl StatusError {
    /// `Uninitialized` together with the status of the VM.
    pub fn uninitialized(message: impl Into<String>, response: MachineStatus) -> Self {
        Self {
            error: MachineError::new(Code::Uninitialized, message),
            response: Some(response),
        }
    }

    /// The machine code.
    pub fn code(&self) -> Code {
        self.error.code
    }
}

impl From<MachineError> for StatusError {
    fn from(error: MachineError) -> Self {
        Self {
            error,
            response: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_is_the_upstream_text() {
        assert_eq!(
            MachineError::new(Code::Uninitialized, "x").to_string(),
            "machine codes error: code = [Uninitialized] message = [x]"
        );
    }

    #[test]
    fn a_machine_error_becomes_a_status_error_without_response() {
        let error = StatusError::from(MachineError::not_found("vm-1"));
        assert_eq!(error.code(), Code::NotFound);
        assert_eq!(error.response, None);
    }
}
