//! `locksmith elect NAME [--value V] -- CMD`: campaign in an election and run CMD while leading
//! (the others wait and take over when the leader goes); `locksmith elect NAME --observe`:
//! print every change of leader.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use serde_json::json;

use crate::acquire::{AcquireArgs, HoldArgs};
use crate::exit;
use crate::run::RunArgs;

/// Arguments of `locksmith elect`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  locksmith elect scheduler --value \"$(hostname):8080\" -- ./scheduler   # run while leading
  locksmith elect scheduler --observe                                   # print each new leader
  locksmith elect scheduler --observe --json                            # as JSON lines

The leader's command runs as under `locksmith run` (its process group is stopped if leadership
is lost) with LOCKSMITH_TOKEN set to its term: a number greater than every earlier leader's, to
pass to anything that must reject a deposed leader. Elections need a backend that keeps a
proposal and tells of changes (the native server, memory://, etcd, ZooKeeper); on the others
(Redis, Redlock, SQL) elect exits 2. --timeout/-w and --no-wait/-n bound the wait to be elected (exit
75, or -E's code). Exit codes as for `locksmith run`; --observe exits 0 when interrupted.")]
pub struct ElectArgs {
    /// The election.
    pub name: String,
    /// How to campaign: backend, lease, how long to wait to be elected, what to say.
    #[command(flatten)]
    pub acquire: AcquireArgs,
    /// The proposal observers see while this candidate leads (e.g. its address).
    #[arg(long, default_value = "", conflicts_with = "observe")]
    pub value: String,
    /// Print the leader and every change of leader instead of campaigning.
    #[arg(long)]
    pub observe: bool,
    /// With --observe: one JSON object per line.
    #[arg(long, requires = "observe")]
    pub json: bool,
    /// Time between SIGTERM and SIGKILL to the command's process group when leadership is lost.
    #[arg(long, default_value = "5s", value_parser = crate::duration_arg)]
    pub kill_grace: Duration,
    /// The command to run while leading, after `--` (not with --observe).
    #[arg(last = true, num_args = 1.., value_name = "CMD", required_unless_present = "observe", conflicts_with = "observe")]
    pub command: Vec<String>,
}

/// Campaigns and runs the command while leading, or observes.
///
/// # Cancel safety
/// As `locksmith run`: not meant to be cancelled mid-run.
pub async fn elect(args: ElectArgs) -> ExitCode {
    if args.observe {
        return observe(args).await;
    }
    let run = RunArgs {
        name: args.name,
        acquire: args.acquire,
        hold: HoldArgs::default(),
        kill_grace: args.kill_grace,
        campaign: Some(args.value),
        command: args.command,
    };
    crate::run::run(run).await
}

async fn observe(args: ElectArgs) -> ExitCode {
    if let Err(e) = locksmith::LockName::new(&args.name) {
        return exit::report("elect", &e);
    }
    let client = match locksmith::connect_with_ttl(&args.acquire.backend, args.acquire.ttl).await {
        Ok(c) => c,
        Err(e) => return exit::report("elect", &e),
    };
    let mut leaders = match tokio::time::timeout(args.acquire.connect_timeout, client.observe(&args.name)).await {
        Ok(Ok(l)) => l,
        Ok(Err(e)) => return exit::report("elect", &e),
        Err(_) => {
            let e = locksmith::Error::Unavailable {
                backend: client.backend().describe(),
                message: format!("no answer within --connect-timeout {:?}", args.acquire.connect_timeout),
            };
            return exit::report("elect", &e);
        }
    };
    let stop = locksmith_cli_common::shutdown_signal();
    tokio::pin!(stop);
    loop {
        let next = tokio::select! {
            _ = &mut stop => return ExitCode::SUCCESS,
            next = leaders.next() => next,
        };
        match next {
            Some(Ok(leader)) => print_leader(&args.name, leader.as_ref(), args.json),
            Some(Err(e)) => return exit::report("elect", &e),
            None => {
                let e = locksmith::Error::Unavailable {
                    backend: client.backend().describe(),
                    message: "the observation ended".into(),
                };
                return exit::report("elect", &e);
            }
        }
    }
}

fn print_leader(name: &str, leader: Option<&locksmith::Leader>, as_json: bool) {
    use std::io::Write;
    let line = match (leader, as_json) {
        (Some(l), true) => json!({
            "election": name,
            "term": l.term,
            "value": l.value,
            "session": l.session,
            "owner": l.owner,
        })
        .to_string(),
        (None, true) => json!({ "election": name, "term": null }).to_string(),
        (Some(l), false) => {
            format!("{name}: term {} leader {:?} (session {})", l.term, l.value.as_deref().unwrap_or(""), l.session)
        }
        (None, false) => format!("{name}: no leader"),
    };
    // Flushed per line: observers are read by other programs as changes happen.
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}
