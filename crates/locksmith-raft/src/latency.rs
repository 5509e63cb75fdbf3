//! Per-stage timings of the replicated write path, as `trace` events of the target
//! `locksmith::timing` (`LOCKSMITH_LOG=locksmith::timing=trace`): how issue 27's per-entry
//! breakdown was measured. Off by default, and then free: no clock is read unless the target
//! is enabled.

use std::time::Instant;

/// The target of every timing event, in this crate and in the server's cluster wing.
pub const TARGET: &str = "locksmith::timing";

/// When the timed stage started, if timings are on.
///
/// ```
/// let started = locksmith_raft::latency::start();
/// // … the stage …
/// locksmith_raft::latency::done(started, "example", 1);
/// ```
#[must_use]
pub fn start() -> Option<Instant> {
    tracing::enabled!(target: TARGET, tracing::Level::TRACE).then(Instant::now)
}

/// Records that `stage` took since `started` (nothing when timings are off); `entries` is how
/// many log entries it handled (0 when that does not apply).
///
/// ```
/// locksmith_raft::latency::done(locksmith_raft::latency::start(), "example", 0);
/// ```
pub fn done(started: Option<Instant>, stage: &'static str, entries: usize) {
    if let Some(t) = started {
        let us = u64::try_from(t.elapsed().as_micros()).unwrap_or(u64::MAX);
        tracing::trace!(target: TARGET, stage, us, entries);
    }
}
