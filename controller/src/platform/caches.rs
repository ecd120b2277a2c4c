//! The cache gate of the work queues: a controller's workers take no key while a cache it reads
//! has not caught up since its watch broke (docs/behaviour.md#stale-caches, "After a watch
//! break"); the decision is [`mcm_decisions::vocabulary::may_act`].
//!
//! The informers outlive leadership terms, and so does their freshness: a term that starts while
//! a cache is stale (the Lease is usually won back before the watches after an outage) waits
//! for it like the term that saw the break.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::FutureExt as _;
use kube::Resource;
use mcm_decisions::vocabulary::{Acting, CacheView, may_act};
use serde::de::DeserializeOwned;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::informer::Informer;

/// A cache whose freshness a gate reads.
trait Freshness: Send + Sync {
    fn view(&self) -> CacheView<'static>;
    fn changes(&self) -> watch::Receiver<u64>;
}

impl<K> Freshness for Informer<K>
where
    K: Resource + Clone + std::fmt::Debug + DeserializeOwned + Send + Sync + 'static,
{
    fn view(&self) -> CacheView<'static> {
        Informer::view(self)
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.freshness_changes()
    }
}

/// The caches one controller reads. Clone freely.
#[derive(Clone)]
pub struct CacheGate {
    controller: &'static str,
    caches: Vec<Arc<dyn Freshness>>,
    /// Whether a worker has said that the controller waits (one line per wait, not per worker).
    announced: Arc<AtomicBool>,
}

impl std::fmt::Debug for CacheGate {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kinds: Vec<&str> = self.caches.iter().map(|cache| cache.view().kind).collect();
        formatter
            .debug_struct("CacheGate")
            .field("controller", &self.controller)
            .field("caches", &kinds)
            .finish()
    }
}

impl CacheGate {
    /// A gate of `controller` (for logs) over no cache yet.
    pub fn new(controller: &'static str) -> Self {
        Self {
            controller,
            caches: Vec::new(),
            announced: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The gate also waits for `informer`.
    #[must_use]
    pub fn with<K>(mut self, informer: &Informer<K>) -> Self
    where
        K: Resource + Clone + std::fmt::Debug + DeserializeOwned + Send + Sync + 'static,
    {
        self.caches.push(Arc::new(informer.clone()));
        self
    }

    /// The decision for the caches as they are now.
    pub fn acting(&self) -> Acting<'static> {
        let views: Vec<CacheView<'static>> = self.caches.iter().map(|cache| cache.view()).collect();
        may_act(&views)
    }

    /// Returns `true` once the controller may act, `false` when `shutdown` came first.
    pub async fn wait(&self, shutdown: &CancellationToken) -> bool {
        loop {
            // Subscribed before reading, so a change between the read and the wait is not lost.
            let mut receivers: Vec<watch::Receiver<u64>> =
                self.caches.iter().map(|cache| cache.changes()).collect();
            let (kind, since) = match self.acting() {
                Acting::Act => {
                    if self.announced.swap(false, Ordering::AcqRel) {
                        tracing::info!(
                            controller = self.controller,
                            "caches caught up: acting again"
                        );
                    }
                    return true;
                }
                Acting::Wait { kind, since } => (kind, since),
            };
            if !self.announced.swap(true, Ordering::AcqRel) {
                match since {
                    Some(since) => tracing::info!(
                        controller = self.controller,
                        cache = kind,
                        stale_since = %since,
                        "waiting for the {kind} cache to catch up (stale since {since}) before acting"
                    ),
                    None => tracing::info!(
                        controller = self.controller,
                        cache = kind,
                        "waiting for the {kind} cache to sync before acting"
                    ),
                }
            }
            let changed = futures::future::select_all(
                receivers
                    .iter_mut()
                    .map(|receiver| receiver.changed().boxed()),
            );
            tokio::select! {
                () = shutdown.cancelled() => return false,
                _ = changed => {}
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use std::time::Duration;

    #[tokio::test]
    async fn the_gate_opens_when_every_cache_has_caught_up() {
        let first = Informer::<ConfigMap>::new("configmaps");
        let second = Informer::<ConfigMap>::new("others");
        let gate = CacheGate::new("test").with(&first).with(&second);
        first.replace(Vec::new());
        second.replace(Vec::new());
        assert!(gate.acting().may_act());
        assert!(second.mark_stale(jiff::Timestamp::now()));
        assert!(!gate.acting().may_act());
        let shutdown = CancellationToken::new();
        let waiting = {
            let gate = gate.clone();
            let shutdown = shutdown.clone();
            tokio::spawn(async move { gate.wait(&shutdown).await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "the gate opened on a stale cache");
        second.replace(Vec::new());
        let opened = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .unwrap()
            .unwrap();
        assert!(opened);
        assert!(gate.acting().may_act());
    }

    #[tokio::test]
    async fn shutdown_ends_the_wait() {
        let cache = Informer::<ConfigMap>::new("configmaps");
        let gate = CacheGate::new("test").with(&cache);
        let shutdown = CancellationToken::new();
        shutdown.cancel();
        assert!(!gate.wait(&shutdown).await, "never synced, shut down");
    }
}
