//! Which controllers run: the names `--controllers` accepts, which upstream binary's share each
//! belongs to, and the pure resolution of the flag (kube-controller-manager's shape: a comma list
//! where `*` means the default set, `name` enables and `-name` disables a controller).
//!
//! The default set depends on `--driver-endpoint`: without one it is upstream's
//! `machine-controller-manager` share (MachineSet, MachineDeployment, overshooting safety; the
//! autoscaler annotations are part of the MachineDeployment controller), so Gardener's unchanged
//! argument list runs beside the provider's Go `machine-controller`; with one it is everything.
//!
//! This module imports no controller; `manager::compose` maps the names to the controllers.

/// Which upstream binary runs a controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Share {
    /// Upstream's `machine-controller-manager` (no driver).
    ControllerManager,
    /// The provider's `machine-controller` (driver linked in; ours calls it over gRPC).
    MachineController,
}

/// One selectable controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ControllerInfo {
    /// Name for `--controllers` (upstream's work queue name).
    pub name: &'static str,
    /// The upstream binary it belongs to.
    pub share: Share,
    /// Whether it calls the driver (needs `--driver-endpoint`).
    pub needs_driver: bool,
    /// One line for the docs and `--help`.
    pub about: &'static str,
}

const fn info(
    name: &'static str,
    share: Share,
    needs_driver: bool,
    about: &'static str,
) -> ControllerInfo {
    ControllerInfo {
        name,
        share,
        needs_driver,
        about,
    }
}

/// Every controller, in start order.
pub const CONTROLLERS: &[ControllerInfo] = &[
    info(
        "machine",
        Share::MachineController,
        true,
        "Machine lifecycle: create, initialize, health, in-place and hot updates, preservation",
    ),
    info(
        "machinetermination",
        Share::MachineController,
        true,
        "Machine deletion: drain, VM deletion, Node deletion, finalizer removal",
    ),
    info(
        "node",
        Share::MachineController,
        false,
        "Node events to Machines; Node deletion triggers Machine deletion",
    ),
    info(
        "machineclass",
        Share::MachineController,
        false,
        "MachineClass and class Secret finalizers",
    ),
    info(
        "machineset",
        Share::ControllerManager,
        false,
        "MachineSets: create and delete Machines, status",
    ),
    info(
        "machinedeployment",
        Share::ControllerManager,
        false,
        "MachineDeployments: rollouts, scaling, autoscaler annotations on Nodes",
    ),
    info(
        "machinesafetyovershooting",
        Share::ControllerManager,
        false,
        "freezes MachineSets that overshoot their replicas",
    ),
    info(
        "machinesafetyorphanvms",
        Share::MachineController,
        true,
        "deletes VMs without a Machine; marks Nodes without a Machine",
    ),
    info(
        "machinesafetyapiserver",
        Share::MachineController,
        false,
        "freezes the Machine controller while an API server is unreachable",
    ),
];

/// The share of the controller (and work queue) named `name`.
pub fn share_of(name: &str) -> Option<Share> {
    CONTROLLERS
        .iter()
        .find(|info| info.name == name)
        .map(|info| info.share)
}

/// Name of the Lease of upstream's `machine-controller-manager`.
pub const CONTROLLER_MANAGER_LEASE: &str = "machine-controller-manager";
/// Name of the Lease of upstream's `machine-controller`.
pub const MACHINE_CONTROLLER_LEASE: &str = "machine-controller";

/// The resolved `--controllers`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selection {
    /// Enabled controllers, in start order.
    pub names: Vec<&'static str>,
}

impl Selection {
    /// Whether a controller of `share` is enabled.
    pub fn runs(&self, share: Share) -> bool {
        CONTROLLERS
            .iter()
            .any(|info| info.share == share && self.names.contains(&info.name))
    }

    /// Whether any enabled controller calls the driver.
    pub fn needs_driver(&self) -> bool {
        CONTROLLERS
            .iter()
            .any(|info| info.needs_driver && self.names.contains(&info.name))
    }

    /// The Lease to hold: upstream's `machine-controller-manager` as soon as one of its
    /// controllers runs, else (machine share only) the provider's `machine-controller`, so our
    /// manager can stand in for either Go binary beside the other.
    pub fn lease_name(&self) -> &'static str {
        if self.runs(Share::MachineController) && !self.runs(Share::ControllerManager) {
            MACHINE_CONTROLLER_LEASE
        } else {
            CONTROLLER_MANAGER_LEASE
        }
    }
}

/// The default set: everything with a driver, upstream's `machine-controller-manager` share
/// without.
pub fn default_set(driver: bool) -> Vec<&'static str> {
    CONTROLLERS
        .iter()
        .filter(|info| driver || info.share == Share::ControllerManager)
        .map(|info| info.name)
        .collect()
}

/// Resolves `--controllers` (`*`, `name`, `-name`, comma separated; blanks around items are
/// ignored). Unknown names, an empty selection and a driver-calling controller without a driver
/// are errors (the message says why).
pub fn select(flag: &str, driver: bool) -> Result<Selection, String> {
    let known = |name: &str| CONTROLLERS.iter().find(|info| info.name == name);
    let mut star = false;
    let mut enabled = Vec::new();
    let mut disabled = Vec::new();
    for item in flag
        .split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
    {
        let (off, name) = match item.strip_prefix('-') {
            Some(name) => (true, name),
            None => (false, item),
        };
        if name == "*" && !off {
            star = true;
            continue;
        }
        let Some(info) = known(name) else {
            let names: Vec<&str> = CONTROLLERS.iter().map(|info| info.name).collect();
            return Err(format!(
                "unknown controller {name:?}; known: *, {}",
                names.join(", ")
            ));
        };
        if off {
            disabled.push(info.name);
        } else {
            enabled.push(info.name);
        }
    }
    let defaults = if star {
        default_set(driver)
    } else {
        Vec::new()
    };
    let names: Vec<&'static str> = CONTROLLERS
        .iter()
        .map(|info| info.name)
        .filter(|name| !disabled.contains(name))
        .filter(|name| enabled.contains(name) || defaults.contains(name))
        .collect();
    if names.is_empty() {
        return Err("selects no controller".to_owned());
    }
    let selection = Selection { names };
    if !driver {
        let calling: Vec<&str> = CONTROLLERS
            .iter()
            .filter(|info| info.needs_driver && selection.names.contains(&info.name))
            .map(|info| info.name)
            .collect();
        if !calling.is_empty() {
            return Err(format!(
                "{} call the driver; set --driver-endpoint",
                calling.join(", ")
            ));
        }
    }
    Ok(selection)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn names_of(share: Share) -> Vec<&'static str> {
        CONTROLLERS
            .iter()
            .filter(|info| info.share == share)
            .map(|info| info.name)
            .collect()
    }

    #[test]
    fn without_a_driver_the_default_is_the_controller_manager_share() {
        let selection = select("*", false).unwrap();
        assert_eq!(
            selection.names,
            [
                "machineset",
                "machinedeployment",
                "machinesafetyovershooting"
            ]
        );
        assert!(!selection.runs(Share::MachineController));
        assert!(!selection.needs_driver());
        assert_eq!(selection.lease_name(), "machine-controller-manager");
    }

    #[test]
    fn with_a_driver_the_default_is_everything() {
        let selection = select("*", true).unwrap();
        assert_eq!(selection.names.len(), CONTROLLERS.len());
        assert_eq!(selection.lease_name(), "machine-controller-manager");
    }

    #[test]
    fn names_enable_and_minus_names_disable() {
        let selection = select("*,-machinesafetyorphanvms", true).unwrap();
        assert!(!selection.names.contains(&"machinesafetyorphanvms"));
        assert_eq!(selection.names.len(), CONTROLLERS.len() - 1);
        let selection = select(" machineset , machinedeployment ", false).unwrap();
        assert_eq!(selection.names, ["machineset", "machinedeployment"]);
        // Disabling wins over enabling, whatever the order.
        let selection = select("-machineset,machineset,machinedeployment", false).unwrap();
        assert_eq!(selection.names, ["machinedeployment"]);
    }

    #[test]
    fn the_machine_share_alone_holds_the_machine_controller_lease() {
        let machine_share = names_of(Share::MachineController).join(",");
        let selection = select(&machine_share, true).unwrap();
        assert_eq!(selection.lease_name(), "machine-controller");
        assert!(selection.needs_driver());
        assert!(!selection.runs(Share::ControllerManager));
    }

    #[test]
    fn bad_selections_are_refused_with_the_reason() {
        let error = select("machinesets", true).unwrap_err();
        assert!(
            error.contains("unknown controller \"machinesets\""),
            "{error}"
        );
        assert!(
            error.contains("machineset,") || error.contains("machineset, "),
            "{error}"
        );
        assert!(select("", true).unwrap_err().contains("no controller"));
        assert!(
            select(
                "*,-machineset,-machinedeployment,-machinesafetyovershooting",
                false
            )
            .unwrap_err()
            .contains("no controller")
        );
        let error = select("*,machine", false).unwrap_err();
        assert!(error.contains("machine call the driver"), "{error}");
        assert!(error.contains("--driver-endpoint"), "{error}");
    }

    proptest::proptest! {
        /// Whatever is asked: every name is known, listed once and in registry order; explicitly
        /// disabled names never run; without a driver no driver-calling controller runs.
        #[test]
        fn selections_are_consistent(
            picks in proptest::collection::vec((0usize..CONTROLLERS.len() + 1, proptest::bool::ANY), 0..8),
            driver in proptest::bool::ANY,
        ) {
            let items: Vec<String> = picks
                .iter()
                .map(|(index, off)| {
                    let name = CONTROLLERS.get(*index).map_or("*", |info| info.name);
                    if *off && name != "*" { format!("-{name}") } else { name.to_owned() }
                })
                .collect();
            let flag = items.join(",");
            if let Ok(selection) = select(&flag, driver) {
                let order: Vec<&str> = CONTROLLERS
                    .iter()
                    .map(|info| info.name)
                    .filter(|name| selection.names.contains(name))
                    .collect();
                proptest::prop_assert_eq!(&order, &selection.names);
                for item in &items {
                    if let Some(name) = item.strip_prefix('-') {
                        proptest::prop_assert!(!selection.names.contains(&name));
                    }
                }
                proptest::prop_assert!(driver || !selection.needs_driver());
                proptest::prop_assert!(!selection.names.is_empty());
            }
        }
    }
}
