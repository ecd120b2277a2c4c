//! Finds the binaries of the system (and the kubectl plugin) and builds them first.
//!
//! Binaries of other crates are not exposed to this crate's tests (`CARGO_BIN_EXE_*` only covers
//! the crate's own), so they are taken from the target directory the test binary itself lives in
//! (`<target>/debug/deps/e2e-<hash>` → `<target>/debug/`). Unless `MCM_E2E_NO_BUILD` is set, one
//! `cargo build` of the four binaries runs first, serialised across test processes by a file lock
//! (nextest runs every test in its own process); cargo itself makes it a no-op when nothing
//! changed, and it guarantees that the scenarios never run yesterday's controllers.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use crate::error::{E2eError, Result};

/// The binaries the system runs, with their packages.
pub const BINARIES: [(&str, &str); 5] = [
    ("mcm-sandbox", "mcm-sandbox"),
    ("mcm-webhook", "machine-webhook"),
    ("mcm-provider-virtual", "provider-virtual"),
    ("mcm-controller", "machine-controller-manager"),
    ("kubectl-mcm", "kubectl-mcm"),
];

/// Where built binaries are: `MCM_E2E_BIN_DIR`, else the profile directory of this test binary.
pub fn bin_dir() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os("MCM_E2E_BIN_DIR") {
        return Ok(PathBuf::from(dir));
    }
    let exe = std::env::current_exe().map_err(E2eError::io("locate the test binary", "."))?;
    // <target>/<profile>/deps/<test binary>
    exe.parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .ok_or_else(|| E2eError::Binary {
            name: "test binary".to_owned(),
            message: format!("{} is not inside <target>/<profile>/deps", exe.display()),
        })
}

/// The workspace root (the parent of this crate).
pub fn workspace_root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(Path::to_path_buf).unwrap_or(manifest)
}

/// Builds the binaries once per process (and under a file lock across processes), then returns
/// the path of `name`.
pub fn binary(name: &str) -> Result<PathBuf> {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    let dir = bin_dir()?;
    let built = BUILT.get_or_init(|| build_all(&dir).map_err(|e| e.to_string()));
    if let Err(message) = built {
        return Err(E2eError::Binary {
            name: name.to_owned(),
            message: message.clone(),
        });
    }
    let path = dir.join(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(E2eError::Binary {
            name: name.to_owned(),
            message: format!("{} does not exist", path.display()),
        })
    }
}

fn build_all(dir: &Path) -> Result<()> {
    if std::env::var_os("MCM_E2E_NO_BUILD").is_some()
        || std::env::var_os("MCM_E2E_BIN_DIR").is_some()
    {
        return Ok(());
    }
    // <target>/debug → <target>; the profile directory name is the cargo profile for dev/test.
    let (Some(target), Some(profile)) = (dir.parent(), dir.file_name()) else {
        return Err(E2eError::Binary {
            name: "all".to_owned(),
            message: format!("cannot derive the target directory from {}", dir.display()),
        });
    };
    let lock_path = target.join("mcm-e2e-build.lock");
    let lock = File::create(&lock_path).map_err(E2eError::io("create", &lock_path))?;
    lock.lock().map_err(E2eError::io("lock", &lock_path))?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .current_dir(workspace_root())
        .arg("build")
        .arg("--target-dir")
        .arg(target);
    if profile == "release" {
        command.arg("--release");
    } else if profile != "debug" {
        command.arg("--profile").arg(profile);
    }
    for (package, bin) in BINARIES {
        command.args(["-p", package, "--bin", bin]);
    }
    eprintln!("mcm-e2e: building the binaries: {command:?}");
    let output = command
        .output()
        .map_err(E2eError::io("run cargo build in", workspace_root()))?;
    drop(lock);
    if output.status.success() {
        Ok(())
    } else {
        Err(E2eError::Binary {
            name: "all".to_owned(),
            message: format!(
                "cargo build failed ({}):\n{}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            ),
        })
    }
}

/// Where the Go in-memory provider behind the bridge is built: `MCM_PROVIDER_MEMORY_BIN`, else
/// `<target>/go/mcm-provider-memory`.
pub fn go_provider_path() -> Result<PathBuf> {
    if let Some(path) = std::env::var_os("MCM_PROVIDER_MEMORY_BIN") {
        return Ok(PathBuf::from(path));
    }
    let dir = bin_dir()?;
    let target = dir.parent().unwrap_or(&dir);
    Ok(target.join("go").join("mcm-provider-memory"))
}

/// Whether the Go toolchain is on the PATH (the bridge's scenario needs it to build its driver).
pub fn go_available() -> bool {
    Command::new("go")
        .arg("version")
        .output()
        .is_ok_and(|output| output.status.success())
}

/// Builds `provider-go/cmd/mcm-provider-memory` (the in-memory provider behind the bridge) once
/// per process, under the same lock as the cargo build, and returns its path. Go's build cache
/// makes a build with nothing changed take about a second. `MCM_PROVIDER_MEMORY_BIN` skips it.
pub fn go_provider() -> Result<PathBuf> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let built = BUILT.get_or_init(|| build_go_provider().map_err(|e| e.to_string()));
    built.clone().map_err(|message| E2eError::Binary {
        name: "mcm-provider-memory".to_owned(),
        message,
    })
}

fn build_go_provider() -> Result<PathBuf> {
    let path = go_provider_path()?;
    if std::env::var_os("MCM_PROVIDER_MEMORY_BIN").is_some() {
        return Ok(path);
    }
    let Some(out_dir) = path.parent() else {
        return Err(E2eError::Binary {
            name: "mcm-provider-memory".to_owned(),
            message: format!("{} has no parent directory", path.display()),
        });
    };
    std::fs::create_dir_all(out_dir).map_err(E2eError::io("create", out_dir))?;
    let lock_path = out_dir.join("build.lock");
    let lock = File::create(&lock_path).map_err(E2eError::io("create", &lock_path))?;
    lock.lock().map_err(E2eError::io("lock", &lock_path))?;
    let module = workspace_root().join("provider-go");
    let mut command = Command::new("go");
    command
        .current_dir(&module)
        .args(["build", "-o"])
        .arg(&path)
        .arg("./cmd/mcm-provider-memory");
    eprintln!("mcm-e2e: building the Go provider: {command:?}");
    let output = command
        .output()
        .map_err(E2eError::io("run go build in", &module))?;
    drop(lock);
    if output.status.success() {
        Ok(path)
    } else {
        Err(E2eError::Binary {
            name: "mcm-provider-memory".to_owned(),
            message: format!(
                "go build failed ({}):\n{}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            ),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `make run` (scripts/run.sh) builds the same packages and binaries as these tests, with no
    /// other package selected: cargo unifies features over the selected packages, so any other
    /// selection (`--workspace` before) compiles a second variant of most crates and `make run`
    /// after `make test` rebuilt about 30 of them.
    #[test]
    fn make_run_builds_what_the_end_to_end_tests_build() {
        let script = std::fs::read_to_string(workspace_root().join("scripts/run.sh"))
            .expect("scripts/run.sh is readable");
        // The build command: from `cargo build` to the end of its continued lines.
        let start = script
            .find("\tcargo build ")
            .expect("scripts/run.sh has a cargo build command");
        let mut command = String::new();
        for line in script[start..].lines() {
            command.push_str(line.trim_end_matches('\\'));
            command.push(' ');
            if !line.ends_with('\\') {
                break;
            }
        }
        let words: Vec<&str> = command.split_whitespace().skip(2).collect();
        let expected: Vec<&str> = BINARIES
            .iter()
            .flat_map(|(package, bin)| ["-p", package, "--bin", bin])
            .collect();
        assert_eq!(words, expected, "scripts/run.sh builds: {command}");
    }
}
