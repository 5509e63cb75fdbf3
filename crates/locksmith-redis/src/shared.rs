//! What a backend and all its sessions share: the command connection, the pub/sub router and
//! the key layout, plus the script calls built on them.

use std::time::Duration;

use locksmith_core::{Error, Result};

use crate::conn::{invocation, Conn};
use crate::holds::Entry;
use crate::layout::{Layout, Mode};
use crate::router::Router;
use crate::scripts::{self, Attempt};

/// How long a plain waiter's queue entry stays live without a refresh: a crashed or paused
/// waiter holds its place at most this long.
pub(crate) const QUEUE_LIFETIME: Duration = Duration::from_millis(2400);

/// Shared by a backend and its sessions.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) conn: Conn,
    pub(crate) router: Router,
    pub(crate) layout: Layout,
}

impl Shared {
    /// One run of the acquire script for `entry`. Plain mode: `waiter` is the caller's queue id
    /// once it waits (the run then joins the queue or refreshes its entry); reentrant mode
    /// ignores it.
    ///
    /// # Cancel safety
    /// Not by itself: the script may have run. Callers track that (see `Pending`).
    pub(crate) async fn try_acquire(&self, entry: &Entry, ttl_ms: u64, waiter: Option<&str>) -> Result<Attempt> {
        let fence = self.layout.fence_key(&entry.key);
        let ttl = ttl_ms.to_string();
        let script = scripts::acquire(self.layout.mode);
        let inv = match self.layout.mode {
            Mode::Plain => {
                let q = self.layout.queue(&entry.key);
                let lifetime = QUEUE_LIFETIME.as_millis().to_string();
                let keys = [&entry.key, &fence, &q.waiters, &q.deadlines];
                invocation(script, &keys.map(String::as_str), &[&entry.ident, &ttl, waiter.unwrap_or(""), &lifetime])
            }
            Mode::Reentrant => invocation(script, &[&entry.key, &fence], &[&entry.ident, &ttl]),
        };
        let reply = self.conn.run(&inv).await?;
        Attempt::parse(&reply).ok_or_else(|| Error::Protocol(format!("redis: unexpected acquire reply {reply:?}")))
    }

    /// Owner-checked release of `entry`; when it freed the lock, wakes the next waiter (plain:
    /// the live head of the queue; reentrant: a message on Redisson's channel). Returns whether
    /// the hold was still ours.
    ///
    /// # Cancel safety
    /// Cancel safe; the release may or may not have happened.
    pub(crate) async fn release(&self, entry: &Entry, ttl_ms: u64) -> Result<bool> {
        let ttl = ttl_ms.to_string();
        let script = scripts::release(self.layout.mode);
        let inv = match self.layout.mode {
            Mode::Plain => {
                let q = self.layout.queue(&entry.key);
                invocation(script, &[&entry.key, &q.waiters, &q.deadlines], &[&entry.ident, &ttl, &q.wake_prefix])
            }
            Mode::Reentrant => {
                let channel = self.layout.channel(&entry.key);
                invocation(script, &[&entry.key], &[&entry.ident, &ttl, &channel])
            }
        };
        let reply = self.conn.run(&inv).await?;
        scripts::as_int(&reply)
            .map(|n| n >= 0)
            .ok_or_else(|| Error::Protocol(format!("redis: unexpected release reply {reply:?}")))
    }

    /// Plain mode: `waiter` leaves the queue of `key`, handing a wake-up it may have received on
    /// to the next live waiter.
    ///
    /// # Cancel safety
    /// Cancel safe; the entry may or may not have been removed (it goes stale by itself).
    pub(crate) async fn leave(&self, key: &str, waiter: &str) -> Result<()> {
        let q = self.layout.queue(key);
        let inv = invocation(scripts::leave(), &[key, &q.waiters, &q.deadlines], &[waiter, &q.wake_prefix]);
        self.conn.run(&inv).await.map(|_| ())
    }

    /// Plain mode: the number of live waiters queued on `key`; reentrant mode: 0 (unknown).
    ///
    /// # Cancel safety
    /// Cancel safe: read only.
    pub(crate) async fn waiters(&self, key: &str) -> Result<u64> {
        if self.layout.mode == Mode::Reentrant {
            return Ok(0);
        }
        let q = self.layout.queue(key);
        let reply = self.conn.run(&invocation(scripts::waiters(), &[&q.waiters, &q.deadlines], &[])).await?;
        scripts::as_int(&reply)
            .and_then(|n| u64::try_from(n).ok())
            .ok_or_else(|| Error::Protocol(format!("redis: unexpected waiters reply {reply:?}")))
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
