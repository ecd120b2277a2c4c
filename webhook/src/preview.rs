//! Know before you roll, at admission: an UPDATE of a MachineDeployment or a MachineClass that
//! will replace or touch machines is answered with warnings that say so (kubectl prints them,
//! also for `kubectl apply --dry-run=server`).
//!
//! The verdict is [`mcm_decisions::rollout_preview`], the same rules the controllers run. This
//! module only reads what the verdict needs (the deployment's MachineSets and machines, the
//! class's users) within [`Preview::deadline`], which is shorter than the admission timeout. A
//! failed or late read becomes a `could not determine the effect: …` warning: the preview never
//! refuses a request and never delays it past its deadline.

use std::sync::OnceLock;
use std::time::Duration;

use kube::Api;
use kube::api::ListParams;
use mcm_api::{v1alpha1, v1beta1};
use mcm_conversion::Spoke;
use mcm_decisions::machine::class_validation::{invalid_class_warning, recorded_invalid};
use mcm_decisions::rollout_preview::text::{
    class_warnings, could_not_determine, deployment_warnings, missing_class_warning,
};
use mcm_decisions::rollout_preview::types::{ClassChange, ClassUser, DeploymentChange, HotPaths};
use mcm_decisions::rollout_preview::verdict::{preview_class, preview_deployment, template_class};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::request::Kind;

/// Default time the preview may spend reading: the chart's admission timeout (5 s) minus a
/// margin for the rules and the network.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(3);

/// The objects of an UPDATE the preview judges, in the hub-compatible `v1alpha1` shape.
#[derive(Debug, Clone, PartialEq)]
pub enum Subject {
    /// A MachineDeployment update.
    Deployment {
        /// As stored.
        old: Box<v1alpha1::MachineDeployment>,
        /// As it would be.
        new: Box<v1alpha1::MachineDeployment>,
    },
    /// A MachineClass update.
    Class {
        /// As stored.
        old: Box<v1alpha1::MachineClass>,
        /// As it would be.
        new: Box<v1alpha1::MachineClass>,
    },
}

/// Decodes one object of the request's version into `v1alpha1`.
fn decode<A, B>(object: &Value, version: &str) -> Result<A, String>
where
    A: Spoke + DeserializeOwned,
    B: Spoke<Hub = A::Hub> + DeserializeOwned,
{
    match version {
        "v1beta1" => serde_json::from_value::<B>(object.clone())
            .map(|b| A::from_hub(&b.into_hub()))
            .map_err(|e| e.to_string()),
        _ => serde_json::from_value::<A>(object.clone()).map_err(|e| e.to_string()),
    }
}

/// What the preview judges in an AdmissionReview body: `Ok(None)` for anything but an UPDATE of
/// a MachineDeployment or MachineClass, and for terminating objects; `Err` when the objects do
/// not decode (the rules report why; the preview only says it cannot tell).
///
/// # Errors
/// An object that does not decode.
pub fn subject(kind: Kind, body: &[u8]) -> Result<Option<Subject>, String> {
    let Ok(review) = serde_json::from_slice::<Value>(body) else {
        return Ok(None);
    };
    let Some(request) = review.get("request") else {
        return Ok(None);
    };
    if request.get("operation").and_then(Value::as_str) != Some("UPDATE") {
        return Ok(None);
    }
    let (Some(new), Some(old)) = (request.get("object"), request.get("oldObject")) else {
        return Ok(None);
    };
    if new
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null())
    {
        return Ok(None);
    }
    let version = request
        .pointer("/kind/version")
        .and_then(Value::as_str)
        .unwrap_or("v1alpha1");
    Ok(match kind {
        Kind::MachineDeployment => Some(Subject::Deployment {
            old: Box::new(decode::<_, v1beta1::MachineDeployment>(old, version)?),
            new: Box::new(decode::<_, v1beta1::MachineDeployment>(new, version)?),
        }),
        Kind::MachineClass => Some(Subject::Class {
            old: Box::new(decode::<_, v1beta1::MachineClass>(old, version)?),
            new: Box::new(decode::<_, v1beta1::MachineClass>(new, version)?),
        }),
        Kind::Machine | Kind::MachineSet => None,
    })
}

/// The class a CREATE or UPDATE of a MachineDeployment or MachineSet names in its template
/// (namespace, class name); `None` for anything else, a terminating object or one that does not
/// decode (the rules report why).
#[must_use]
pub fn template_class_of(kind: Kind, body: &[u8]) -> Option<(String, String)> {
    let review = serde_json::from_slice::<Value>(body).ok()?;
    let request = review.get("request")?;
    let operation = request.get("operation").and_then(Value::as_str)?;
    if operation != "CREATE" && operation != "UPDATE" {
        return None;
    }
    let object = request.get("object")?;
    if object
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|t| !t.is_null())
    {
        return None;
    }
    let version = request
        .pointer("/kind/version")
        .and_then(Value::as_str)
        .unwrap_or("v1alpha1");
    let (namespace, template) = match kind {
        Kind::MachineDeployment => {
            let md =
                decode::<v1alpha1::MachineDeployment, v1beta1::MachineDeployment>(object, version)
                    .ok()?;
            (md.metadata.namespace, Some(md.spec.template))
        }
        Kind::MachineSet => {
            let ms = decode::<v1alpha1::MachineSet, v1beta1::MachineSet>(object, version).ok()?;
            (ms.metadata.namespace, ms.spec.template)
        }
        Kind::Machine | Kind::MachineClass => return None,
    };
    let class = template?
        .spec?
        .class?
        .name
        .filter(|name| !name.is_empty())?;
    let namespace = namespace
        .or_else(|| {
            request
                .get("namespace")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .unwrap_or_default();
    Some((namespace, class))
}

/// Appends `extra` to the warnings of an AdmissionReview answer.
pub fn append_warnings(review: &mut Value, extra: Vec<String>) {
    if extra.is_empty() {
        return;
    }
    let Some(response) = review.get_mut("response").and_then(Value::as_object_mut) else {
        return;
    };
    let warnings = response.entry("warnings").or_insert_with(|| json!([]));
    if let Some(list) = warnings.as_array_mut() {
        for line in extra {
            if !list.iter().any(|w| w.as_str() == Some(line.as_str())) {
                list.push(Value::String(line));
            }
        }
    }
}

/// The server's message of an API error (not the whole debug dump), else the error's text.
fn brief(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) if !status.message.is_empty() => status.message.clone(),
        other => other.to_string(),
    }
}

/// The label selector text of a deployment's `matchLabels` (empty: list everything, the pure
/// preview picks out what the deployment owns).
fn selector_of(md: &v1alpha1::MachineDeployment) -> String {
    md.spec
        .selector
        .as_ref()
        .filter(|s| s.match_expressions.as_ref().is_none_or(Vec::is_empty))
        .and_then(|s| s.match_labels.as_ref())
        .map(|labels| {
            labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default()
}

/// The admission-time preview: an optional API client and the read deadline.
pub struct Preview {
    client: OnceLock<kube::Client>,
    /// How long reading may take before the preview gives up on it.
    pub deadline: Duration,
}

impl std::fmt::Debug for Preview {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Preview")
            .field("client", &self.client.get().is_some())
            .field("deadline", &self.deadline)
            .finish()
    }
}

impl Default for Preview {
    fn default() -> Self {
        Self::new(DEFAULT_DEADLINE)
    }
}

impl Preview {
    /// A preview without a client yet, reading within `deadline`.
    #[must_use]
    pub fn new(deadline: Duration) -> Self {
        Self {
            client: OnceLock::new(),
            deadline,
        }
    }

    /// Gives the preview its API client (once; later calls are ignored).
    pub fn set_client(&self, client: kube::Client) {
        let _ = self.client.set(client);
    }

    /// The warnings for an AdmissionReview body of `kind` (empty when nothing is touched or the
    /// request is not an update this preview judges).
    pub async fn warnings(&self, kind: Kind, body: &[u8]) -> Vec<String> {
        let subject = match subject(kind, body) {
            Ok(Some(subject)) => subject,
            Ok(None) => return Vec::new(),
            Err(error) => {
                return vec![could_not_determine(&format!(
                    "the object does not decode ({error})"
                ))];
            }
        };
        let now = jiff::Timestamp::now();
        match subject {
            Subject::Deployment { old, new } => self.deployment(&old, &new, now).await,
            Subject::Class { old, new } => self.class(&old, &new, now).await,
        }
    }

    /// A warning when a MachineDeployment or MachineSet names a class the MachineClass controller
    /// recorded invalid (its `machine.sapcloud.io/class-validation` annotation). Never a denial:
    /// the record may be stale. Nothing when the class cannot be read within the deadline.
    pub async fn invalid_class_warnings(&self, kind: Kind, body: &[u8]) -> Vec<String> {
        let Some((namespace, class)) = template_class_of(kind, body) else {
            return Vec::new();
        };
        let Some(client) = self.client.get().cloned() else {
            return Vec::new();
        };
        let classes = Api::<v1alpha1::MachineClass>::namespaced(client, &namespace);
        match tokio::time::timeout(self.deadline, classes.get_opt(&class)).await {
            Ok(Ok(Some(found))) => recorded_invalid(found.metadata.annotations.as_ref())
                .map(|errors| vec![invalid_class_warning(&namespace, &class, errors)])
                .unwrap_or_default(),
            Ok(Ok(None)) => Vec::new(),
            Ok(Err(error)) => {
                tracing::debug!(%namespace, %class, error = %brief(&error), "class validation record not read");
                Vec::new()
            }
            Err(_) => {
                tracing::debug!(%namespace, %class, "class validation record not read in time");
                Vec::new()
            }
        }
    }

    async fn deployment(
        &self,
        old: &v1alpha1::MachineDeployment,
        new: &v1alpha1::MachineDeployment,
        now: jiff::Timestamp,
    ) -> Vec<String> {
        // Nothing about the machines changes: no read at all.
        let blind = DeploymentChange {
            old,
            new,
            machine_sets: &[],
            machines: &[],
            observed: false,
            now,
        };
        match preview_deployment(&blind) {
            Ok(v) if deployment_warnings(&v).is_empty() => return Vec::new(),
            Ok(_) => {}
            Err(error) => return vec![could_not_determine(&error.to_string())],
        }
        let namespace = new.metadata.namespace.clone().unwrap_or_default();
        let name = new.metadata.name.clone().unwrap_or_default();
        // A template that names another class: whether that class exists.
        let new_class = template_class(new)
            .filter(|class| Some(*class) != template_class(old))
            .map(str::to_owned);
        let read = async {
            let client = self
                .client
                .get()
                .ok_or("the webhook has no API client")?
                .clone();
            let params = ListParams::default().labels(&selector_of(new));
            let sets = Api::<v1alpha1::MachineSet>::namespaced(client.clone(), &namespace)
                .list(&params)
                .await
                .map_err(|e| format!("cannot list MachineSets: {}", brief(&e)))?;
            let missing = match &new_class {
                Some(class) => {
                    Api::<v1alpha1::MachineClass>::namespaced(client.clone(), &namespace)
                        .get_opt(class)
                        .await
                        .map_err(|e| format!("cannot get MachineClass {class}: {}", brief(&e)))?
                        .is_none()
                }
                None => false,
            };
            let machines = Api::<v1alpha1::Machine>::namespaced(client, &namespace)
                .list(&params)
                .await
                .map_err(|e| format!("cannot list Machines: {}", brief(&e)))?;
            Ok::<_, String>((sets.items, machines.items, missing))
        };
        let read = tokio::time::timeout(self.deadline, read)
            .await
            .unwrap_or_else(|_| {
                Err(format!(
                    "reading the machines took longer than {} ms",
                    self.deadline.as_millis()
                ))
            });
        let (sets, machines, missing, failure) = match read {
            Ok((sets, machines, missing)) => (sets, machines, missing, None),
            Err(error) => (Vec::new(), Vec::new(), false, Some(error)),
        };
        let change = DeploymentChange {
            machine_sets: &sets,
            machines: &machines,
            observed: failure.is_none(),
            ..blind
        };
        let mut lines = Vec::new();
        if let Some(error) = failure {
            tracing::info!(%namespace, %name, %error, "rollout preview without machines");
            lines.push(could_not_determine(&format!(
                "machinedeployment {namespace}/{name}: {error}"
            )));
        }
        match preview_deployment(&change) {
            Ok(v) => {
                lines.extend(deployment_warnings(&v));
                if let Some(class) = new_class.as_deref().filter(|_| missing) {
                    lines.push(missing_class_warning(&v, class));
                }
            }
            Err(error) => lines.push(could_not_determine(&error.to_string())),
        }
        lines
    }

    async fn class(
        &self,
        old: &v1alpha1::MachineClass,
        new: &v1alpha1::MachineClass,
        now: jiff::Timestamp,
    ) -> Vec<String> {
        let change = ClassChange {
            old,
            new,
            deployments: Vec::new(),
            hot_paths: HotPaths::Rules,
            now,
        };
        match preview_class(&change) {
            Ok(v) if v.changes.is_empty() => return Vec::new(),
            Ok(_) => {}
            Err(error) => return vec![could_not_determine(&error.to_string())],
        }
        let namespace = new.metadata.namespace.clone().unwrap_or_default();
        let read = async {
            let client = self
                .client
                .get()
                .ok_or("the webhook has no API client")?
                .clone();
            let params = ListParams::default();
            let deployments =
                Api::<v1alpha1::MachineDeployment>::namespaced(client.clone(), &namespace)
                    .list(&params)
                    .await
                    .map_err(|e| format!("cannot list MachineDeployments: {}", brief(&e)))?;
            let sets = Api::<v1alpha1::MachineSet>::namespaced(client.clone(), &namespace)
                .list(&params)
                .await
                .map_err(|e| format!("cannot list MachineSets: {}", brief(&e)))?;
            let machines = Api::<v1alpha1::Machine>::namespaced(client, &namespace)
                .list(&params)
                .await
                .map_err(|e| format!("cannot list Machines: {}", brief(&e)))?;
            Ok::<_, String>((deployments.items, sets.items, machines.items))
        };
        let read = tokio::time::timeout(self.deadline, read)
            .await
            .unwrap_or_else(|_| {
                Err(format!(
                    "reading the class's users took longer than {} ms",
                    self.deadline.as_millis()
                ))
            });
        let (deployments, sets, machines) = match read {
            Ok(read) => read,
            Err(error) => {
                let class = new.metadata.name.clone().unwrap_or_default();
                tracing::info!(%namespace, %class, %error, "rollout preview failed");
                return vec![could_not_determine(&format!(
                    "machineclass {namespace}/{class}: {error}"
                ))];
            }
        };
        let change = ClassChange {
            deployments: deployments
                .iter()
                .map(|deployment| ClassUser {
                    deployment,
                    machine_sets: &sets,
                    machines: &machines,
                })
                .collect(),
            ..change
        };
        match preview_class(&change) {
            Ok(v) => class_warnings(&v),
            Err(error) => vec![could_not_determine(&error.to_string())],
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn review(operation: &str, version: &str, old: &Value, new: &Value) -> Vec<u8> {
        json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": "u",
                "kind": {"group": "machine.sapcloud.io", "version": version, "kind": "MachineDeployment"},
                "operation": operation,
                "object": new,
                "oldObject": old,
            }
        })
        .to_string()
        .into_bytes()
    }

    fn md(class: &str) -> Value {
        json!({
            "apiVersion": "machine.sapcloud.io/v1alpha1", "kind": "MachineDeployment",
            "metadata": {"name": "w", "namespace": "ns"},
            "spec": {"replicas": 4, "selector": {"matchLabels": {"pool": "a"}},
                     "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 2, "maxUnavailable": 0}},
                     "template": {"metadata": {"labels": {"pool": "a"}}, "spec": {"class": {"kind": "MachineClass", "name": class}}}}
        })
    }

    #[tokio::test]
    async fn without_a_client_the_verdict_is_estimated_and_says_so() {
        let preview = Preview::new(Duration::from_millis(100));
        let lines = preview
            .warnings(
                Kind::MachineDeployment,
                &review("UPDATE", "v1alpha1", &md("a"), &md("b")),
            )
            .await;
        assert_eq!(
            lines,
            vec![
                "could not determine the effect: machinedeployment ns/w: the webhook has no API client",
                "this change replaces 4 machines of machinedeployment ns/w by a rolling update (maxSurge 2, maxUnavailable 0: about 2 batches)",
                "the machine counts of machinedeployment ns/w are estimated from spec.replicas (its machines could not be read)",
            ]
        );
    }

    #[tokio::test]
    async fn creates_unchanged_templates_and_bad_objects() {
        let preview = Preview::default();
        let create = review("CREATE", "v1alpha1", &md("a"), &md("b"));
        assert!(
            preview
                .warnings(Kind::MachineDeployment, &create)
                .await
                .is_empty()
        );
        let same = review("UPDATE", "v1alpha1", &md("a"), &md("a"));
        assert!(
            preview
                .warnings(Kind::MachineDeployment, &same)
                .await
                .is_empty()
        );
        let mut bad = md("b");
        bad["spec"]["replicas"] = json!("many");
        let lines = preview
            .warnings(
                Kind::MachineDeployment,
                &review("UPDATE", "v1alpha1", &md("a"), &bad),
            )
            .await;
        assert_eq!(lines.len(), 1);
        assert!(
            lines[0].starts_with("could not determine the effect: the object does not decode"),
            "{lines:?}"
        );
        let mut strategy = md("b");
        strategy["spec"]["strategy"]["rollingUpdate"]["maxSurge"] = json!("x%");
        let lines = preview
            .warnings(
                Kind::MachineDeployment,
                &review("UPDATE", "v1alpha1", &md("a"), &strategy),
            )
            .await;
        assert!(
            lines[0].starts_with(
                "could not determine the effect: the update strategy cannot be resolved"
            ),
            "{lines:?}"
        );
    }

    #[test]
    fn warnings_are_appended_without_duplicates() {
        let mut answer = json!({"response": {"allowed": true, "warnings": ["a"]}});
        append_warnings(&mut answer, vec!["a".into(), "b".into()]);
        assert_eq!(answer["response"]["warnings"], json!(["a", "b"]));
        let mut answer = json!({"response": {"allowed": true}});
        append_warnings(&mut answer, vec!["c".into()]);
        assert_eq!(answer["response"]["warnings"], json!(["c"]));
    }
}
