//! A process whose wall clock is skewed, for the clock-skew tests: libfaketime preloaded
//! directly, not through Debian's `faketime` wrapper. The wrapper names a POSIX semaphore after
//! its own PID and leaves it behind when it is killed (the tests end what they start with
//! SIGKILL); with PIDs reused within a run (`pid_max` is 32,768 here), a later wrapper that drew
//! the same PID failed with `sem_open: File exists`. The library alone needs no semaphore for a
//! fixed offset.

use std::path::PathBuf;
use std::process::Command;

/// Debian's package for libfaketime.
pub const FAKETIME_SETUP: &str = "bash scripts/setup.sh (apt-get install faketime)";

/// Makes `cmd` (and every process it starts) see a wall clock skewed by `skew`, in libfaketime's
/// relative format (`"-1h"`, `"+1h"`); the monotonic clock is left alone, so timers still work.
///
/// # Panics
/// When libfaketime is not installed (the message names the setup command).
pub fn skew_clock<'a>(cmd: &'a mut Command, skew: &str) -> &'a mut Command {
    cmd.env("LD_PRELOAD", library()).env("FAKETIME", skew).env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
}

/// `/usr/lib/<multiarch>/faketime/libfaketime.so.1`.
fn library() -> PathBuf {
    let found = std::fs::read_dir("/usr/lib")
        .ok()
        .and_then(|dirs| dirs.flatten().map(|d| d.path().join("faketime/libfaketime.so.1")).find(|p| p.exists()));
    found.unwrap_or_else(|| panic!("libfaketime is not installed; run: {FAKETIME_SETUP}"))
}
