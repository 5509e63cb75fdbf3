//! `locksmith chaos-worker` (hidden): one worker process of the safety harness.
//!
//! Loop: `lock()` → log `acquired` (after the call returned) → READ the register with the token
//! → sleep a random time below `--hold` → WRITE read+1 with the token → log `release-start`
//! (before the call) → `unlock()` → log `released`. The worker never asks `is_held()` before
//! writing: the token alone must protect the register, and that is what is under test. On
//! SIGTERM it finishes the cycle it is in and exits.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use locksmith::LockOptions;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::watch;

use super::history::{Event, HistoryWriter};
use super::register::{RegisterClient, WriteOutcome};
use locksmith_cli_common::{duration_arg, exit};

/// Arguments of the hidden `locksmith chaos-worker`, passed by `locksmith chaos`.
#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// Backend URL (already pointing at the fault proxies, if any). Passed in the environment,
    /// not on the command line, where `ps` would show a password.
    #[arg(long, env = "LOCKSMITH_BACKEND", hide_env_values = true)]
    pub backend: String,
    /// The lock all workers contend for.
    #[arg(long)]
    pub lock: String,
    /// The register's address.
    #[arg(long)]
    pub register: SocketAddr,
    /// Session lease.
    #[arg(long, value_parser = duration_arg)]
    pub ttl: Duration,
    /// Longest sleep between read and write.
    #[arg(long, value_parser = duration_arg)]
    pub hold: Duration,
    /// This worker's id.
    #[arg(long)]
    pub id: u32,
    /// Which start of this worker this is.
    #[arg(long)]
    pub incarnation: u32,
    /// Where to append the history (JSON lines).
    #[arg(long)]
    pub history: PathBuf,
    /// Seed of the hold-time RNG.
    #[arg(long)]
    pub seed: u64,
    /// Take the lock with `allow_unfenced` and send token 0 (the register then takes every write).
    #[arg(long)]
    pub unfenced: bool,
}

/// Runs the worker until SIGTERM (or SIGKILL). Exit 0 after SIGTERM; 2 for bad arguments; 70
/// when the history cannot be written.
///
/// # Cancel safety
/// Not meant to be cancelled: the lease frees a lock held when it is dropped.
pub async fn chaos_worker(args: WorkerArgs) -> ExitCode {
    let mut history = match HistoryWriter::open(&args.history, args.id, args.incarnation) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("locksmith chaos-worker: cannot open {}: {e}", args.history.display());
            return ExitCode::from(exit::SOFTWARE);
        }
    };
    let client = match locksmith::connect_with_ttl(&args.backend, args.ttl).await {
        Ok(c) => c,
        Err(e) => return exit::report("chaos-worker", &e),
    };
    let (stop_tx, mut stop) = watch::channel(false);
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::spawn(async move {
                term.recv().await;
                let _ = stop_tx.send(true);
            });
        }
        Err(e) => {
            eprintln!("locksmith chaos-worker: cannot install a SIGTERM handler: {e}");
            return ExitCode::from(exit::SOFTWARE);
        }
    }
    let seed = args.seed ^ (u64::from(args.id) << 32) ^ u64::from(args.incarnation);
    let mut rng = StdRng::seed_from_u64(seed);
    let mut register: Option<RegisterClient> = None;
    // Long enough for every other worker to take its turn; a timeout is only logged and retried.
    let wait = args.ttl * 5 + args.hold * 2;
    let mut seq = 0u64;
    while !*stop.borrow() {
        seq += 1;
        let hold = format!("{}.{}.{seq}", args.id, args.incarnation);
        if let Err(e) = history.log(Event::Invoke { hold: hold.clone() }) {
            eprintln!("locksmith chaos-worker: cannot write the history: {e}");
            return ExitCode::from(exit::SOFTWARE);
        }
        let mut opts = LockOptions::new().timeout(wait);
        if args.unfenced {
            opts = opts.allow_unfenced();
        }
        let got = tokio::select! {
            r = client.lock_with(&args.lock, opts) => r,
            _ = stop.wait_for(|s| *s) => {
                let _ = history.log(Event::Failed { hold, error: "stopped while waiting".into() });
                break;
            }
        };
        let guard = match got {
            Ok(g) => g,
            Err(e) => {
                let _ = history.log(Event::Failed { hold, error: e.to_string() });
                if exit::code_for(&e) == exit::USAGE {
                    // Bad arguments (name, TTL, URL, Redlock without --unfenced) cannot get
                    // better by retrying.
                    return exit::report("chaos-worker", &e);
                }
                if !matches!(e, locksmith::Error::Timeout) {
                    // A failure that came fast (server down, reset): do not spin on it.
                    tokio::time::sleep(Duration::from_millis(rng.random_range(20..120))).await;
                }
                continue;
            }
        };
        let token = guard.fencing_token();
        if history.log(Event::Acquired { hold: hold.clone(), token }).is_err() {
            return ExitCode::from(exit::SOFTWARE);
        }
        let sent = if args.unfenced { 0 } else { token.unwrap_or(0) };
        let longest = u64::try_from(args.hold.as_micros()).unwrap_or(u64::MAX);
        let pause = Duration::from_micros(rng.random_range(0..=longest));
        if let Err(e) = critical_section(&mut register, &args, &mut history, &hold, sent, pause).await {
            register = None;
            let _ = history.log(Event::Failed { hold: hold.clone(), error: format!("register: {e}") });
        }
        let _ = history.log(Event::ReleaseStart { hold: hold.clone() });
        // unlock() has its own timeouts; the outer bound only keeps a wedged backend from
        // stalling the loop (the lease frees the lock anyway).
        let ok = matches!(tokio::time::timeout(args.ttl * 2, guard.unlock()).await, Ok(Ok(true)));
        let _ = history.log(Event::Released { hold, ok });
    }
    client.close().await;
    ExitCode::SUCCESS
}

/// READ, sleep, WRITE read+1, logging what the register answered.
async fn critical_section(
    register: &mut Option<RegisterClient>,
    args: &WorkerArgs,
    history: &mut HistoryWriter,
    hold: &str,
    token: u64,
    pause: Duration,
) -> std::io::Result<()> {
    let reg = match register {
        Some(r) => r,
        None => register.insert(RegisterClient::connect(args.register).await?),
    };
    let value = reg.read(token, args.id, hold).await?;
    history.log(Event::Read { hold: hold.to_string(), value })?;
    tokio::time::sleep(pause).await;
    let new = value + 1;
    let outcome = reg.write(token, value, new, args.id, hold).await?;
    history.log(Event::Write {
        hold: hold.to_string(),
        expected: value,
        new,
        accepted: outcome == WriteOutcome::Accepted,
    })
}
