//! The virtual provider's `providerSpec`: parsing and validation with field paths (pure).
//!
//! ```yaml
//! provider: virtual
//! providerSpec:
//!   bootDelay: 5s                 # time from CreateMachine until the Node registers
//!   createLatency: 0s             # time CreateMachine itself takes (a slow cloud API)
//!   initialization: silent        # none | reported | silent (see `Initialization`)
//!   requiresInitialization: true  # older spelling of `initialization: reported`
//!   unhealthyAfter: 10m           # the Node's Ready condition turns False this long after boot
//!   failures:                     # fail the first N calls for each machine with a code
//!     create: {code: ResourceExhausted, times: 2}
//!     initialize: {code: Internal, times: 1}
//!     delete: {code: Unavailable, times: 1}
//!   tags: {team: a}               # hot-updatable (UpdateMachine)
//! ```

use std::collections::BTreeMap;

use mcm_api::duration::Duration;
use mcm_provider_proto::Code;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The `MachineClass.provider` value this driver serves.
pub const PROVIDER_NAME: &str = "virtual";

/// providerSpec paths UpdateMachine changes on a running VM.
pub const HOT_UPDATABLE_PATHS: &[&str] = &["tags"];

/// A validation failure of one field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The field path, e.g. `providerSpec.bootDelay`.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// Joins field errors into one message (`path: message; path: message`).
pub fn describe(errors: &[FieldError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Failure injection for one driver method: the first `times` calls for a machine fail with `code`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailureInjection {
    /// The machine code name (`Code::name`) to fail with.
    #[serde(with = "code_name")]
    pub code: Code,
    /// How many calls fail (per machine) before calls succeed.
    pub times: u32,
}

mod code_name {
    use mcm_provider_proto::Code;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(code: &Code, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(code.name())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Code, D::Error> {
        let name = String::deserialize(deserializer)?;
        Ok(Code::from_name(&name))
    }
}

/// Which driver method a failure injection applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum FailingMethod {
    /// CreateMachine.
    Create,
    /// InitializeMachine.
    Initialize,
    /// DeleteMachine.
    Delete,
}

impl FailingMethod {
    /// The providerSpec key.
    pub fn key(self) -> &'static str {
        match self {
            FailingMethod::Create => "create",
            FailingMethod::Initialize => "initialize",
            FailingMethod::Delete => "delete",
        }
    }
}

/// Whether a VM needs InitializeMachine before its Node registers, and how GetMachineStatus
/// shows a VM that is not initialised yet (`providerSpec.initialization`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Initialization {
    /// `none`: nothing to initialise (InitializeMachine still answers OK).
    #[default]
    None,
    /// `reported`: GetMachineStatus answers `Uninitialized` (with the VM's status) until
    /// InitializeMachine succeeded, as the AWS provider does.
    Reported,
    /// `silent`: GetMachineStatus answers like a cloud that cannot see initialisation (NotFound
    /// before CreateMachine, the VM after), yet the Node registers only after InitializeMachine:
    /// only a controller that initialises the VM in the pass that created it gets a Node.
    Silent,
}

impl Initialization {
    /// The providerSpec value.
    pub fn name(self) -> &'static str {
        match self {
            Initialization::None => "none",
            Initialization::Reported => "reported",
            Initialization::Silent => "silent",
        }
    }
}

/// A validated providerSpec.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VirtualSpec {
    /// Time from CreateMachine until the VM has booted and its Node registers.
    pub boot_delay: Duration,
    /// Time CreateMachine takes before the VM exists (abandoned if the call's deadline expires).
    pub create_latency: Duration,
    /// Whether GetMachineStatus answers Uninitialized until InitializeMachine succeeded
    /// ([`Initialization::Reported`]).
    pub requires_initialization: bool,
    /// Whether the VM needs InitializeMachine although GetMachineStatus reports it normally
    /// ([`Initialization::Silent`]; absent in state files written before it existed).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub silent_initialization: bool,
    /// The Node's Ready condition turns False this long after boot.
    pub unhealthy_after: Option<Duration>,
    /// Failure injection per method.
    pub failures: BTreeMap<FailingMethod, FailureInjection>,
    /// VM tags (hot-updatable).
    pub tags: BTreeMap<String, String>,
}

impl VirtualSpec {
    /// The initialisation mode.
    pub fn initialization(&self) -> Initialization {
        if self.silent_initialization {
            Initialization::Silent
        } else if self.requires_initialization {
            Initialization::Reported
        } else {
            Initialization::None
        }
    }

    fn set_initialization(&mut self, mode: Initialization) {
        self.requires_initialization = mode == Initialization::Reported;
        self.silent_initialization = mode == Initialization::Silent;
    }
}

const FIELDS: &[&str] = &[
    "bootDelay",
    "createLatency",
    "initialization",
    "requiresInitialization",
    "unhealthyAfter",
    "failures",
    "tags",
];

/// Checks `MachineClass.provider`.
pub fn check_provider(provider: Option<&str>) -> Result<(), FieldError> {
    match provider {
        Some(PROVIDER_NAME) => Ok(()),
        Some(other) => Err(FieldError {
            path: "provider".into(),
            message: format!("{other:?} is not served by this driver (expected {PROVIDER_NAME:?})"),
        }),
        None => Err(FieldError {
            path: "provider".into(),
            message: format!("is missing (expected {PROVIDER_NAME:?})"),
        }),
    }
}

/// Parses and validates a providerSpec, reporting every bad field with its path.
pub fn parse_provider_spec(value: &Value) -> Result<VirtualSpec, Vec<FieldError>> {
    let mut errors = Vec::new();
    let mut spec = VirtualSpec::default();
    let object = match value {
        Value::Null => return Ok(spec),
        Value::Object(object) => object,
        other => {
            return Err(vec![FieldError {
                path: "providerSpec".into(),
                message: format!("must be an object, got {}", kind_of(other)),
            }]);
        }
    };
    for key in object.keys().filter(|key| !FIELDS.contains(&key.as_str())) {
        errors.push(FieldError {
            path: format!("providerSpec.{key}"),
            message: format!("unknown field (known: {})", FIELDS.join(", ")),
        });
    }
    if let Some(value) = object.get("bootDelay") {
        spec.boot_delay =
            duration(value, "providerSpec.bootDelay", &mut errors).unwrap_or_default();
    }
    if let Some(value) = object.get("createLatency") {
        spec.create_latency =
            duration(value, "providerSpec.createLatency", &mut errors).unwrap_or_default();
    }
    if let Some(value) = object.get("unhealthyAfter") {
        spec.unhealthy_after = duration(value, "providerSpec.unhealthyAfter", &mut errors);
    }
    let legacy = match object.get("requiresInitialization") {
        None | Some(Value::Null) => None,
        Some(Value::Bool(flag)) => Some(if *flag {
            Initialization::Reported
        } else {
            Initialization::None
        }),
        Some(other) => {
            errors.push(FieldError {
                path: "providerSpec.requiresInitialization".into(),
                message: format!("must be a boolean, got {}", kind_of(other)),
            });
            None
        }
    };
    let mode = match object.get("initialization") {
        None | Some(Value::Null) => None,
        Some(Value::String(name)) => match name.as_str() {
            "none" => Some(Initialization::None),
            "reported" => Some(Initialization::Reported),
            "silent" => Some(Initialization::Silent),
            _ => {
                errors.push(FieldError {
                    path: "providerSpec.initialization".into(),
                    message: format!("{name:?} is not one of none, reported, silent"),
                });
                None
            }
        },
        Some(other) => {
            errors.push(FieldError {
                path: "providerSpec.initialization".into(),
                message: format!(
                    "must be one of \"none\", \"reported\", \"silent\", got {}",
                    kind_of(other)
                ),
            });
            None
        }
    };
    match (mode, legacy) {
        (Some(mode), Some(legacy)) if mode != legacy => errors.push(FieldError {
            path: "providerSpec.initialization".into(),
            message: format!(
                "{:?} contradicts requiresInitialization: {} (which means {:?}); set only initialization",
                mode.name(),
                legacy == Initialization::Reported,
                legacy.name()
            ),
        }),
        (Some(mode), _) | (None, Some(mode)) => spec.set_initialization(mode),
        (None, None) => {}
    }
    if let Some(value) = object.get("failures") {
        spec.failures = failures(value, &mut errors);
    }
    if let Some(value) = object.get("tags") {
        spec.tags = tags(value, &mut errors);
    }
    if errors.is_empty() {
        Ok(spec)
    } else {
        Err(errors)
    }
}

/// The providerSpec paths whose values differ between two specs and are not hot-updatable.
pub fn cold_changes(current: &VirtualSpec, wanted: &VirtualSpec) -> Vec<&'static str> {
    let mut changed = Vec::new();
    if current.boot_delay != wanted.boot_delay {
        changed.push("providerSpec.bootDelay");
    }
    if current.create_latency != wanted.create_latency {
        changed.push("providerSpec.createLatency");
    }
    if current.initialization() != wanted.initialization() {
        changed.push("providerSpec.initialization");
    }
    if current.unhealthy_after != wanted.unhealthy_after {
        changed.push("providerSpec.unhealthyAfter");
    }
    if current.failures != wanted.failures {
        changed.push("providerSpec.failures");
    }
    changed
}

/// The hot-updatable paths whose values differ.
pub fn hot_changes(current: &VirtualSpec, wanted: &VirtualSpec) -> Vec<String> {
    if current.tags == wanted.tags {
        Vec::new()
    } else {
        vec!["tags".to_owned()]
    }
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn duration(value: &Value, path: &str, errors: &mut Vec<FieldError>) -> Option<Duration> {
    let error = |message: String| FieldError {
        path: path.to_owned(),
        message,
    };
    match value {
        Value::Null => None,
        Value::String(text) => match text.parse::<Duration>() {
            Ok(parsed) if parsed.is_negative() => {
                errors.push(error(format!("must not be negative, got {text:?}")));
                None
            }
            Ok(parsed) => Some(parsed),
            Err(parse) => {
                errors.push(error(format!(
                    "not a duration like \"10s\" or \"1m30s\": {parse}"
                )));
                None
            }
        },
        other => {
            errors.push(error(format!(
                "must be a duration string like \"10s\", got {}",
                kind_of(other)
            )));
            None
        }
    }
}

fn failures(
    value: &Value,
    errors: &mut Vec<FieldError>,
) -> BTreeMap<FailingMethod, FailureInjection> {
    let mut result = BTreeMap::new();
    let Value::Object(object) = value else {
        errors.push(FieldError {
            path: "providerSpec.failures".into(),
            message: format!("must be an object, got {}", kind_of(value)),
        });
        return result;
    };
    for (key, entry) in object {
        let path = format!("providerSpec.failures.{key}");
        let method = match key.as_str() {
            "create" => FailingMethod::Create,
            "initialize" => FailingMethod::Initialize,
            "delete" => FailingMethod::Delete,
            _ => {
                errors.push(FieldError {
                    path,
                    message: "unknown method (known: create, initialize, delete)".into(),
                });
                continue;
            }
        };
        let Value::Object(fields) = entry else {
            errors.push(FieldError {
                path,
                message: format!(
                    "must be an object with code and times, got {}",
                    kind_of(entry)
                ),
            });
            continue;
        };
        for unknown in fields
            .keys()
            .filter(|field| !["code", "times"].contains(&field.as_str()))
        {
            errors.push(FieldError {
                path: format!("{path}.{unknown}"),
                message: "unknown field (known: code, times)".into(),
            });
        }
        let code = match fields.get("code") {
            Some(Value::String(name)) => {
                match Code::ALL.into_iter().find(|code| code.name() == name) {
                    Some(Code::Ok) | None => {
                        errors.push(FieldError {
                        path: format!("{path}.code"),
                        message: format!("{name:?} is not an error code name (e.g. ResourceExhausted, Internal, Uninitialized)"),
                    });
                        None
                    }
                    Some(code) => Some(code),
                }
            }
            other => {
                errors.push(FieldError {
                    path: format!("{path}.code"),
                    message: format!(
                        "must be a code name string, got {}",
                        other.map_or("nothing", kind_of)
                    ),
                });
                None
            }
        };
        let times = match fields.get("times") {
            None => Some(1),
            Some(Value::Number(number)) => {
                match number.as_u64().and_then(|times| u32::try_from(times).ok()) {
                    Some(times) if times >= 1 => Some(times),
                    _ => {
                        errors.push(FieldError {
                            path: format!("{path}.times"),
                            message: format!("must be a positive integer, got {number}"),
                        });
                        None
                    }
                }
            }
            Some(other) => {
                errors.push(FieldError {
                    path: format!("{path}.times"),
                    message: format!("must be a positive integer, got {}", kind_of(other)),
                });
                None
            }
        };
        if let (Some(code), Some(times)) = (code, times) {
            result.insert(method, FailureInjection { code, times });
        }
    }
    result
}

fn tags(value: &Value, errors: &mut Vec<FieldError>) -> BTreeMap<String, String> {
    let Value::Object(object) = value else {
        errors.push(FieldError {
            path: "providerSpec.tags".into(),
            message: format!("must be an object of strings, got {}", kind_of(value)),
        });
        return BTreeMap::new();
    };
    let mut tags = BTreeMap::new();
    for (key, entry) in object {
        if key.is_empty() {
            errors.push(FieldError {
                path: "providerSpec.tags".into(),
                message: "tag keys must not be empty".into(),
            });
            continue;
        }
        match entry {
            Value::String(text) => {
                tags.insert(key.clone(), text.clone());
            }
            other => errors.push(FieldError {
                path: format!("providerSpec.tags.{key}"),
                message: format!("must be a string, got {}", kind_of(other)),
            }),
        }
    }
    tags
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn paths(errors: &[FieldError]) -> Vec<&str> {
        errors.iter().map(|error| error.path.as_str()).collect()
    }

    #[test]
    fn a_full_spec_parses() {
        let spec = parse_provider_spec(&json!({
            "bootDelay": "1m30s",
            "createLatency": "250ms",
            "requiresInitialization": true,
            "unhealthyAfter": "10m",
            "failures": {
                "create": {"code": "ResourceExhausted", "times": 2},
                "delete": {"code": "Unavailable"},
            },
            "tags": {"team": "a"},
        }))
        .unwrap();
        assert_eq!(spec.boot_delay, "90s".parse().unwrap());
        assert_eq!(
            spec.create_latency.to_std(),
            Some(std::time::Duration::from_millis(250))
        );
        assert!(spec.requires_initialization);
        assert_eq!(spec.unhealthy_after, Some("10m".parse().unwrap()));
        assert_eq!(
            spec.failures.get(&FailingMethod::Create),
            Some(&FailureInjection {
                code: Code::ResourceExhausted,
                times: 2
            })
        );
        assert_eq!(
            spec.failures.get(&FailingMethod::Delete).map(|f| f.times),
            Some(1)
        );
        assert_eq!(spec.tags.get("team").map(String::as_str), Some("a"));
    }

    #[test]
    fn empty_and_null_specs_are_defaults() {
        assert_eq!(
            parse_provider_spec(&json!({})).unwrap(),
            VirtualSpec::default()
        );
        assert_eq!(
            parse_provider_spec(&Value::Null).unwrap(),
            VirtualSpec::default()
        );
    }

    #[test]
    fn every_bad_field_is_reported_with_its_path() {
        let errors = parse_provider_spec(&json!({
            "bootDelay": "soon",
            "createLatency": 5,
            "unhealthyAfter": "-1s",
            "requiresInitialization": "yes",
            "failures": {
                "create": {"code": "Nope", "times": 0},
                "reboot": {"code": "Internal"},
                "delete": {"code": "OK", "extra": 1},
            },
            "tags": {"a": 1, "": "x"},
            "colour": "blue",
        }))
        .unwrap_err();
        let mut found = paths(&errors);
        found.sort_unstable();
        assert_eq!(
            found,
            vec![
                "providerSpec.bootDelay",
                "providerSpec.colour",
                "providerSpec.createLatency",
                "providerSpec.failures.create.code",
                "providerSpec.failures.create.times",
                "providerSpec.failures.delete.code",
                "providerSpec.failures.delete.extra",
                "providerSpec.failures.reboot",
                "providerSpec.requiresInitialization",
                "providerSpec.tags",
                "providerSpec.tags.a",
                "providerSpec.unhealthyAfter",
            ]
        );
        assert!(describe(&errors).contains("providerSpec.bootDelay: not a duration"));
    }

    #[test]
    fn initialization_modes_and_the_older_flag() {
        let mode = |spec: Value| parse_provider_spec(&spec).map(|spec| spec.initialization());
        assert_eq!(mode(json!({})), Ok(Initialization::None));
        assert_eq!(
            mode(json!({"initialization": "silent"})),
            Ok(Initialization::Silent)
        );
        assert_eq!(
            mode(json!({"initialization": "reported"})),
            Ok(Initialization::Reported)
        );
        assert_eq!(
            mode(json!({"requiresInitialization": true})),
            Ok(Initialization::Reported)
        );
        assert_eq!(
            mode(json!({"initialization": "reported", "requiresInitialization": true})),
            Ok(Initialization::Reported)
        );
        assert_eq!(
            mode(json!({"initialization": "none", "requiresInitialization": false})),
            Ok(Initialization::None)
        );
        for bad in [
            json!({"initialization": "silent", "requiresInitialization": true}),
            json!({"initialization": "later"}),
            json!({"initialization": true}),
        ] {
            let errors = parse_provider_spec(&bad).unwrap_err();
            assert_eq!(paths(&errors), vec!["providerSpec.initialization"], "{bad}");
        }
        // The state file keeps the mode; files written before `silent` existed read as before.
        let silent = parse_provider_spec(&json!({"initialization": "silent"})).unwrap();
        let stored = serde_json::to_value(&silent).unwrap();
        assert_eq!(stored["silentInitialization"], true);
        let read: VirtualSpec = serde_json::from_value(stored).unwrap();
        assert_eq!(read.initialization(), Initialization::Silent);
        let mut old = serde_json::to_value(VirtualSpec::default()).unwrap();
        assert!(old.get("silentInitialization").is_none());
        old["requiresInitialization"] = json!(true);
        let read: VirtualSpec = serde_json::from_value(old).unwrap();
        assert_eq!(read.initialization(), Initialization::Reported);
    }

    #[test]
    fn a_non_object_spec_is_refused() {
        let errors = parse_provider_spec(&json!(["x"])).unwrap_err();
        assert_eq!(paths(&errors), vec!["providerSpec"]);
    }

    #[test]
    fn provider_must_be_virtual() {
        assert!(check_provider(Some("virtual")).is_ok());
        assert_eq!(check_provider(Some("AWS")).unwrap_err().path, "provider");
        assert!(
            check_provider(None)
                .unwrap_err()
                .message
                .contains("missing")
        );
    }

    #[test]
    fn only_tags_are_hot() {
        let current = parse_provider_spec(&json!({"tags": {"a": "1"}, "bootDelay": "1s"})).unwrap();
        let tags_only =
            parse_provider_spec(&json!({"tags": {"a": "2"}, "bootDelay": "1s"})).unwrap();
        assert!(cold_changes(&current, &tags_only).is_empty());
        assert_eq!(hot_changes(&current, &tags_only), vec!["tags"]);
        let cold = parse_provider_spec(
            &json!({"tags": {"a": "2"}, "bootDelay": "2s", "requiresInitialization": true}),
        )
        .unwrap();
        assert_eq!(
            cold_changes(&current, &cold),
            vec!["providerSpec.bootDelay", "providerSpec.initialization"]
        );
        let silent = parse_provider_spec(
            &json!({"tags": {"a": "1"}, "bootDelay": "1s", "initialization": "silent"}),
        )
        .unwrap();
        assert_eq!(
            cold_changes(&current, &silent),
            vec!["providerSpec.initialization"]
        );
        assert!(hot_changes(&current, &current).is_empty());
    }
}
