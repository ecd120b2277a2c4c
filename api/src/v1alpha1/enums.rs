//! String enumerations of the v1alpha1 API that stay open for values this version does not know.
//!
//! Upstream declares them as Go `string` types, so a newer controller (or a user) can write any
//! text. Every enum here therefore has an `Other(String)` variant that keeps unknown text verbatim:
//! decoding never fails and writing the object back does not change it. The schema is a plain
//! `type: string`, as upstream.

/// Declares an open string enum: known variants with their exact wire text plus `Other(String)`,
/// `as_str`/`Display`/`From<&str>`/`FromStr`, string serde and a `type: string` schema.
macro_rules! open_string_enum {
    (
        $(#[$meta:meta])*
        $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident => $text:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )+
            /// A value this version does not know, kept verbatim so it survives a round trip.
            Other(String),
        }

        impl $name {
            /// The wire texts of every known variant, in declaration order.
            pub const KNOWN: &'static [&'static str] = &[$($text),+];

            /// The exact text written to the API.
            #[must_use]
            pub fn as_str(&self) -> &str {
                match self {
                    $( Self::$variant => $text, )+
                    Self::Other(text) => text,
                }
            }

            /// Whether this is one of the values this version knows.
            #[must_use]
            pub fn is_known(&self) -> bool {
                !matches!(self, Self::Other(_))
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl From<&str> for $name {
            fn from(text: &str) -> Self {
                match text {
                    $( $text => Self::$variant, )+
                    other => Self::Other(other.to_owned()),
                }
            }
        }

        impl From<String> for $name {
            fn from(text: String) -> Self {
                match text.as_str() {
                    $( $text => Self::$variant, )+
                    _ => Self::Other(text),
                }
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = ::std::convert::Infallible;

            fn from_str(text: &str) -> Result<Self, Self::Err> {
                Ok(Self::from(text))
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                self.as_str()
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.as_str() == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(self.as_str())
            }
        }

        impl<'de> ::serde::Deserialize<'de> for $name {
            fn deserialize<D: ::serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                <String as ::serde::Deserialize>::deserialize(deserializer).map(Self::from)
            }
        }

        impl ::schemars::JsonSchema for $name {
            fn schema_name() -> ::std::borrow::Cow<'static, str> {
                stringify!($name).into()
            }

            fn inline_schema() -> bool {
                true
            }

            fn json_schema(_: &mut ::schemars::SchemaGenerator) -> ::schemars::Schema {
                ::schemars::json_schema!({ "type": "string" })
            }
        }
    };
}

open_string_enum! {
    /// Phase of a Machine (`status.currentStatus.phase`). An absent phase means "not created yet".
    MachinePhase {
        /// VM created, waiting for its Node to become healthy.
        Pending => "Pending",
        /// VM created and there is no target cluster, so no Node is awaited.
        Available => "Available",
        /// The Node is healthy.
        Running => "Running",
        /// The deletion flow is in progress.
        Terminating => "Terminating",
        /// Was Running, the Node is now unhealthy or missing.
        Unknown => "Unknown",
        /// Creation or health timeout elapsed.
        Failed => "Failed",
        /// Creating or initialising the VM failed and the creation timeout has not elapsed yet.
        CrashLoopBackOff => "CrashLoopBackOff",
        /// The machine is being updated in place.
        InPlaceUpdating => "InPlaceUpdating",
        /// The in-place update succeeded.
        InPlaceUpdateSuccessful => "InPlaceUpdateSuccessful",
        /// The in-place update failed.
        InPlaceUpdateFailed => "InPlaceUpdateFailed",
    }
}

open_string_enum! {
    /// State of the last operation on a machine (`lastOperation.state`).
    MachineState {
        /// The operation is not complete yet.
        Processing => "Processing",
        /// The operation failed.
        Failed => "Failed",
        /// The operation completed successfully.
        Successful => "Successful",
    }
}

open_string_enum! {
    /// Kind of the last operation on a machine (`lastOperation.type`).
    MachineOperationType {
        /// Creation of the VM.
        Create => "Create",
        /// Defined upstream but never written by the controllers.
        Update => "Update",
        /// In-place update of the machine.
        InPlaceUpdate => "InPlaceUpdate",
        /// Draining the node.
        DrainNode => "DrainNode",
        /// Health check of the node.
        HealthCheck => "HealthCheck",
        /// Deletion of the machine.
        Delete => "Delete",
    }
}

open_string_enum! {
    /// Status of a MachineSet or MachineDeployment condition.
    ConditionStatus {
        /// The resource is in the condition.
        True => "True",
        /// The resource is not in the condition.
        False => "False",
        /// It cannot be decided whether the resource is in the condition.
        Unknown => "Unknown",
    }
}

open_string_enum! {
    /// Type of a MachineSet condition (`status.machineSetCondition[].type`).
    MachineSetConditionType {
        /// A machine of the set could not be created or deleted.
        ReplicaFailure => "ReplicaFailure",
        /// The set was frozen by the overshooting safety controller.
        Frozen => "Frozen",
    }
}

open_string_enum! {
    /// Type of a MachineDeployment condition.
    MachineDeploymentConditionType {
        /// At least the minimum of available replicas is up.
        Available => "Available",
        /// The deployment is rolling out or scaling.
        Progressing => "Progressing",
        /// A machine of the deployment could not be created or deleted.
        ReplicaFailure => "ReplicaFailure",
        /// The deployment was frozen by the overshooting safety controller.
        Frozen => "Frozen",
    }
}

open_string_enum! {
    /// How a MachineDeployment replaces machines (`spec.strategy.type`). There is no default
    /// upstream: an absent or empty type fails validation.
    MachineDeploymentStrategyType {
        /// Delete all old machines before creating new ones.
        Recreate => "Recreate",
        /// Scale the new MachineSet up and old ones down gradually.
        RollingUpdate => "RollingUpdate",
        /// Update the existing machines in place.
        InPlaceUpdate => "InPlaceUpdate",
    }
}

open_string_enum! {
    /// Who selects machines for an in-place update (`spec.strategy.inPlaceUpdate.orchestrationType`).
    OrchestrationType {
        /// The machine-controller-manager selects the nodes.
        Auto => "Auto",
        /// An external actor selects the nodes.
        Manual => "Manual",
    }
}

impl Default for ConditionStatus {
    /// `Unknown`, as for Kubernetes conditions whose status has not been determined.
    fn default() -> Self {
        Self::Unknown
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn known_values_map_to_variants_and_back() {
        for text in MachinePhase::KNOWN {
            let phase = MachinePhase::from(*text);
            assert!(phase.is_known(), "{text}");
            assert_eq!(phase.as_str(), *text);
        }
        assert_eq!(
            MachinePhase::from("CrashLoopBackOff"),
            MachinePhase::CrashLoopBackOff
        );
        assert_eq!(MachineOperationType::DrainNode.to_string(), "DrainNode");
        assert_eq!(OrchestrationType::KNOWN, &["Auto", "Manual"]);
    }

    #[test]
    fn unknown_values_survive_verbatim() {
        let phase: MachinePhase = serde_json::from_str("\"Hibernating\"").unwrap();
        assert_eq!(phase, MachinePhase::Other("Hibernating".into()));
        assert!(!phase.is_known());
        assert_eq!(serde_json::to_string(&phase).unwrap(), "\"Hibernating\"");
        // Case matters: Go compares the strings exactly.
        assert_eq!(
            MachinePhase::from("running"),
            MachinePhase::Other("running".into())
        );
        let empty: MachineState = serde_json::from_str("\"\"").unwrap();
        assert_eq!(empty.as_str(), "");
    }

    #[test]
    fn non_strings_are_rejected_without_panic() {
        assert!(serde_json::from_str::<MachinePhase>("1").is_err());
        assert!(serde_json::from_str::<ConditionStatus>("true").is_err());
        assert!(serde_json::from_str::<ConditionStatus>("null").is_err());
    }
}
