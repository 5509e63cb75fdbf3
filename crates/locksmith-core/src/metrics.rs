//! Metrics hooks (DESIGN.md §3), on the [`metrics`](https://docs.rs/metrics) facade: install
//! any recorder (a Prometheus exporter, a test recorder…) and these counters appear; without
//! one they cost a relaxed load.
//!
//! The names are constants so dashboards and the bench read the same strings. Every counter
//! carries a `backend` label with the URL scheme ([`Backend::scheme`](crate::Backend::scheme)):
//! a small, fixed set of values, never a host or a user name.
//!
//! ```
//! // A driver's wait loop, after a notification or a poll interval, before it retries:
//! locksmith_core::metrics::wakeup("redis");
//! ```

/// Acquisitions granted by the engine (`lock`, `try_lock`, reentrant re-entries excluded).
pub const GRANTS: &str = "locksmith_grants_total";
/// Holds released by their owner (the final release of a reentrant hold).
pub const RELEASES: &str = "locksmith_releases_total";
/// Holds lost: the backend reported them gone or taken, or the session expired with them.
pub const LOSSES: &str = "locksmith_losses_total";
/// Sessions that died with the engine: expired on the backend, or their local deadline passed
/// without a renewal (every hold on them is lost).
pub const SESSIONS_LOST: &str = "locksmith_sessions_lost_total";
/// A waiting acquisition went back to the backend to check the lock again: after a push, a
/// watch event, a pub/sub message, a NOTIFY or a poll interval. Wake-ups per release measure
/// herd-freedom: 1 is a perfect hand-off, W is a herd of W waiters.
pub const WAKEUPS: &str = "locksmith_waiter_wakeups_total";

/// Counts one waiter wake-up (see [`WAKEUPS`]) for the driver named by its URL scheme.
pub fn wakeup(scheme: &'static str) {
    metrics::counter!(WAKEUPS, "backend" => scheme).increment(1);
}

pub(crate) fn grant(scheme: &'static str) {
    metrics::counter!(GRANTS, "backend" => scheme).increment(1);
}

pub(crate) fn release(scheme: &'static str) {
    metrics::counter!(RELEASES, "backend" => scheme).increment(1);
}

pub(crate) fn lost(scheme: &'static str, holds: u64) {
    metrics::counter!(LOSSES, "backend" => scheme).increment(holds);
}

pub(crate) fn session_lost() {
    metrics::counter!(SESSIONS_LOST).increment(1);
}
