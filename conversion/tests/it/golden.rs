//! Golden fixtures: a realistic upstream v1alpha1 object and its hand-written v1beta1 form.

use mcm_conversion::convert_object;
use serde_json::Value;

fn fixture(name: &str) -> Value {
    let path = format!("{}/tests/it/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

#[test]
fn machine_deployment_converts_to_the_golden_v1beta1_and_back() {
    let alpha = fixture("machinedeployment-v1alpha1.json");
    let beta = fixture("machinedeployment-v1beta1.json");
    assert_eq!(
        convert_object(0, &alpha, "machine.sapcloud.io/v1beta1").unwrap(),
        beta
    );
    assert_eq!(
        convert_object(0, &beta, "machine.sapcloud.io/v1alpha1").unwrap(),
        alpha
    );
}

#[test]
fn machine_class_converts_to_the_golden_v1beta1_and_back() {
    let alpha = fixture("machineclass-v1alpha1.json");
    let beta = fixture("machineclass-v1beta1.json");
    assert_eq!(
        convert_object(0, &alpha, "machine.sapcloud.io/v1beta1").unwrap(),
        beta
    );
    assert_eq!(
        convert_object(0, &beta, "machine.sapcloud.io/v1alpha1").unwrap(),
        alpha
    );
}
