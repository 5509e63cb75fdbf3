//! Counters a proxy keeps, and the snapshot users read.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// What a [`FaultProxy`](crate::FaultProxy) has done so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProxyStats {
    /// Connections accepted from clients, including those closed at once during a cut.
    pub accepted: u64,
    /// Connections open right now.
    pub open: u64,
    /// Connections closed by a cut (open ones reset by `cut`, and new ones refused during it).
    pub cut: u64,
    /// Bytes delivered from clients to the upstream.
    pub bytes_to_upstream: u64,
    /// Bytes delivered from the upstream to clients.
    pub bytes_to_client: u64,
}

/// Shared by the accept loop and every connection task. Relaxed atomics: the counters are
/// independent and only read as a snapshot for reports.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) accepted: AtomicU64,
    pub(crate) open: AtomicU64,
    pub(crate) cut: AtomicU64,
    pub(crate) bytes_to_upstream: AtomicU64,
    pub(crate) bytes_to_client: AtomicU64,
}

impl Counters {
    pub(crate) fn snapshot(&self) -> ProxyStats {
        ProxyStats {
            accepted: self.accepted.load(Relaxed),
            open: self.open.load(Relaxed),
            cut: self.cut.load(Relaxed),
            bytes_to_upstream: self.bytes_to_upstream.load(Relaxed),
            bytes_to_client: self.bytes_to_client.load(Relaxed),
        }
    }

    /// Counts a connection as open until the returned guard drops, so a task that is aborted
    /// (proxy dropped) still decrements.
    pub(crate) fn opened(&self) -> OpenGuard<'_> {
        self.open.fetch_add(1, Relaxed);
        OpenGuard(&self.open)
    }
}

/// Decrements the open-connection gauge on drop.
pub(crate) struct OpenGuard<'a>(&'a AtomicU64);

impl Drop for OpenGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Relaxed);
    }
}
