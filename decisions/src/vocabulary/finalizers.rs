//! The finalizer list every controller writes: one name added or removed, the rest kept, sorted as
//! upstream writes it. Classes, Secrets, Machines, MachineSets, MachineDeployments and Nodes all
//! compute their list here, so no decision or shell builds one itself.

/// The finalizer list with `wanted` present (`true`) or absent, sorted; `None` when unchanged.
#[must_use]
pub fn finalizers_with(current: &[String], name: &str, wanted: bool) -> Option<Vec<String>> {
    let has = current.iter().any(|f| f == name);
    if has == wanted {
        return None;
    }
    let mut next: Vec<String> = current.iter().filter(|f| *f != name).cloned().collect();
    if wanted {
        next.push(name.to_owned());
    }
    next.sort();
    next.dedup();
    Some(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finalizer_lists_are_sorted_sets() {
        let current = vec!["z".to_owned(), "a".to_owned()];
        assert_eq!(
            finalizers_with(&current, "m", true),
            Some(vec!["a".to_owned(), "m".to_owned(), "z".to_owned()])
        );
        assert_eq!(finalizers_with(&current, "m", false), None);
        let with = vec!["m".to_owned(), "a".to_owned()];
        assert_eq!(finalizers_with(&with, "m", true), None);
        assert_eq!(
            finalizers_with(&with, "m", false),
            Some(vec!["a".to_owned()])
        );
    }
}
