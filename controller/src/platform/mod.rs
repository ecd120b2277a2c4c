//! The platform every controller runs on: the configuration, the control and target clients, the
//! metrics and the event recorder ([`Platform`]); and the building blocks of a reconcile shell
//! ([`informer`], [`queue`], the [`overlay`] of its own writes over its cache, its
//! [`finalizers`], and the one API [`error`] of the shells).
//!
//! Each controller defines its own context next to its reconcile shell (for example
//! `machine_set::context::MachineSetContext`) holding a [`Platform`] plus only the informers,
//! driver and handles it uses; composing controllers into a manager is `manager::compose`.
//! Nothing here imports a controller.

pub mod caches;
pub mod config;
pub mod error;
pub mod events;
pub mod finalizers;
pub mod freeze;
pub mod index;
pub mod informer;
pub mod logging;
pub mod metrics;
pub mod node_cache;
pub mod overlay;
pub mod process_metrics;
pub mod queue;
pub mod selection;

/// The error type of controller entry points and other boxed, thread-safe failures.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

use std::sync::Arc;

use kube::{Api, Client, Resource};

pub use self::events::EVENT_REPEAT_SUPPRESSION;
use self::events::EventSink;
use crate::platform::config::Config;
use crate::platform::metrics::Metrics;

/// The component name on Events and field managers.
pub const COMPONENT: &str = "machine-controller-manager";

/// What every controller works with. Shared as `Arc<Platform>` by the controllers' contexts.
pub struct Platform {
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

impl Platform {
    /// The platform over the manager's clients and metrics.
    pub fn new(
        config: Arc<Config>,
        control: Client,
        target: Option<Client>,
        metrics: Metrics,
    ) -> Self {
        Self {
            namespace: config.namespace.clone(),
            config,
            events: EventSink::new(control.clone(), COMPONENT),
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

/// Implements `Deref<Target = Platform>` for a controller context holding `platform: Arc<Platform>`, so
/// the reconcile code reads `context.event(..)`, `context.config` the same way whatever context
/// it is handed.
#[macro_export]
macro_rules! deref_to_platform {
    ($context:ty) => {
        impl std::ops::Deref for $context {
            type Target = $crate::platform::Platform;
            fn deref(&self) -> &$crate::platform::Platform {
                &self.platform
            }
        }
    };
}
