//! `locksmith status --watch`: the status table kept on screen, redrawn in place from a
//! [`Feed`](crate::feed::Feed), with time left counting down between reads.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use locksmith::{Client, LockStatus};

use crate::feed::{Feed, FeedConfig, Snapshot};
use crate::status::StatusArgs;

/// How often the countdown is redrawn when nothing changed.
const REDRAW: Duration = Duration::from_millis(250);

/// Follows the locks until Ctrl-C.
///
/// # Cancel safety
/// Cancel safe: read only.
pub(crate) async fn watch(client: Client, args: &StatusArgs) -> ExitCode {
    let backend = client.backend().describe();
    let prefix = args.name.clone().unwrap_or_else(|| args.prefix.clone());
    let feed = Feed::start(client, FeedConfig { prefix, interval: args.interval });
    let mut rx = feed.subscribe();
    let mut stdout = std::io::stdout();
    loop {
        let frame = {
            let snapshot = rx.borrow_and_update().clone();
            frame(&backend, args, &snapshot)
        };
        // Home and clear, then the frame: one write, so the terminal never shows half of one.
        let _ = write!(stdout, "\x1b[H\x1b[2J{frame}");
        let _ = stdout.flush();
        tokio::select! {
            changed = rx.changed() => if changed.is_err() { return ExitCode::SUCCESS },
            _ = tokio::time::sleep(REDRAW) => {}
            _ = tokio::signal::ctrl_c() => return ExitCode::SUCCESS,
        }
    }
}

/// One screen: a title line, how the states are read, and the table with time left as of now.
fn frame(backend: &str, args: &StatusArgs, s: &Snapshot) -> String {
    let age = s.taken.elapsed();
    let locks: Vec<LockStatus> = s
        .locks
        .iter()
        .filter(|l| args.name.as_ref().is_none_or(|n| &l.name == n))
        .map(|l| counted_down(l, age))
        .collect();
    let mut out = format!("locksmith status --watch  {backend}  ({})\n", s.source.describe(args.interval));
    if let Some(e) = &s.error {
        out.push_str(&format!("last read failed: {e} (showing the locks as last read)\n"));
    }
    out.push('\n');
    if locks.is_empty() {
        out.push_str(
            match &args.name {
                Some(n) => format!("{n}: free\n"),
                None => "no locks\n".to_string(),
            }
            .as_str(),
        );
    } else {
        out.push_str(&crate::status::render(&locks));
    }
    out
}

/// `l` with each holder's time left as it is `age` after it was read.
fn counted_down(l: &LockStatus, age: Duration) -> LockStatus {
    let mut l = l.clone();
    for h in l.holders.iter_mut().chain(l.holder.iter_mut()) {
        h.ttl_left = h.ttl_left.map(|t| t.saturating_sub(age));
    }
    l
}
