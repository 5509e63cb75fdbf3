//! What a backend and all its sessions share: the command connection, the pub/sub router and
//! the key layout, plus the script calls built on them.

use std::time::Duration;

use locksmith_core::{Error, Result};

use crate::conn::{invocation, Conn};
use crate::holds::Entry;
use crate::layout::{Kind, Layout, Mode};
use crate::router::Router;
use crate::scripts::{self, Attempt};
use crate::{rwlock, semaphore};

/// How long a waiter's queue entry stays live without a refresh: a crashed or paused
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
    /// One run of the acquire script for `entry`. `waiter` is the caller's queue id once it
    /// waits (the run then joins the queue or refreshes its entry); reentrant holds ignore it.
    ///
    /// # Cancel safety
    /// Not by itself: the script may have run. Callers track that (see `Pending`).
    pub(crate) async fn try_acquire(&self, entry: &Entry, ttl_ms: u64, waiter: Option<&str>) -> Result<Attempt> {
        let layout = &self.layout;
        let key = entry.key.as_str();
        let fence = layout.counter(entry.kind, key);
        let ttl = ttl_ms.to_string();
        let waiter = waiter.unwrap_or("");
        let lifetime = QUEUE_LIFETIME.as_millis().to_string();
        let q = layout.queue(key);
        let sem_counter = layout.counter(Kind::Permit(1), key);
        let sem_timeouts = layout.timeout_set(key);
        let inv = match entry.kind {
            Kind::Plain => {
                let keys = [key, &fence, &q.waiters, &q.deadlines, &sem_counter, &sem_timeouts];
                invocation(scripts::acquire(entry.kind), &keys, &[&entry.ident, &ttl, waiter, &lifetime])
            }
            Kind::Reentrant => {
                let keys = [key, &fence, &sem_counter, &sem_timeouts];
                invocation(scripts::acquire(entry.kind), &keys, &[&entry.ident, &ttl])
            }
            Kind::Read | Kind::Write => {
                let holders = layout.holders_key(key);
                let prefix = layout.rwlock_timeout_prefix(key);
                let keys =
                    [key, &fence, &q.waiters, &q.deadlines, &q.writers, &holders, &prefix, &sem_counter, &sem_timeouts];
                let kind = if entry.kind == Kind::Write { "write" } else { "read" };
                invocation(rwlock::acquire(), &keys, &[&entry.ident, &ttl, waiter, &lifetime, kind, &entry.record])
            }
            Kind::Permit(n) => {
                let holders = layout.holders_key(key);
                let channel = layout.redisson_channel(entry.kind, key).unwrap_or_default();
                let keys = [key, &sem_timeouts, &fence, &q.waiters, &q.deadlines, &holders];
                let mut inv = semaphore::acquire().prepare_invoke();
                for k in keys {
                    inv.key(k);
                }
                // The permit id goes in as Redisson stores it: 16 raw bytes.
                inv.arg(entry.member.as_slice())
                    .arg(&ttl)
                    .arg(waiter)
                    .arg(&lifetime)
                    .arg(n)
                    .arg(&entry.record)
                    .arg(&channel);
                inv
            }
        };
        let reply = self.conn.run(&inv).await?;
        Attempt::parse(&reply).ok_or_else(|| Error::Protocol(format!("redis: unexpected acquire reply {reply:?}")))
    }

    /// Owner-checked release of `entry`; when it freed room, wakes the next waiters (the live
    /// head of the queue, the readers before its first writer, the waiters the free permits
    /// admit) and publishes on Redisson's channel where the layout has one. Returns whether the
    /// hold was still ours.
    ///
    /// # Cancel safety
    /// Cancel safe; the release may or may not have happened.
    pub(crate) async fn release(&self, entry: &Entry, ttl_ms: u64) -> Result<bool> {
        let layout = &self.layout;
        let key = entry.key.as_str();
        let ttl = ttl_ms.to_string();
        let q = layout.queue(key);
        let channel = layout.redisson_channel(entry.kind, key).unwrap_or_default();
        let inv = match entry.kind {
            Kind::Plain => invocation(
                scripts::release(entry.kind),
                &[key, &q.waiters, &q.deadlines],
                &[&entry.ident, &ttl, &q.wake_prefix],
            ),
            Kind::Reentrant => invocation(scripts::release(entry.kind), &[key], &[&entry.ident, &ttl, &channel]),
            Kind::Read | Kind::Write => {
                let holders = layout.holders_key(key);
                let prefix = layout.rwlock_timeout_prefix(key);
                let keys = [key, &q.waiters, &q.deadlines, &q.writers, &holders, &prefix];
                invocation(rwlock::release(entry.kind == Kind::Write), &keys, &[&entry.ident, &q.wake_prefix, &channel])
            }
            Kind::Permit(_) => {
                let timeouts = layout.timeout_set(key);
                let holders = layout.holders_key(key);
                let mut inv = semaphore::release().prepare_invoke();
                for k in [key, &timeouts, &q.waiters, &q.deadlines, &holders] {
                    inv.key(k);
                }
                inv.arg(entry.member.as_slice()).arg(&channel).arg(&q.wake_prefix);
                inv
            }
        };
        let reply = self.conn.run(&inv).await?;
        scripts::as_int(&reply)
            .map(|n| n >= 0)
            .ok_or_else(|| Error::Protocol(format!("redis: unexpected release reply {reply:?}")))
    }

    /// `waiter` leaves the queue of `entry`'s lock, handing a wake-up it may have received on to
    /// whoever may now take the lock.
    ///
    /// # Cancel safety
    /// Cancel safe; the entry may or may not have been removed (it goes stale by itself).
    pub(crate) async fn leave(&self, entry: &Entry, waiter: &str) -> Result<()> {
        let key = entry.key.as_str();
        let q = self.layout.queue(key);
        let inv = match entry.kind {
            Kind::Read | Kind::Write => {
                invocation(rwlock::leave(), &[key, &q.waiters, &q.deadlines, &q.writers], &[waiter, &q.wake_prefix])
            }
            Kind::Permit(_) => {
                invocation(semaphore::leave(), &[key, &q.waiters, &q.deadlines], &[waiter, &q.wake_prefix])
            }
            Kind::Plain | Kind::Reentrant => {
                invocation(scripts::leave(), &[key, &q.waiters, &q.deadlines], &[waiter, &q.wake_prefix])
            }
        };
        self.conn.run(&inv).await.map(|_| ())
    }

    /// The number of live waiters queued on `key`; reentrant mode: 0 (unknown).
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

    /// Owner-checked renewal of `entries` (of any kinds) in one script; `true` per entry still
    /// ours.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub(crate) async fn renew(&self, entries: &[&Entry], ttl_ms: u64) -> Result<Vec<bool>> {
        let mut inv = scripts::renew().prepare_invoke();
        inv.arg(ttl_ms);
        for e in entries {
            let keys = match e.kind {
                Kind::Plain | Kind::Reentrant => [e.key.clone(), e.key.clone(), e.key.clone()],
                Kind::Read | Kind::Write => {
                    [e.key.clone(), self.layout.holders_key(&e.key), self.layout.rwlock_timeout_prefix(&e.key)]
                }
                Kind::Permit(_) => {
                    let timeouts = self.layout.timeout_set(&e.key);
                    [timeouts.clone(), timeouts.clone(), timeouts]
                }
            };
            for k in keys {
                inv.key(k);
            }
            inv.arg(e.kind.code()).arg(e.member.as_slice());
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
