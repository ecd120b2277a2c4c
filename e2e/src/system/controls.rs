//! Fault controls and probes of a system: API outages, the sandbox's admin API and the API
//! server's denials and audit log, provider-virtual's VMs and node conditions, the manager's
//! metrics, and stopping and starting the manager.

use std::time::Duration;

use serde_json::{Value, json};

use super::start::wait_http_ready;
use super::{ApiServer, System, WEBHOOK_NAMESPACE};
use crate::admin_http;
use crate::error::{E2eError, Result};

impl System {
    /// The requests the API server's authorizer refused (403) to the system's own identities, per
    /// user: the sandbox's `/sandbox/admin/denials`, or kube-apiserver's audit log. `{}` when none.
    pub async fn rbac_denials(&self) -> Result<Value> {
        let parts = self.sandbox_parts("the API server's denials")?;
        let processes = parts.processes.lock().await;
        match &processes.api {
            ApiServer::Sandbox(_) => {
                drop(processes);
                self.sandbox_admin(::http::Method::GET, "denials", None)
                    .await
            }
            ApiServer::Kube(control_plane) => {
                control_plane.denials(&format!("system:serviceaccount:{WEBHOOK_NAMESPACE}:"))
            }
        }
    }

    /// The requests kube-apiserver completed with `code` (from its audit log), as `(verb,
    /// resource, namespace, name)`; an error on the sandbox or a cluster of one's own.
    pub async fn completed_requests(
        &self,
        code: u64,
    ) -> Result<Vec<(String, String, String, String)>> {
        let parts = self.sandbox_parts("kube-apiserver's audit log")?;
        let processes = parts.processes.lock().await;
        match &processes.api {
            ApiServer::Kube(control_plane) => control_plane.completed_requests(code),
            ApiServer::Sandbox(_) => Err(E2eError::Binary {
                name: "kube-apiserver".to_owned(),
                message: "the audit log exists on the real control plane only".to_owned(),
            }),
        }
    }

    /// Begins an API outage: the sandbox answers 503 to everything (ended by
    /// [`System::end_api_outage`], or after `bound` seconds if that is never called), or
    /// kube-apiserver is stopped.
    pub async fn begin_api_outage(&self, bound: u64) -> Result<()> {
        if self.is_sandbox() {
            self.sandbox_admin(
                ::http::Method::POST,
                "unavailable",
                Some(json!({"seconds": bound})),
            )
            .await
            .map(drop)
        } else {
            self.set_kube_apiserver_running(false).await
        }
    }

    /// Ends the outage of [`System::begin_api_outage`]; returns once the API answers again.
    pub async fn end_api_outage(&self) -> Result<()> {
        if self.is_sandbox() {
            self.sandbox_admin(::http::Method::DELETE, "unavailable", None)
                .await
                .map(drop)
        } else {
            self.set_kube_apiserver_running(true).await
        }
    }

    /// Stops kube-apiserver for an outage, or starts it again on the same port and etcd
    /// (`running`); etcd and kube-controller-manager keep running, as when an API server
    /// instance is replaced. The sandbox's outages go through its admin API instead.
    async fn set_kube_apiserver_running(&self, running: bool) -> Result<()> {
        let parts = self.sandbox_parts("stopping or starting the API server")?;
        let processes = parts.processes.lock().await;
        let ApiServer::Kube(control_plane) = &processes.api else {
            return Err(E2eError::Assertion(
                "the sandbox's outages go through its admin API (/sandbox/admin/unavailable)"
                    .to_owned(),
            ));
        };
        if running {
            control_plane.start_component("kube-apiserver").await
        } else {
            control_plane.stop_component("kube-apiserver").await
        }
    }

    /// A call to the sandbox's `/sandbox/admin/<path>` (fault injection, counters).
    pub async fn sandbox_admin(
        &self,
        method: ::http::Method,
        path: &str,
        body: Option<Value>,
    ) -> Result<Value> {
        if !self.is_sandbox() {
            return Err(E2eError::Assertion(
                "the sandbox admin API is only available with the sandbox system".to_owned(),
            ));
        }
        let uri = format!("/sandbox/admin/{}", path.trim_start_matches('/'));
        let body = body.map(|b| b.to_string().into_bytes()).unwrap_or_default();
        let request = ::http::Request::builder()
            .method(method.clone())
            .uri(&uri)
            .header(::http::header::CONTENT_TYPE, "application/json")
            .body(body)
            .map_err(|e| E2eError::Assertion(format!("request {uri}: {e}")))?;
        let text = self
            .client
            .request_text(request)
            .await
            .map_err(E2eError::kube(format!("{method} {uri}")))?;
        serde_json::from_str(&text).map_err(E2eError::decode(format!("answer of {uri}")))
    }

    /// The VMs of provider-virtual (`GET /admin/vms`).
    pub async fn vms(&self) -> Result<Vec<Value>> {
        let parts = self.sandbox_parts("the provider's VM list")?;
        let text = admin_http::get_ok(parts.addresses.provider_admin, "/admin/vms").await?;
        let value: Value =
            serde_json::from_str(&text).map_err(E2eError::decode("GET /admin/vms"))?;
        match value {
            Value::Array(items) => Ok(items),
            other => Err(E2eError::Decode {
                what: "GET /admin/vms".to_owned(),
                message: format!("expected a list, got {other}"),
            }),
        }
    }

    /// Overrides node conditions through provider-virtual's admin endpoint
    /// (`{"Ready":"False"}`); `None` removes the overrides.
    pub async fn set_node_conditions(&self, node: &str, conditions: Option<Value>) -> Result<()> {
        let parts = self.sandbox_parts("node condition overrides")?;
        let path = format!("/admin/nodes/{node}/conditions");
        let (method, body) = match conditions {
            Some(c) => (::http::Method::PUT, Some(c.to_string())),
            None => (::http::Method::DELETE, None),
        };
        let answer =
            admin_http::call(method.clone(), parts.addresses.provider_admin, &path, body).await?;
        if answer.ok() {
            Ok(())
        } else {
            Err(E2eError::Http {
                method: method.to_string(),
                url: path,
                message: format!("{}: {}", answer.status, answer.body),
            })
        }
    }

    /// The manager's `/metrics` text.
    pub async fn manager_metrics(&self) -> Result<String> {
        let parts = self.sandbox_parts("the manager's metrics")?;
        admin_http::get_ok(parts.addresses.manager_admin, "/metrics").await
    }

    /// Stops the manager gracefully (SIGTERM; it releases its Lease) and returns its exit code.
    pub async fn stop_manager(&self) -> Result<Option<i32>> {
        let parts = self.sandbox_parts("stopping the manager")?;
        let mut processes = parts.processes.lock().await;
        processes.manager()?.stop(Duration::from_secs(40)).await
    }

    /// Starts the manager again with the same flags and waits until it is ready.
    pub async fn start_manager(&self) -> Result<()> {
        let parts = self.sandbox_parts("starting the manager")?;
        let mut processes = parts.processes.lock().await;
        let manager = processes.manager()?;
        manager.restart()?;
        wait_http_ready(manager, parts.addresses.manager_admin, "/readyz").await
    }
}
