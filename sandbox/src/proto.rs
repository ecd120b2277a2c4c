//! Decoding of the Kubernetes protobuf envelope for the built-in kinds that kubectl's typed
//! clients send as protobuf: what `kubectl create <kind>` sends for every kind the sandbox serves
//! that has such a subcommand (Namespace, ConfigMap, Secret, ServiceAccount, Service, Deployment,
//! PodDisruptionBudget, Role, RoleBinding, ClusterRole, ClusterRoleBinding), DeleteOptions,
//! Eviction, Binding, access reviews and TokenRequest; and what a client-go controller writes
//! with its typed clients, which default to protobuf: Leases (leader election), core/v1 Events
//! (event recorders) and Node updates (metadata and spec; an update of a Node keeps its stored
//! status, so the status message is not decoded). Upstream's Go machine-controller-manager is
//! such a client and has no switch to JSON (docs/performance.md#against-upstream). Responses are
//! always JSON, which clients accept. Pure functions.
//!
//! The decoder walks the protobuf wire format guided by a table of message schemas (field number,
//! JSON name, type) taken from the API's `generated.proto` definitions. The table covers the
//! fields those commands can set; a field it does not know is skipped. A full generated binding
//! (the `k8s-pb` crate) would cover every field of every kind, but it brings its own
//! prost types with no conversion to the JSON the store keeps, and compiles the whole API for a
//! test server whose clients send protobuf only from these few subcommands; kinds without a
//! schema here are answered 415 so the gap is loud, not silent.

use base64::Engine;
use serde_json::{Map, Value, json};

/// The kinds a protobuf body may carry (the other schemas are their parts).
pub const KINDS: &[&str] = &[
    "Namespace",
    "ConfigMap",
    "Secret",
    "ServiceAccount",
    "Service",
    "Deployment",
    "PodDisruptionBudget",
    "Role",
    "ClusterRole",
    "RoleBinding",
    "ClusterRoleBinding",
    "DeleteOptions",
    "Eviction",
    "Binding",
    "SelfSubjectAccessReview",
    "SubjectAccessReview",
    "TokenRequest",
    "Lease",
    "Event",
    "Node",
];

/// The protobuf envelope prefix.
pub const MAGIC: &[u8] = b"k8s\x00";

#[derive(Clone, Copy)]
enum F {
    Str,
    Int,
    /// A non-pointer Go integer with `omitempty`: always encoded, 0 means unset.
    Int0,
    Bool,
    /// A non-pointer Go bool with `omitempty`: always encoded, false means unset.
    Bool0,
    Msg(&'static str),
    MapStr,
    MapBytes,
    RepStr,
    RepMsg(&'static str),
    Time,
    /// `metav1.MicroTime`: a Time with microseconds in JSON.
    MicroTime,
    IntOrStr,
}

fn schema(msg: &str) -> Option<&'static [(u64, &'static str, F)]> {
    use F::*;
    Some(match msg {
        "ObjectMeta" => &[
            (1, "name", Str),
            (2, "generateName", Str),
            (3, "namespace", Str),
            (5, "uid", Str),
            (6, "resourceVersion", Str),
            (7, "generation", Int0),
            (8, "creationTimestamp", Time),
            (9, "deletionTimestamp", Time),
            (10, "deletionGracePeriodSeconds", Int),
            (11, "labels", MapStr),
            (12, "annotations", MapStr),
            (13, "ownerReferences", RepMsg("OwnerReference")),
            (14, "finalizers", RepStr),
        ],
        "OwnerReference" => &[
            (1, "kind", Str),
            (3, "name", Str),
            (4, "uid", Str),
            (5, "apiVersion", Str),
            (6, "controller", Bool),
            (7, "blockOwnerDeletion", Bool),
        ],
        "ConfigMap" => &[
            (1, "metadata", Msg("ObjectMeta")),
            (2, "data", MapStr),
            (3, "binaryData", MapBytes),
            (4, "immutable", Bool),
        ],
        "Secret" => &[
            (1, "metadata", Msg("ObjectMeta")),
            (2, "data", MapBytes),
            (3, "type", Str),
            (4, "stringData", MapStr),
            (5, "immutable", Bool),
        ],
        "Namespace" => &[
            (1, "metadata", Msg("ObjectMeta")),
            (2, "spec", Msg("NamespaceSpec")),
            (3, "status", Msg("NamespaceStatus")),
        ],
        "NamespaceSpec" => &[(1, "finalizers", RepStr)],
        "NamespaceStatus" => &[(1, "phase", Str)],
        "ServiceAccount" => &[
            (1, "metadata", Msg("ObjectMeta")),
            (2, "secrets", RepMsg("ObjectReference")),
            (3, "imagePullSecrets", RepMsg("LocalObjectReference")),
            (4, "automountServiceAccountToken", Bool),
        ],
        "ObjectReference" => &[
            (1, "kind", Str),
            (2, "namespace", Str),
            (3, "name", Str),
            (4, "uid", Str),
            (5, "apiVersion", Str),
            (6, "resourceVersion", Str),
            (7, "fieldPath", Str),
        ],
        "LocalObjectReference" => &[(1, "name", Str)],
        "DeleteOptions" => &[
            (1, "gracePeriodSeconds", Int),
            (2, "preconditions", Msg("Preconditions")),
            (3, "orphanDependents", Bool),
            (4, "propagationPolicy", Str),
            (5, "dryRun", RepStr),
        ],
        "Preconditions" => &[(1, "uid", Str), (2, "resourceVersion", Str)],
        "Eviction" => &[
            (1, "metadata", Msg("ObjectMeta")),
            (2, "deleteOptions", Msg("DeleteOptions")),
        ],
        "Binding" => &[
            (1, "metadata", Msg("ObjectMeta")),
            (2, "target", Msg("ObjectReference")),
        ],
        // Status messages are left out on purpose: their non-pointer scalars are always
        // encoded, and clients cannot set status on create anyway.
        "Deployment" => &[
            (1, "metadata", Msg("ObjectMeta")),
            (2, "spec", Msg("DeploymentSpec")),
        ],
        "DeploymentSpec" => &[
            (1, "replicas", Int),
            (2, "selector", Msg("LabelSelector")),
            (3, "template", Msg("PodTemplateSpec")),
            (4, "strategy", Msg("DeploymentStrategy")),
            (5, "minReadySeconds", Int),
            (6, "revisionHistoryLimit", Int),
            (7, "paused", Bool),
            (9, "progressDeadlineSeconds", Int),
        ],
        "DeploymentStrategy" => &[
            (1, "type", Str),
            (2, "rollingUpdate", Msg("RollingUpdateDeployment")),
        ],
        "RollingUpdateDeployment" => &[(1, "maxUnavailable", IntOrStr), (2, "maxSurge", IntOrStr)],
        "LabelSelector" => &[
            (1, "matchLabels", MapStr),
            (2, "matchExpressions", RepMsg("LabelSelectorRequirement")),
        ],
        "LabelSelectorRequirement" => {
            &[(1, "key", Str), (2, "operator", Str), (3, "values", RepStr)]
        }
        "PodTemplateSpec" => &[
            (1, "metadata", Msg("ObjectMeta")),
            (2, "spec", Msg("PodSpec")),
        ],
        "PodSpec" => &[
            (2, "containers", RepMsg("Container")),
            (3, "restartPolicy", Str),
            (4, "terminationGracePeriodSeconds", Int),
            (5, "activeDeadlineSeconds", Int),
            (6, "dnsPolicy", Str),
            (7, "nodeSelector", MapStr),
            (8, "serviceAccountName", Str),
            (10, "nodeName", Str),
            (16, "hostname", Str),
            (17, "subdomain", Str),
            (19, "schedulerName", Str),
            (20, "initContainers", RepMsg("Container")),
            (21, "automountServiceAccountToken", Bool),
            (22, "tolerations", RepMsg("Toleration")),
            (24, "priorityClassName", Str),
        ],
        "Container" => &[
            (1, "name", Str),
            (2, "image", Str),
            (3, "command", RepStr),
            (4, "args", RepStr),
            (5, "workingDir", Str),
            (7, "env", RepMsg("EnvVar")),
            (13, "terminationMessagePath", Str),
            (14, "imagePullPolicy", Str),
        ],
        "EnvVar" => &[(1, "name", Str), (2, "value", Str)],
        "Toleration" => &[
            (1, "key", Str),
            (2, "operator", Str),
            (3, "value", Str),
            (4, "effect", Str),
            (5, "tolerationSeconds", Int),
        ],
        "PodDisruptionBudget" => &[
            (1, "metadata", Msg("ObjectMeta")),
            (2, "spec", Msg("PodDisruptionBudgetSpec")),
        ],
        "PodDisruptionBudgetSpec" => &[
            (1, "minAvailable", IntOrStr),
            (2, "selector", Msg("LabelSelector")),
            (3, "maxUnavailable", IntOrStr),
            (4, "unhealthyPodEvictionPolicy", Str),
        ],
        // kubectl create role|clusterrole|rolebinding|clusterrolebinding (rbac/v1).
        "Role" => &[
            (1, "metadata", Msg("ObjectMeta")),
            (2, "rules", RepMsg("PolicyRule")),
        ],
        "ClusterRole" => &[
            (1, "metadata", Msg("ObjectMeta")),
            (2, "rules", RepMsg("PolicyRule")),
            (3, "aggregationRule", Msg("AggregationRule")),
        ],
        "PolicyRule" => &[
            (1, "verbs", RepStr),
            (2, "apiGroups", RepStr),
            (3, "resources", RepStr),
            (4, "resourceNames", RepStr),
            (5, "nonResourceURLs", RepStr),
        ],
        "AggregationRule" => &[(1, "clusterRoleSelectors", RepMsg("LabelSelector"))],
        "RoleBinding" | "ClusterRoleBinding" => &[
            (1, "metadata", Msg("ObjectMeta")),
            (2, "subjects", RepMsg("Subject")),
            (3, "roleRef", Msg("RoleRef")),
        ],
        "Subject" => &[
            (1, "kind", Str),
            (2, "apiGroup", Str),
            (3, "name", Str),
            (4, "namespace", Str),
        ],
        "RoleRef" => &[(1, "apiGroup", Str), (2, "kind", Str), (3, "name", Str)],
        // kubectl create service clusterip|nodeport|loadbalancer|externalname (core/v1).
        "Service" => &[
            (1, "metadata", Msg("ObjectMeta")),
            (2, "spec", Msg("ServiceSpec")),
        ],
        "ServiceSpec" => &[
            (1, "ports", RepMsg("ServicePort")),
            (2, "selector", MapStr),
            (3, "clusterIP", Str),
            (4, "type", Str),
            (5, "externalIPs", RepStr),
            (7, "sessionAffinity", Str),
            (8, "loadBalancerIP", Str),
            (9, "loadBalancerSourceRanges", RepStr),
            (10, "externalName", Str),
            (11, "externalTrafficPolicy", Str),
            (12, "healthCheckNodePort", Int0),
            (13, "publishNotReadyAddresses", Bool0),
            (14, "sessionAffinityConfig", Msg("SessionAffinityConfig")),
            (17, "ipFamilyPolicy", Str),
            (18, "clusterIPs", RepStr),
            (19, "ipFamilies", RepStr),
            (20, "allocateLoadBalancerNodePorts", Bool),
            (21, "loadBalancerClass", Str),
            (22, "internalTrafficPolicy", Str),
            (23, "trafficDistribution", Str),
        ],
        "ServicePort" => &[
            (1, "name", Str),
            (2, "protocol", Str),
            (3, "port", Int),
            (4, "targetPort", IntOrStr),
            (5, "nodePort", Int0),
            (6, "appProtocol", Str),
        ],
        "SessionAffinityConfig" => &[(1, "clientIP", Msg("ClientIPConfig"))],
        "ClientIPConfig" => &[(1, "timeoutSeconds", Int)],
        // kubectl auth can-i and kubectl create token (authorization/v1, authentication/v1).
        "SelfSubjectAccessReview" => &[
            (1, "metadata", Msg("ObjectMeta")),
            (2, "spec", Msg("SubjectAccessReviewSpec")),
        ],
        "SubjectAccessReview" => &[
            (1, "metadata", Msg("ObjectMeta")),
            (2, "spec", Msg("SubjectAccessReviewSpec")),
        ],
        // The self spec has fields 1 and 2 only; the other review's spec adds the subject.
        "SubjectAccessReviewSpec" => &[
            (1, "resourceAttributes", Msg("ResourceAttributes")),
            (2, "nonResourceAttributes", Msg("NonResourceAttributes")),
            (3, "user", Str),
            (4, "groups", RepStr),
            (6, "uid", Str),
        ],
        "ResourceAttributes" => &[
            (1, "namespace", Str),
            (2, "verb", Str),
            (3, "group", Str),
            (4, "version", Str),
            (5, "resource", Str),
            (6, "subresource", Str),
            (7, "name", Str),
        ],
        "NonResourceAttributes" => &[(1, "path", Str), (2, "verb", Str)],
        "TokenRequest" => &[
            (1, "metadata", Msg("ObjectMeta")),
            (2, "spec", Msg("TokenRequestSpec")),
        ],
        "TokenRequestSpec" => &[(1, "audiences", RepStr), (4, "expirationSeconds", Int)],
        "Lease" => &[
            (1, "metadata", Msg("ObjectMeta")),
            (2, "spec", Msg("LeaseSpec")),
        ],
        "LeaseSpec" => &[
            (1, "holderIdentity", Str),
            (2, "leaseDurationSeconds", Int),
            (3, "acquireTime", MicroTime),
            (4, "renewTime", MicroTime),
            (5, "leaseTransitions", Int),
            (6, "strategy", Str),
            (7, "preferredHolder", Str),
        ],
        "Event" => &[
            (1, "metadata", Msg("ObjectMeta")),
            (2, "involvedObject", Msg("ObjectReference")),
            (3, "reason", Str),
            (4, "message", Str),
            (5, "source", Msg("EventSource")),
            (6, "firstTimestamp", Time),
            (7, "lastTimestamp", Time),
            (8, "count", Int0),
            (9, "type", Str),
            (10, "eventTime", MicroTime),
            (11, "series", Msg("EventSeries")),
            (12, "action", Str),
            (13, "related", Msg("ObjectReference")),
            (14, "reportingComponent", Str),
            (15, "reportingInstance", Str),
        ],
        "EventSource" => &[(1, "component", Str), (2, "host", Str)],
        "EventSeries" => &[(1, "count", Int0), (2, "lastObservedTime", MicroTime)],
        // The status (field 3) is left out: an update of a Node keeps the stored status.
        "Node" => &[
            (1, "metadata", Msg("ObjectMeta")),
            (2, "spec", Msg("NodeSpec")),
        ],
        "NodeSpec" => &[
            (1, "podCIDR", Str),
            (3, "providerID", Str),
            (4, "unschedulable", Bool0),
            (5, "taints", RepMsg("Taint")),
            (7, "podCIDRs", RepStr),
        ],
        "Taint" => &[
            (1, "key", Str),
            (2, "value", Str),
            (3, "effect", Str),
            (4, "timeAdded", Time),
        ],
        _ => return None,
    })
}

enum Wire<'a> {
    Varint(u64),
    Len(&'a [u8]),
    Fixed,
}

fn varint(buf: &[u8], pos: &mut usize) -> Result<u64, String> {
    let mut v: u64 = 0;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*pos).ok_or("truncated varint")?;
        *pos += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(v);
        }
    }
    Err("varint too long".into())
}

fn fields(buf: &[u8]) -> Result<Vec<(u64, Wire<'_>)>, String> {
    let mut out = Vec::new();
    let mut pos = 0;
    while pos < buf.len() {
        let tag = varint(buf, &mut pos)?;
        let (num, wt) = (tag >> 3, tag & 7);
        let w = match wt {
            0 => Wire::Varint(varint(buf, &mut pos)?),
            1 => {
                pos += 8;
                Wire::Fixed
            }
            5 => {
                pos += 4;
                Wire::Fixed
            }
            2 => {
                let len = usize::try_from(varint(buf, &mut pos)?).map_err(|_| "length overflow")?;
                let end = pos
                    .checked_add(len)
                    .filter(|e| *e <= buf.len())
                    .ok_or("truncated field")?;
                let s = &buf[pos..end];
                pos = end;
                Wire::Len(s)
            }
            other => return Err(format!("unsupported wire type {other}")),
        };
        if pos > buf.len() {
            return Err("truncated message".into());
        }
        out.push((num, w));
    }
    Ok(out)
}

/// A varint as Go's int32/int64: negative numbers are sign-extended to 64 bits on the wire.
fn int(v: u64) -> i64 {
    v as i64
}

fn text(b: &[u8]) -> Result<String, String> {
    String::from_utf8(b.to_vec()).map_err(|e| format!("invalid UTF-8: {e}"))
}

fn decode_msg(msg: &str, buf: &[u8]) -> Result<Value, String> {
    let sch = schema(msg).ok_or_else(|| format!("no protobuf schema for {msg}"))?;
    let mut out = Map::new();
    for (num, w) in fields(buf)? {
        let Some((_, name, kind)) = sch.iter().find(|(n, _, _)| *n == num) else {
            continue;
        };
        let name = name.to_string();
        match (kind, w) {
            (F::Str, Wire::Len(b)) => {
                // Go always encodes non-pointer strings; empty ones are omitted in JSON.
                if !b.is_empty() {
                    out.insert(name, json!(text(b)?));
                }
            }
            (F::IntOrStr, Wire::Len(b)) => {
                let (mut is_str, mut int, mut string) = (false, 0i64, String::new());
                for (n, w) in fields(b)? {
                    match (n, w) {
                        (1, Wire::Varint(t)) => is_str = t == 1,
                        (2, Wire::Varint(v)) => int = v as i64,
                        (3, Wire::Len(v)) => string = text(v)?,
                        _ => {}
                    }
                }
                out.insert(name, if is_str { json!(string) } else { json!(int) });
            }
            (F::Int, Wire::Varint(v)) => {
                out.insert(name, json!(int(v)));
            }
            (F::Int0, Wire::Varint(v)) => {
                if v != 0 {
                    out.insert(name, json!(int(v)));
                }
            }
            (F::Bool, Wire::Varint(v)) => {
                out.insert(name, json!(v != 0));
            }
            (F::Bool0, Wire::Varint(v)) => {
                if v != 0 {
                    out.insert(name, json!(true));
                }
            }
            (F::Msg(m), Wire::Len(b)) => {
                out.insert(name, decode_msg(m, b)?);
            }
            (F::RepStr, Wire::Len(b)) => {
                let e = out.entry(name).or_insert_with(|| json!([]));
                if let Some(a) = e.as_array_mut() {
                    a.push(json!(text(b)?));
                }
            }
            (F::RepMsg(m), Wire::Len(b)) => {
                let v = decode_msg(m, b)?;
                let e = out.entry(name).or_insert_with(|| json!([]));
                if let Some(a) = e.as_array_mut() {
                    a.push(v);
                }
            }
            (F::MapStr | F::MapBytes, Wire::Len(b)) => {
                let mut key = String::new();
                let mut val = Value::String(String::new());
                for (n, w) in fields(b)? {
                    match (n, w) {
                        (1, Wire::Len(k)) => key = text(k)?,
                        (2, Wire::Len(v)) => {
                            val = if matches!(kind, F::MapBytes) {
                                json!(base64::engine::general_purpose::STANDARD.encode(v))
                            } else {
                                json!(text(v)?)
                            };
                        }
                        _ => {}
                    }
                }
                let e = out.entry(name).or_insert_with(|| json!({}));
                if let Some(m) = e.as_object_mut() {
                    m.insert(key, val);
                }
            }
            // Go encodes a zero Time as an empty message; JSON has null, i.e. no field.
            (F::Time | F::MicroTime, Wire::Len(b)) if !b.is_empty() => {
                let (mut secs, mut nanos) = (0i64, 0i32);
                for (n, w) in fields(b)? {
                    match (n, w) {
                        (1, Wire::Varint(v)) => secs = v as i64,
                        (2, Wire::Varint(v)) => nanos = v as i32,
                        _ => {}
                    }
                }
                let ts = jiff::Timestamp::new(secs, nanos).map_err(|e| e.to_string())?;
                let format = if matches!(kind, F::MicroTime) {
                    "%Y-%m-%dT%H:%M:%S%.6fZ"
                } else {
                    "%Y-%m-%dT%H:%M:%SZ"
                };
                out.insert(name, json!(ts.strftime(format).to_string()));
            }
            (F::Time | F::MicroTime, Wire::Len(_)) => {}
            _ => return Err(format!("field {num} of {msg} has an unexpected wire type")),
        }
    }
    Ok(Value::Object(out))
}

/// Why a protobuf body could not be decoded.
#[derive(Debug, Clone, PartialEq)]
pub enum ProtoError {
    /// Not a protobuf envelope or malformed.
    Malformed(String),
    /// A kind the sandbox has no schema for.
    Unsupported(String),
}

/// Decodes a `k8s\0`-prefixed `runtime.Unknown` envelope into the JSON object.
pub fn decode(body: &[u8]) -> Result<Value, ProtoError> {
    let rest = body
        .strip_prefix(MAGIC)
        .ok_or_else(|| ProtoError::Malformed("missing the k8s protobuf prefix".into()))?;
    let mut api_version = String::new();
    let mut kind = String::new();
    let mut raw: &[u8] = &[];
    for (n, w) in fields(rest).map_err(ProtoError::Malformed)? {
        match (n, w) {
            (1, Wire::Len(tm)) => {
                for (tn, tw) in fields(tm).map_err(ProtoError::Malformed)? {
                    match (tn, tw) {
                        (1, Wire::Len(v)) => {
                            api_version = text(v).map_err(ProtoError::Malformed)?
                        }
                        (2, Wire::Len(v)) => kind = text(v).map_err(ProtoError::Malformed)?,
                        _ => {}
                    }
                }
            }
            (2, Wire::Len(r)) => raw = r,
            _ => {}
        }
    }
    if !KINDS.contains(&kind.as_str()) {
        return Err(ProtoError::Unsupported(kind));
    }
    let mut obj = decode_msg(&kind, raw).map_err(ProtoError::Malformed)?;
    obj["apiVersion"] = json!(api_version);
    obj["kind"] = json!(kind);
    Ok(obj)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn field(num: u64, payload: &[u8]) -> Vec<u8> {
        let mut out = vec![((num << 3) | 2) as u8, payload.len() as u8];
        out.extend_from_slice(payload);
        out
    }

    #[test]
    fn decodes_a_configmap_envelope() {
        let meta = [
            field(1, b"kc"),
            field(3, b"ns"),
            field(11, &[field(1, b"a"), field(2, b"b")].concat()),
        ]
        .concat();
        let cm = [
            field(1, &meta),
            field(2, &[field(1, b"k"), field(2, b"v")].concat()),
            vec![(4 << 3), 1],
        ]
        .concat();
        let tm = [field(1, b"v1"), field(2, b"ConfigMap")].concat();
        let env = [MAGIC.to_vec(), field(1, &tm), field(2, &cm)].concat();
        let v = decode(&env).unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kc", "namespace": "ns", "labels": {"a": "b"}}, "data": {"k": "v"}, "immutable": true})
        );
    }

    #[test]
    fn rejects_garbage_and_unknown_kinds() {
        assert!(matches!(decode(b"nope"), Err(ProtoError::Malformed(_))));
        assert!(matches!(
            decode(&[MAGIC, &[0x0a, 0x50]].concat()),
            Err(ProtoError::Malformed(_))
        ));
        let tm = [field(1, b"apps/v1"), field(2, b"StatefulSet")].concat();
        assert_eq!(
            decode(&[MAGIC.to_vec(), field(1, &tm)].concat()),
            Err(ProtoError::Unsupported("StatefulSet".into()))
        );
    }

    #[test]
    fn every_kind_has_a_schema_and_parts_are_not_kinds() {
        for kind in KINDS {
            assert!(schema(kind).is_some(), "{kind}");
        }
        let tm = [
            field(1, b"rbac.authorization.k8s.io/v1"),
            field(2, b"PolicyRule"),
        ]
        .concat();
        assert_eq!(
            decode(&[MAGIC.to_vec(), field(1, &tm)].concat()),
            Err(ProtoError::Unsupported("PolicyRule".into()))
        );
    }

    fn varint_field(num: u64, v: u64) -> Vec<u8> {
        let mut out = vec![(num << 3) as u8];
        let mut v = v;
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(b);
                break;
            }
            out.push(b | 0x80);
        }
        out
    }

    #[test]
    fn decodes_rbac_kinds_like_kubectl_create() {
        let rule = [
            field(1, b"get"),
            field(1, b"list"),
            field(2, b""),
            field(3, b"pods"),
            field(4, b"p1"),
        ]
        .concat();
        let role = [
            field(1, &[field(1, b"r"), field(3, b"ns")].concat()),
            field(2, &rule),
        ]
        .concat();
        let tm = [field(1, b"rbac.authorization.k8s.io/v1"), field(2, b"Role")].concat();
        let v = decode(&[MAGIC.to_vec(), field(1, &tm), field(2, &role)].concat()).unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                   "metadata": {"name": "r", "namespace": "ns"},
                   "rules": [{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"], "resourceNames": ["p1"]}]})
        );
        let subject = [
            field(1, b"ServiceAccount"),
            field(2, b""),
            field(3, b"sa"),
            field(4, b"ns"),
        ]
        .concat();
        let role_ref = [
            field(1, b"rbac.authorization.k8s.io"),
            field(2, b"ClusterRole"),
            field(3, b"view"),
        ]
        .concat();
        let binding = [
            field(1, &field(1, b"b")),
            field(2, &subject),
            field(3, &role_ref),
        ]
        .concat();
        let tm = [
            field(1, b"rbac.authorization.k8s.io/v1"),
            field(2, b"ClusterRoleBinding"),
        ]
        .concat();
        let v = decode(&[MAGIC.to_vec(), field(1, &tm), field(2, &binding)].concat()).unwrap();
        assert_eq!(
            v["subjects"],
            json!([{"kind": "ServiceAccount", "name": "sa", "namespace": "ns"}])
        );
        assert_eq!(
            v["roleRef"],
            json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"})
        );
        let selector = field(1, &[field(1, b"agg"), field(2, b"true")].concat());
        let cr = [field(1, &field(1, b"c")), field(3, &field(1, &selector))].concat();
        let tm = [
            field(1, b"rbac.authorization.k8s.io/v1"),
            field(2, b"ClusterRole"),
        ]
        .concat();
        let v = decode(&[MAGIC.to_vec(), field(1, &tm), field(2, &cr)].concat()).unwrap();
        assert_eq!(
            v["aggregationRule"],
            json!({"clusterRoleSelectors": [{"matchLabels": {"agg": "true"}}]})
        );
    }

    #[test]
    fn decodes_a_service_without_go_zero_values() {
        let target = [varint_field(1, 0), varint_field(2, 8080)].concat();
        let port = [
            field(1, b"http"),
            field(2, b"TCP"),
            varint_field(3, 80),
            field(4, &target),
            varint_field(5, 0),
        ]
        .concat();
        let spec = [
            field(1, &port),
            field(2, &[field(1, b"app"), field(2, b"web")].concat()),
            field(4, b"ClusterIP"),
            varint_field(12, 0),
            varint_field(13, 0),
        ]
        .concat();
        let svc = [field(1, &field(1, b"web")), field(2, &spec)].concat();
        let tm = [field(1, b"v1"), field(2, b"Service")].concat();
        let v = decode(&[MAGIC.to_vec(), field(1, &tm), field(2, &svc)].concat()).unwrap();
        assert_eq!(
            v["spec"],
            json!({"ports": [{"name": "http", "protocol": "TCP", "port": 80, "targetPort": 8080}],
                   "selector": {"app": "web"}, "type": "ClusterIP"})
        );
    }

    #[test]
    fn decodes_a_deployment_and_a_pdb_like_kubectl_create() {
        let labels = field(11, &[field(1, b"app"), field(2, b"web")].concat());
        let container = [
            field(1, b"busybox"),
            field(2, b"busybox:1.36"),
            field(5, b""),
        ]
        .concat();
        let template = [
            field(1, &labels),
            field(2, &[field(2, &container), field(3, b"")].concat()),
        ]
        .concat();
        let selector = field(1, &[field(1, b"app"), field(2, b"web")].concat());
        // replicas=0 is a set pointer and must survive; status (field 3) is ignored.
        let spec = [
            vec![1 << 3, 0],
            field(2, &selector),
            field(3, &template),
            field(4, b""),
        ]
        .concat();
        let deploy = [
            field(1, &[field(1, b"web"), labels.clone()].concat()),
            field(2, &spec),
            field(3, &[vec![1 << 3, 0]].concat()),
        ]
        .concat();
        let tm = [field(1, b"apps/v1"), field(2, b"Deployment")].concat();
        let v = decode(&[MAGIC.to_vec(), field(1, &tm), field(2, &deploy)].concat()).unwrap();
        assert_eq!(
            v,
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"name": "web", "labels": {"app": "web"}},
                   "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "web"}}, "strategy": {},
                            "template": {"metadata": {"labels": {"app": "web"}},
                                         "spec": {"containers": [{"name": "busybox", "image": "busybox:1.36"}]}}}})
        );
        let int_or_str_int = [vec![1 << 3, 0], vec![2 << 3, 1]].concat();
        let int_or_str_str = [vec![1 << 3, 1], field(3, b"50%")].concat();
        let pdb_spec = [
            field(1, &int_or_str_int),
            field(2, &selector),
            field(3, &int_or_str_str),
        ]
        .concat();
        let pdb = [field(1, &field(1, b"p")), field(2, &pdb_spec)].concat();
        let tm = [field(1, b"policy/v1"), field(2, b"PodDisruptionBudget")].concat();
        let v = decode(&[MAGIC.to_vec(), field(1, &tm), field(2, &pdb)].concat()).unwrap();
        assert_eq!(v["spec"]["minAvailable"], json!(1));
        assert_eq!(v["spec"]["maxUnavailable"], json!("50%"));
        assert_eq!(v["spec"]["selector"]["matchLabels"]["app"], json!("web"));
    }

    fn hex(text: &str) -> Vec<u8> {
        (0..text.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
            .collect()
    }

    /// Bodies as client-go v0.34's protobuf serializer writes them (a Go program encoded these
    /// objects): a leader-election Lease, a recorder's Event and an update of a Node.
    #[test]
    fn decodes_what_client_go_controllers_write() {
        let lease = decode(&hex("6b3873000a1f0a16636f6f7264696e6174696f6e2e6b38732e696f2f763112054c6561736512550a290a126d616368696e652d636f6e74726f6c6c657212001a0764656661756c7422002a0032003800420012280a06686f73742d31100f1a0c08f0caacd80610f8faa68203220c08f0caacd80610f8faa6820328021a002200")).unwrap();
        assert_eq!(
            lease,
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                   "metadata": {"name": "machine-controller", "namespace": "default"},
                   "spec": {"holderIdentity": "host-1", "leaseDurationSeconds": 15,
                            "acquireTime": "2026-11-28T19:03:12.810139Z",
                            "renewTime": "2026-11-28T19:03:12.810139Z", "leaseTransitions": 2}})
        );
        let event = decode(&hex("6b3873000a0b0a02763112054576656e7412b4010a1e0a076d2d312e31383712001a0764656661756c7422002a00320038004200123b0a074d616368696e65120764656661756c741a036d2d3122002a1c6d616368696e652e736170636c6f75642e696f2f7631616c7068613132003a001a0743726561746564220e637265617465642074686520564d2a160a126d616368696e652d636f6e74726f6c6c65721200320808f0caacd80610003a0808f0caacd806100040014a064e6f726d616c5200620072007a001a002200")).unwrap();
        // The zero eventTime (an empty message on the wire) is left out, as JSON's null.
        assert_eq!(
            event,
            json!({"apiVersion": "v1", "kind": "Event",
                   "metadata": {"name": "m-1.187", "namespace": "default"},
                   "involvedObject": {"kind": "Machine", "namespace": "default", "name": "m-1",
                                      "apiVersion": "machine.sapcloud.io/v1alpha1"},
                   "reason": "Created", "message": "created the VM",
                   "source": {"component": "machine-controller"},
                   "firstTimestamp": "2026-11-28T19:03:12Z", "lastTimestamp": "2026-11-28T19:03:12Z",
                   "count": 1, "type": "Normal"})
        );
        let node = decode(&hex("6b3873000a0a0a02763112044e6f646512a1010a2a0a036d2d3112001a0022002a0032023432380042005a0b0a046e6f646512036d2d3162060a0161120162122b0a0012001a0f6d656d6f72793a2f2f2f612f6d2d3120012a120a016b1201761a0a4e6f5363686564756c651a461a0022150a0552656164791204547275651a0022002a0032002a0f0a08486f73746e616d6512036d2d3132040a0208003a140a0012001a0022002a0032003a0042004a0052001a002200")).unwrap();
        // The status is not decoded: an update of a Node keeps the stored one.
        assert_eq!(
            node,
            json!({"apiVersion": "v1", "kind": "Node",
                   "metadata": {"name": "m-1", "resourceVersion": "42",
                                "labels": {"node": "m-1"}, "annotations": {"a": "b"}},
                   "spec": {"providerID": "memory:///a/m-1", "unschedulable": true,
                            "taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]}})
        );
    }
}
