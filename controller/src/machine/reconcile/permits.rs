//! The per-MachineDeployment failure permit (upstream `permits.PermitGiver` with one permit per
//! key): at most one reconcile at a time may decide to mark a machine of a given deployment
//! Failed, so two Unknown siblings are never failed together (docs/behaviour.md#health-check).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How long a reconcile waits for the permit (upstream `TryPermit(key, 1s)`).
pub const PERMIT_WAIT: Duration = Duration::from_secs(1);

/// One permit per key (the machine's `name` label).
#[derive(Default)]
pub struct Permits {
    keys: Mutex<HashMap<String, Arc<Semaphore>>>,
}

impl Permits {
    /// Waits up to `wait` for the permit of `key`; `None` when another reconcile holds it.
    pub async fn try_acquire(&self, key: &str, wait: Duration) -> Option<OwnedSemaphorePermit> {
        let semaphore = {
            let mut keys = self
                .keys
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            Arc::clone(
                keys.entry(key.to_owned())
                    .or_insert_with(|| Arc::new(Semaphore::new(1))),
            )
        };
        tokio::time::timeout(wait, semaphore.acquire_owned())
            .await
            .ok()
            .and_then(Result::ok)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_holder_per_key_and_keys_are_independent() {
        let permits = Permits::default();
        let held = permits.try_acquire("md-a", PERMIT_WAIT).await;
        assert!(held.is_some());
        assert!(
            permits
                .try_acquire("md-a", Duration::from_millis(20))
                .await
                .is_none(),
            "a second holder of the same deployment must wait"
        );
        assert!(
            permits.try_acquire("md-b", PERMIT_WAIT).await.is_some(),
            "another deployment is not blocked"
        );
        drop(held);
        assert!(permits.try_acquire("md-a", PERMIT_WAIT).await.is_some());
    }
}
