//! Authentication and RBAC authorization: who kube-apiserver lets in (401) and what it lets them
//! do (403), with its codes and messages, ServiceAccount tokens, access reviews and `kubectl auth
//! can-i`. Against the sandbox these run with `SandboxConfig::authorization` on.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use kube::api::{Api, ApiResource, DynamicObject, ListParams, PostParams};
use kube::config::{AuthInfo, KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use mcm_sandbox::SandboxConfig;
use serde_json::{Value, json};

use crate::common::{Target, api_error, assert_status, configmap, raw, wait_for};

async fn authz_target() -> Target {
    Target::with_config(SandboxConfig {
        authorization: true,
        ..Default::default()
    })
    .await
}

/// A client of the target's cluster that authenticates with `token` only.
async fn token_client(kubeconfig: &Path, token: &str) -> Client {
    let kc = Kubeconfig::read_from(kubeconfig).expect("kubeconfig readable");
    let mut cfg = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("kubeconfig usable");
    cfg.auth_info = AuthInfo {
        token: Some(token.to_string().into()),
        ..Default::default()
    };
    cfg.default_retry = false;
    Client::try_from(cfg).expect("client")
}

/// Creates a ServiceAccount and returns (user name, token) from the TokenRequest subresource.
async fn service_account(t: &Target, name: &str) -> (String, String) {
    let sas: Api<ServiceAccount> = t.api();
    sas.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": name}})).expect("sa"),
    )
    .await
    .expect("create ServiceAccount");
    let req = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                     "spec": {"expirationSeconds": 3600}});
    let resp = raw(
        &t.client,
        "POST",
        &format!("/api/v1/namespaces/{}/serviceaccounts/{name}/token", t.ns),
        &[("content-type", "application/json")],
        req.to_string().into_bytes(),
    )
    .await;
    assert_eq!(
        resp.status.as_u16(),
        201,
        "TokenRequest answers 201 Created"
    );
    let body = resp.json();
    assert_eq!(body["kind"], "TokenRequest", "{body}");
    let token = body["status"]["token"]
        .as_str()
        .expect("status.token")
        .to_string();
    assert!(
        body["status"]["expirationTimestamp"].is_string(),
        "status.expirationTimestamp: {body}"
    );
    (format!("system:serviceaccount:{}:{name}", t.ns), token)
}

fn rbac(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: "rbac.authorization.k8s.io".into(),
        version: "v1".into(),
        api_version: "rbac.authorization.k8s.io/v1".into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

async fn create_rbac(t: &Target, kind: &str, plural: &str, namespaced: bool, obj: Value) {
    let ar = rbac(kind, plural);
    let api: Api<DynamicObject> = if namespaced {
        t.dyn_api(&ar)
    } else {
        Api::all_with(t.client.clone(), &ar)
    };
    let obj: DynamicObject = serde_json::from_value(obj).expect("rbac object");
    let name = obj.metadata.name.clone().unwrap_or_default();
    api.create(&PostParams::default(), &obj)
        .await
        .unwrap_or_else(|e| panic!("create {kind} {name}: {e}"));
    if !namespaced {
        t.delete_at_end(ar, &name);
    }
}

/// Binds `user` (a ServiceAccount of the test namespace) to `rules` with a Role + RoleBinding.
async fn grant(t: &Target, sa: &str, name: &str, rules: Value) {
    create_rbac(
        t,
        "Role",
        "roles",
        true,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
               "metadata": {"name": name, "namespace": t.ns}, "rules": rules}),
    )
    .await;
    create_rbac(
        t,
        "RoleBinding",
        "rolebindings",
        true,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": name, "namespace": t.ns},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
               "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": t.ns}]}),
    )
    .await;
}

#[tokio::test]
async fn invalid_bearer_token_is_401_unauthorized() {
    let t = authz_target().await;
    let client = token_client(&t.kubeconfig, "not-a-valid-token").await;
    let resp = raw(&client, "GET", "/api/v1/namespaces", &[], Vec::new()).await;
    let body = resp.assert_status_object(401, "Unauthorized", "a bad token");
    assert_eq!(
        body["message"], "Unauthorized",
        "kube's 401 message: {body}"
    );
    t.finish().await;
}

#[tokio::test]
async fn service_account_without_rbac_gets_kube_forbidden_messages() {
    let t = authz_target().await;
    let (user, token) = service_account(&t, "nobody").await;
    let client = token_client(&t.kubeconfig, &token).await;
    let ns = t.ns.clone();

    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let s = api_error(cms.get("c1").await, "get configmap");
    assert_status(&s, 403, "Forbidden", "get configmap without a grant");
    assert_eq!(
        s.message,
        format!(
            "configmaps \"c1\" is forbidden: User \"{user}\" cannot get resource \"configmaps\" in API group \"\" in the namespace \"{ns}\""
        )
    );

    let s = api_error(cms.list(&ListParams::default()).await, "list configmaps");
    assert_eq!(
        s.message,
        format!(
            "configmaps is forbidden: User \"{user}\" cannot list resource \"configmaps\" in API group \"\" in the namespace \"{ns}\""
        )
    );

    let resp = raw(&client, "GET", "/api/v1/nodes", &[], Vec::new()).await;
    let body = resp.assert_status_object(403, "Forbidden", "list nodes");
    assert_eq!(
        body["message"],
        format!(
            "nodes is forbidden: User \"{user}\" cannot list resource \"nodes\" in API group \"\" at the cluster scope"
        )
    );
    assert_eq!(body["details"]["kind"], "nodes", "{body}");

    let path = format!("/apis/apps/v1/namespaces/{ns}/deployments/d1/status");
    let body = raw(&client, "GET", &path, &[], Vec::new())
        .await
        .assert_status_object(403, "Forbidden", "get deployments/status");
    assert_eq!(
        body["message"],
        format!(
            "deployments.apps \"d1\" is forbidden: User \"{user}\" cannot get resource \"deployments/status\" in API group \"apps\" in the namespace \"{ns}\""
        )
    );
    assert_eq!(body["details"]["name"], "d1", "{body}");
    assert_eq!(body["details"]["group"], "apps", "{body}");

    let body = raw(&client, "GET", "/metrics-of-nobody", &[], Vec::new())
        .await
        .assert_status_object(403, "Forbidden", "non-resource path");
    assert_eq!(
        body["message"],
        format!("forbidden: User \"{user}\" cannot get path \"/metrics-of-nobody\"")
    );

    // Discovery is open to every authenticated user (system:discovery).
    let resp = raw(&client, "GET", "/api", &[], Vec::new()).await;
    assert_eq!(resp.status.as_u16(), 200, "GET /api as a ServiceAccount");
    t.finish().await;
}

#[tokio::test]
async fn role_binding_grants_verbs_names_and_subresources_exactly() {
    let t = authz_target().await;
    let cms: Api<ConfigMap> = t.api();
    for n in ["c1", "c2"] {
        cms.create(&PostParams::default(), &configmap(n, &[], &[]))
            .await
            .expect("create configmap");
    }
    let (user, token) = service_account(&t, "reader").await;
    grant(
        &t,
        "reader",
        "read-c1",
        json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"], "resourceNames": ["c1"]},
               {"apiGroups": ["apps"], "resources": ["deployments/status"], "verbs": ["get"]}]),
    )
    .await;
    let client = token_client(&t.kubeconfig, &token).await;
    let mine: Api<ConfigMap> = Api::namespaced(client.clone(), &t.ns);
    // Real clusters apply a new binding within moments, not at once.
    wait_for(
        "the RoleBinding applies",
        Duration::from_secs(20),
        || async { mine.get("c1").await.ok() },
    )
    .await;
    let s = api_error(mine.get("c2").await, "get c2 (not among resourceNames)");
    assert_status(&s, 403, "Forbidden", "resourceNames limit get");
    let s = api_error(mine.list(&ListParams::default()).await, "list");
    assert_status(&s, 403, "Forbidden", "resourceNames never grant list");
    let mut c1 = mine.get("c1").await.expect("get c1");
    c1.data = Some([("k".to_string(), "v".to_string())].into());
    let s = api_error(
        mine.replace("c1", &PostParams::default(), &c1).await,
        "update",
    );
    assert!(
        s.message.contains(&format!(
            "User \"{user}\" cannot update resource \"configmaps\""
        )),
        "{s:?}"
    );
    let other: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let s = api_error(other.get("c1").await, "get in another namespace");
    assert_status(
        &s,
        403,
        "Forbidden",
        "a RoleBinding grants only in its namespace",
    );

    // deployments/status is granted, the deployment itself is not: 404 (allowed, absent) vs 403.
    let path = format!("/apis/apps/v1/namespaces/{}/deployments/d1", t.ns);
    raw(&client, "GET", &format!("{path}/status"), &[], Vec::new())
        .await
        .assert_status_object(404, "NotFound", "granted subresource of a missing object");
    raw(&client, "GET", &path, &[], Vec::new())
        .await
        .assert_status_object(403, "Forbidden", "main resource not granted");
    t.finish().await;
}

#[tokio::test]
async fn cluster_role_binding_to_service_account_groups() {
    let t = authz_target().await;
    let (_, token) = service_account(&t, "grouped").await;
    let name = t.cluster_name("list-ns");
    create_rbac(
        &t,
        "ClusterRole",
        "clusterroles",
        false,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
               "metadata": {"name": name},
               "rules": [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list"]}]}),
    )
    .await;
    create_rbac(
        &t,
        "ClusterRoleBinding",
        "clusterrolebindings",
        false,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": name},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
               "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group",
                             "name": format!("system:serviceaccounts:{}", t.ns)}]}),
    )
    .await;
    let client = token_client(&t.kubeconfig, &token).await;
    wait_for(
        "a ClusterRoleBinding to the namespace's ServiceAccount group applies",
        Duration::from_secs(20),
        || async {
            let r = raw(&client, "GET", "/api/v1/namespaces", &[], Vec::new()).await;
            (r.status.as_u16() == 200).then_some(())
        },
    )
    .await;
    t.finish().await;
}

async fn review(client: &Client, plural: &str, spec: Value) -> Value {
    let kind = if plural == "selfsubjectaccessreviews" {
        "SelfSubjectAccessReview"
    } else {
        "SubjectAccessReview"
    };
    let body = json!({"apiVersion": "authorization.k8s.io/v1", "kind": kind, "spec": spec});
    let resp = raw(
        client,
        "POST",
        &format!("/apis/authorization.k8s.io/v1/{plural}"),
        &[("content-type", "application/json")],
        body.to_string().into_bytes(),
    )
    .await;
    assert_eq!(resp.status.as_u16(), 201, "{kind} answers 201");
    resp.json()
}

#[tokio::test]
async fn access_reviews_answer_for_self_and_others() {
    let t = authz_target().await;
    let (user, token) = service_account(&t, "asker").await;
    grant(
        &t,
        "asker",
        "get-cm",
        json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]),
    )
    .await;
    let client = token_client(&t.kubeconfig, &token).await;
    let attrs = |verb: &str| json!({"resourceAttributes": {"namespace": t.ns, "verb": verb, "resource": "configmaps"}});
    let allowed = |v: &Value| v["status"]["allowed"].as_bool();
    wait_for("SSAR sees the grant", Duration::from_secs(20), || async {
        (allowed(&review(&client, "selfsubjectaccessreviews", attrs("get")).await) == Some(true))
            .then_some(())
    })
    .await;
    let denied = review(&client, "selfsubjectaccessreviews", attrs("delete")).await;
    assert_eq!(allowed(&denied), Some(false), "{denied}");

    let mut spec = attrs("get");
    spec["user"] = json!(user);
    spec["groups"] = json!(["system:serviceaccounts", "system:authenticated"]);
    let sar = review(&t.client, "subjectaccessreviews", spec.clone()).await;
    assert_eq!(allowed(&sar), Some(true), "{sar}");
    spec["user"] = json!("someone-else");
    let sar = review(&t.client, "subjectaccessreviews", spec).await;
    assert_eq!(allowed(&sar), Some(false), "{sar}");
    // An unprivileged user may not ask about others.
    let body = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                      "spec": {"user": "x", "resourceAttributes": {"verb": "get", "resource": "pods"}}});
    raw(
        &client,
        "POST",
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        &[("content-type", "application/json")],
        body.to_string().into_bytes(),
    )
    .await
    .assert_status_object(403, "Forbidden", "SAR needs a grant");
    t.finish().await;
}

#[tokio::test]
async fn kubectl_auth_can_i_follows_rbac() {
    if Command::new("kubectl")
        .args(["version", "--client"])
        .output()
        .map(|o| !o.status.success())
        .unwrap_or(true)
    {
        eprintln!("\n**********\nSKIPPED: kubectl not found on PATH\n**********\n");
        return;
    }
    let t = authz_target().await;
    let (_, token) = service_account(&t, "kubectl-user").await;
    grant(
        &t,
        "kubectl-user",
        "list-cm",
        json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}]),
    )
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let kc_text = std::fs::read_to_string(&t.kubeconfig).expect("kubeconfig");
    let mut kc: Value = serde_saphyr::from_str(&kc_text).expect("kubeconfig yaml");
    if let Some(users) = kc["users"].as_array_mut() {
        for u in users {
            u["user"] = json!({"token": token});
        }
    }
    let path = dir.path().join("kubeconfig");
    std::fs::write(&path, serde_json::to_string(&kc).expect("json")).expect("write");
    let can_i = |verb: &'static str| {
        let path = path.clone();
        let ns = t.ns.clone();
        let cache = dir.path().join("cache");
        async move {
            tokio::task::spawn_blocking(move || {
                Command::new("kubectl")
                    .arg(format!("--kubeconfig={}", path.display()))
                    .arg(format!("--cache-dir={}", cache.display()))
                    .args(["auth", "can-i", verb, "configmaps", "-n", &ns])
                    .output()
                    .expect("run kubectl")
            })
            .await
            .expect("kubectl task")
        }
    };
    let yes = wait_for(
        "kubectl auth can-i list says yes",
        Duration::from_secs(20),
        || async {
            let out = can_i("list").await;
            out.status.success().then_some(out)
        },
    )
    .await;
    assert_eq!(String::from_utf8_lossy(&yes.stdout).trim(), "yes");
    let no = can_i("delete").await;
    assert!(!no.status.success(), "can-i delete exits non-zero");
    assert_eq!(String::from_utf8_lossy(&no.stdout).trim(), "no");
    t.finish().await;
}

#[tokio::test]
async fn client_certificates_and_static_tokens_name_their_users() {
    let t = authz_target().await;
    let Some(sb) = t.sandbox_only(
        "client_certificates_and_static_tokens_name_their_users",
        "needs the cluster CA key and the token file",
    ) else {
        t.finish().await;
        return;
    };
    let yaml = sb
        .kubeconfig_for_certificate("alice", &["devs", "ops"])
        .expect("client certificate");
    let alice = mcm_sandbox::Sandbox::client_from_kubeconfig(&yaml)
        .await
        .expect("client");
    let body = raw(&alice, "GET", "/api/v1/nodes", &[], Vec::new())
        .await
        .assert_status_object(403, "Forbidden", "alice lists nodes");
    assert_eq!(
        body["message"],
        "nodes is forbidden: User \"alice\" cannot list resource \"nodes\" in API group \"\" at the cluster scope"
    );
    let ssar = review(
        &alice,
        "selfsubjectaccessreviews",
        json!({"nonResourceAttributes": {"path": "/api", "verb": "get"}}),
    )
    .await;
    assert_eq!(ssar["status"]["allowed"], true, "{ssar}");
    create_rbac(
        &t,
        "ClusterRoleBinding",
        "clusterrolebindings",
        false,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": "ops-admin"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
               "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "ops"}]}),
    )
    .await;
    let resp = raw(&alice, "GET", "/api/v1/nodes", &[], Vec::new()).await;
    assert_eq!(resp.status.as_u16(), 200, "group ops (second O) is bound");

    sb.authenticator()
        .add_token("bob-token", mcm_sandbox::authn::User::new("bob", []));
    let bob = token_client(&t.kubeconfig, "bob-token").await;
    let body = raw(&bob, "GET", "/api/v1/nodes", &[], Vec::new())
        .await
        .assert_status_object(403, "Forbidden", "bob lists nodes");
    assert!(
        body["message"]
            .as_str()
            .is_some_and(|m| m.contains("User \"bob\"")),
        "{body}"
    );
    assert_eq!(
        sb.denials().snapshot().get("bob"),
        Some(&1),
        "the sandbox counts 403s per user"
    );
    // The request record names the authenticated user, never the token.
    let records = sb.faults().requesters.snapshot();
    assert!(
        records
            .iter()
            .any(|r| r.user == "bob" && r.resource == "nodes" && r.count == 1),
        "{records:?}"
    );
    assert!(records.iter().all(|r| r.user != "bob-token"), "{records:?}");
    t.finish().await;
}

#[tokio::test]
async fn anonymous_requests_are_401_except_health() {
    let t = authz_target().await;
    let Some(sb) = t.sandbox_only(
        "anonymous_requests_are_401_except_health",
        "real clusters differ in --anonymous-auth",
    ) else {
        t.finish().await;
        return;
    };
    // The admin kubeconfig without its token: no credentials at all.
    let yaml = sb.kubeconfig_yaml().replace(
        &format!("    token: {}\n", mcm_sandbox::authn::ADMIN_TOKEN),
        "",
    );
    let anon = mcm_sandbox::Sandbox::client_from_kubeconfig(&yaml)
        .await
        .expect("anonymous client");
    let body = raw(&anon, "GET", "/api/v1/namespaces", &[], Vec::new())
        .await
        .assert_status_object(401, "Unauthorized", "anonymous list");
    assert_eq!(body["message"], "Unauthorized");
    let health = raw(&anon, "GET", "/healthz", &[], Vec::new()).await;
    assert_eq!(health.status.as_u16(), 200, "health is public");
    t.finish().await;
}
