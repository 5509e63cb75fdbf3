//! What `run`, `elect` and `lock` share: the flags of an acquisition (those users of `flock`,
//! `etcdctl lock` and `consul lock` expect) and its prologue — check the name, listen for
//! signals, connect, open the session within `--connect-timeout`, acquire (waiting, for a
//! bounded time, or not at all), say why not — and its epilogue, the release.

use std::process::ExitCode;
use std::time::{Duration, SystemTime};

use clap::Args;
use locksmith::{Client, Guard, LockOptions};

use crate::exit;
use crate::run::signals::Signals;

/// How to acquire: backend, lease, how long to wait, what to say.
#[derive(Debug, Clone, Args)]
pub struct AcquireArgs {
    /// Backend URL.
    #[arg(long, env = "LOCKSMITH_BACKEND", default_value = crate::DEFAULT_BACKEND)]
    pub backend: String,
    /// Session lease; renewed about every TTL/3 while held (100ms to 1h).
    #[arg(long, default_value = "10s", value_parser = crate::ttl_arg)]
    pub ttl: Duration,
    /// Give up waiting after this long (exit 75, or -E's code): seconds as flock's -w takes them
    /// (`5`, `0.5`) or a duration (`30s`); 0 tries once, like --no-wait. Connecting is bounded
    /// by --connect-timeout, not by this.
    #[arg(long, short = 'w', value_name = "SECS|DURATION", value_parser = wait_arg, conflicts_with = "no_wait")]
    pub timeout: Option<Duration>,
    /// Do not wait: if the lock is held, exit 75 (or -E's code) at once.
    #[arg(long, short = 'n')]
    pub no_wait: bool,
    /// The exit code when the lock is not acquired (--timeout passed, or held with --no-wait).
    #[arg(long, short = 'E', value_name = "N", default_value_t = exit::NOT_ACQUIRED)]
    pub conflict_exit_code: u8,
    /// Bound on connecting to the backend and opening the session (exit 69 when it passes).
    #[arg(long, default_value = "10s", value_parser = crate::duration_arg)]
    pub connect_timeout: Duration,
    /// Say nothing when the lock is not acquired (exit 75 all the same), e.g. for cron.
    #[arg(long, short, conflicts_with = "verbose")]
    pub quiet: bool,
    /// Say who holds the lock while waiting, the token acquired and the release; show the
    /// library's warnings too (LOCKSMITH_LOG=debug for everything).
    #[arg(long, short)]
    pub verbose: bool,
    /// The owner id others see in `locksmith status` (default: host/pid/random).
    #[arg(long)]
    pub owner: Option<String>,
    /// If this holder's session expires (a crash, not a clean release), keep the lock
    /// unavailable this much longer, for resources that do not check fencing tokens. The
    /// native server, etcd, Redis and SQL keep it; ZooKeeper, Redlock and memcached ignore it.
    #[arg(long, value_parser = crate::duration_arg)]
    pub lock_delay: Option<Duration>,
}

/// The kind of hold (`run` and `lock`): the lock, a reader's share, or a permit; fenced or not.
#[derive(Debug, Clone, Default, Args)]
pub struct HoldArgs {
    /// Lock even on a backend that cannot give a safe fencing token (Redlock, memcached); there is then no
    /// token (no LOCKSMITH_TOKEN for the command).
    #[arg(long)]
    pub unfenced: bool,
    /// Hold one of N permits of a semaphore named NAME instead of the lock: at most N holders
    /// at a time (everyone must give the same N). A crashed holder's permit comes back when its
    /// lease runs out.
    #[arg(long, value_name = "N", conflicts_with = "shared", value_parser = clap::value_parser!(u32).range(1..=i64::from(locksmith::MAX_PERMITS)))]
    pub permits: Option<u32>,
    /// Hold NAME as a reader: other `--shared` holders may hold it at the same time, never one
    /// holding it without `--shared` (the writer). Waiters are served in arrival order, so a
    /// waiting writer is not starved by readers.
    #[arg(long)]
    pub shared: bool,
}

impl HoldArgs {
    /// The lock options these flags ask for.
    pub(crate) fn options(&self) -> LockOptions {
        let mut opts = LockOptions::new();
        if self.unfenced {
            opts = opts.allow_unfenced();
        }
        if let Some(n) = self.permits {
            opts = opts.permits(n);
        }
        if self.shared {
            opts = opts.shared();
        }
        opts
    }
}

/// Parses flock's `-w` seconds (`5`, `0.5`) or a duration (`30s`, `1m30s`).
fn wait_arg(s: &str) -> Result<Duration, String> {
    match s.trim().parse::<f64>() {
        Ok(secs) => Duration::try_from_secs_f64(secs).map_err(|_| format!("{s:?} is not a number of seconds")),
        Err(_) => crate::duration_arg(s),
    }
}

/// An acquired hold, with the client that keeps it and the signals listened for since before.
#[derive(Debug)]
pub(crate) struct Held {
    pub(crate) client: Client,
    pub(crate) guard: Guard,
    pub(crate) signals: Signals,
}

/// Acquires `name` as `args` say, with `opts` for the kind of hold; `who` names the
/// subcommand in messages; `campaign`: the hold is a leader election's, refused (exit 2) on a
/// backend without elections. `Err` is the exit code to return; what went wrong was said.
pub(crate) async fn acquire(
    who: &str,
    name: &str,
    args: &AcquireArgs,
    mut opts: LockOptions,
    campaign: bool,
) -> Result<Held, ExitCode> {
    let nothing = if who == "lock" { "nothing held" } else { "nothing ran" };
    // Bad input is refused before anything is connected to.
    if let Err(e) = locksmith::LockName::new(name) {
        return Err(exit::report(who, &e));
    }
    let mut signals = Signals::install().map_err(|e| {
        eprintln!("locksmith {who}: cannot install signal handlers: {e}");
        ExitCode::from(exit::SOFTWARE)
    })?;
    let client = locksmith::connect_with_ttl(&args.backend, args.ttl).await.map_err(|e| exit::report(who, &e))?;
    if campaign && !client.backend().supports_election() {
        let e = locksmith::Error::Unsupported(format!(
            "{} offers no leader election (it cannot keep a proposal and tell observers); use `locksmith run` for a plain lock",
            client.backend().describe()
        ));
        return Err(exit::report(who, &e));
    }
    // Connecting and opening the session have their own bound, so that --timeout is only the
    // wait for the lock (and --timeout 0s can still take a free lock).
    let opened = tokio::select! {
        r = tokio::time::timeout(args.connect_timeout, client.session_id()) => r,
        sig = signals.next() => {
            client.close().await;
            eprintln!("locksmith {who}: {sig} while connecting; {nothing}");
            return Err(ExitCode::from(128 + sig as u8));
        }
    };
    match opened {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => return Err(exit::report(who, &e)),
        Err(_) => {
            let e = locksmith::Error::Unavailable {
                backend: client.backend().describe(),
                message: format!("no session within --connect-timeout {:?}", args.connect_timeout),
            };
            return Err(exit::report(who, &e));
        }
    }
    if let Some(owner) = &args.owner {
        opts = opts.owner(owner.clone());
    }
    if let Some(delay) = args.lock_delay {
        opts = opts.lock_delay(delay);
    }
    let once = args.no_wait || args.timeout.is_some_and(|t| t.is_zero());
    let attempt = async {
        if once || args.verbose {
            let got = client.try_lock_with(name, opts.clone()).await?;
            if got.is_some() || once {
                return Ok(got);
            }
            say_who_holds(who, &client, name).await;
        }
        match args.timeout {
            Some(t) => client.lock_with(name, opts.timeout(t)).await.map(Some),
            None => client.lock_with(name, opts).await.map(Some),
        }
    };
    let got = tokio::select! {
        r = attempt => r,
        sig = signals.next() => {
            // Dropping the acquisition withdrew our place in the queue; closing the session
            // makes sure nothing of ours is left even if the withdrawal raced with a grant.
            client.close().await;
            eprintln!("locksmith {who}: {sig} while waiting for {name:?}; {nothing}");
            return Err(ExitCode::from(128 + sig as u8));
        }
    };
    let not_acquired = |why: String| {
        if !args.quiet {
            eprintln!("locksmith {who}: {why}; {nothing}");
        }
        ExitCode::from(args.conflict_exit_code)
    };
    let guard = match got {
        Ok(Some(g)) => g,
        Ok(None) => {
            client.close().await;
            return Err(not_acquired(format!("{name:?} is held by someone else")));
        }
        Err(locksmith::Error::Timeout) => {
            client.close().await;
            return Err(not_acquired(format!("timed out waiting for {name:?}")));
        }
        Err(e) => {
            client.close().await;
            return Err(exit::report(who, &e));
        }
    };
    if args.verbose {
        match guard.fencing_token() {
            Some(token) => eprintln!("locksmith {who}: acquired {name:?}, token {token}"),
            None => eprintln!("locksmith {who}: acquired {name:?} (unfenced: no token)"),
        }
    }
    Ok(Held { client, guard, signals })
}

/// `-v` while waiting: who holds the lock now, as far as the backend tells.
async fn say_who_holds(who: &str, client: &Client, name: &str) {
    let status = client.status(Some(name)).await.ok().and_then(|s| s.into_iter().next());
    let holders: Vec<String> = match status {
        Some(s) if !s.holders.is_empty() => s.holders.iter().map(describe_holder).collect(),
        Some(s) => s.holder.iter().map(describe_holder).collect(),
        None => Vec::new(),
    };
    if holders.is_empty() {
        eprintln!("locksmith {who}: waiting for {name:?}");
    } else {
        eprintln!("locksmith {who}: waiting for {name:?}, held by {}", holders.join(", "));
    }
}

fn describe_holder(h: &locksmith::HolderStatus) -> String {
    match h.ttl_left {
        Some(left) => format!("{} (token {}, lease {} left)", h.owner, h.token, locksmith::format_duration(left)),
        None => format!("{} (token {})", h.owner, h.token),
    }
}

/// Releases the hold and closes the client; `-v` says so. A failed release is said, not fatal:
/// the lease frees the lock one TTL later.
pub(crate) async fn release(who: &str, name: &str, verbose: bool, client: Client, guard: Guard) {
    match guard.unlock().await {
        Ok(_) if verbose => eprintln!("locksmith {who}: released {name:?}"),
        Ok(_) => {}
        Err(e) => eprintln!("locksmith {who}: releasing {name:?} failed ({e}); the lease frees it within the TTL"),
    }
    client.close().await;
}

/// The words for a lost hold: when it stopped being safe, as a UTC date and how long ago.
pub(crate) fn loss(name: &str, guard: &Guard) -> String {
    let until = guard.valid_until();
    let when = match SystemTime::now().duration_since(until) {
        Ok(ago) => format!("{:.1} s ago", ago.as_secs_f64()),
        Err(ahead) => format!("in {:.1} s", ahead.duration().as_secs_f64()),
    };
    format!("lost lock {name:?} (held safely until {}, {when})", utc(until))
}

/// `2026-11-27 16:02:51.123 UTC`.
pub(crate) fn utc(t: SystemTime) -> String {
    let rfc3339 = humantime::format_rfc3339_millis(t).to_string();
    format!("{} UTC", rfc3339.trim_end_matches('Z').replacen('T', " ", 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// flock's `-w` takes seconds, fractions too; durations with units work as everywhere.
    #[test]
    fn wait_takes_seconds_like_flock_or_a_duration() {
        assert_eq!(wait_arg("5"), Ok(Duration::from_secs(5)));
        assert_eq!(wait_arg("0.5"), Ok(Duration::from_millis(500)));
        assert_eq!(wait_arg("0"), Ok(Duration::ZERO));
        assert_eq!(wait_arg("1m30s"), Ok(Duration::from_secs(90)));
        assert!(wait_arg("-1").is_err());
        assert!(wait_arg("soon").is_err());
    }

    /// Dates are UTC, to the millisecond, without the `T` and `Z` of RFC 3339.
    #[test]
    fn dates_read_as_utc() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_millis(1_795_795_371_123);
        assert_eq!(utc(t), "2026-11-27 16:02:51.123 UTC");
    }
}
