//! `locksmith admin release NAME [--session ID]`: an administrator's release of a stuck lock on
//! the native server (`NativeBackend::admin_release`).

use std::process::ExitCode;

use clap::{Args, Subcommand};
use locksmith_native::NativeBackend;
use serde_json::json;

use crate::exit;

/// Arguments of `locksmith admin`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  locksmith status jobs/nightly                    # the holder's session, e.g. 100000002
  locksmith admin release jobs/nightly --session 100000002
  locksmith admin release jobs/nightly --backend 'locksmith://locks:7531?token_file=admin.token'

The holder's session is revoked as if its lease had run out (without lock-delay): every lock
it holds is released and handed to the next waiter with a greater token, and the holder learns
at its next renewal that it lost them (`locksmith run` stops its command and exits 76). Give
--session so that a retry cannot release the next holder too. With an auth policy (`serve
--auth`) only an admin principal may (exit 77 otherwise); the server logs each release.")]
pub struct AdminArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: AdminCommand,
}

/// The `admin` subcommands.
#[derive(Debug, Subcommand)]
pub enum AdminCommand {
    /// Release a stuck lock: revoke its holder's session (native server only).
    Release(ReleaseArgs),
}

/// Arguments of `locksmith admin release`.
#[derive(Debug, Args)]
pub struct ReleaseArgs {
    /// The lock.
    pub name: String,
    /// Only the holder with this session (as `locksmith status` shows it, hexadecimal).
    #[arg(long, value_name = "ID", value_parser = session_arg)]
    pub session: Option<u64>,
    /// The native server: `locksmith://HOST:PORT` (a cluster: its nodes), with a token of an
    /// admin principal when it runs with --auth.
    #[arg(long, env = "LOCKSMITH_BACKEND", default_value = crate::DEFAULT_BACKEND)]
    pub backend: String,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// A session id as `locksmith status` prints it (hexadecimal).
fn session_arg(s: &str) -> Result<u64, String> {
    u64::from_str_radix(s.trim_start_matches("0x"), 16)
        .map_err(|_| format!("{s:?} is not a session id (hexadecimal, as `locksmith status` shows it)"))
}

/// Runs an `admin` subcommand.
///
/// # Cancel safety
/// Not cancel safe: a dropped release may still happen on the server.
pub async fn admin(args: AdminArgs) -> ExitCode {
    match args.command {
        AdminCommand::Release(r) => release(r).await,
    }
}

async fn release(r: ReleaseArgs) -> ExitCode {
    let context = "admin release";
    let name = match locksmith::LockName::new(&r.name) {
        Ok(n) => n,
        Err(e) => return exit::report(context, &e),
    };
    let backend = match NativeBackend::from_url(&r.backend) {
        Ok(b) => b,
        Err(locksmith::Error::InvalidUrl { url, .. }) if !url.starts_with("locksmith") => {
            let reason = "admin release is for the native server: locksmith://HOST:PORT (or locksmiths://)".into();
            return exit::report(context, &locksmith::Error::InvalidUrl { url, reason });
        }
        Err(e) => return exit::report(context, &e),
    };
    let revoked = match backend.admin_release(&name, r.session).await {
        Ok(revoked) => revoked,
        Err(e) => return exit::report(context, &e),
    };
    if r.json {
        let holds: Vec<_> = revoked
            .iter()
            .map(|h| json!({ "session": format!("{:x}", h.session), "owner": h.owner, "token": h.token }))
            .collect();
        println!("{}", json!({ "lock": r.name, "revoked": holds }));
        return ExitCode::SUCCESS;
    }
    if revoked.is_empty() {
        println!("{}: no holder matched; nothing changed", r.name);
    }
    for h in &revoked {
        println!(
            "{}: released token {} of session {:x} (owner {}); the session is revoked, the next waiter gets a greater \
             token",
            r.name, h.token, h.session, h.owner
        );
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::session_arg;

    /// Session ids are taken as `locksmith status` prints them.
    #[test]
    fn session_ids_are_hexadecimal() {
        assert_eq!(session_arg("100000002"), Ok(0x1_0000_0002));
        assert_eq!(session_arg("0xff"), Ok(255));
        assert!(session_arg("zz").is_err());
    }
}
