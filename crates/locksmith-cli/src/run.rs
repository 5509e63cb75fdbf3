//! `locksmith run NAME -- CMD…`: a command under a lock, stopped if the lock is lost.

use std::process::ExitCode;
use std::time::{Duration, UNIX_EPOCH};

use clap::Args;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::process::Command;
use tokio::signal::unix::{signal, Signal as Stream, SignalKind};

use crate::exit;

/// Arguments of `locksmith run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The lock to hold while CMD runs.
    pub name: String,
    /// Backend URL.
    #[arg(long, env = "LOCKSMITH_BACKEND", default_value = crate::DEFAULT_BACKEND)]
    pub backend: String,
    /// Session lease; renewed about every TTL/3 while CMD runs.
    #[arg(long, default_value = "10s", value_parser = crate::duration_arg)]
    pub ttl: Duration,
    /// Give up waiting after this long (exit 75).
    #[arg(long, value_parser = crate::duration_arg, conflicts_with = "no_wait")]
    pub timeout: Option<Duration>,
    /// Do not wait: if the lock is held, exit 75 at once.
    #[arg(long)]
    pub no_wait: bool,
    /// Lock even on a backend that cannot give a safe fencing token (Redlock); CMD then gets no
    /// LOCKSMITH_TOKEN.
    #[arg(long)]
    pub unfenced: bool,
    /// After the lock is lost: time between SIGTERM and SIGKILL to CMD.
    #[arg(long, default_value = "5s", value_parser = crate::duration_arg)]
    pub kill_grace: Duration,
    /// The command and its arguments.
    #[arg(last = true, required = true, num_args = 1..)]
    pub command: Vec<String>,
}

struct Signals {
    int: Stream,
    term: Stream,
    hup: Stream,
    quit: Stream,
    usr1: Stream,
    usr2: Stream,
}

impl Signals {
    fn install() -> std::io::Result<Self> {
        Ok(Self {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            hup: signal(SignalKind::hangup())?,
            quit: signal(SignalKind::quit())?,
            usr1: signal(SignalKind::user_defined1())?,
            usr2: signal(SignalKind::user_defined2())?,
        })
    }

    async fn next(&mut self) -> Signal {
        tokio::select! {
            _ = self.int.recv() => Signal::SIGINT,
            _ = self.term.recv() => Signal::SIGTERM,
            _ = self.hup.recv() => Signal::SIGHUP,
            _ = self.quit.recv() => Signal::SIGQUIT,
            _ = self.usr1.recv() => Signal::SIGUSR1,
            _ = self.usr2.recv() => Signal::SIGUSR2,
        }
    }
}

fn unix_ms(t: std::time::SystemTime) -> u128 {
    t.duration_since(UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0)
}

/// Acquires, runs, releases. Exit codes: CMD's own; 75 not acquired; 76 lost; 2 bad arguments;
/// 69 backend unreachable; 128+N when stopped by signal N while waiting.
///
/// # Cancel safety
/// Not meant to be cancelled: dropping it mid-run leaves the command running unsupervised; the lock is freed by the lease.
pub async fn run(args: RunArgs) -> ExitCode {
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
    let acquire = async {
        let mut opts = locksmith::LockOptions::new();
        if args.unfenced {
            opts = opts.allow_unfenced();
        }
        if args.no_wait {
            client.try_lock_with(&args.name, opts).await
        } else {
            if let Some(t) = args.timeout {
                opts = opts.timeout(t);
            }
            client.lock_with(&args.name, opts).await.map(Some)
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
    let guard = match guard {
        Ok(Some(g)) => g,
        Ok(None) => {
            eprintln!("locksmith run: {:?} is held by someone else; nothing ran", args.name);
            client.close().await;
            return ExitCode::from(exit::NOT_ACQUIRED);
        }
        Err(locksmith::Error::Timeout) => {
            eprintln!("locksmith run: timed out waiting for {:?}; nothing ran", args.name);
            client.close().await;
            return ExitCode::from(exit::NOT_ACQUIRED);
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
    let mut child = match command.spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("locksmith run: cannot start {program:?}: {e}");
            let _ = guard.unlock().await;
            // 127 like a shell for "command not found", 126 otherwise.
            let code = if e.kind() == std::io::ErrorKind::NotFound { 127 } else { 126 };
            return ExitCode::from(code);
        }
    };
    let pid = child.id().and_then(|p| i32::try_from(p).ok()).map(Pid::from_raw);

    let status = loop {
        tokio::select! {
            biased;
            _ = guard.lost() => {
                eprintln!(
                    "locksmith run: lost lock {:?} (held safely until unix_ms={}); stopping the command",
                    args.name,
                    unix_ms(guard.valid_until())
                );
                if let Some(pid) = pid {
                    let _ = kill(pid, Signal::SIGTERM);
                }
                if tokio::time::timeout(args.kill_grace, child.wait()).await.is_err() {
                    let _ = child.start_kill();
                    let _ = child.wait().await;
                }
                drop(guard);
                client.close().await;
                return ExitCode::from(exit::LOST);
            }
            status = child.wait() => break status,
            sig = signals.next() => {
                if let Some(pid) = pid {
                    let _ = kill(pid, sig);
                }
            }
        }
    };
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
