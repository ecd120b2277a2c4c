//! Parsing of `TYPE/NAME` arguments the way kubectl spells them (`machinedeployment/web`,
//! `mcd/web`, `node/n1`, `machine/m1`), without any I/O.

use crate::error::CliError;

/// The kinds the plugin's commands accept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TargetKind {
    /// `machinedeployment`, `machinedeployments`, `mcd`, with or without the group suffix.
    MachineDeployment,
    /// `machine`, `machines`, `mc`.
    Machine,
    /// `node`, `nodes`, `no`.
    Node,
}

impl TargetKind {
    /// The resource name kubectl prints (`<resource>.<group>/<name>` in messages).
    #[must_use]
    pub fn qualified(self) -> &'static str {
        match self {
            Self::MachineDeployment => "machinedeployment.machine.sapcloud.io",
            Self::Machine => "machine.machine.sapcloud.io",
            Self::Node => "node",
        }
    }
}

/// A parsed `TYPE/NAME` argument.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The kind.
    pub kind: TargetKind,
    /// The object name.
    pub name: String,
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.kind.qualified(), self.name)
    }
}

fn kind_of(text: &str) -> Option<TargetKind> {
    let lower = text.to_ascii_lowercase();
    let bare = lower
        .strip_suffix(".machine.sapcloud.io")
        .unwrap_or(lower.as_str());
    match bare {
        "machinedeployment" | "machinedeployments" | "mcd" => Some(TargetKind::MachineDeployment),
        "machine" | "machines" | "mc" => Some(TargetKind::Machine),
        "node" | "nodes" | "no" => Some(TargetKind::Node),
        _ => None,
    }
}

/// Parses `TYPE/NAME` (or `TYPE NAME` split by the caller) and checks the kind is one of
/// `allowed`.
///
/// # Errors
/// [`CliError::Usage`] when the argument is not `TYPE/NAME`, the type is unknown, or the command
/// does not accept it.
pub fn parse_target(argument: &str, allowed: &[TargetKind]) -> Result<Target, CliError> {
    let expected = || {
        allowed
            .iter()
            .map(|k| format!("{}/<name>", k.qualified().split('.').next().unwrap_or("")))
            .collect::<Vec<_>>()
            .join(" or ")
    };
    let Some((kind_text, name)) = argument.split_once('/') else {
        return Err(CliError::Usage(format!(
            "expected {}, got {argument:?}",
            expected()
        )));
    };
    if name.is_empty() || name.contains('/') {
        return Err(CliError::Usage(format!(
            "expected {}, got {argument:?}",
            expected()
        )));
    }
    let Some(kind) = kind_of(kind_text) else {
        return Err(CliError::Usage(format!(
            "the server doesn't have a resource type {kind_text:?} for this command (expected {})",
            expected()
        )));
    };
    if !allowed.contains(&kind) {
        return Err(CliError::Usage(format!(
            "{kind_text:?} is not supported by this command (expected {})",
            expected()
        )));
    }
    Ok(Target {
        kind,
        name: name.to_owned(),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const MD: &[TargetKind] = &[TargetKind::MachineDeployment];

    #[test]
    fn accepts_kubectl_spellings_of_machinedeployment() {
        for spelling in [
            "machinedeployment/web",
            "machinedeployments/web",
            "mcd/web",
            "MachineDeployment/web",
            "machinedeployment.machine.sapcloud.io/web",
        ] {
            let target = parse_target(spelling, MD).unwrap();
            assert_eq!(target.kind, TargetKind::MachineDeployment, "{spelling}");
            assert_eq!(target.name, "web", "{spelling}");
        }
    }

    #[test]
    fn rejects_missing_name_unknown_type_and_wrong_kind() {
        for bad in ["web", "mcd/", "mcd/a/b", "deployment/web", "node/n1"] {
            let error = parse_target(bad, MD).unwrap_err();
            assert!(matches!(error, CliError::Usage(_)), "{bad}: {error}");
            assert!(
                error.to_string().contains("machinedeployment/<name>"),
                "{bad}: {error}"
            );
        }
    }

    #[test]
    fn nodes_and_machines_for_preserve() {
        let allowed = &[TargetKind::Node, TargetKind::Machine];
        assert_eq!(
            parse_target("no/n1", allowed).unwrap().kind,
            TargetKind::Node
        );
        assert_eq!(
            parse_target("mc/m1", allowed).unwrap().kind,
            TargetKind::Machine
        );
        assert_eq!(
            parse_target("node/n1", allowed).unwrap().to_string(),
            "node/n1"
        );
    }
}
