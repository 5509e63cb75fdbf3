//! `locksmith run NAME -- CMD…`: a command under a lock; the command's whole process tree is
//! stopped if the lock is lost, and ended before the lock is released.

pub mod guardian;
mod signals;
mod terminal;
mod tree;

use std::process::ExitCode;
use std::time::{Duration, UNIX_EPOCH};

use clap::Args;
use tokio::process::Command;

use self::signals::Signals;
use self::terminal::Terminal;
use self::tree::Tree;
use crate::exit;

/// Examples and exit codes shown by `locksmith run --help`.
const AFTER_HELP: &str = "\
Examples:
  locksmith run nightly-report -- ./report.sh --date today
  locksmith run nightly-report --timeout 30s -- ./report.sh   # give up after 30 s of waiting
  locksmith run nightly-report --no-wait --quiet -- ./report.sh  # cron: skip if already running
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
  75                  not acquired (--timeout passed, or held with --no-wait); nothing ran
  76                  the lock was lost while the command ran; the command was stopped
  2                   bad arguments (name, TTL, duration, URL)
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
    /// Backend URL.
    #[arg(long, env = "LOCKSMITH_BACKEND", default_value = crate::DEFAULT_BACKEND)]
    pub backend: String,
    /// Session lease; renewed about every TTL/3 while CMD runs (100ms to 1h).
    #[arg(long, default_value = "10s", value_parser = crate::ttl_arg)]
    pub ttl: Duration,
    /// Give up waiting for the lock after this long (exit 75); 0s tries once, like --no-wait.
    /// Connecting to the backend is bounded by --connect-timeout, not by this.
    #[arg(long, value_parser = crate::duration_arg, conflicts_with = "no_wait")]
    pub timeout: Option<Duration>,
    /// Do not wait: if the lock is held, exit 75 at once.
    #[arg(long)]
    pub no_wait: bool,
    /// Bound on connecting to the backend and opening the session (exit 69 when it passes).
    #[arg(long, default_value = "10s", value_parser = crate::duration_arg)]
    pub connect_timeout: Duration,
    /// Say nothing when the lock is not acquired (exit 75 all the same), e.g. for cron.
    #[arg(long, short)]
    pub quiet: bool,
    /// Lock even on a backend that cannot give a safe fencing token (Redlock); CMD then gets no
    /// LOCKSMITH_TOKEN.
    #[arg(long)]
    pub unfenced: bool,
    /// After the lock is lost, or the command exited leaving processes behind: time between
    /// SIGTERM and SIGKILL to the command's process group.
    #[arg(long, default_value = "5s", value_parser = crate::duration_arg)]
    pub kill_grace: Duration,
    /// Hold one of N permits of a semaphore named NAME instead of the lock: at most N commands
    /// run at a time (everyone must give the same N). A crashed holder's permit comes back when
    /// its lease runs out.
    #[arg(long, value_name = "N", conflicts_with = "shared", value_parser = clap::value_parser!(u32).range(1..=i64::from(locksmith::MAX_PERMITS)))]
    pub permits: Option<u32>,
    /// Hold NAME as a reader: other `--shared` commands may run at the same time, never one
    /// holding it without `--shared` (the writer). Waiters are served in arrival order, so a
    /// waiting writer is not starved by readers.
    #[arg(long)]
    pub shared: bool,
    /// A value shown with the hold (`locksmith elect` sets it to the candidate's proposal).
    #[arg(skip)]
    pub value: Option<String>,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, num_args = 1.., value_name = "CMD")]
    pub command: Vec<String>,
}

fn unix_ms(t: std::time::SystemTime) -> u128 {
    t.duration_since(UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0)
}

/// Acquires, runs, releases. Exit codes: as `locksmith run --help` lists them.
///
/// # Cancel safety
/// Not meant to be cancelled: dropping it mid-run leaves the command running unsupervised; the
/// lock is freed by the lease.
pub async fn run(args: RunArgs) -> ExitCode {
    // Bad input is refused before anything is connected to.
    if let Err(e) = locksmith::LockName::new(&args.name) {
        return exit::report("run", &e);
    }
    let mut signals = match Signals::install() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("locksmith run: cannot install signal handlers: {e}");
            return ExitCode::from(exit::SOFTWARE);
        }
    };
    let client = match locksmith::connect_with_ttl(&args.backend, args.ttl).await {
        Ok(c) => c,
        Err(e) => return exit::report("run", &e),
    };
    // Connecting and opening the session have their own bound, so that --timeout is only the
    // wait for the lock (and --timeout 0s can still take a free lock).
    let opened = tokio::select! {
        r = tokio::time::timeout(args.connect_timeout, client.session_id()) => r,
        sig = signals.next() => {
            client.close().await;
            eprintln!("locksmith run: {sig} while connecting; nothing ran");
            return ExitCode::from(128 + sig as u8);
        }
    };
    match opened {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => return exit::report("run", &e),
        Err(_) => {
            let e = locksmith::Error::Unavailable {
                backend: client.backend().describe(),
                message: format!("no session within --connect-timeout {:?}", args.connect_timeout),
            };
            return exit::report("run", &e);
        }
    }
    let acquire = async {
        let mut opts = locksmith::LockOptions::new();
        if args.unfenced {
            opts = opts.allow_unfenced();
        }
        if let Some(n) = args.permits {
            opts = opts.permits(n);
        }
        if args.shared {
            opts = opts.shared();
        }
        if let Some(v) = &args.value {
            opts = opts.value(v.clone());
        }
        match args.timeout {
            _ if args.no_wait => client.try_lock_with(&args.name, opts).await,
            Some(t) if t.is_zero() => client.try_lock_with(&args.name, opts).await,
            Some(t) => client.lock_with(&args.name, opts.timeout(t)).await.map(Some),
            None => client.lock_with(&args.name, opts).await.map(Some),
        }
    };
    let guard = tokio::select! {
        r = acquire => r,
        sig = signals.next() => {
            // Dropping the acquisition withdrew our place in the queue; closing the session
            // makes sure nothing of ours is left even if the withdrawal raced with a grant.
            client.close().await;
            eprintln!("locksmith run: {sig} while waiting for {:?}; nothing ran", args.name);
            return ExitCode::from(128 + sig as u8);
        }
    };
    let not_acquired = |why: &str| {
        if !args.quiet {
            eprintln!("locksmith run: {why}; nothing ran");
        }
        ExitCode::from(exit::NOT_ACQUIRED)
    };
    let guard = match guard {
        Ok(Some(g)) => g,
        Ok(None) => {
            client.close().await;
            return not_acquired(&format!("{:?} is held by someone else", args.name));
        }
        Err(locksmith::Error::Timeout) => {
            client.close().await;
            return not_acquired(&format!("timed out waiting for {:?}", args.name));
        }
        Err(e) => return exit::report("run", &e),
    };
    tracing::info!(lock = %args.name, token = guard.token(), "acquired");

    let Some((program, program_args)) = args.command.split_first() else {
        eprintln!("locksmith run: no command given");
        let _ = guard.unlock().await;
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
            eprintln!("locksmith run: cannot start the guardian of the command's process group: {e}; nothing ran");
            let _ = guard.unlock().await;
            client.close().await;
            return ExitCode::from(exit::SOFTWARE);
        }
    };
    let mut tree = match Tree::spawn(command, Terminal::foreground(), guardian) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("locksmith run: cannot start {program:?}: {e}");
            let _ = guard.unlock().await;
            client.close().await;
            // 127 like a shell for "command not found", 126 otherwise.
            let code = if e.kind() == std::io::ErrorKind::NotFound { 127 } else { 126 };
            return ExitCode::from(code);
        }
    };

    let status = loop {
        tokio::select! {
            biased;
            _ = guard.lost() => {
                eprintln!(
                    "locksmith run: lost lock {:?} (held safely until unix_ms={}); stopping the command",
                    args.name,
                    unix_ms(guard.valid_until())
                );
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
        tracing::warn!(lock = %args.name, "the command exited leaving processes in its group; ending them");
        let _ = tree.terminate(args.kill_grace).await;
    }
    tree.finish();
    let held = guard.is_held();
    if let Err(e) = guard.unlock().await {
        tracing::warn!(error = %e, "release failed; the lease frees the lock after the TTL");
    }
    client.close().await;
    let status = match status {
        Ok(s) => s,
        Err(e) => {
            eprintln!("locksmith run: waiting for the command failed: {e}");
            return ExitCode::from(exit::SOFTWARE);
        }
    };
    if !held {
        eprintln!("locksmith run: lock {:?} was lost as the command finished", args.name);
        return ExitCode::from(exit::LOST);
    }
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
        (None, Some(sig)) => ExitCode::from(128u8.saturating_add(u8::try_from(sig).unwrap_or(0))),
        _ => ExitCode::from(1),
    }
}
