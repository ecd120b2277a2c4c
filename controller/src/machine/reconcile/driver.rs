//! Driver calls with latency metrics by method and code (`mcm_driver_call_duration_seconds` and
//! the upstream `mcm_cloud_api_driver_*` families).

use std::future::Future;
use std::time::Instant;

use mcm_api::v1alpha1::MachineClass;
use mcm_provider_proto::{Code, MachineError, StatusError};

use crate::machine::context::MachineContext;

/// An error that carries a machine code.
pub(crate) trait HasCode {
    /// The machine code.
    fn code(&self) -> Code;
}

impl HasCode for MachineError {
    fn code(&self) -> Code {
        self.code
    }
}

impl HasCode for StatusError {
    fn code(&self) -> Code {
        self.error.code
    }
}

/// The provider label of the driver metrics: the class's `provider` field.
pub(crate) fn provider_of(class: &MachineClass) -> &str {
    class.provider.as_deref().unwrap_or("")
}

/// Runs one driver call and records its latency by method and result code.
pub(crate) async fn timed<T, E: HasCode>(
    context: &MachineContext,
    provider: &str,
    method: &str,
    call: impl Future<Output = Result<T, E>>,
) -> Result<T, E> {
    let started = Instant::now();
    let result = call.await;
    let code = match &result {
        Ok(_) => "OK",
        Err(error) => error.code().name(),
    };
    context
        .metrics
        .driver_call(provider, method, code, started.elapsed());
    if result.is_err() {
        tracing::debug!(method, code, "driver call failed");
    }
    result
}
