//! `locksmith status`: who holds what.

use std::process::ExitCode;

use clap::Args;
use serde_json::json;

use crate::exit;

/// Arguments of `locksmith status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// One lock (all known locks when omitted).
    pub name: Option<String>,
    /// Backend URL.
    #[arg(long, env = "LOCKSMITH_BACKEND", default_value = crate::DEFAULT_BACKEND)]
    pub backend: String,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
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
    let locks = match client.status(args.name.as_deref()).await {
        Ok(l) => l,
        Err(e) => return exit::report("status", &e),
    };
    if args.json {
        let rows: Vec<_> = locks
            .iter()
            .map(|l| {
                json!({
                    "name": l.name,
                    "held": l.holder.is_some(),
                    "holder_session": l.holder.as_ref().map(|h| h.session.clone()),
                    "holder_owner": l.holder.as_ref().map(|h| h.owner.clone()),
                    "token": l.holder.as_ref().map(|h| h.token),
                    "ttl_left_ms": l.holder.as_ref().map(|h| h.ttl_left.as_millis() as u64),
                    "waiters": l.waiters,
                    "last_token": l.last_token,
                    "lock_delay_left_ms": l.lock_delay_left.map(|d| d.as_millis() as u64),
                })
            })
            .collect();
        let out = if args.name.is_some() { rows.into_iter().next().unwrap_or(json!(null)) } else { json!(rows) };
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
    println!(
        "{:<32} {:<8} {:<18} {:>10} {:>8} {:>10}",
        "LOCK", "STATE", "HOLDER SESSION", "TOKEN", "WAITERS", "TTL LEFT"
    );
    for l in &locks {
        match &l.holder {
            Some(h) => println!(
                "{:<32} {:<8} {:<18} {:>10} {:>8} {:>10}",
                l.name,
                "held",
                h.session,
                h.token,
                l.waiters,
                format!("{}ms", h.ttl_left.as_millis())
            ),
            None => {
                let state = if l.lock_delay_left.is_some() { "delayed" } else { "free" };
                println!("{:<32} {:<8} {:<18} {:>10} {:>8} {:>10}", l.name, state, "-", l.last_token, l.waiters, "-");
            }
        }
    }
    ExitCode::SUCCESS
}
