//! The outcome of a run: one [`Outcome`] per check, gathered in a [`Report`].

use std::fmt;

/// The outcome of one check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The driver behaved as the contract says.
    Passed,
    /// It did not; the text says how.
    Failed(String),
    /// Not applicable (the reason says why).
    Skipped(String),
}

/// The outcomes of a run, one per check.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// (check name, outcome), in run order.
    pub cases: Vec<(&'static str, Outcome)>,
}

impl Report {
    /// The failed checks.
    pub fn failures(&self) -> Vec<(&'static str, &str)> {
        self.cases
            .iter()
            .filter_map(|(name, outcome)| match outcome {
                Outcome::Failed(reason) => Some((*name, reason.as_str())),
                _ => None,
            })
            .collect()
    }

    /// The outcome of a check by name.
    pub fn outcome(&self, name: &str) -> Option<&Outcome> {
        self.cases
            .iter()
            .find(|(case, _)| *case == name)
            .map(|(_, outcome)| outcome)
    }

    /// Panics with the whole report if any check failed (for use in tests).
    pub fn assert_passed(&self) {
        assert!(
            self.failures().is_empty(),
            "driver conformance failed:\n{self}"
        );
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (name, outcome) in &self.cases {
            match outcome {
                Outcome::Passed => writeln!(f, "PASS {name}")?,
                Outcome::Failed(reason) => writeln!(f, "FAIL {name}: {reason}")?,
                Outcome::Skipped(reason) => writeln!(f, "SKIP {name}: {reason}")?,
            }
        }
        Ok(())
    }
}
