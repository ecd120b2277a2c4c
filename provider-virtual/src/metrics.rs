//! Prometheus metrics: driver calls by method and code, API requests of the virtual kubelet by
//! action and result, and the number of VMs.

use std::sync::Arc;
use std::sync::atomic::AtomicI64;

use mcm_provider_proto::{
    Capabilities, ClassFieldErrors, CreateMachineResponse, DeleteMachineResponse, Driver,
    GetVolumeIdsRequest, InitializeMachineResponse, ListMachinesRequest, MachineError, MachineList,
    MachineRequest, MachineStatus, StatusError, UpdateMachineRequest, UpdateMachineResponse,
    ValidateMachineClassRequest,
};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Labels of a driver call.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    /// gRPC method name (`CreateMachine`...).
    pub method: String,
    /// Machine code name (`OK`, `NotFound`...).
    pub code: String,
}

/// Labels of a virtual-kubelet API request.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KubeLabels {
    /// `register_node`, `renew_lease`, `create_lease`, `post_node_status`, `mark_pod_running`,
    /// `complete_pod`.
    pub action: String,
    /// `ok` or the HTTP status / `error`.
    pub result: String,
}

/// Labels of the VMs-by-InitializeMachine-calls gauge.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct InitializeCallsLabels {
    /// The number of InitializeMachine calls a VM received (`0`, `1`, `2`...).
    pub calls: String,
}

/// All metrics of the provider.
pub struct Metrics {
    registry: Registry,
    /// Driver calls by method and code.
    pub driver_calls: Family<CallLabels, Counter>,
    /// API requests of the virtual kubelet.
    pub kube_requests: Family<KubeLabels, Counter>,
    /// Current number of VMs.
    pub vms: Gauge<i64, AtomicI64>,
    /// Current number of VMs by the number of InitializeMachine calls they received.
    pub vms_by_initialize_calls: Family<InitializeCallsLabels, Gauge<i64, AtomicI64>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Registers the metrics under the prefix `provider_virtual`.
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("provider_virtual");
        let driver_calls = Family::<CallLabels, Counter>::default();
        let kube_requests = Family::<KubeLabels, Counter>::default();
        let vms = Gauge::<i64, AtomicI64>::default();
        registry.register(
            "driver_calls",
            "Driver calls by gRPC method and machine code",
            driver_calls.clone(),
        );
        registry.register(
            "kube_requests",
            "Target-cluster API requests of the virtual kubelet by action and result",
            kube_requests.clone(),
        );
        registry.register("vms", "Number of virtual machines", vms.clone());
        let vms_by_initialize_calls =
            Family::<InitializeCallsLabels, Gauge<i64, AtomicI64>>::default();
        registry.register(
            "vms_by_initialize_calls",
            "Number of virtual machines by how many InitializeMachine calls each received",
            vms_by_initialize_calls.clone(),
        );
        Self {
            registry,
            driver_calls,
            kube_requests,
            vms,
            vms_by_initialize_calls,
        }
    }

    /// Replaces the VMs-by-InitializeMachine-calls series (counts that no VM has any more go).
    pub fn set_initialize_call_counts(&self, counts: &std::collections::BTreeMap<u32, usize>) {
        self.vms_by_initialize_calls.clear();
        for (calls, vms) in counts {
            self.vms_by_initialize_calls
                .get_or_create(&InitializeCallsLabels {
                    calls: calls.to_string(),
                })
                .set(i64::try_from(*vms).unwrap_or(i64::MAX));
        }
    }

    /// The OpenMetrics text exposition.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        if let Err(error) = prometheus_client::encoding::text::encode(&mut text, &self.registry) {
            tracing::warn!(%error, "cannot encode metrics");
        }
        text
    }

    /// Counts one driver call.
    pub fn record_call(&self, method: &str, code: &str) {
        self.driver_calls
            .get_or_create(&CallLabels {
                method: method.to_owned(),
                code: code.to_owned(),
            })
            .inc();
    }

    /// Counts one kubelet API request.
    pub fn record_kube(&self, action: &str, result: &str) {
        self.kube_requests
            .get_or_create(&KubeLabels {
                action: action.to_owned(),
                result: result.to_owned(),
            })
            .inc();
    }
}

/// A driver whose calls are counted.
pub struct Metered<D> {
    inner: D,
    metrics: Arc<Metrics>,
    vm_count: Box<dyn Fn() -> usize + Send + Sync>,
}

impl<D: Driver> Metered<D> {
    /// Wraps `inner`; `vm_count` feeds the VM gauge after each call.
    pub fn new(
        inner: D,
        metrics: Arc<Metrics>,
        vm_count: impl Fn() -> usize + Send + Sync + 'static,
    ) -> Self {
        Self {
            inner,
            metrics,
            vm_count: Box::new(vm_count),
        }
    }

    /// Runs one call and counts it by code; a call dropped before it finished (its deadline
    /// expired or the caller went away) counts as `Canceled`.
    async fn measure<T, E>(
        &self,
        method: &'static str,
        call: impl std::future::Future<Output = Result<T, E>>,
        code_of: impl Fn(&E) -> &'static str,
    ) -> Result<T, E> {
        let mut guard = CancelGuard {
            metrics: &self.metrics,
            method,
            finished: false,
        };
        let result = call.await;
        guard.finished = true;
        self.metrics
            .record_call(method, result.as_ref().map_or_else(code_of, |_| "OK"));
        self.metrics
            .vms
            .set(i64::try_from((self.vm_count)()).unwrap_or(i64::MAX));
        result
    }
}

struct CancelGuard<'a> {
    metrics: &'a Metrics,
    method: &'static str,
    finished: bool,
}

impl Drop for CancelGuard<'_> {
    fn drop(&mut self) {
        if !self.finished {
            self.metrics.record_call(self.method, "Canceled");
        }
    }
}

fn machine_code(error: &MachineError) -> &'static str {
    error.code.name()
}

impl<D: Driver> Driver for Metered<D> {
    fn capabilities(&self) -> Capabilities {
        self.metrics.record_call("GetCapabilities", "OK");
        self.inner.capabilities()
    }

    async fn create_machine(
        &self,
        request: MachineRequest,
    ) -> Result<CreateMachineResponse, MachineError> {
        self.measure(
            "CreateMachine",
            self.inner.create_machine(request),
            machine_code,
        )
        .await
    }

    async fn initialize_machine(
        &self,
        request: MachineRequest,
    ) -> Result<InitializeMachineResponse, MachineError> {
        self.measure(
            "InitializeMachine",
            self.inner.initialize_machine(request),
            machine_code,
        )
        .await
    }

    async fn delete_machine(
        &self,
        request: MachineRequest,
    ) -> Result<DeleteMachineResponse, MachineError> {
        self.measure(
            "DeleteMachine",
            self.inner.delete_machine(request),
            machine_code,
        )
        .await
    }

    async fn get_machine_status(
        &self,
        request: MachineRequest,
    ) -> Result<MachineStatus, StatusError> {
        self.measure(
            "GetMachineStatus",
            self.inner.get_machine_status(request),
            |error: &StatusError| error.code().name(),
        )
        .await
    }

    async fn list_machines(
        &self,
        request: ListMachinesRequest,
    ) -> Result<MachineList, MachineError> {
        self.measure(
            "ListMachines",
            self.inner.list_machines(request),
            machine_code,
        )
        .await
    }

    async fn get_volume_ids(
        &self,
        request: GetVolumeIdsRequest,
    ) -> Result<Vec<String>, MachineError> {
        self.measure(
            "GetVolumeIDs",
            self.inner.get_volume_ids(request),
            machine_code,
        )
        .await
    }

    async fn update_machine(
        &self,
        request: UpdateMachineRequest,
    ) -> Result<UpdateMachineResponse, MachineError> {
        self.measure(
            "UpdateMachine",
            self.inner.update_machine(request),
            machine_code,
        )
        .await
    }

    async fn validate_machine_class(
        &self,
        request: ValidateMachineClassRequest,
    ) -> Result<ClassFieldErrors, MachineError> {
        self.measure(
            "ValidateMachineClass",
            self.inner.validate_machine_class(request),
            machine_code,
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_are_exposed_by_method_and_code() {
        let metrics = Metrics::new();
        metrics.record_call("CreateMachine", "OK");
        metrics.record_call("CreateMachine", "OK");
        metrics.record_call("DeleteMachine", "Unavailable");
        metrics.record_kube("renew_lease", "ok");
        let text = metrics.encode();
        assert!(
            text.contains(
                r#"provider_virtual_driver_calls_total{method="CreateMachine",code="OK"} 2"#
            ),
            "{text}"
        );
        assert!(text.contains(r#"provider_virtual_driver_calls_total{method="DeleteMachine",code="Unavailable"} 1"#), "{text}");
        assert!(
            text.contains(
                r#"provider_virtual_kube_requests_total{action="renew_lease",result="ok"} 1"#
            ),
            "{text}"
        );
    }

    fn request(name: &str, spec: serde_json::Value) -> MachineRequest {
        MachineRequest {
            machine: mcm_provider_proto::conformance::machine("ns", name, "c", None),
            class: serde_json::from_value(serde_json::json!({
                "metadata": {"name": "c", "namespace": "ns"}, "provider": "virtual", "providerSpec": spec,
            }))
            .unwrap(),
            secret: Default::default(),
        }
    }

    #[tokio::test]
    async fn the_metered_driver_counts_codes_and_cancelled_calls() {
        use crate::driver::{Fleet, VirtualDriver};
        let metrics = Arc::new(Metrics::new());
        let fleet = Arc::new(Fleet::in_memory());
        let counted = fleet.clone();
        let driver = Metered::new(VirtualDriver::new(fleet), metrics.clone(), move || {
            counted.len()
        });
        driver
            .create_machine(request("a", serde_json::json!({})))
            .await
            .unwrap();
        driver
            .create_machine(request("b", serde_json::json!({"bootDelay": 3})))
            .await
            .unwrap_err();
        driver
            .get_machine_status(request("absent", serde_json::json!({})))
            .await
            .unwrap_err();
        let slow =
            driver.create_machine(request("slow", serde_json::json!({"createLatency": "1h"})));
        assert!(
            tokio::time::timeout(std::time::Duration::from_millis(10), slow)
                .await
                .is_err()
        );
        let text = metrics.encode();
        for expected in [
            r#"provider_virtual_driver_calls_total{method="CreateMachine",code="OK"} 1"#,
            r#"provider_virtual_driver_calls_total{method="CreateMachine",code="InvalidArgument"} 1"#,
            r#"provider_virtual_driver_calls_total{method="GetMachineStatus",code="NotFound"} 1"#,
            r#"provider_virtual_driver_calls_total{method="CreateMachine",code="Canceled"} 1"#,
            "provider_virtual_vms 1",
        ] {
            assert!(text.contains(expected), "{expected} missing in\n{text}");
        }
    }
}
