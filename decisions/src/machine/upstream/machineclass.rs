//! `machineclass_test.go` `#reconcileClusterMachineClass` and `secret_test.go`
//! (`#addSecretFinalizers`, `#deleteSecretFinalizers`, `#updateSecretFinalizers`), replayed
//! through the pure decisions of the MachineClass/Secret controller
//! (`class_reconcile::plan_class`, `plan_secret`, `vocabulary::finalizers_with`). Upstream writes the result
//! through a fake clientset and reads the object back; the rows compare the finalizers the shell
//! is told to write (or that nothing is written) and, for the blocked deletion, the retry.

use crate::machine::class::{ClassStep, plan_class, plan_secret};
use crate::vocabulary::finalizers_with;

/// Upstream `MCMFinalizerName`, spelled out so the rows do not depend on our constant.
const MCM: &str = "machine.sapcloud.io/machine-controller-manager";
/// Upstream `MCFinalizerName`.
const MC: &str = "machine.sapcloud.io/machine-controller";

/// `(entry, class being deleted, machines referring to the class, class finalizers before,
/// finalizers after or None when upstream writes nothing, deletion blocked with a retry)`.
type ClassRow = (
    &'static str,
    bool,
    usize,
    &'static [&'static str],
    Option<&'static [&'static str]>,
    bool,
);

const CLASS_ROWS: &[ClassRow] = &[
    (
        "Add finalizer to machine class",
        false,
        1,
        &[],
        Some(&[MCM]),
        false,
    ),
    (
        "Do not add finalizer to machine class because no machines use it",
        false,
        0,
        &[],
        None,
        false,
    ),
    (
        "Finalizer exists, so do nothing",
        false,
        1,
        &[MCM],
        None,
        false,
    ),
    (
        "Class deletion fails as machine objects are still referring the machine class hence retry",
        true,
        1,
        &[MCM],
        None,
        true,
    ),
    // The one machine uses "DifferentClassName".
    (
        "Class deletion succeeds with removal of finalizer",
        true,
        0,
        &[MCM],
        Some(&[]),
        false,
    ),
    (
        "Class deletion succeeds as no finalizer exists",
        true,
        0,
        &[],
        None,
        false,
    ),
];

fn strings(values: &[&str]) -> Vec<String> {
    values.iter().map(|value| (*value).to_owned()).collect()
}

#[test]
fn reconcile_cluster_machine_class_table() {
    for &(entry, deleting, users, before, after, blocked) in CLASS_ROWS {
        let step = plan_class(deleting, users, &strings(before));
        let expected = if blocked {
            ClassStep::DeletionBlocked
        } else {
            match after {
                Some(after) => ClassStep::SetFinalizers(strings(after), users > 0),
                None => ClassStep::Nothing,
            }
        };
        assert_eq!(step, expected, "{entry}");
    }
}

/// Extra row: a class whose machines are gone keeps other controllers' finalizers.
#[test]
fn class_finalizer_removal_keeps_foreign_finalizers() {
    assert_eq!(
        plan_class(false, 0, &strings(&["other", MCM])),
        ClassStep::SetFinalizers(strings(&["other"]), false)
    );
}

#[test]
fn add_secret_finalizers() {
    // "should add finalizer on Secret.": a referenced Secret without finalizers gets exactly MC's.
    assert_eq!(plan_secret(true, false, &[]), Some(strings(&[MC])), "add");
    // Already there: upstream's addSecretFinalizers writes nothing.
    assert_eq!(plan_secret(true, false, &strings(&[MC])), None, "add again");
}

#[test]
fn delete_secret_finalizers() {
    // "should delete the finalizer from Secret.": MC's finalizer goes, none is left.
    assert_eq!(
        plan_secret(false, false, &strings(&[MC])),
        Some(Vec::new()),
        "should delete the finalizer from Secret."
    );
    // "should not be able delete the wrong finalizer from Secret.": a Secret carrying only the
    // MCM finalizer keeps it (nothing written, one finalizer left).
    assert_eq!(
        plan_secret(false, false, &strings(&[MCM])),
        None,
        "should not be able delete the wrong finalizer from Secret."
    );
    // Extra: a Secret being deleted that is still referenced keeps MC's finalizer, and is not
    // given it when it has none (the API server refuses new finalizers then).
    assert_eq!(plan_secret(true, true, &strings(&[MC])), None);
    assert_eq!(plan_secret(true, true, &[]), None);
}

#[test]
fn update_secret_finalizers() {
    // "should update the finalizer on Secret.": upstream's Secret has no finalizers and
    // `updateSecretFinalizers` is given `["finalizer1", "finalizer2"]`; the Secret read back
    // carries exactly that list. Ours is never given a list: `finalizers_with` computes each list
    // the shell writes verbatim. From upstream's Secret, asking for upstream's finalizers in turn
    // gives upstream's expected list, same elements, same order.
    let given = strings(&["finalizer1", "finalizer2"]);
    let written = given
        .iter()
        .try_fold(Vec::new(), |current: Vec<String>, name| {
            finalizers_with(&current, name, true)
        });
    assert_eq!(
        written,
        Some(given),
        "should update the finalizer on Secret."
    );
    // Extra: a list computed from a current one keeps unrelated finalizers, sorted as upstream's
    // `sets.String.List()`, and drops ours when it is not wanted.
    let current = strings(&["finalizer2", "finalizer1"]);
    assert_eq!(
        finalizers_with(&current, MC, true),
        Some(strings(&["finalizer1", "finalizer2", MC]))
    );
    assert_eq!(
        finalizers_with(&strings(&["finalizer1", MC, "finalizer2"]), MC, false),
        Some(strings(&["finalizer1", "finalizer2"]))
    );
}
