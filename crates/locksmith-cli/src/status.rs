//! `locksmith status`: who holds what.

use std::process::ExitCode;

use clap::Args;
use locksmith::LockStatus;
use serde_json::json;

use crate::exit;
use crate::table::{or_dash, render_table};

/// Arguments of `locksmith status`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  locksmith status                          # every lock with a holder or waiters
  locksmith status nightly-report --json    # one lock as a JSON object
  locksmith status --backend redis://127.0.0.1:6379
  locksmith status --watch --prefix nightly-   # redrawn in place until Ctrl-C

A '-' is a value the backend cannot tell (e.g. ZooKeeper does not show a session's time left,
SQLite's waiters poll and are not counted).")]
pub struct StatusArgs {
    /// One lock (all known locks when omitted).
    pub name: Option<String>,
    /// Backend URL.
    #[arg(long, env = "LOCKSMITH_BACKEND", default_value = crate::DEFAULT_BACKEND)]
    pub backend: String,
    /// Print JSON instead of a table.
    #[arg(long, conflicts_with = "watch")]
    pub json: bool,
    /// Bound on reaching the backend and getting its answer (exit 69 when it passes).
    #[arg(long, default_value = "10s", value_parser = crate::duration_arg)]
    pub connect_timeout: std::time::Duration,
    /// Keep the table on screen, redrawn in place as locks change (until Ctrl-C): changes come
    /// from the backend's change stream where it has one, otherwise from reading status every
    /// --interval; time left counts down in between.
    #[arg(long)]
    pub watch: bool,
    /// With --watch: only locks whose name starts with this.
    #[arg(long, requires = "watch", default_value = "")]
    pub prefix: String,
    /// With --watch: how often the locks are listed.
    #[arg(long, requires = "watch", default_value = "500ms", value_parser = crate::duration_arg)]
    pub interval: std::time::Duration,
}

/// Prints the status.
///
/// # Cancel safety
/// Cancel safe: read only.
pub async fn status(args: StatusArgs) -> ExitCode {
    let client = match locksmith::connect(&args.backend).await {
        Ok(c) => c,
        Err(e) => return exit::report("status", &e),
    };
    if args.watch {
        return crate::status_watch::watch(client, &args).await;
    }
    let answer = tokio::time::timeout(args.connect_timeout, client.status(args.name.as_deref())).await;
    let locks = match answer {
        Ok(Ok(l)) => l,
        Ok(Err(e)) => return exit::report("status", &e),
        Err(_) => {
            let message =
                format!("no answer within --connect-timeout {}", locksmith::format_duration(args.connect_timeout));
            let e = locksmith::Error::Unavailable { backend: client.backend().describe(), message };
            return exit::report("status", &e);
        }
    };
    if args.json {
        let rows: Vec<_> = locks.iter().map(json_row).collect();
        let out = match &args.name {
            // One lock is always an object, also one never locked.
            Some(n) => rows.into_iter().next().unwrap_or_else(|| json_row(&LockStatus::new(n.clone(), None, 0, 0))),
            None => json!(rows),
        };
        println!("{out}");
        return ExitCode::SUCCESS;
    }
    if locks.is_empty() {
        match &args.name {
            Some(n) => println!("{n}: free (never locked)"),
            None => println!("no locks"),
        }
        return ExitCode::SUCCESS;
    }
    print!("{}", render(&locks));
    ExitCode::SUCCESS
}

/// The status table of `locks`.
pub(crate) fn render(locks: &[LockStatus]) -> String {
    // The VALUE column (an election's proposal) only when some holder has one.
    let shown = if locks.iter().any(|l| l.holders.iter().any(|h| h.value.is_some())) { 8 } else { 7 };
    let rows: Vec<Vec<String>> = locks.iter().flat_map(table_rows).map(|r| r[..shown].to_vec()).collect();
    let header = ["LOCK", "STATE", "HOLDER", "SESSION", "TOKEN", "WAITERS", "TTL LEFT", "VALUE"];
    render_table(&header[..shown], &rows, |i| (4..7).contains(&i))
}

/// One row per holder (readers and permit holders each get theirs), or one for a free lock.
fn table_rows(l: &LockStatus) -> Vec<[String; 8]> {
    let waiters = or_dash(l.waiters);
    if l.holders.is_empty() {
        let state = match l.lock_delay_left {
            Some(d) => format!("delayed {}", locksmith::format_duration(d)),
            None => "free".into(),
        };
        let row =
            [l.name.clone(), state, "-".into(), "-".into(), l.last_token.to_string(), waiters, "-".into(), "-".into()];
        return vec![row];
    }
    let count = l.holders.len();
    l.holders
        .iter()
        .map(|h| {
            let state = match h.mode {
                locksmith::HoldMode::Shared => format!("read ({count})"),
                locksmith::HoldMode::Permit(n) => format!("permit {count}/{n}"),
                _ => "held".into(),
            };
            [
                l.name.clone(),
                state,
                h.owner.clone(),
                h.session.clone(),
                h.token.to_string(),
                waiters.clone(),
                or_dash(h.ttl_left.map(locksmith::format_duration)),
                h.value.clone().unwrap_or_else(|| "-".into()),
            ]
        })
        .collect()
}

pub(crate) fn mode_name(mode: locksmith::HoldMode) -> &'static str {
    match mode {
        locksmith::HoldMode::Shared => "shared",
        locksmith::HoldMode::Permit(_) => "permit",
        _ => "exclusive",
    }
}

pub(crate) fn json_row(l: &LockStatus) -> serde_json::Value {
    json!({
        "name": l.name,
        "held": l.holder.is_some(),
        "holder_session": l.holder.as_ref().map(|h| h.session.clone()),
        "holder_owner": l.holder.as_ref().map(|h| h.owner.clone()),
        "token": l.holder.as_ref().map(|h| h.token),
        "ttl_left_ms": l.holder.as_ref().and_then(|h| h.ttl_left).map(|d| d.as_millis() as u64),
        "waiters": l.waiters,
        "last_token": l.last_token,
        "lock_delay_left_ms": l.lock_delay_left.map(|d| d.as_millis() as u64),
        "permits": l.permits,
        "holders": l.holders.iter().map(|h| json!({
            "session": h.session,
            "owner": h.owner,
            "token": h.token,
            "ttl_left_ms": h.ttl_left.map(|d| d.as_millis() as u64),
            "mode": mode_name(h.mode),
            "value": h.value,
        })).collect::<Vec<_>>(),
    })
}
