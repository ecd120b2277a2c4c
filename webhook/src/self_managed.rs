//! Self-managed certificates (docs/behaviour.md#webhook-certificates item 4, modelled on Gardener's secrets manager):
//! an own CA (rcgen) valid 30 days, renewed at 80 % of its validity or when fewer than 10 days
//! are left; the previous CA stays in the CA bundle for 24 h so API servers that still hold the
//! old bundle keep trusting the new serving certificate; the serving certificate is issued by
//! the current CA and re-issued on every rotation.
//!
//! The decisions ([`plan`], [`bundle`]) are pure functions of the stored state and `now`.
//! [`rotate`] generates keys. The shell ([`run`]) stores the state in a Secret, lets only the
//! holder of a Lease write (Secret and caBundle injection into our webhook configurations and the
//! CRDs' conversion `clientConfig`), and has every replica load the serving certificate from
//! the Secret into its [`CertStore`] without restart.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration as StdDuration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};

use crate::tls::CertStore;

/// Why certificates could not be generated or stored.
#[derive(Debug, thiserror::Error)]
pub enum SelfManagedError {
    /// rcgen failed.
    #[error("cannot generate the {what}: {source}")]
    Generate {
        /// CA or serving certificate.
        what: &'static str,
        /// The rcgen error.
        #[source]
        source: rcgen::Error,
    },
    /// The stored Secret is incomplete or malformed.
    #[error("secret {name} is malformed: {reason}")]
    Malformed {
        /// Secret name.
        name: String,
        /// What is wrong.
        reason: String,
    },
    /// An API call failed.
    #[error("{action} failed: {source}")]
    Api {
        /// What was attempted.
        action: String,
        /// The client error.
        #[source]
        source: kube::Error,
    },
}

/// Rotation policy.
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    /// Validity of a CA (and of the serving certificate it issues).
    pub validity: SignedDuration,
    /// Renew once this fraction of the validity has passed.
    pub renew_fraction: f64,
    /// Renew when less than this is left.
    pub renew_when_left: SignedDuration,
    /// How long the previous CA stays in the bundle.
    pub overlap: SignedDuration,
}

impl Default for Policy {
    fn default() -> Self {
        Self {
            validity: SignedDuration::from_hours(30 * 24),
            renew_fraction: 0.8,
            renew_when_left: SignedDuration::from_hours(10 * 24),
            overlap: SignedDuration::from_hours(24),
        }
    }
}

/// Everything the webhook keeps about its certificates (stored in one Secret).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct State {
    /// Current CA certificate (PEM).
    pub ca_cert: String,
    /// Current CA key (PEM).
    pub ca_key: String,
    /// When the current CA was issued.
    pub issued_at: Timestamp,
    /// When the current CA expires.
    pub valid_until: Timestamp,
    /// The previous CA and until when it stays in the bundle.
    pub previous: Option<(String, Timestamp)>,
    /// Serving certificate (PEM) issued by the current CA.
    pub tls_cert: String,
    /// Serving key (PEM).
    pub tls_key: String,
}

/// What to do with the stored state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Nothing yet: create the first CA.
    Create,
    /// The CA is due: rotate, keeping the old one in the bundle.
    Rotate,
    /// Still good.
    Keep,
}

/// Decides whether the CA must be created or rotated at `now`.
#[must_use]
pub fn plan(state: Option<&State>, now: Timestamp, policy: &Policy) -> Plan {
    let Some(state) = state else {
        return Plan::Create;
    };
    let lifetime = state.valid_until.duration_since(state.issued_at);
    let elapsed = now.duration_since(state.issued_at);
    let left = state.valid_until.duration_since(now);
    let due_by_fraction = elapsed.as_secs_f64() >= lifetime.as_secs_f64() * policy.renew_fraction;
    if due_by_fraction || left < policy.renew_when_left {
        Plan::Rotate
    } else {
        Plan::Keep
    }
}

/// The CA bundle to inject at `now`: the current CA, plus the previous one during the overlap.
#[must_use]
pub fn bundle(state: &State, now: Timestamp) -> String {
    let mut out = state.ca_cert.clone();
    if let Some((previous, keep_until)) = &state.previous
        && now < *keep_until
    {
        if !out.ends_with('\n') {
            out.push('\n');
        }
        out.push_str(previous);
    }
    out
}

fn set_validity(params: &mut CertificateParams, not_before: Timestamp, not_after: Timestamp) {
    let since_epoch =
        |at: Timestamp| StdDuration::from_secs(u64::try_from(at.as_second()).unwrap_or(0));
    params.not_before = rcgen::date_time_ymd(1970, 1, 1) + since_epoch(not_before);
    params.not_after = rcgen::date_time_ymd(1970, 1, 1) + since_epoch(not_after);
}

fn ca_params(
    common_name: &str,
    not_before: Timestamp,
    not_after: Timestamp,
) -> Result<CertificateParams, SelfManagedError> {
    let mut params = CertificateParams::new(Vec::<String>::new())
        .map_err(|source| SelfManagedError::Generate { what: "CA", source })?;
    let mut name = DistinguishedName::new();
    name.push(DnType::CommonName, common_name);
    params.distinguished_name = name;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    set_validity(&mut params, not_before, not_after);
    Ok(params)
}

/// Generates a new CA and serving certificate at `now`; the current CA of `previous` (if any)
/// stays in the bundle for the policy's overlap.
pub fn rotate(
    previous: Option<&State>,
    now: Timestamp,
    policy: &Policy,
    common_name: &str,
    dns_names: &[String],
) -> Result<State, SelfManagedError> {
    let valid_until = now.checked_add(policy.validity).unwrap_or(Timestamp::MAX);
    // A little slack for clocks that run behind ours.
    let not_before = now.checked_sub(SignedDuration::from_mins(5)).unwrap_or(now);
    let ca_key = KeyPair::generate().map_err(|source| SelfManagedError::Generate {
        what: "CA key",
        source,
    })?;
    let params = ca_params(common_name, not_before, valid_until)?;
    let ca_cert = params
        .self_signed(&ca_key)
        .map_err(|source| SelfManagedError::Generate { what: "CA", source })?;
    let issuer = Issuer::new(params, &ca_key);
    let server_key = KeyPair::generate().map_err(|source| SelfManagedError::Generate {
        what: "serving key",
        source,
    })?;
    let mut server = CertificateParams::new(dns_names.to_vec()).map_err(|source| {
        SelfManagedError::Generate {
            what: "serving certificate",
            source,
        }
    })?;
    let mut name = DistinguishedName::new();
    name.push(
        DnType::CommonName,
        dns_names.first().map_or(common_name, String::as_str),
    );
    server.distinguished_name = name;
    server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    set_validity(&mut server, not_before, valid_until);
    let server_cert =
        server
            .signed_by(&server_key, &issuer)
            .map_err(|source| SelfManagedError::Generate {
                what: "serving certificate",
                source,
            })?;
    let overlap_until = now.checked_add(policy.overlap).unwrap_or(Timestamp::MAX);
    Ok(State {
        ca_cert: ca_cert.pem(),
        ca_key: ca_key.serialize_pem(),
        issued_at: now,
        valid_until,
        previous: previous.map(|p| (p.ca_cert.clone(), overlap_until)),
        tls_cert: server_cert.pem(),
        tls_key: server_key.serialize_pem(),
    })
}

const KEY_CA_CERT: &str = "ca.crt";
const KEY_CA_KEY: &str = "ca.key";
const KEY_PREVIOUS_CA: &str = "previous-ca.crt";
const KEY_TLS_CERT: &str = "tls.crt";
const KEY_TLS_KEY: &str = "tls.key";
const ANNOTATION_ISSUED_AT: &str = "machine.sapcloud.io/ca-issued-at";
const ANNOTATION_VALID_UNTIL: &str = "machine.sapcloud.io/ca-valid-until";
const ANNOTATION_PREVIOUS_UNTIL: &str = "machine.sapcloud.io/previous-ca-in-bundle-until";

/// The state as the data and annotations of a Secret.
#[must_use]
pub fn to_secret(state: &State, name: &str, namespace: &str) -> Secret {
    let mut data = BTreeMap::new();
    let mut put = |key: &str, value: &str| {
        data.insert(key.to_owned(), ByteString(value.as_bytes().to_vec()));
    };
    put(KEY_CA_CERT, &state.ca_cert);
    put(KEY_CA_KEY, &state.ca_key);
    put(KEY_TLS_CERT, &state.tls_cert);
    put(KEY_TLS_KEY, &state.tls_key);
    let mut annotations = BTreeMap::from([
        (ANNOTATION_ISSUED_AT.to_owned(), state.issued_at.to_string()),
        (
            ANNOTATION_VALID_UNTIL.to_owned(),
            state.valid_until.to_string(),
        ),
    ]);
    if let Some((previous, until)) = &state.previous {
        put(KEY_PREVIOUS_CA, previous);
        annotations.insert(ANNOTATION_PREVIOUS_UNTIL.to_owned(), until.to_string());
    }
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            annotations: Some(annotations),
            labels: Some(BTreeMap::from([(
                "app.kubernetes.io/managed-by".to_owned(),
                "machine-webhook".to_owned(),
            )])),
            ..ObjectMeta::default()
        },
        data: Some(data),
        type_: Some("kubernetes.io/tls".to_owned()),
        ..Secret::default()
    }
}

/// Reads the state back from a Secret written by [`to_secret`].
pub fn from_secret(secret: &Secret) -> Result<State, SelfManagedError> {
    let name = secret.metadata.name.clone().unwrap_or_default();
    let malformed = |reason: String| SelfManagedError::Malformed {
        name: name.clone(),
        reason,
    };
    let data = secret
        .data
        .as_ref()
        .ok_or_else(|| malformed("no data".to_owned()))?;
    let text = |key: &str| {
        data.get(key)
            .ok_or_else(|| malformed(format!("missing {key}")))
            .and_then(|b| {
                String::from_utf8(b.0.clone()).map_err(|_| malformed(format!("{key} is not UTF-8")))
            })
    };
    let annotations = secret.metadata.annotations.clone().unwrap_or_default();
    let time = |key: &str| {
        annotations
            .get(key)
            .ok_or_else(|| malformed(format!("missing annotation {key}")))
            .and_then(|t| {
                t.parse::<Timestamp>()
                    .map_err(|e| malformed(format!("{key}: {e}")))
            })
    };
    let previous = match (
        data.contains_key(KEY_PREVIOUS_CA),
        annotations.contains_key(ANNOTATION_PREVIOUS_UNTIL),
    ) {
        (true, true) => Some((text(KEY_PREVIOUS_CA)?, time(ANNOTATION_PREVIOUS_UNTIL)?)),
        _ => None,
    };
    Ok(State {
        ca_cert: text(KEY_CA_CERT)?,
        ca_key: text(KEY_CA_KEY)?,
        issued_at: time(ANNOTATION_ISSUED_AT)?,
        valid_until: time(ANNOTATION_VALID_UNTIL)?,
        previous,
        tls_cert: text(KEY_TLS_CERT)?,
        tls_key: text(KEY_TLS_KEY)?,
    })
}

/// Settings of the self-managed mode.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Namespace of the Secret and the Lease.
    pub namespace: String,
    /// Name of the Secret holding CA and serving certificate.
    pub secret_name: String,
    /// Name of the Lease whose holder writes.
    pub lease_name: String,
    /// Identity of this replica in the Lease.
    pub identity: String,
    /// DNS names of the serving certificate (`<svc>`, `<svc>.<ns>`, `<svc>.<ns>.svc`, ...).
    pub dns_names: Vec<String>,
    /// Our MutatingWebhookConfiguration.
    pub mutating_configuration: Option<String>,
    /// Our ValidatingWebhookConfiguration.
    pub validating_configuration: Option<String>,
    /// CRDs whose conversion `clientConfig` gets the bundle.
    pub crds: Vec<String>,
    /// How often to reconcile.
    pub period: StdDuration,
    /// Rotation policy.
    pub policy: Policy,
}

/// Writes `bundle` as `caBundle` into every webhook of our configurations and into the
/// conversion webhook of each CRD (CRDs without a conversion webhook are left alone).
pub async fn inject_ca_bundle(
    client: &kube::Client,
    settings: &Settings,
    bundle: &[u8],
) -> Result<(), SelfManagedError> {
    let api_error = |action: String| move |source| SelfManagedError::Api { action, source };
    if let Some(name) = &settings.mutating_configuration {
        let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
        let mut object = api.get(name).await.map_err(api_error(format!(
            "get MutatingWebhookConfiguration {name}"
        )))?;
        let mut changed = false;
        for webhook in object.webhooks.iter_mut().flatten() {
            if webhook
                .client_config
                .ca_bundle
                .as_ref()
                .map(|b| b.0.as_slice())
                != Some(bundle)
            {
                webhook.client_config.ca_bundle = Some(ByteString(bundle.to_vec()));
                changed = true;
            }
        }
        if changed {
            api.replace(name, &PostParams::default(), &object)
                .await
                .map_err(api_error(format!(
                    "update MutatingWebhookConfiguration {name}"
                )))?;
        }
    }
    if let Some(name) = &settings.validating_configuration {
        let api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
        let mut object = api.get(name).await.map_err(api_error(format!(
            "get ValidatingWebhookConfiguration {name}"
        )))?;
        let mut changed = false;
        for webhook in object.webhooks.iter_mut().flatten() {
            if webhook
                .client_config
                .ca_bundle
                .as_ref()
                .map(|b| b.0.as_slice())
                != Some(bundle)
            {
                webhook.client_config.ca_bundle = Some(ByteString(bundle.to_vec()));
                changed = true;
            }
        }
        if changed {
            api.replace(name, &PostParams::default(), &object)
                .await
                .map_err(api_error(format!(
                    "update ValidatingWebhookConfiguration {name}"
                )))?;
        }
    }
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in &settings.crds {
        let mut crd = crds
            .get(name)
            .await
            .map_err(api_error(format!("get CRD {name}")))?;
        let Some(config) = crd
            .spec
            .conversion
            .as_mut()
            .and_then(|c| c.webhook.as_mut())
            .and_then(|w| w.client_config.as_mut())
        else {
            continue;
        };
        if config.ca_bundle.as_ref().map(|b| b.0.as_slice()) != Some(bundle) {
            config.ca_bundle = Some(ByteString(bundle.to_vec()));
            crds.replace(name, &PostParams::default(), &crd)
                .await
                .map_err(api_error(format!("update CRD {name}")))?;
        }
    }
    Ok(())
}

/// One reconcile: the leader creates/rotates the state and injects the bundle; every replica
/// loads the serving certificate. Returns whether a certificate is being served.
pub async fn reconcile_once(
    client: &kube::Client,
    settings: &Settings,
    store: &CertStore,
    is_leader: bool,
    now: Timestamp,
) -> Result<bool, SelfManagedError> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &settings.namespace);
    let existing = secrets
        .get_opt(&settings.secret_name)
        .await
        .map_err(|source| SelfManagedError::Api {
            action: format!("get Secret {}/{}", settings.namespace, settings.secret_name),
            source,
        })?;
    let state = existing
        .as_ref()
        .map(from_secret)
        .transpose()
        .unwrap_or_else(|error| {
            tracing::warn!(%error, "stored certificates unusable; they will be replaced");
            None
        });
    let mut state = state;
    if is_leader {
        let decision = plan(state.as_ref(), now, &settings.policy);
        if decision != Plan::Keep {
            let common_name = format!("{}-ca", settings.secret_name);
            let next = rotate(
                state.as_ref(),
                now,
                &settings.policy,
                &common_name,
                &settings.dns_names,
            )?;
            let mut secret = to_secret(&next, &settings.secret_name, &settings.namespace);
            let result = match &existing {
                Some(current) => {
                    // Optimistic concurrency: a stale write (another leader) fails instead of
                    // overwriting.
                    secret.metadata.resource_version = current.metadata.resource_version.clone();
                    secrets
                        .replace(&settings.secret_name, &PostParams::default(), &secret)
                        .await
                }
                None => secrets.create(&PostParams::default(), &secret).await,
            };
            result.map_err(|source| SelfManagedError::Api {
                action: format!(
                    "write Secret {}/{}",
                    settings.namespace, settings.secret_name
                ),
                source,
            })?;
            tracing::info!(plan = ?decision, valid_until = %next.valid_until, "webhook CA issued");
            state = Some(next);
        }
        if let Some(state) = &state {
            inject_ca_bundle(client, settings, bundle(state, now).as_bytes()).await?;
        }
    }
    if let Some(state) = &state
        && let Err(error) = store.set_pem(state.tls_cert.as_bytes(), state.tls_key.as_bytes())
    {
        tracing::warn!(%error, "stored serving certificate rejected; keeping the previous one");
    }
    Ok(store.is_loaded())
}

/// Runs the self-managed mode until the process ends: takes part in the Lease election and
/// reconciles every `settings.period` and whenever leadership changes.
pub async fn run(
    client: kube::Client,
    settings: Settings,
    store: Arc<CertStore>,
) -> anyhow::Result<()> {
    let manager =
        kube_lease_manager::LeaseManagerBuilder::new(client.clone(), &settings.lease_name)
            .with_namespace(&settings.namespace)
            .with_identity(&settings.identity)
            .build()
            .await?;
    let (mut leader, _task) = manager.watch().await;
    let mut ticker = tokio::time::interval(settings.period);
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            changed = leader.changed() => {
                if changed.is_err() {
                    anyhow::bail!("lease manager stopped");
                }
            }
        }
        let is_leader = *leader.borrow();
        if let Err(error) =
            reconcile_once(&client, &settings, &store, is_leader, Timestamp::now()).await
        {
            tracing::warn!(%error, is_leader, "certificate reconcile failed; retrying");
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(seconds).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    const DAY: i64 = 86_400;

    fn state(issued: i64, until: i64) -> State {
        State {
            ca_cert: "A".into(),
            ca_key: String::new(),
            issued_at: at(issued),
            valid_until: at(until),
            previous: None,
            tls_cert: String::new(),
            tls_key: String::new(),
        }
    }

    #[test]
    fn plan_creates_keeps_and_rotates_at_80_percent() {
        let policy = Policy::default();
        assert_eq!(plan(None, at(0), &policy), Plan::Create);
        let current = state(0, 30 * DAY);
        assert_eq!(plan(Some(&current), at(10 * DAY), &policy), Plan::Keep);
        assert_eq!(plan(Some(&current), at(24 * DAY), &policy), Plan::Rotate);
        // Short-lived CA: fewer than 10 days left triggers rotation early.
        let short = state(0, 12 * DAY);
        assert_eq!(plan(Some(&short), at(3 * DAY), &policy), Plan::Rotate);
    }

    #[test]
    fn bundle_keeps_the_previous_ca_during_the_overlap_only() {
        let mut current = state(0, 30 * DAY);
        current.ca_cert = "NEW\n".into();
        current.previous = Some(("OLD\n".into(), at(DAY)));
        assert_eq!(bundle(&current, at(DAY - 1)), "NEW\nOLD\n");
        assert_eq!(bundle(&current, at(DAY)), "NEW\n");
    }

    #[test]
    fn rotation_issues_a_serving_certificate_and_round_trips_through_a_secret() {
        let policy = Policy::default();
        let names = vec!["svc.ns.svc".to_owned()];
        let first = rotate(None, at(1_800_000_000), &policy, "mcm-ca", &names).unwrap();
        assert!(first.previous.is_none());
        assert!(
            crate::tls::certified_key(first.tls_cert.as_bytes(), first.tls_key.as_bytes()).is_ok()
        );
        let second = rotate(
            Some(&first),
            at(1_800_000_000 + 25 * DAY),
            &policy,
            "mcm-ca",
            &names,
        )
        .unwrap();
        assert_ne!(second.ca_cert, first.ca_cert);
        assert_eq!(
            second.previous.as_ref().map(|p| p.0.clone()),
            Some(first.ca_cert.clone())
        );
        let secret = to_secret(&second, "s", "ns");
        assert_eq!(from_secret(&secret).unwrap(), second);
    }
}
