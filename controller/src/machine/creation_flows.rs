//! Which machines are inside the creation flow (a CreateMachine/InitializeMachine call may be
//! running). The Machine controller owns and writes it ([`CreationFlows`]); the termination
//! controller only reads it ([`CreationFlowReader`]) and leaves such machines alone until the flow
//! ends (upstream's `pendingMachineCreationMap`).

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};

/// The writable registry, held by the Machine controller.
#[derive(Clone, Default)]
pub struct CreationFlows {
    names: Arc<Mutex<HashSet<String>>>,
}

/// The read-only side.
#[derive(Clone, Default)]
pub struct CreationFlowReader {
    names: Arc<Mutex<HashSet<String>>>,
}

fn lock(names: &Mutex<HashSet<String>>) -> MutexGuard<'_, HashSet<String>> {
    names
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl CreationFlows {
    /// A reader of this registry.
    pub fn reader(&self) -> CreationFlowReader {
        CreationFlowReader {
            names: Arc::clone(&self.names),
        }
    }

    /// Marks `name` as inside the creation flow; false if it already was.
    pub fn started(&self, name: &str) -> bool {
        lock(&self.names).insert(name.to_owned())
    }

    /// Ends what [`CreationFlows::started`] began.
    pub fn finished(&self, name: &str) {
        lock(&self.names).remove(name);
    }

    /// True while `name` is inside the creation flow.
    pub fn contains(&self, name: &str) -> bool {
        lock(&self.names).contains(name)
    }
}

impl CreationFlowReader {
    /// True while `name` is inside the creation flow.
    pub fn contains(&self, name: &str) -> bool {
        lock(&self.names).contains(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readers_follow_the_flows() {
        let flows = CreationFlows::default();
        let reader = flows.reader();
        assert!(flows.started("m1"));
        assert!(
            !flows.started("m1"),
            "a second start reports the running flow"
        );
        assert!(reader.contains("m1") && !reader.contains("m2"));
        flows.finished("m1");
        assert!(!reader.contains("m1") && !flows.contains("m1"));
    }
}
