//! One child process of the system: started with its output in a log file, checked for life,
//! stopped gracefully (SIGTERM, then SIGKILL) and restartable with the same command line.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::error::{E2eError, Result};

/// A running (or exited) component.
#[derive(Debug)]
pub struct Process {
    name: String,
    program: PathBuf,
    args: Vec<String>,
    envs: Vec<(String, String)>,
    log: PathBuf,
    /// Working directory of the child (the test's own when `None`).
    cwd: Option<PathBuf>,
    child: Option<Child>,
    starts: u32,
}

impl Process {
    /// Starts `program args` with its stdout and stderr appended to `log`.
    pub fn start(
        name: &str,
        program: PathBuf,
        args: Vec<String>,
        envs: Vec<(String, String)>,
        log: PathBuf,
    ) -> Result<Self> {
        Self::spawned(name, None, program, args, envs, log)
    }

    /// Like [`Process::start`], in the working directory `cwd`: a relative `program` such as
    /// `./machine-controller-manager` is then found there, as a container's command is found in
    /// the image's `WORKDIR`.
    pub fn start_in(
        name: &str,
        cwd: PathBuf,
        program: PathBuf,
        args: Vec<String>,
        envs: Vec<(String, String)>,
        log: PathBuf,
    ) -> Result<Self> {
        Self::spawned(name, Some(cwd), program, args, envs, log)
    }

    fn spawned(
        name: &str,
        cwd: Option<PathBuf>,
        program: PathBuf,
        args: Vec<String>,
        envs: Vec<(String, String)>,
        log: PathBuf,
    ) -> Result<Self> {
        let mut process = Self {
            name: name.to_owned(),
            program,
            args,
            envs,
            log,
            cwd,
            child: None,
            starts: 0,
        };
        process.spawn()?;
        Ok(process)
    }

    fn spawn(&mut self) -> Result<()> {
        let log = File::options()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(E2eError::io("open log", &self.log))?;
        let err = log
            .try_clone()
            .map_err(E2eError::io("open log", &self.log))?;
        let mut command = Command::new(&self.program);
        command
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .env("NO_COLOR", "1");
        for (key, value) in &self.envs {
            command.env(key, value);
        }
        if let Some(cwd) = &self.cwd {
            command.current_dir(cwd);
        }
        if std::env::var_os("RUST_LOG").is_none() {
            command.env("RUST_LOG", "info");
        }
        let child = command.spawn().map_err(|e| E2eError::Process {
            name: self.name.clone(),
            message: format!("cannot start {}: {e}", self.program.display()),
        })?;
        self.starts += 1;
        self.child = Some(child);
        Ok(())
    }

    /// Component name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The log file.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The process id while running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// `Err` naming the exit status when the process has exited.
    pub fn check_alive(&mut self) -> Result<()> {
        let Some(child) = self.child.as_mut() else {
            return Err(E2eError::Process {
                name: self.name.clone(),
                message: "not running".to_owned(),
            });
        };
        match child.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(E2eError::Process {
                name: self.name.clone(),
                message: format!("exited with {status}; log:\n{}", self.tail(40)),
            }),
            Err(e) => Err(E2eError::Process {
                name: self.name.clone(),
                message: format!("cannot query its state: {e}"),
            }),
        }
    }

    /// Stops the process: SIGTERM, up to `grace` to exit, then SIGKILL. Returns the exit code
    /// when it exited by itself.
    pub async fn stop(&mut self, grace: Duration) -> Result<Option<i32>> {
        let Some(mut child) = self.child.take() else {
            return Ok(None);
        };
        if let Ok(Some(status)) = child.try_wait() {
            return Ok(status.code());
        }
        // std only sends SIGKILL; the graceful path (lease release, in-flight calls) needs TERM.
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = tokio::time::Instant::now() + grace;
        loop {
            match child.try_wait() {
                Ok(Some(status)) => return Ok(status.code()),
                Ok(None) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                _ => break,
            }
        }
        let _ = child.kill();
        let _ = child.wait();
        Ok(None)
    }

    /// Starts the process again with the same command line (after [`Process::stop`]).
    pub fn restart(&mut self) -> Result<()> {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.spawn()
    }

    /// How many times it was started.
    pub fn starts(&self) -> u32 {
        self.starts
    }

    /// The last `lines` lines of its log.
    pub fn tail(&self, lines: usize) -> String {
        match std::fs::read(&self.log) {
            Ok(bytes) => {
                let text = String::from_utf8_lossy(&bytes);
                let all: Vec<&str> = text.lines().collect();
                all[all.len().saturating_sub(lines)..].join("\n")
            }
            Err(e) => format!("(cannot read {}: {e})", self.log.display()),
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
