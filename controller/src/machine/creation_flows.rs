//! Which machines are inside the creation flow (a CreateMachine/InitializeMachine call may be
//! running). The Machine controller writes it ([`CreationFlows::enter`]); the termination
//! controller only asks it ([`CreationFlows::contains`]) and leaves such machines alone until the
//! flow ends (upstream's `pendingMachineCreationMap`). Both share one registry through their
//! `MachineContext`.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};

/// The registry (clones share it).
#[derive(Clone, Default)]
pub struct CreationFlows {
    names: Arc<Mutex<HashSet<String>>>,
}

fn lock(names: &Mutex<HashSet<String>>) -> MutexGuard<'_, HashSet<String>> {
    names
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl CreationFlows {
    /// Marks `name` as inside the creation flow; false if it already was.
    pub fn started(&self, name: &str) -> bool {
        lock(&self.names).insert(name.to_owned())
    }

    /// Ends what [`CreationFlows::started`] began.
    pub fn finished(&self, name: &str) {
        lock(&self.names).remove(name);
    }

    /// Marks `name` as inside the creation flow until the returned guard is dropped, so the flow
    /// leaves the set however it ends (result, error, early return or panic), as upstream's
    /// deferred `unmarkCreationProcessing`.
    pub fn enter(&self, name: &str) -> CreationFlow {
        self.started(name);
        CreationFlow {
            flows: self.clone(),
            name: name.to_owned(),
        }
    }

    /// True while `name` is inside the creation flow.
    pub fn contains(&self, name: &str) -> bool {
        lock(&self.names).contains(name)
    }
}

/// One machine's stay in the creation flow ([`CreationFlows::enter`]); dropping it ends the stay.
#[must_use = "the machine leaves the creation flow when the guard is dropped"]
pub struct CreationFlow {
    flows: CreationFlows,
    name: String,
}

impl Drop for CreationFlow {
    fn drop(&mut self) {
        self.flows.finished(&self.name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_the_flows() {
        let flows = CreationFlows::default();
        let reader = flows.clone();
        assert!(flows.started("m1"));
        assert!(
            !flows.started("m1"),
            "a second start reports the running flow"
        );
        assert!(reader.contains("m1") && !reader.contains("m2"));
        flows.finished("m1");
        assert!(!reader.contains("m1") && !flows.contains("m1"));
    }

    /// Upstream `#pendingMachineCreationMap tests`, "Remove machine from pendingMachineCreationMap
    /// after it exits creation flow": the machine is in the set while its flow runs (the
    /// termination shell leaves it alone) and out of it once the flow returned, whether the pass
    /// ended normally, with an error or by a panic. The flow's own result for that entry is
    /// `mcm_decisions::machine::upstream::creation::trigger_creation_flow_table`.
    #[test]
    fn a_flow_leaves_the_set_however_it_ends() {
        let flows = CreationFlows::default();
        let reader = flows.clone();
        let flow =
            |result: Result<&'static str, &'static str>| -> Result<&'static str, &'static str> {
                let _flow = flows.enter("machine-0");
                assert!(reader.contains("machine-0"), "inside while the flow runs");
                let text = result?;
                Ok(text)
            };
        assert_eq!(
            flow(Ok("machine creation in process")),
            Ok("machine creation in process")
        );
        assert!(!reader.contains("machine-0"), "out after a normal end");
        assert_eq!(flow(Err("driver error")), Err("driver error"));
        assert!(!reader.contains("machine-0"), "out after an error");
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _flow = flows.enter("machine-0");
            panic!("driver call panicked");
        }));
        assert!(panicked.is_err());
        assert!(!reader.contains("machine-0"), "out after a panic");
        // Another machine's flow is not touched by this one ending.
        let other = flows.enter("machine-1");
        drop(flows.enter("machine-0"));
        assert!(reader.contains("machine-1") && !reader.contains("machine-0"));
        drop(other);
        assert!(!reader.contains("machine-1"));
    }
}
