//! Import circles between the file modules, and between the top-level folders, of every crate
//! of the workspace (`make imports`, part of `make lint`).
//!
//! For each member of the root `Cargo.toml`'s `[workspace] members`, each target rooted in its
//! `src/` is analysed on its own: the library (`src/lib.rs`), the binary `src/main.rs` and the
//! binaries `src/bin/*.rs` / `src/bin/*/main.rs`. `tests/`, `examples/`, `benches/` and `build.rs`
//! are not analysed (integration tests only see the library's public paths).
//!
//! Edges (see [`edges`] for the resolution rules):
//! - a file module imports another when its code names something the other defines, through a
//!   `use` (incl. `pub use` re-exports and globs) or a qualified path in code;
//! - a `mod child;` declaration alone is not an edge; a `pub use child::X` in the parent is an
//!   edge parent -> child, and `use super::X` in the child an edge child -> parent, so a parent
//!   that re-exports a child which imports the parent back is a circle;
//! - inline modules (`mod tests { }`) belong to their file; a file test module (`#[cfg(test)] mod
//!   tests;` in `tests.rs`) is a file module like any other (its `use super::*` is an edge to the
//!   parent, which is no circle unless the parent imports the test module).
//!
//! The folder graph merges the file modules under each top-level module of the crate: `src/a.rs`,
//! `src/a/mod.rs` and everything below `src/a/` are the node `a/` (or `a.rs` when the module is a
//! single file); the crate root (`lib.rs`, `main.rs`) is its own node. An edge between two file
//! modules of different nodes is an edge between the nodes.

#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod edges;
pub mod graph;
#[cfg(test)]
mod tests;
pub mod tree;

use std::path::{Path, PathBuf};

use crate::graph::{Graph, Site};
use crate::tree::{LoadError, ModuleTree};

/// Why the workspace could not be analysed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The workspace manifest could not be read.
    #[error("cannot read {path}: {source}")]
    Manifest {
        /// The manifest.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A crate's sources could not be loaded.
    #[error(transparent)]
    Load(#[from] LoadError),
}

/// One crate target: a root file and the module tree below it.
#[derive(Debug, Clone)]
pub struct Target {
    /// The crate's directory relative to the workspace root (`sandbox`, `tools/import-graph`).
    pub crate_dir: String,
    /// `lib`, `bin` (src/main.rs) or `bin <name>`.
    pub kind: String,
    /// The root file.
    pub root_file: PathBuf,
}

/// The graphs of one target.
#[derive(Debug)]
pub struct Analysis {
    /// The analysed target.
    pub target: Target,
    /// Between file modules (labels: paths relative to the crate's `src/`).
    pub files: Graph,
    /// Between top-level folders (and top-level files) of `src/`.
    pub folders: Graph,
    /// Declared modules whose file is missing.
    pub warnings: Vec<String>,
}

impl Analysis {
    /// Whether either graph has a circle.
    pub fn has_circles(&self) -> bool {
        !self.files.circles().is_empty() || !self.folders.circles().is_empty()
    }
}

/// The targets of every workspace member under `root`, in member order.
pub fn discover(root: &Path) -> Result<Vec<Target>, Error> {
    let manifest = root.join("Cargo.toml");
    let text = std::fs::read_to_string(&manifest).map_err(|source| Error::Manifest {
        path: manifest.clone(),
        source,
    })?;
    let mut targets = Vec::new();
    for member in workspace_members(&text) {
        let src = root.join(&member).join("src");
        let mut roots = Vec::new();
        for (file, kind) in [("lib.rs", "lib"), ("main.rs", "bin")] {
            if src.join(file).is_file() {
                roots.push((src.join(file), kind.to_owned()));
            }
        }
        if let Ok(entries) = std::fs::read_dir(src.join("bin")) {
            let mut bins: Vec<(PathBuf, String)> = entries
                .filter_map(Result::ok)
                .filter_map(|entry| {
                    let path = entry.path();
                    let name = path.file_stem()?.to_string_lossy().into_owned();
                    if path.is_dir() && path.join("main.rs").is_file() {
                        Some((path.join("main.rs"), format!("bin {name}")))
                    } else if path.extension().is_some_and(|ext| ext == "rs") {
                        Some((path, format!("bin {name}")))
                    } else {
                        None
                    }
                })
                .collect();
            bins.sort();
            roots.extend(bins);
        }
        targets.extend(roots.into_iter().map(|(root_file, kind)| Target {
            crate_dir: member.clone(),
            kind,
            root_file,
        }));
    }
    Ok(targets)
}

/// The `members = [...]` entries of a workspace manifest (globs are not supported: the
/// workspace lists its members).
fn workspace_members(manifest: &str) -> Vec<String> {
    // Comments first (they may hold commas or brackets), then the array after `members`.
    let text: String = manifest
        .lines()
        .map(|line| line.split('#').next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n");
    let Some(start) = text.find("members") else {
        return Vec::new();
    };
    let rest = &text[start..];
    let (Some(open), Some(close)) = (rest.find('['), rest.find(']')) else {
        return Vec::new();
    };
    rest[open + 1..close]
        .split(',')
        .map(|entry| entry.trim().trim_matches('"'))
        .filter(|entry| !entry.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Loads a target and builds its file and folder graphs.
pub fn analyze(target: &Target) -> Result<Analysis, Error> {
    let tree = ModuleTree::load(&target.root_file)?;
    let src = target.root_file.parent().unwrap_or(Path::new("."));
    let src = if target.kind.starts_with("bin ") {
        // `src/bin/x.rs` and `src/bin/x/main.rs`: labels relative to `src/`.
        src.ancestors()
            .find(|dir| dir.ends_with("src"))
            .unwrap_or(src)
    } else {
        src
    };
    let relative = |path: &Path| -> String {
        path.strip_prefix(src)
            .unwrap_or(path)
            .to_string_lossy()
            .into_owned()
    };
    let display_file =
        |path: &Path| -> String { format!("{}/src/{}", target.crate_dir, relative(path)) };

    let folder_label = |id: usize| -> String {
        let module = &tree.modules[id];
        let Some(top) = module.path.first() else {
            return relative(&module.file);
        };
        let top_id = tree
            .modules
            .iter()
            .position(|m| m.path.len() == 1 && &m.path[0] == top)
            .unwrap_or(id);
        let top_module = &tree.modules[top_id];
        let spread = top_module.file.ends_with("mod.rs")
            || tree.modules.iter().enumerate().any(|(other, m)| {
                m.path.first() == Some(top) && m.file_module == other && other != top_id
            });
        if spread {
            format!("{top}/")
        } else {
            relative(&tree.modules[tree.file_of(top_id)].file)
        }
    };

    let mut files = Graph::default();
    let mut folders = Graph::default();
    for (id, module) in tree.modules.iter().enumerate() {
        if module.file_module == id {
            files.node(&relative(&module.file));
            folders.node(&folder_label(id));
        }
    }
    for edge in edges::collect(&tree) {
        let from_file = &tree.modules[edge.from].file;
        let site = Site {
            file: display_file(from_file),
            line: edge.line,
        };
        let from = files.node(&relative(from_file));
        let to = files.node(&relative(&tree.modules[edge.to].file));
        files.add(from, to, site.clone());
        let from = folders.node(&folder_label(edge.from));
        let to = folders.node(&folder_label(edge.to));
        folders.add(from, to, site);
    }
    Ok(Analysis {
        target: target.clone(),
        files,
        folders,
        warnings: tree.warnings,
    })
}

/// The circles of an analysis as report lines (empty when there are none).
pub fn circle_report(analysis: &Analysis) -> Vec<String> {
    let mut lines = Vec::new();
    let name = format!("{} ({})", analysis.target.crate_dir, analysis.target.kind);
    for (level, graph) in [
        ("file modules", &analysis.files),
        ("folders", &analysis.folders),
    ] {
        for circle in graph.circles() {
            let members: Vec<&str> = circle.iter().map(|n| graph.labels[*n].as_str()).collect();
            lines.push(format!(
                "{name}: circle between {} {level}: {}",
                circle.len(),
                members.join(", ")
            ));
            let cycles = graph.cycles_through(&circle);
            let shown: usize = cycles.iter().map(Vec::len).sum();
            for cycle in &cycles {
                lines.push("  cycle:".to_owned());
                lines.extend(
                    graph
                        .describe_cycle(cycle)
                        .into_iter()
                        .map(|l| format!("    {l}")),
                );
            }
            // To break a circle one edge of every cycle must go: list the others too.
            let inside = graph.edges_within(&circle);
            if inside.len() > shown {
                lines.push("  every edge inside the circle:".to_owned());
                lines.extend(inside.into_iter().map(|l| format!("    {l}")));
            }
        }
    }
    lines
}

/// The folder graph of an analysis as `--map` lines.
pub fn map_report(analysis: &Analysis) -> Vec<String> {
    let mut lines = vec![format!(
        "{} ({}):",
        analysis.target.crate_dir, analysis.target.kind
    )];
    lines.extend(
        analysis
            .folders
            .map_lines()
            .into_iter()
            .map(|l| format!("  {l}")),
    );
    lines
}

/// Every file-level edge of an analysis as `--edges` lines (`from -> to  (file:line)`).
pub fn edge_report(analysis: &Analysis) -> Vec<String> {
    let graph = &analysis.files;
    let mut lines = vec![format!(
        "{} ({}):",
        analysis.target.crate_dir, analysis.target.kind
    )];
    lines.extend(graph.edges.iter().map(|((from, to), site)| {
        format!(
            "  {} -> {}  ({}:{})",
            graph.labels[*from], graph.labels[*to], site.file, site.line
        )
    }));
    lines
}
