//! The Machine controller's freeze switch. The API-server check owns and flips it
//! ([`FreezeSwitch`]); the Machine and termination controllers only read it ([`FreezeReader`]).
//! Process-local, as upstream: a restart starts unfrozen and the check decides again.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::platform::metrics::Metrics;

/// The writable side, held by the API-server check. Setting it also sets the
/// `mcm_machine_controller_frozen` gauge.
#[derive(Clone)]
pub struct FreezeSwitch {
    frozen: Arc<AtomicBool>,
    metrics: Metrics,
}

/// The read-only side, handed to the controllers that stop while frozen.
#[derive(Clone, Default)]
pub struct FreezeReader {
    frozen: Arc<AtomicBool>,
}

impl FreezeSwitch {
    /// An unfrozen switch reporting to `metrics`.
    pub fn new(metrics: Metrics) -> Self {
        Self {
            frozen: Arc::new(AtomicBool::new(false)),
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
        self.frozen.load(Ordering::SeqCst)
    }

    /// Freezes or unfreezes the Machine controller.
    pub fn set(&self, frozen: bool) {
        self.frozen.store(frozen, Ordering::SeqCst);
        self.metrics.set_machine_controller_frozen(frozen);
    }
}

impl FreezeReader {
    /// True while the API-server check keeps the Machine controller frozen.
    pub fn is_frozen(&self) -> bool {
        self.frozen.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_see_what_the_switch_sets() {
        let switch = FreezeSwitch::new(Metrics::new());
        let reader = switch.reader();
        assert!(!reader.is_frozen());
        switch.set(true);
        assert!(reader.is_frozen() && switch.is_frozen());
        switch.set(false);
        assert!(!reader.is_frozen());
        // A detached reader (no API-server check running) never reports a freeze.
        assert!(!FreezeReader::default().is_frozen());
    }
}
