//! `locksmith status --watch` in a real terminal (tmux): the table is redrawn in place as the
//! native server's locks change hands.

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

/// The screen's row of lock `name`.
fn row<'a>(screen: &'a str, name: &str) -> Option<&'a str> {
    screen.lines().find(|l| l.starts_with(&format!("{name} ")))
}

#[test]
fn status_watch_redraws_the_holder_the_waiters_and_the_hand_off_in_place() {
    let server = NativeServer::start(BIN.as_ref());
    let url = server.url();
    let term = Tmux::start(&format!("{BIN} status --watch --prefix watch- --backend '{url}'"), 160, 20);
    term.wait_for("the watch's title", Duration::from_secs(10), |s| s.contains("locksmith status --watch"));

    let first = holder(&url, "watch-job", 2);
    let owner_first = format!("/{}/", first.pid());
    term.wait_for("the first holder", Duration::from_secs(5), |s| {
        row(s, "watch-job").is_some_and(|r| r.contains(" held ") && r.contains(&owner_first))
    });
    // The native server can be observed: once its lock's stream answered, the title says the
    // changes are live.
    term.wait_for("the live source", Duration::from_secs(3), |s| s.contains("change stream (observe)"));

    let second = holder(&url, "watch-job", 30);
    let owner_second = format!("/{}/", second.pid());
    term.wait_for("one waiter behind the first holder", Duration::from_secs(5), |s| {
        row(s, "watch-job").is_some_and(|r| r.contains(&owner_first) && r.split_whitespace().nth(5) == Some("1"))
    });
    // The first holder's command ends after 2 s: the lock goes to the waiter, with the next
    // token, and nobody waits any more.
    let screen = term.wait_for("the hand-off to the waiter", Duration::from_secs(8), |s| {
        row(s, "watch-job").is_some_and(|r| r.contains(&owner_second) && r.split_whitespace().nth(4) == Some("2"))
    });
    let r = row(&screen, "watch-job").unwrap_or_default();
    assert_eq!(r.split_whitespace().nth(5), Some("0"), "{screen}");
    // Redrawn in place: one title, one row per lock, whatever happened before.
    assert_eq!(screen.matches("locksmith status --watch").count(), 1, "{screen}");
    assert_eq!(screen.lines().filter(|l| l.starts_with("watch-job ")).count(), 1, "{screen}");
    drop(second);
}
