//! `import-graph [--map] <workspace root>`: prints every import circle between file modules or
//! between top-level folders of the workspace's crates and exits 1 if there is any; `--map`
//! prints the folder-level graph of each crate instead (for the docs), `--edges` every edge
//! between file modules with its first use; both exit 0.

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let mut map = false;
    let mut edges = false;
    let mut root = None;
    for arg in std::env::args().skip(1) {
        match arg.as_str() {
            "--map" => map = true,
            "--edges" => edges = true,
            "-h" | "--help" => {
                println!("usage: import-graph [--map | --edges] <workspace root>");
                return ExitCode::SUCCESS;
            }
            _ if root.is_none() => root = Some(PathBuf::from(arg)),
            _ => {
                eprintln!("usage: import-graph [--map | --edges] <workspace root>");
                return ExitCode::from(2);
            }
        }
    }
    let root = root.unwrap_or_else(|| PathBuf::from("."));
    let targets = match mcm_import_graph::discover(&root) {
        Ok(targets) => targets,
        Err(error) => {
            eprintln!("import-graph: {error}");
            return ExitCode::from(2);
        }
    };
    let mut circles = 0usize;
    for target in &targets {
        let analysis = match mcm_import_graph::analyze(target) {
            Ok(analysis) => analysis,
            Err(error) => {
                eprintln!("import-graph: {error}");
                return ExitCode::from(2);
            }
        };
        for warning in &analysis.warnings {
            eprintln!("import-graph: warning: {warning}");
        }
        if edges {
            for line in mcm_import_graph::edge_report(&analysis) {
                println!("{line}");
            }
            continue;
        }
        if map {
            for line in mcm_import_graph::map_report(&analysis) {
                println!("{line}");
            }
            continue;
        }
        let report = mcm_import_graph::circle_report(&analysis);
        circles += usize::from(!report.is_empty());
        for line in report {
            println!("{line}");
        }
    }
    if map || edges {
        return ExitCode::SUCCESS;
    }
    if circles == 0 {
        println!(
            "import-graph: no import circle in {} crate targets",
            targets.len()
        );
        ExitCode::SUCCESS
    } else {
        println!("import-graph: {circles} crate target(s) with import circles");
        ExitCode::FAILURE
    }
}
