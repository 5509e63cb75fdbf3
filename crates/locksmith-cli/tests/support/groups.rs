//! Process groups seen from outside, for the tests of `locksmith run`'s process tree: members
//! read from `/proc`, cleanup of a group by its id, files the command writes.

#![allow(dead_code)]

use std::path::Path;
use std::time::{Duration, Instant};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

/// Kills process groups (SIGCONT, SIGKILL) on drop, so a failing test leaves nothing running.
pub struct GroupGuard(pub Vec<i32>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        for &g in &self.0 {
            let _ = killpg(Pid::from_raw(g), Signal::SIGCONT);
            let _ = killpg(Pid::from_raw(g), Signal::SIGKILL);
        }
    }
}

/// `(state, pgrp)` of a process from `/proc`, `None` once it is gone.
pub fn proc_stat(pid: i32) -> Option<(char, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    let mut f = after.split_ascii_whitespace();
    let state = f.next()?.chars().next()?;
    let _ppid = f.next()?;
    Some((state, f.next()?.parse().ok()?))
}

/// The process group of a running process.
///
/// # Panics
/// When the process is gone.
pub fn group_of(pid: i32) -> i32 {
    proc_stat(pid).unwrap_or_else(|| panic!("process {pid} is gone")).1
}

/// Whether `pid` runs (a zombie waiting to be reaped does not).
pub fn running(pid: i32) -> bool {
    proc_stat(pid).is_some_and(|(s, _)| s != 'Z' && s != 'X')
}

/// Every running process of group `pgrp`.
pub fn group_members(pgrp: i32) -> Vec<i32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<i32>().ok()) else { continue };
        if proc_stat(pid).is_some_and(|(s, g)| g == pgrp && s != 'Z' && s != 'X') {
            out.push(pid);
        }
    }
    out
}

/// Waits until group `pgrp` has at least `n` running processes.
///
/// # Panics
/// When it does not within `timeout`.
pub fn wait_for_members(pgrp: i32, n: usize, timeout: Duration) -> Vec<i32> {
    let until = Instant::now() + timeout;
    loop {
        let members = group_members(pgrp);
        if members.len() >= n {
            return members;
        }
        assert!(Instant::now() < until, "group {pgrp} has {} processes, expected {n}: {members:?}", members.len());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The contents of a file the command writes, once it ends with a newline.
///
/// # Panics
/// When it does not within `timeout`.
pub fn wait_for_file(path: &Path, timeout: Duration) -> String {
    let until = Instant::now() + timeout;
    loop {
        if let Ok(s) = std::fs::read_to_string(path) {
            if s.ends_with('\n') {
                return s;
            }
        }
        assert!(Instant::now() < until, "{} never appeared", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A shell snippet printing how many processes of group `$OLD_GROUP` run (zombies do not
/// count): the next holder's own check that nothing of the previous one is left.
pub const COUNT_OLD_GROUP: &str = r#"n=0
for f in /proc/[0-9]*/stat; do
  read -r l < "$f" 2>/dev/null || continue
  l=${l##*") "}
  set -- $l
  if [ "$3" = "$OLD_GROUP" ] && [ "$1" != Z ] && [ "$1" != X ]; then n=$((n+1)); fi
done
echo "$n""#;
