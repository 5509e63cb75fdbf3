//! The guardian of the command's process group (`locksmith_process::guardian`): this same
//! binary, started as the hidden `locksmith run-guardian` before the command, without an async
//! runtime. When `locksmith run` dies without a word (SIGKILL, the OOM killer, a supervisor's
//! `KillMode=process`), it SIGKILLs the command's whole group within milliseconds.

use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode};

use clap::Args;
use locksmith_process::guardian::{self, Guardian};

use crate::exit;

/// Arguments of the hidden `locksmith run-guardian`.
#[derive(Debug, Args)]
pub struct GuardianArgs {
    /// The PID of the `locksmith run` that started it (it refuses any other parent).
    #[arg(long)]
    pub runner: i32,
}

/// Starts the guardian of a new process group, for the command to join.
pub(crate) fn start() -> std::io::Result<Guardian> {
    // This binary, even if the file was replaced or deleted since it started.
    let program =
        if cfg!(target_os = "linux") { std::path::PathBuf::from("/proc/self/exe") } else { std::env::current_exe()? };
    let mut cmd = Command::new(program);
    cmd.arg0("locksmith").args(["run-guardian", "--runner", &std::process::id().to_string()]);
    Guardian::start(cmd)
}

/// `locksmith run-guardian --runner PID`: watches until the runner is gone, then ends its
/// group. Returns only when it refuses (started by hand): exit 2.
pub fn main(args: &GuardianArgs) -> ExitCode {
    match guardian::watch(args.runner) {
        Ok(never) => match never {},
        Err(refusal) => {
            eprintln!("locksmith run-guardian: {refusal}");
            ExitCode::from(exit::USAGE)
        }
    }
}
