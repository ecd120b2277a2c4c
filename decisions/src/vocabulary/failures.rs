//! Failures the plans react to: driver errors (classified by their code) and failed API writes.

use mcm_provider_proto::{Code, MachineError};

use super::requeue::Retry;

/// A failed driver call as the controller sees it (docs/behaviour.md#error-encoding, docs/behaviour.md#reaction-matrix).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DriverError {
    /// The driver answered with a machine code.
    Coded(MachineError),
    /// The error carried no decodable machine code (upstream: the text did not have exactly two
    /// bracket groups; for us: a transport failure the client could not classify).
    Undecodable(String),
}

impl DriverError {
    /// The code, `Unknown` for undecodable errors (as upstream `status.FromError`).
    #[must_use]
    pub fn code(&self) -> Code {
        match self {
            DriverError::Coded(error) => error.code,
            DriverError::Undecodable(_) => Code::Unknown,
        }
    }

    /// Whether the error was decodable.
    #[must_use]
    pub fn is_decodable(&self) -> bool {
        matches!(self, DriverError::Coded(_))
    }

    /// A coded error (test convenience: shells build errors from what the driver returned).
    #[cfg(test)]
    #[must_use]
    pub fn coded(code: Code, message: &str) -> Self {
        DriverError::Coded(MachineError::new(code, message))
    }
}

impl std::fmt::Display for DriverError {
    /// The upstream `err.Error()` text, which status descriptions embed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DriverError::Coded(error) => write!(f, "{error}"),
            DriverError::Undecodable(text) => f.write_str(text),
        }
    }
}

/// The codes upstream retries quickly (ShortRetry) and for which it keeps `lastKnownState`.
#[must_use]
pub fn is_transient(code: Code) -> bool {
    matches!(
        code,
        Code::Unknown | Code::DeadlineExceeded | Code::Aborted | Code::Unavailable
    )
}

/// A failed API write, as far as the plans care.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteFailure {
    /// The API server answered 409 Conflict (retry after ConflictRetry).
    pub conflict: bool,
    /// The error text.
    pub message: String,
}

impl WriteFailure {
    /// The retry upstream uses after a failed write.
    #[must_use]
    pub fn retry(&self) -> Retry {
        if self.conflict {
            Retry::Conflict
        } else {
            Retry::Short
        }
    }
}
