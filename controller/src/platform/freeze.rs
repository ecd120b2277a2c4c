//! The Machine controller's freeze switch. The API-server check owns and flips it
//! ([`FreezeSwitch`]); the Machine and termination controllers only read it ([`FreezeReader`]).
//! Process-local, as upstream: a restart starts unfrozen and the check decides again.

use std::sync::Arc;

use tokio::sync::watch;

use crate::platform::metrics::Metrics;

/// The writable side, held by the API-server check. Setting it also sets the
/// `mcm_machine_controller_frozen` gauge.
#[derive(Clone)]
pub struct FreezeSwitch {
    frozen: Arc<watch::Sender<bool>>,
    metrics: Metrics,
}

/// The read-only side, handed to the controllers that stop while frozen.
#[derive(Clone)]
pub struct FreezeReader {
    frozen: Arc<watch::Sender<bool>>,
}

impl Default for FreezeReader {
    /// A detached reader: never frozen.
    fn default() -> Self {
        Self {
            frozen: Arc::new(watch::channel(false).0),
        }
    }
}

impl FreezeSwitch {
    /// An unfrozen switch reporting to `metrics`.
    pub fn new(metrics: Metrics) -> Self {
        Self {
            frozen: Arc::new(watch::channel(false).0),
            metrics,
        }
    }

    /// A reader of this switch.
    pub fn reader(&self) -> FreezeReader {
        FreezeReader {
            frozen: Arc::clone(&self.frozen),
        }
    }

    /// True while frozen.
    pub fn is_frozen(&self) -> bool {
        *self.frozen.borrow()
    }

    /// Freezes or unfreezes the Machine controller.
    pub fn set(&self, frozen: bool) {
        self.frozen.send_replace(frozen);
        self.metrics.set_machine_controller_frozen(frozen);
    }
}

impl FreezeReader {
    /// True while the API-server check keeps the Machine controller frozen.
    pub fn is_frozen(&self) -> bool {
        *self.frozen.borrow()
    }

    /// A receiver that changes when the switch is flipped: a frozen pass requeues its machine
    /// after the long retry, so the controllers requeue every machine when the freeze is lifted
    /// (machines created just before an outage would otherwise wait that long).
    pub fn changes(&self) -> watch::Receiver<bool> {
        self.frozen.subscribe()
    }
}

/// Adds `keys()` to `queue` whenever the freeze is lifted, until `shutdown`.
pub async fn requeue_when_unfrozen(
    reader: FreezeReader,
    queue: crate::platform::queue::WorkQueue,
    keys: impl Fn() -> Vec<String> + Send + 'static,
    shutdown: tokio_util::sync::CancellationToken,
) {
    let mut changes = reader.changes();
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            changed = changes.changed() => if changed.is_err() { return },
        }
        if !*changes.borrow_and_update() {
            let keys = keys();
            tracing::info!(
                queue = queue.name(),
                keys = keys.len(),
                "machine controller unfrozen: requeueing"
            );
            for key in keys {
                queue.add(key);
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn readers_see_what_the_switch_sets() {
        let switch = FreezeSwitch::new(Metrics::new());
        let reader = switch.reader();
        assert!(!reader.is_frozen());
        switch.set(true);
        assert!(reader.is_frozen() && switch.is_frozen());
        let mut changes = reader.changes();
        switch.set(false);
        assert!(!reader.is_frozen());
        assert!(changes.has_changed().unwrap() && !*changes.borrow_and_update());
        // A detached reader (no API-server check running) never reports a freeze.
        assert!(!FreezeReader::default().is_frozen());
    }
}
