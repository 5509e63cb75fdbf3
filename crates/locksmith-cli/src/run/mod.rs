//! `locksmith run NAME -- CMD…`: a command under a lock; the command's whole process tree is
//! stopped if the lock is lost, and ended before the lock is released.

pub mod guardian;
pub(crate) mod signals;
mod terminal;
mod tree;

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use tokio::process::Command;

use self::terminal::Terminal;
use self::tree::Tree;
use crate::acquire::{self, AcquireArgs, Held, HoldArgs};
use crate::exit;

/// Examples and exit codes shown by `locksmith run --help`.
const AFTER_HELP: &str = "\
Examples:
  locksmith run nightly-report -- ./report.sh --date today
  locksmith run nightly-report -w 30 -- ./report.sh           # give up after 30 s of waiting
  locksmith run nightly-report -n -q -- ./report.sh           # cron: skip if already running
  locksmith run nightly-report -n -E 0 -- ./report.sh         # ... and exit 0 when skipped
  locksmith run nightly-report -v -- ./report.sh              # say who holds it, the token, the release
  locksmith run exports --permits 4 -- ./export.sh            # at most 4 exports at a time
  locksmith run catalog --shared -- ./read-catalog.sh         # readers together, never with a writer

The command runs in a process group of its own (the terminal's foreground when locksmith is);
SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 sent to locksmith are forwarded to that
group. If the lock is lost, the group gets SIGTERM, then SIGKILL after --kill-grace. When the
command exits, processes it left running in its group are ended the same way before the lock
is released. A guardian process leads that group and SIGKILLs it if locksmith itself is killed
(kill -9, the OOM killer): the command never outlives its lock's holder.

The command's environment: LOCKSMITH_LOCK (the lock name) and LOCKSMITH_TOKEN (the fencing
token; not set with --unfenced). LOCKSMITH_TOKEN_FILE names the file holding the bearer token for
a native server started with --auth (or give ?token_file=FILE in the URL).

Durations: a number and a unit, or several: 500ms, 10s, 2m, 1h, 1m30s. TTL: 100ms to 1h.

Exit codes:
  the command's own   it ran under the lock (128+N if it was killed by signal N)
  75                  not acquired (--timeout passed, or held with --no-wait); nothing ran;
                      -E N makes it N
  76                  the lock was lost (or its session expired) while the command ran; the
                      command was stopped
  2                   bad arguments (name, TTL, duration, URL; elect: a backend without
                      elections, --observe with a command)
  69                  backend unreachable
  77                  credentials or permissions refused by the backend
  78                  configuration error (TLS verification, TLS required, certificate files)
  126, 127            the command could not be executed / was not found
  70                  the guardian of the command's group could not start; nothing ran
  130, 143            interrupted (SIGINT, SIGTERM) while waiting; nothing ran";

/// Arguments of `locksmith run`.
#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
pub struct RunArgs {
    /// The lock to hold while CMD runs.
    pub name: String,
    /// How to acquire.
    #[command(flatten)]
    pub acquire: AcquireArgs,
    /// What kind of hold.
    #[command(flatten)]
    pub hold: HoldArgs,
    /// After the lock is lost, or the command exited leaving processes behind: time between
    /// SIGTERM and SIGKILL to the command's process group.
    #[arg(long, default_value = "5s", value_parser = crate::duration_arg)]
    pub kill_grace: Duration,
    /// `locksmith elect`: the candidate's proposal; the hold is then a campaign, refused on
    /// backends without elections.
    #[arg(skip)]
    pub campaign: Option<String>,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, num_args = 1.., value_name = "CMD")]
    pub command: Vec<String>,
}

/// Acquires, runs, releases. Exit codes: as `locksmith run --help` lists them.
///
/// # Cancel safety
/// Not meant to be cancelled: dropping it mid-run SIGKILLs the command's group at once (the
/// guardian stands down), without the SIGTERM grace; the lock is freed by the lease.
pub async fn run(args: RunArgs) -> ExitCode {
    let who = if args.campaign.is_some() { "elect" } else { "run" };
    let mut opts = args.hold.options();
    if let Some(v) = &args.campaign {
        opts = opts.value(v.clone());
    }
    let Held { client, guard, mut signals } =
        match acquire::acquire(who, &args.name, &args.acquire, opts, args.campaign.is_some()).await {
            Ok(held) => held,
            Err(code) => return code,
        };
    let verbose = args.acquire.verbose;

    let Some((program, program_args)) = args.command.split_first() else {
        eprintln!("locksmith {who}: no command given");
        acquire::release(who, &args.name, verbose, client, guard).await;
        return ExitCode::from(exit::USAGE);
    };
    let mut command = Command::new(program);
    command.args(program_args).env("LOCKSMITH_LOCK", &args.name).env_remove("LOCKSMITH_TOKEN");
    if let Some(token) = guard.fencing_token() {
        command.env("LOCKSMITH_TOKEN", token.to_string());
    }
    // The guardian first: without it, a `kill -9` of this process would leave the command
    // running without the lock.
    let guardian = match guardian::start() {
        Ok(g) => g,
        Err(e) => {
            eprintln!("locksmith {who}: cannot start the guardian of the command's process group: {e}; nothing ran");
            acquire::release(who, &args.name, verbose, client, guard).await;
            return ExitCode::from(exit::SOFTWARE);
        }
    };
    let mut tree = match Tree::spawn(command, Terminal::foreground(), guardian) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("locksmith {who}: cannot start {program:?}: {e}");
            acquire::release(who, &args.name, verbose, client, guard).await;
            // 127 like a shell for "command not found", 126 otherwise.
            let code = if e.kind() == std::io::ErrorKind::NotFound { 127 } else { 126 };
            return ExitCode::from(code);
        }
    };

    let status = loop {
        tokio::select! {
            biased;
            _ = guard.lost() => {
                eprintln!("locksmith {who}: {}; stopping the command", acquire::loss(&args.name, &guard));
                let _ = tree.terminate(args.kill_grace).await;
                tree.finish();
                drop(guard);
                client.close().await;
                return ExitCode::from(exit::LOST);
            }
            status = tree.wait() => break status,
            sig = signals.next() => tree.signal(sig),
        }
    };
    // The command is done; whatever it left running in its group must not outlive the lock.
    if tree.running() {
        eprintln!("locksmith {who}: the command exited leaving processes in its group; ending them");
        let _ = tree.terminate(args.kill_grace).await;
    }
    tree.finish();
    let held = guard.is_held();
    acquire::release(who, &args.name, verbose, client, guard).await;
    let status = match status {
        Ok(s) => s,
        Err(e) => {
            eprintln!("locksmith {who}: waiting for the command failed: {e}");
            return ExitCode::from(exit::SOFTWARE);
        }
    };
    if !held {
        eprintln!("locksmith {who}: lock {:?} was lost as the command finished", args.name);
        return ExitCode::from(exit::LOST);
    }
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        (None, Some(sig)) => ExitCode::from(128u8.saturating_add(u8::try_from(sig).unwrap_or(0))),
        _ => ExitCode::from(1),
    }
}
