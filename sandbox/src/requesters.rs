//! Who asked for what: resource requests counted per requester (user and User-Agent), verb, API
//! group, resource, subresource and namespace.
//!
//! The user is the one authentication identified: a ServiceAccount token's
//! `system:serviceaccount:<ns>:<name>`, a client certificate's CN, a static token's user (after
//! impersonation, the impersonated user, whose permissions the request used). Only when nobody
//! was identified, which happens with authorization off and an unknown token, the bearer token
//! itself stands in for the name, so tests without RBAC can still tell components apart by
//! giving each its own token. Tests then check that a component only used the verbs and
//! resources its RBAC role grants (`GET /sandbox/admin/requesters`); with RBAC enforced, refused
//! requests are recorded too (and counted per user under `GET /sandbox/admin/denials`).
//! Discovery, OpenAPI and health requests are not resource requests and are not recorded.

use crate::resource_path::ResourcePath;
use crate::verb::Verb;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Mutex;

/// User name recorded for a request that neither authenticated nor sent a bearer token.
pub const ANONYMOUS: &str = "system:anonymous";

/// The sender of a request, read off its headers.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Requester {
    /// The authenticated user's name; else the bearer token; else [`ANONYMOUS`].
    pub user: String,
    /// The User-Agent header, empty when absent.
    pub user_agent: String,
}

impl Requester {
    /// The requester of a request with these headers, `authenticated` naming the user that
    /// authentication identified (`None` when it identified nobody).
    pub fn of(authenticated: Option<&str>, headers: &http::HeaderMap) -> Self {
        let header = |name: http::header::HeaderName| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .trim()
                .to_owned()
        };
        let user = match authenticated {
            Some(name) => name.to_owned(),
            None => header(http::header::AUTHORIZATION)
                .strip_prefix("Bearer ")
                .map(str::trim)
                .filter(|t| !t.is_empty())
                .unwrap_or(ANONYMOUS)
                .to_owned(),
        };
        Self {
            user,
            user_agent: header(http::header::USER_AGENT),
        }
    }
}

/// One recorded (requester, request shape) with its count.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestRecord {
    /// See [`Requester::user`].
    pub user: String,
    /// See [`Requester::user_agent`].
    pub user_agent: String,
    /// RBAC verb (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`, ...).
    pub verb: Verb,
    /// API group (`""` for the core group).
    pub group: String,
    /// Plural resource.
    pub resource: String,
    /// Subresource (`status`, `scale`, `eviction`), empty for the object itself.
    pub subresource: String,
    /// Namespace of the URL, empty for cluster-scoped and all-namespace requests.
    pub namespace: String,
    /// Answered requests of this shape (any status code).
    pub count: u64,
}

type Key = (String, String, Verb, String, String, String, String);

/// The counts of one sandbox, shared by every request handler.
#[derive(Debug, Default)]
pub struct RequestLog {
    counts: Mutex<BTreeMap<Key, u64>>,
}

impl RequestLog {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Key, u64>> {
        // A poisoned lock only means a handler panicked mid-insert; the map stays usable.
        self.counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Counts one answered resource request.
    pub fn record(&self, who: &Requester, verb: Verb, path: &ResourcePath) {
        let key = (
            who.user.clone(),
            who.user_agent.clone(),
            verb,
            path.group.clone(),
            path.resource.clone(),
            path.sub.clone().unwrap_or_default(),
            path.namespace.clone().unwrap_or_default(),
        );
        *self.lock().entry(key).or_insert(0) += 1;
    }

    /// Every recorded shape, ordered by user, agent, verb, group, resource, subresource, namespace.
    pub fn snapshot(&self) -> Vec<RequestRecord> {
        self.lock()
            .iter()
            .map(
                |((user, user_agent, verb, group, resource, subresource, namespace), count)| {
                    RequestRecord {
                        user: user.clone(),
                        user_agent: user_agent.clone(),
                        verb: *verb,
                        group: group.clone(),
                        resource: resource.clone(),
                        subresource: subresource.clone(),
                        namespace: namespace.clone(),
                        count: *count,
                    }
                },
            )
            .collect()
    }

    /// Forgets every record.
    pub fn reset(&self) {
        self.lock().clear();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::resource_path::parse_resource_path;

    #[test]
    fn records_per_requester_and_shape() {
        let mut headers = http::HeaderMap::new();
        headers.insert(
            http::header::AUTHORIZATION,
            http::HeaderValue::from_static("Bearer mcm"),
        );
        headers.insert(
            http::header::USER_AGENT,
            http::HeaderValue::from_static("kube-rs/5"),
        );
        // Nobody identified (authorization off, unknown token): the token names the user.
        let mcm = Requester::of(None, &headers);
        assert_eq!(mcm.user, "mcm");
        assert_eq!(mcm.user_agent, "kube-rs/5");
        let anonymous = Requester::of(None, &http::HeaderMap::new());
        assert_eq!(anonymous.user, ANONYMOUS);
        // An authenticated user is named as authentication knows it, never by the token.
        let account = Requester::of(Some("system:serviceaccount:ns:mcm"), &headers);
        assert_eq!(account.user, "system:serviceaccount:ns:mcm");
        assert_eq!(account.user_agent, "kube-rs/5");

        let log = RequestLog::default();
        let lease =
            parse_resource_path("/apis/coordination.k8s.io/v1/namespaces/ns/leases/mcm").unwrap();
        let status = parse_resource_path(
            "/apis/machine.sapcloud.io/v1alpha1/namespaces/ns/machines/m/status",
        )
        .unwrap();
        log.record(&mcm, Verb::Update, &lease);
        log.record(&mcm, Verb::Update, &lease);
        log.record(&anonymous, Verb::Patch, &status);
        let records = log.snapshot();
        assert_eq!(records.len(), 2, "{records:?}");
        let lease_updates = records.iter().find(|r| r.user == "mcm").unwrap();
        assert_eq!(lease_updates.count, 2);
        assert_eq!(lease_updates.group, "coordination.k8s.io");
        assert_eq!(lease_updates.resource, "leases");
        assert_eq!(lease_updates.namespace, "ns");
        let status_patch = records.iter().find(|r| r.user == ANONYMOUS).unwrap();
        assert_eq!(status_patch.subresource, "status");
        assert_eq!(status_patch.verb, Verb::Patch);
        log.reset();
        assert!(log.snapshot().is_empty());
    }
}
