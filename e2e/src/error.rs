//! The one error type of the e2e framework: every failure says what was attempted and on which
//! object or process, so a red scenario explains itself without a debugger.

use std::path::PathBuf;

/// Everything that can go wrong while driving the system.
#[derive(Debug, thiserror::Error)]
pub enum E2eError {
    /// A binary could not be built or found.
    #[error("binary {name}: {message}")]
    Binary {
        /// Binary name.
        name: String,
        /// What went wrong.
        message: String,
    },
    /// A process could not be started, stopped or exited on its own.
    #[error("process {name}: {message}")]
    Process {
        /// Component name.
        name: String,
        /// What went wrong.
        message: String,
    },
    /// File system trouble (temp dir, logs, kubeconfig, state files).
    #[error("{action} {path}: {source}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The path.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A Kubernetes API call failed.
    #[error("{action}: {source}")]
    Kube {
        /// What was being done, with the object.
        action: String,
        /// The cause.
        source: kube::Error,
    },
    /// The kubeconfig could not be loaded.
    #[error("kubeconfig {path}: {message}")]
    Kubeconfig {
        /// Its path.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// An HTTP call to an admin endpoint failed or answered an error.
    #[error("HTTP {method} {url}: {message}")]
    Http {
        /// Method.
        method: String,
        /// URL.
        url: String,
        /// What went wrong (status and body, or the transport error).
        message: String,
    },
    /// kubectl could not be run.
    #[error("kubectl {args}: {message}")]
    Kubectl {
        /// Arguments.
        args: String,
        /// What went wrong.
        message: String,
    },
    /// JSON or YAML of an object or answer could not be read or written.
    #[error("{what}: {message}")]
    Decode {
        /// What was decoded.
        what: String,
        /// The cause.
        message: String,
    },
    /// A condition was not reached within its (generous) limit.
    #[error("{what}: not reached within {seconds}s; last observation: {last}")]
    Timeout {
        /// The awaited condition.
        what: String,
        /// The limit.
        seconds: u64,
        /// What the last probe saw.
        last: String,
    },
    /// The system did something a scenario asserts it must not (or did not do what it must).
    #[error("{0}")]
    Assertion(String),
    /// A driver call to the provider failed.
    #[error("driver {call}: {message}")]
    Driver {
        /// The call.
        call: String,
        /// The machine error.
        message: String,
    },
}

impl E2eError {
    /// Wraps a kube error with what was being done.
    pub fn kube(action: impl Into<String>) -> impl FnOnce(kube::Error) -> Self {
        let action = action.into();
        move |source| Self::Kube { action, source }
    }

    /// Wraps an I/O error with the action and path.
    pub fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| Self::Io {
            action,
            path,
            source,
        }
    }

    /// A decoding error of `what`.
    pub fn decode(what: impl Into<String>) -> impl FnOnce(serde_json::Error) -> Self {
        let what = what.into();
        move |e| Self::Decode {
            what,
            message: e.to_string(),
        }
    }
}

/// Result of the framework.
pub type Result<T, E = E2eError> = std::result::Result<T, E>;

/// Fails a scenario with `message` unless `condition` holds.
pub fn ensure(condition: bool, message: impl FnOnce() -> String) -> Result<()> {
    if condition {
        Ok(())
    } else {
        Err(E2eError::Assertion(message()))
    }
}
