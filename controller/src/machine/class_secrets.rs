//! The Secrets referenced by MachineClasses, read on demand and reused briefly. Owned by the
//! Machine controller (the main driver caller) and handed to the termination controller, the
//! MachineClass controller and the orphan collection, which call the driver with the same data.
//!
//! Every driver call needs the class's Secrets; reading them once per call costed several GETs
//! per machine, while caching every Secret of the namespace would hold unrelated data in memory.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::{Api, Client};
use mcm_api::v1alpha1::MachineClass;
use mcm_decisions::machine::class::merge_secret_data;

/// How long a Secret read for a MachineClass is reused before it is read again.
pub const SECRET_REUSE: Duration = Duration::from_secs(10);

/// A Secret referenced by a MachineClass could not be read.
#[derive(Debug, thiserror::Error)]
#[error("cannot read the Secret {namespace}/{name}: {source}")]
pub struct SecretReadError {
    /// Namespace of the Secret.
    pub namespace: String,
    /// Name of the Secret.
    pub name: String,
    /// The API error.
    #[source]
    pub source: kube::Error,
}

/// A Secret (or its absence) and when it was read.
type SecretRead = (Instant, Option<Arc<Secret>>);

/// One lock per Secret being read: concurrent misses of the same Secret wait for one read.
type ReadLocks = HashMap<(String, String), Arc<tokio::sync::Mutex<()>>>;

/// The shared reuse cache; clones share it.
#[derive(Clone)]
pub struct ClassSecrets {
    client: Client,
    namespace: String,
    reads: Arc<Mutex<HashMap<(String, String), SecretRead>>>,
    /// A manager started beside N machines of one class reconciles them at once: without this,
    /// each of those passes read the class's Secrets itself (N GETs instead of one).
    in_flight: Arc<Mutex<ReadLocks>>,
}

impl ClassSecrets {
    /// A cache reading through `client`; references without a namespace mean `namespace`.
    pub fn new(client: Client, namespace: impl Into<String>) -> Self {
        Self {
            client,
            namespace: namespace.into(),
            reads: Arc::default(),
            in_flight: Arc::default(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<(String, String), SecretRead>> {
        self.reads
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The merged data of the Secrets a MachineClass references (`secretRef`, then
    /// `credentialsSecretRef`; `stringData` is folded in for servers that do not). Missing
    /// Secrets contribute nothing. Reads are reused for [`SECRET_REUSE`].
    pub async fn class_secret_data(
        &self,
        class: &MachineClass,
    ) -> Result<BTreeMap<String, Vec<u8>>, SecretReadError> {
        let mut data = BTreeMap::new();
        for reference in [&class.secret_ref, &class.credentials_secret_ref]
            .into_iter()
            .flatten()
        {
            let Some(name) = reference.name.as_deref().filter(|name| !name.is_empty()) else {
                continue;
            };
            let namespace = reference
                .namespace
                .as_deref()
                .filter(|namespace| !namespace.is_empty())
                .unwrap_or(&self.namespace);
            let secret = self.secret(namespace, name).await?;
            merge_secret_data(&mut data, secret.as_deref());
        }
        Ok(data)
    }

    async fn secret(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Arc<Secret>>, SecretReadError> {
        let key = (namespace.to_owned(), name.to_owned());
        if let Some(secret) = self.reusable(&key) {
            return Ok(secret);
        }
        let read_lock = Arc::clone(
            self.in_flight
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner())
                .entry(key.clone())
                .or_default(),
        );
        let result = {
            let _reading = read_lock.lock().await;
            // Another pass may have read it while this one waited.
            match self.reusable(&key) {
                Some(secret) => Ok(secret),
                None => self.read(&key).await,
            }
        };
        self.forget_unused_lock(&key, read_lock);
        result
    }

    /// GETs the Secret and keeps it for [`SECRET_REUSE`].
    async fn read(&self, key: &(String, String)) -> Result<Option<Arc<Secret>>, SecretReadError> {
        let (namespace, name) = key;
        let now = Instant::now();
        let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        let secret = api
            .get_opt(name)
            .await
            .map_err(|source| SecretReadError {
                namespace: namespace.clone(),
                name: name.clone(),
                source,
            })?
            .map(Arc::new);
        let mut reads = self.lock();
        reads.retain(|_, (read_at, _)| now.duration_since(*read_at) < SECRET_REUSE);
        reads.insert(key.clone(), (now, secret.clone()));
        Ok(secret)
    }

    /// Drops the key's read lock from the map once no other pass holds it (the map and
    /// `read_lock` are its last two owners).
    fn forget_unused_lock(&self, key: &(String, String), read_lock: Arc<tokio::sync::Mutex<()>>) {
        let mut in_flight = self
            .in_flight
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let ours = in_flight
            .get(key)
            .is_some_and(|lock| Arc::ptr_eq(lock, &read_lock));
        if ours && Arc::strong_count(&read_lock) <= 2 {
            in_flight.remove(key);
        }
    }

    /// The Secret read less than [`SECRET_REUSE`] ago, if any (`Some(None)`: it did not exist).
    fn reusable(&self, key: &(String, String)) -> Option<Option<Arc<Secret>>> {
        let reads = self.lock();
        let (read_at, secret) = reads.get(key)?;
        (Instant::now().duration_since(*read_at) < SECRET_REUSE).then(|| secret.clone())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use kube::api::PostParams;
    use mcm_sandbox::{Sandbox, SandboxConfig};

    fn class(secret: &str, credentials: &str) -> MachineClass {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1",
            "kind": "MachineClass",
            "metadata": {"name": "c", "namespace": "default"},
            "providerSpec": {},
            "secretRef": {"name": secret, "namespace": "default"},
            "credentialsSecretRef": {"name": credentials},
        }))
        .unwrap()
    }

    fn secret_gets(sandbox: &Sandbox) -> u64 {
        sandbox
            .faults()
            .requesters
            .snapshot()
            .iter()
            .filter(|r| r.resource == "secrets" && r.verb == mcm_sandbox::Verb::Get)
            .map(|r| r.count)
            .sum()
    }

    /// A manager started beside many machines of one class reconciles them at once: they share
    /// one read of each Secret (a missing one included) instead of one read each.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_passes_share_one_read_of_each_secret() {
        let sandbox = Sandbox::start(SandboxConfig::default()).await.unwrap();
        let client = sandbox.client();
        let secret: Secret = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "cloud", "namespace": "default"},
            "stringData": {"userData": "#!/bin/sh"}
        }))
        .unwrap();
        Api::<Secret>::namespaced(client.clone(), "default")
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();
        sandbox.faults().requesters.reset();
        // Slow answers: every pass misses the reuse cache while the first read is under way.
        sandbox
            .faults()
            .set_latency(std::time::Duration::from_millis(200));
        let secrets = ClassSecrets::new(client, "default");
        let class = class("cloud", "missing");
        let passes: Vec<_> = (0..40)
            .map(|_| {
                let secrets = secrets.clone();
                let class = class.clone();
                tokio::spawn(async move { secrets.class_secret_data(&class).await })
            })
            .collect();
        for pass in passes {
            let data = pass.await.unwrap().unwrap();
            assert_eq!(
                data.get("userData").map(Vec::as_slice),
                Some(&b"#!/bin/sh"[..])
            );
        }
        assert_eq!(
            secret_gets(&sandbox),
            2,
            "one GET per Secret, the missing one included"
        );
        assert!(secrets.in_flight.lock().unwrap().is_empty(), "no lock kept");
    }
}
