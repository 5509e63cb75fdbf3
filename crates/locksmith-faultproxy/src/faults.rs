//! The fault state every task of one proxy watches, and the waits built on it.

use std::io;
use std::time::Duration;

use tokio::sync::watch;

/// Whether bytes may move.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Bytes flow (after the configured latency).
    Pass,
    /// Partition, reset flavour: connections are reset, new ones refused after accept.
    Cut,
    /// Partition, blackhole flavour: connections stay open, nothing moves until heal.
    Blackhole,
}

/// One snapshot of the faults; published through a `watch` channel so every task sees the
/// latest value without locking.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Faults {
    pub(crate) mode: Mode,
    pub(crate) latency: Duration,
    /// Counts calls to `cut`, so a connection notices a cut even if `heal` follows before it
    /// is scheduled (a `watch` channel only keeps the latest value).
    pub(crate) cuts: u64,
}

impl Faults {
    pub(crate) const NONE: Faults = Faults { mode: Mode::Pass, latency: Duration::ZERO, cuts: 0 };
}

/// The error a forwarding task ends with when its proxy is dropped.
pub(crate) fn stopped() -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionAborted, "fault proxy stopped")
}

/// Waits while the proxy blackholes traffic and returns the faults in force after that.
///
/// A `Cut` also ends the wait: the connection's cut watcher closes it, not this wait.
pub(crate) async fn unblocked(ctrl: &mut watch::Receiver<Faults>) -> io::Result<Faults> {
    match ctrl.wait_for(|f| f.mode != Mode::Blackhole).await {
        Ok(f) => Ok(*f),
        Err(_) => Err(stopped()),
    }
}

/// Resolves once a cut happened after the connection saw `cuts` (→ `true`), or when the
/// proxy is dropped (→ `false`).
pub(crate) async fn cut_since(mut ctrl: watch::Receiver<Faults>, cuts: u64) -> bool {
    ctrl.wait_for(|f| f.cuts != cuts).await.is_ok()
}
