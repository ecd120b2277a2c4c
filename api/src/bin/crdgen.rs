//! Writes the CRDs of `machine.sapcloud.io` as YAML, one file per CRD named like upstream
//! (`machine.sapcloud.io_machines.yaml`, ...), into the directory given as the first argument.
//!
//! Usage: `crdgen <dir>` (the Makefile target `make crds` writes the chart's `crds/` folder).

use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    let Some(dir) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: crdgen <output-directory>");
        return ExitCode::from(2);
    };
    match run(&dir) {
        Ok(count) => {
            eprintln!("crdgen: wrote {count} CRD(s) to {}", dir.display());
            ExitCode::SUCCESS
        }
        Err(message) => {
            eprintln!("crdgen: {message}");
            ExitCode::FAILURE
        }
    }
}

fn run(dir: &std::path::Path) -> Result<usize, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let crds = mcm_api::crd::all().map_err(|e| e.to_string())?;
    for (file, crd) in &crds {
        let yaml = mcm_api::crd::to_yaml(crd).map_err(|e| e.to_string())?;
        let path = dir.join(file);
        std::fs::write(&path, yaml).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(crds.len())
}
