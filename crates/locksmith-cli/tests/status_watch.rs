//! `locksmith status --watch` in a real terminal (tmux): the table is redrawn in place as a lock
//! changes hands, on the native server (observed) and on Redis (polled).

#[path = "support/tmux.rs"]
mod tmux;

use std::process::{Command, Stdio};
use std::time::Duration;

use locksmith_testkit::{spawn, NativeServer};
use tmux::Tmux;

const BIN: &str = env!("CARGO_BIN_EXE_locksmith");

/// `locksmith run NAME -- sleep SECS` against `url`, quiet.
fn holder(url: &str, name: &str, secs: u32) -> locksmith_testkit::ChildProcess {
    let mut cmd = Command::new(BIN);
    cmd.args(["run", name, "--backend", url, "--", "sleep", &secs.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    spawn(&format!("locksmith run {name}"), &mut cmd)
}

/// The screen's row of `watch-job`.
fn row(screen: &str) -> Option<&str> {
    screen.lines().find(|l| l.starts_with("watch-job "))
}

/// A row's holder and token (`owner/token`), when held. Counted from the right for the
/// numbers: a backend without session ids (Redis) leaves that column blank.
fn holder_of(r: &str) -> Option<String> {
    let cells: Vec<&str> = r.split_whitespace().collect();
    (cells.get(1) == Some(&"held")).then(|| format!("{}/{}", cells[2], cells[cells.len() - 3]))
}

/// A row's number of waiters.
fn waiters_of(r: &str) -> Option<&str> {
    r.split_whitespace().rev().nth(1)
}

/// The watch shows the first holder, then a waiter behind it, then the hand-off to that waiter
/// with nobody waiting, always as one table redrawn in place; its title says how it learns of
/// changes (`source`).
fn the_watch_follows_a_hand_off(url: &str, source: &str) {
    let term = Tmux::start(&format!("{BIN} status --watch --prefix watch- --backend '{url}'"), 160, 20);
    term.wait_for("the watch's title", Duration::from_secs(10), |s| s.contains("locksmith status --watch"));

    let _first = holder(url, "watch-job", 2);
    let screen = term.wait_for("the first holder", Duration::from_secs(5), |s| row(s).and_then(holder_of).is_some());
    let first = row(&screen).and_then(holder_of).unwrap_or_default();
    term.wait_for("how changes are learnt", Duration::from_secs(3), |s| s.contains(source));

    let _second = holder(url, "watch-job", 30);
    term.wait_for("one waiter behind the first holder", Duration::from_secs(5), |s| {
        row(s).is_some_and(|r| holder_of(r).as_deref() == Some(first.as_str()) && waiters_of(r) == Some("1"))
    });
    // The first holder's command ends after 2 s: the lock goes to the waiter, and nobody waits.
    let screen = term.wait_for("the hand-off to the waiter", Duration::from_secs(8), |s| {
        row(s).is_some_and(|r| holder_of(r).is_some_and(|h| h != first) && waiters_of(r) == Some("0"))
    });
    // Redrawn in place: one title, one row per lock, whatever happened before.
    assert_eq!(screen.matches("locksmith status --watch").count(), 1, "{screen}");
    assert_eq!(screen.lines().filter(|l| l.starts_with("watch-job ")).count(), 1, "{screen}");
}

#[test]
fn on_the_native_server_status_watch_redraws_the_holder_the_waiters_and_the_hand_off_live() {
    let server = NativeServer::start(BIN.as_ref());
    the_watch_follows_a_hand_off(&server.url(), "change stream (observe)");
}

#[cfg(feature = "redis")]
#[test]
fn on_redis_status_watch_redraws_the_holder_the_waiters_and_the_hand_off_by_polling() {
    let server = locksmith_testkit::RedisServer::start();
    the_watch_follows_a_hand_off(&server.url(), "polling status every 500ms");
}
