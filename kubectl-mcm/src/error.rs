//! The plugin's errors, the text kubectl users expect for each, and the exit codes.
//!
//! Exit codes (documented in `docs/user-guide.md`): 0 success, 1 any error (API, unknown object,
//! no permission, unreachable server), 2 bad usage, 3 the rollout failed (progress deadline
//! exceeded), 4 the deployment is frozen by the safety controller, 5 `--timeout` elapsed.

use thiserror::Error;

/// Everything a command can fail with.
#[derive(Debug, Error)]
pub enum CliError {
    /// Wrong arguments (bad `TYPE/NAME`, conflicting flags).
    #[error("error: {0}")]
    Usage(String),

    /// The API server answered with an error status (404, 403, 409, 422, ...); `message` is the
    /// server's text, which already names the object (`machinedeployments.machine.sapcloud.io
    /// "web" not found`).
    #[error("Error from server ({reason}): {message}")]
    Api {
        /// HTTP status code.
        code: u16,
        /// Status reason (`NotFound`, `Forbidden`, ...), or the code when the server gave none.
        reason: String,
        /// The server's message.
        message: String,
    },

    /// The API server could not be reached.
    #[error("Unable to connect to the server: {0}")]
    Unreachable(String),

    /// Kubeconfig missing, unreadable, or naming an unknown context.
    #[error("error: invalid kubeconfig: {0}")]
    Config(String),

    /// A request that is valid but makes no sense for the object's state (already paused, no
    /// such revision, rollback of a paused deployment).
    #[error("error: {0}")]
    Refused(String),

    /// An object the API returned could not be read as the expected kind.
    #[error("error: {what}: {message}")]
    Decode {
        /// What was being read.
        what: String,
        /// Why it failed.
        message: String,
    },

    /// `rollout status` saw the progress deadline pass.
    #[error("error: {0}")]
    RolloutFailed(String),

    /// `rollout status` saw the deployment frozen by the overshooting safety controller.
    #[error("error: {0}")]
    Frozen(String),

    /// `rollout status --timeout` elapsed first.
    #[error("error: timed out waiting for the condition: {0}")]
    Timeout(String),

    /// Writing to the terminal failed.
    #[error("error: cannot write output: {0}")]
    Output(#[from] std::io::Error),
}

impl CliError {
    /// The process exit code for this error.
    #[must_use]
    pub fn exit_code(&self) -> u8 {
        match self {
            Self::Usage(_) => 2,
            Self::RolloutFailed(_) => 3,
            Self::Frozen(_) => 4,
            Self::Timeout(_) => 5,
            Self::Api { .. }
            | Self::Unreachable(_)
            | Self::Config(_)
            | Self::Refused(_)
            | Self::Decode { .. }
            | Self::Output(_) => 1,
        }
    }
}

impl From<kube::Error> for CliError {
    fn from(error: kube::Error) -> Self {
        match error {
            kube::Error::Api(status) => {
                let reason = if status.reason.is_empty() {
                    status.code.to_string()
                } else {
                    status.reason.clone()
                };
                let message = if status.message.is_empty() {
                    format!("the server answered {}", status.code)
                } else {
                    status.message.clone()
                };
                Self::Api {
                    code: status.code,
                    reason,
                    message,
                }
            }
            kube::Error::HyperError(e) => Self::Unreachable(e.to_string()),
            kube::Error::Service(e) => Self::Unreachable(source_chain(e.as_ref())),
            kube::Error::InferConfig(e) => Self::Config(e.to_string()),
            kube::Error::InferKubeconfig(e) => Self::Config(e.to_string()),
            kube::Error::Auth(e) => Self::Config(e.to_string()),
            other => Self::Unreachable(other.to_string()),
        }
    }
}

/// `error: cause: cause` — connection errors hide the useful part (connection refused, DNS) in
/// their sources.
fn source_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut current = error.source();
    while let Some(cause) = current {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        current = cause.source();
    }
    text
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn api(code: u16, reason: &str, message: &str) -> CliError {
        let status = kube::core::Status {
            code,
            reason: reason.to_owned(),
            message: message.to_owned(),
            ..Default::default()
        };
        CliError::from(kube::Error::Api(Box::new(status)))
    }

    #[test]
    fn not_found_and_forbidden_read_like_kubectl() {
        let missing = api(
            404,
            "NotFound",
            "machinedeployments.machine.sapcloud.io \"web\" not found",
        );
        assert_eq!(
            missing.to_string(),
            "Error from server (NotFound): machinedeployments.machine.sapcloud.io \"web\" not found"
        );
        assert_eq!(missing.exit_code(), 1);
        let forbidden = api(
            403,
            "Forbidden",
            "machinedeployments is forbidden: User \"u\" cannot get",
        );
        assert!(
            forbidden
                .to_string()
                .starts_with("Error from server (Forbidden): ")
        );
        assert!(forbidden.to_string().contains("User \"u\" cannot get"));
    }

    #[test]
    fn empty_status_fields_still_say_something() {
        let error = api(500, "", "");
        assert_eq!(
            error.to_string(),
            "Error from server (500): the server answered 500"
        );
    }

    #[test]
    fn exit_codes_tell_failures_apart() {
        let codes = [
            CliError::Usage(String::new()).exit_code(),
            CliError::RolloutFailed(String::new()).exit_code(),
            CliError::Frozen(String::new()).exit_code(),
            CliError::Timeout(String::new()).exit_code(),
            CliError::Unreachable(String::new()).exit_code(),
        ];
        let distinct: std::collections::BTreeSet<u8> = codes.iter().copied().collect();
        assert_eq!(distinct.len(), codes.len(), "{codes:?}");
        assert!(codes.iter().all(|c| *c != 0));
    }
}
