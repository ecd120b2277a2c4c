//! What every reconcile shell shares: the configuration, the control and target clients, the
//! metrics and the event recorder ([`Shell`]); and the building blocks of a shell ([`informer`],
//! [`queue`]).
//!
//! Each controller defines its own context next to its reconcile shell (for example
//! `machine_set::context::MachineSetContext`) holding a [`Shell`] plus only the informers, driver
//! and handles it uses; composing controllers into a manager is `manager::compose`. Nothing here
//! imports a controller.

pub mod informer;
pub mod queue;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::{Api, Client, Resource};

use crate::manager::config::Config;
use crate::manager::metrics::Metrics;

/// The component name on Events and field managers.
pub const COMPONENT: &str = "machine-controller-manager";

/// What every reconcile shell works with. Shared as `Arc<Shell>` by the controllers' contexts.
pub struct Shell {
    /// Validated flags.
    pub config: Arc<Config>,
    /// Control cluster client (Machine* objects, Secrets, Events).
    pub control: Client,
    /// Target cluster client (Nodes, Pods, volumes); `None` with `--target-kubeconfig=none`.
    pub target: Option<Client>,
    /// The control namespace (`--namespace`).
    pub namespace: String,
    /// Metrics to update.
    pub metrics: Metrics,
    events: EventSink,
}

impl Shell {
    /// A shell over the manager's clients and metrics.
    pub fn new(
        config: Arc<Config>,
        control: Client,
        target: Option<Client>,
        metrics: Metrics,
    ) -> Self {
        Self {
            namespace: config.namespace.clone(),
            config,
            events: EventSink::new(control.clone()),
            control,
            target,
            metrics,
        }
    }

    /// An API of kind `K` in the control namespace.
    pub fn namespaced<K>(&self) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        Api::namespaced(self.control.clone(), &self.namespace)
    }

    /// Records an Event on `object` (best effort: failures are logged, never returned, and the
    /// caller does not wait). `action` is a PascalCase verb, `reason` the `kubectl describe`
    /// reason.
    pub fn event<K>(&self, object: &K, warning: bool, reason: &str, action: &str, note: String)
    where
        K: Resource<DynamicType = ()>,
    {
        self.events
            .publish(object.object_ref(&()), warning, reason, action, note);
    }
}

/// Implements `Deref<Target = Shell>` for a controller context holding `shell: Arc<Shell>`, so
/// the reconcile code reads `context.event(..)`, `context.config` the same way whatever context
/// it is handed.
#[macro_export]
macro_rules! deref_to_shell {
    ($context:ty) => {
        impl std::ops::Deref for $context {
            type Target = $crate::shell::Shell;
            fn deref(&self) -> &$crate::shell::Shell {
                &self.shell
            }
        }
    };
}

/// How long an identical event (same object, type, reason and note) is not recorded again.
pub const EVENT_REPEAT_SUPPRESSION: Duration = Duration::from_secs(60);

/// Publishes `events.k8s.io/v1` Events. kube's `Recorder` folds every event with the same reason
/// and action into one series whatever its note, which hid messages like "scaled down to 0"
/// behind an earlier "scaled down to 5"; here only identical events within
/// [`EVENT_REPEAT_SUPPRESSION`] are folded (dropped), so a requeue loop cannot flood the API.
struct EventSink {
    client: Client,
    instance: String,
    recent: std::sync::Mutex<HashMap<(String, bool, String, String), Instant>>,
}

impl EventSink {
    fn new(client: Client) -> Self {
        Self {
            client,
            instance: std::env::var("POD_NAME").unwrap_or_else(|_| COMPONENT.to_owned()),
            recent: std::sync::Mutex::default(),
        }
    }

    fn publish(
        &self,
        regarding: k8s_openapi::api::core::v1::ObjectReference,
        warning: bool,
        reason: &str,
        action: &str,
        note: String,
    ) {
        let note = truncate_note(note);
        let identity = regarding
            .uid
            .clone()
            .unwrap_or_else(|| regarding.name.clone().unwrap_or_default());
        let now = Instant::now();
        {
            let mut recent = self
                .recent
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            let key = (identity, warning, reason.to_owned(), note.clone());
            if recent
                .get(&key)
                .is_some_and(|at| now.duration_since(*at) < EVENT_REPEAT_SUPPRESSION)
            {
                return;
            }
            if recent.len() > 10_000 {
                recent.retain(|_, at| now.duration_since(*at) < EVENT_REPEAT_SUPPRESSION);
            }
            recent.insert(key, now);
        }
        let timestamp = jiff::Timestamp::now();
        let namespace = regarding
            .namespace
            .clone()
            .unwrap_or_else(|| "default".to_owned());
        let event = k8s_openapi::api::events::v1::Event {
            metadata: kube::api::ObjectMeta {
                // client-go's naming: the object's name and the time in hex nanoseconds.
                name: Some(format!(
                    "{}.{:x}",
                    regarding.name.clone().unwrap_or_default(),
                    timestamp.as_nanosecond()
                )),
                namespace: Some(namespace.clone()),
                ..Default::default()
            },
            event_time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
                timestamp,
            )),
            type_: Some(if warning { "Warning" } else { "Normal" }.to_owned()),
            reason: Some(reason.to_owned()),
            action: Some(action.to_owned()),
            note: Some(note),
            regarding: Some(regarding),
            reporting_controller: Some(COMPONENT.to_owned()),
            reporting_instance: Some(self.instance.clone()),
            ..Default::default()
        };
        let api: Api<k8s_openapi::api::events::v1::Event> =
            Api::namespaced(self.client.clone(), &namespace);
        tokio::spawn(async move {
            if let Err(error) = api.create(&Default::default(), &event).await {
                tracing::debug!(%error, reason = event.reason, "cannot record an event");
            }
        });
    }
}

/// Event notes are limited to 1 kB by the API server.
fn truncate_note(mut note: String) -> String {
    const LIMIT: usize = 1000;
    if note.len() > LIMIT {
        let mut end = LIMIT;
        while !note.is_char_boundary(end) {
            end -= 1;
        }
        note.truncate(end);
    }
    note
}
