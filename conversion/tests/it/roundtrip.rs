//! Every round trip is lossless, for arbitrary objects (unknown enum values included: the
//! strategies generate them).

use mcm_api::arbitrary;
use mcm_api::keys::annotation::CONVERSION_DATA;
use mcm_api::{v1alpha1, v1beta1};
use mcm_conversion::{Spoke, convert_object};
use proptest::prelude::*;
use serde::Serialize;
use serde::de::DeserializeOwned;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 64,
        ..ProptestConfig::default()
    }
}

/// v1alpha1 → hub → v1alpha1 gives the input back.
fn alpha_hub_alpha<A: Spoke + Clone + PartialEq + std::fmt::Debug>(
    alpha: &A,
) -> Result<(), TestCaseError> {
    let hub = alpha.clone().into_hub();
    prop_assert_eq!(&A::from_hub(&hub), alpha);
    Ok(())
}

/// hub → v1beta1 → hub gives the hub back (hubs taken from arbitrary v1alpha1 objects, which
/// cover every hub field).
fn hub_beta_hub<A, B>(alpha: &A) -> Result<(), TestCaseError>
where
    A: Spoke + Clone,
    B: Spoke<Hub = A::Hub> + Serialize + DeserializeOwned,
    A::Hub: PartialEq + std::fmt::Debug,
{
    let hub = alpha.clone().into_hub();
    let beta = B::from_hub(&hub);
    // Through JSON, as the API server stores and sends it.
    let beta: B = serde_json::from_value(serde_json::to_value(&beta).unwrap()).unwrap();
    prop_assert_eq!(beta.into_hub(), hub);
    Ok(())
}

/// v1alpha1 → v1beta1 → v1alpha1 through the review code (JSON in, JSON out) gives the same
/// JSON back.
fn alpha_beta_alpha_json<A: Serialize>(alpha: &A) -> Result<(), TestCaseError> {
    let input = serde_json::to_value(alpha).unwrap();
    let beta = convert_object(0, &input, v1beta1::API_VERSION).unwrap();
    prop_assert_eq!(beta["apiVersion"].as_str(), Some(v1beta1::API_VERSION));
    let back = convert_object(0, &beta, v1alpha1::API_VERSION).unwrap();
    prop_assert_eq!(&back, &input);
    prop_assert!(
        back["metadata"]["annotations"]
            .get(CONVERSION_DATA)
            .is_none()
            || input["metadata"]["annotations"]
                .get(CONVERSION_DATA)
                .is_some()
    );
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn machines_round_trip(alpha in arbitrary::machine()) {
        alpha_hub_alpha(&alpha)?;
        hub_beta_hub::<_, v1beta1::Machine>(&alpha)?;
        alpha_beta_alpha_json(&alpha)?;
    }

    #[test]
    fn machine_sets_round_trip(alpha in arbitrary::machine_set()) {
        alpha_hub_alpha(&alpha)?;
        hub_beta_hub::<_, v1beta1::MachineSet>(&alpha)?;
        alpha_beta_alpha_json(&alpha)?;
    }

    #[test]
    fn machine_deployments_round_trip(alpha in arbitrary::machine_deployment()) {
        alpha_hub_alpha(&alpha)?;
        hub_beta_hub::<_, v1beta1::MachineDeployment>(&alpha)?;
        alpha_beta_alpha_json(&alpha)?;
    }

    #[test]
    fn machine_classes_round_trip(alpha in arbitrary::machine_class()) {
        alpha_hub_alpha(&alpha)?;
        hub_beta_hub::<_, v1beta1::MachineClass>(&alpha)?;
        alpha_beta_alpha_json(&alpha)?;
    }
}

#[test]
fn rollback_to_survives_v1beta1_in_the_annotation_only() {
    let mut alpha =
        v1alpha1::MachineDeployment::new("md", v1alpha1::MachineDeploymentSpec::default());
    alpha.spec.rollback_to = Some(v1alpha1::RollbackConfig { revision: Some(3) });
    let beta = v1beta1::MachineDeployment::from_hub(&alpha.clone().into_hub());
    let beta_json = serde_json::to_value(&beta).unwrap();
    assert!(beta_json["spec"].get("rollbackTo").is_none());
    assert_eq!(
        beta_json["metadata"]["annotations"][CONVERSION_DATA],
        serde_json::json!(r#"{"rollbackTo":{"revision":3},"noAnnotations":true}"#)
    );
    let hub = beta.into_hub();
    assert_eq!(
        hub.metadata.annotations, None,
        "annotation must not leak into the hub"
    );
    assert_eq!(v1alpha1::MachineDeployment::from_hub(&hub), alpha);
}

#[test]
fn a_foreign_conversion_data_annotation_is_kept() {
    let mut beta = v1beta1::MachineSet::new("ms", v1beta1::MachineSetSpec::default());
    beta.metadata.annotations = Some([(CONVERSION_DATA.to_owned(), "not json".to_owned())].into());
    let hub = beta.clone().into_hub();
    assert_eq!(hub.metadata.annotations, beta.metadata.annotations);
}
