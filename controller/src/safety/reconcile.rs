//! The safety controller shells: orphan VMs, API-server health freeze, overshooting.
//!
//! Being written: the shell is not wired yet.

use std::sync::Arc;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use crate::manager::BoxError;
use crate::shell::Shell;

/// Runs the safety controllers until `shutdown`.
pub fn run(
    shell: Arc<Shell>,
    shutdown: CancellationToken,
) -> BoxFuture<'static, Result<(), BoxError>> {
    let _ = shell;
    Box::pin(async move {
        shutdown.cancelled().await;
        Ok(())
    })
}
