//! `locksmith lock NAME`: acquire, print the token, hold until interrupted — as `etcdctl lock
//! NAME` does without a command — for scripts that keep a lock around several steps.

use std::io::Write;
use std::process::ExitCode;

use clap::Args;

use crate::acquire::{self, AcquireArgs, Held, HoldArgs};
use crate::exit;

/// Arguments of `locksmith lock`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  locksmith lock deploy                 # prints the token, holds until Ctrl-C
  locksmith lock deploy -w 30 -v        # wait at most 30 s, saying who holds it meanwhile

The token is printed on stdout (a line; `-` with --unfenced) once the lock is held. SIGINT, SIGTERM, SIGHUP, SIGQUIT,
SIGUSR1 or SIGUSR2 releases it and exits 0. Exit codes as for `locksmith run`, and 76 when the
lock is lost while held (nothing else can be stopped: it is for whoever read the token to stop
using it).")]
pub struct LockArgs {
    /// The lock to hold.
    pub name: String,
    /// How to acquire.
    #[command(flatten)]
    pub acquire: AcquireArgs,
    /// What kind of hold.
    #[command(flatten)]
    pub hold: HoldArgs,
}

/// Acquires, prints the token, holds until a signal, releases.
///
/// # Cancel safety
/// Not meant to be cancelled: the hold is freed by the lease.
pub async fn lock(args: LockArgs) -> ExitCode {
    let Held { client, guard, mut signals } =
        match acquire::acquire("lock", &args.name, &args.acquire, args.hold.options(), false).await {
            Ok(held) => held,
            Err(code) => return code,
        };
    {
        let mut out = std::io::stdout().lock();
        let printed = match guard.fencing_token() {
            Some(token) => writeln!(out, "{token}"),
            None => writeln!(out, "-"),
        };
        // Flushed at once: a script reads it while the lock is held.
        if printed.and_then(|()| out.flush()).is_err() {
            eprintln!("locksmith lock: cannot write the token to stdout; releasing");
            acquire::release("lock", &args.name, args.acquire.verbose, client, guard).await;
            return ExitCode::from(exit::SOFTWARE);
        }
    }
    tokio::select! {
        _ = guard.lost() => {
            eprintln!("locksmith lock: {}", acquire::loss(&args.name, &guard));
            drop(guard);
            client.close().await;
            ExitCode::from(exit::LOST)
        }
        _ = signals.next() => {
            acquire::release("lock", &args.name, args.acquire.verbose, client, guard).await;
            ExitCode::SUCCESS
        }
    }
}
