//! What a backend and all its sessions share: the command connection, the pub/sub router and
//! the key layout, plus the script calls built on them.

use locksmith_core::{Error, Result};

use crate::conn::{invocation, Conn};
use crate::holds::Entry;
use crate::layout::Layout;
use crate::router::Router;
use crate::scripts::{self, Attempt};

/// Shared by a backend and its sessions.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) conn: Conn,
    pub(crate) router: Router,
    pub(crate) layout: Layout,
}

impl Shared {
    /// One run of the acquire script for `entry`.
    ///
    /// # Cancel safety
    /// Not by itself: the script may have run. Callers track that (see `Pending`).
    pub(crate) async fn try_acquire(&self, entry: &Entry, ttl_ms: u64) -> Result<Attempt> {
        let fence = self.layout.fence_key(&entry.key);
        let ttl = ttl_ms.to_string();
        let inv = invocation(scripts::acquire(self.layout.mode), &[&entry.key, &fence], &[&entry.ident, &ttl]);
        let reply = self.conn.run(&inv).await?;
        Attempt::parse(&reply).ok_or_else(|| Error::Protocol(format!("redis: unexpected acquire reply {reply:?}")))
    }

    /// Owner-checked release of `entry`; publishes a wake-up when it freed the lock. Returns
    /// whether the hold was still ours.
    ///
    /// # Cancel safety
    /// Cancel safe; the release may or may not have happened.
    pub(crate) async fn release(&self, entry: &Entry, ttl_ms: u64) -> Result<bool> {
        let channel = self.layout.channel(&entry.key);
        let ttl = ttl_ms.to_string();
        let inv = invocation(scripts::release(self.layout.mode), &[&entry.key], &[&entry.ident, &ttl, &channel]);
        let reply = self.conn.run(&inv).await?;
        scripts::as_int(&reply)
            .map(|n| n >= 0)
            .ok_or_else(|| Error::Protocol(format!("redis: unexpected release reply {reply:?}")))
    }

    /// Owner-checked renewal of `entries` in one script; `true` per entry still ours.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub(crate) async fn renew(&self, entries: &[&Entry], ttl_ms: u64) -> Result<Vec<bool>> {
        let mut inv = scripts::renew(self.layout.mode).prepare_invoke();
        inv.arg(ttl_ms);
        for e in entries {
            inv.key(&e.key);
            inv.arg(&e.ident);
        }
        let reply = self.conn.run(&inv).await?;
        let bad = || Error::Protocol(format!("redis: unexpected renewal reply {reply:?}"));
        let redis::Value::Array(items) = &reply else { return Err(bad()) };
        if items.len() != entries.len() {
            return Err(bad());
        }
        items.iter().map(|v| scripts::as_int(v).map(|n| n == 1).ok_or_else(bad)).collect()
    }

    /// A round trip, to tell whether the server answers.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub(crate) async fn ping(&self) -> Result<()> {
        let mut p = redis::pipe();
        p.cmd("PING");
        self.conn.pipe(&p).await.map(|_| ())
    }
}
