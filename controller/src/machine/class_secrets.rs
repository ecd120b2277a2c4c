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

/// The shared reuse cache; clones share it.
#[derive(Clone)]
pub struct ClassSecrets {
    client: Client,
    namespace: String,
    reads: Arc<Mutex<HashMap<(String, String), SecretRead>>>,
}

impl ClassSecrets {
    /// A cache reading through `client`; references without a namespace mean `namespace`.
    pub fn new(client: Client, namespace: impl Into<String>) -> Self {
        Self {
            client,
            namespace: namespace.into(),
            reads: Arc::default(),
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
        let now = Instant::now();
        if let Some((read_at, secret)) = self.lock().get(&key)
            && now.duration_since(*read_at) < SECRET_REUSE
        {
            return Ok(secret.clone());
        }
        let api: Api<Secret> = Api::namespaced(self.client.clone(), namespace);
        let secret = api
            .get_opt(name)
            .await
            .map_err(|source| SecretReadError {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                source,
            })?
            .map(Arc::new);
        let mut reads = self.lock();
        reads.retain(|_, (read_at, _)| now.duration_since(*read_at) < SECRET_REUSE);
        reads.insert(key, (now, secret.clone()));
        Ok(secret)
    }
}
