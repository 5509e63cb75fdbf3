//! One lock's state: its counters, kept forever, and — only while something is going on — its
//! holders, its queue and its lock-delay. Which holds go together, and which are refused on a
//! name in use another way, are the rules every backend shares (`locksmith_core::holding`:
//! [`HoldMode::joins`], [`ConflictKind::between`]); this file only applies them to the holders
//! and the queue.
//!
//! The queue is first come, first served whatever the kind: a waiter is admitted only when it
//! is at the head, so readers arriving after a queued writer wait behind it (no writer
//! starvation), and a release admits as many waiters from the head as now fit.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use locksmith_core::{ConflictKind, HoldMode};

use super::holders::Holders;
use super::SessionId;

#[derive(Debug, Clone)]
pub(super) struct Holder {
    pub(super) session: SessionId,
    pub(super) owner: String,
    pub(super) token: u64,
    pub(super) lock_delay: Duration,
    pub(super) mode: HoldMode,
    pub(super) value: Option<String>,
}

#[derive(Debug, Clone)]
pub(super) struct Waiter {
    pub(super) session: SessionId,
    pub(super) request: u64,
    pub(super) owner: String,
    pub(super) lock_delay: Duration,
    pub(super) mode: HoldMode,
    pub(super) value: Option<String>,
}

/// A lock the machine knows. Its counters are kept forever; the rest only while it is busy.
#[derive(Debug, Default)]
pub(super) struct Lock {
    /// Last token issued; never decreases, never forgotten.
    pub(super) counter: u64,
    /// [`Durability::Leases`](super::Durability::Leases): highest token covered by a
    /// [`Record::Reserve`](super::Record::Reserve).
    pub(super) reserved: u64,
    /// Holders, queue and lock-delay; `None` while there are none (most locks, most of the time).
    pub(super) busy: Option<Box<Busy>>,
}

/// What a lock has going on.
#[derive(Debug, Default)]
pub(super) struct Busy {
    holders: Holders,
    /// Queued acquires in arrival order, keyed by a machine-wide sequence number: the head is
    /// the first key, and a waiter is removed by its key (cancel, session end) in O(log n).
    pub(super) waiters: BTreeMap<u64, Waiter>,
    pub(super) delay_until: Option<Instant>,
}

impl Busy {
    /// Whether a hold of `mode` can join the current holders (the queue aside).
    fn admits(&self, mode: HoldMode, now: Instant) -> bool {
        if self.delay_until.is_some_and(|t| t > now) {
            return false;
        }
        mode.joins(self.holders.len(), self.holders.first().map(|h| h.mode))
    }

    /// The semaphore's number of permits while it is in use.
    fn permits(&self) -> Option<u32> {
        match self.in_use_as() {
            Some(HoldMode::Permit(n)) => Some(n),
            _ => None,
        }
    }

    /// The kind of holds and waits on the lock now, if any.
    fn in_use_as(&self) -> Option<HoldMode> {
        self.holders.first().map(|h| h.mode).or_else(|| self.waiters.values().next().map(|w| w.mode))
    }
}

impl Lock {
    /// The hold of `(session, owner)`, if it has one.
    pub(super) fn hold_of(&self, session: SessionId, owner: &str) -> Option<&Holder> {
        self.busy.as_ref()?.holders.of(session, owner)
    }

    /// The hold with `token`, if it is still held.
    pub(super) fn hold(&self, token: u64) -> Option<&Holder> {
        self.busy.as_ref()?.holders.get(token)
    }

    /// Every holder, by token.
    pub(super) fn holders(&self) -> impl Iterator<Item = &Holder> {
        self.busy.iter().flat_map(|b| b.holders.iter())
    }

    pub(super) fn waiters(&self) -> usize {
        self.busy.as_ref().map_or(0, |b| b.waiters.len())
    }

    pub(super) fn delay_until(&self) -> Option<Instant> {
        self.busy.as_ref().and_then(|b| b.delay_until)
    }

    /// A semaphore's number of permits, while it is in use.
    pub(super) fn permits(&self) -> Option<u32> {
        self.busy.as_ref().and_then(|b| b.permits())
    }

    /// Nothing going on: no holder, nobody queued, no lock-delay.
    pub(super) fn is_idle(&self) -> bool {
        self.busy.as_ref().is_none_or(|b| b.holders.is_empty() && b.waiters.is_empty() && b.delay_until.is_none())
    }

    /// Whether a hold of `mode` would be granted now: it fits the holders and nobody is queued
    /// before it.
    pub(super) fn grants_now(&self, mode: HoldMode, now: Instant) -> bool {
        self.busy.as_ref().is_none_or(|b| b.waiters.is_empty() && b.admits(mode, now))
    }

    /// Why a hold of `mode` cannot be asked for on this lock at all (a semaphore asked for as a
    /// lock, or with another number of permits), while it is in use.
    pub(super) fn refuses(&self, mode: HoldMode) -> Option<ConflictKind> {
        ConflictKind::between(self.busy.as_ref()?.in_use_as()?, mode)
    }

    pub(super) fn busy_mut(&mut self) -> &mut Busy {
        self.busy.get_or_insert_with(Default::default)
    }

    /// Adds a holder. An exclusive hold replaces any others (only a replayed log that lost
    /// their releases can get here with others); the replaced ones are returned.
    pub(super) fn add_holder(&mut self, holder: Holder) -> Vec<Holder> {
        let busy = self.busy_mut();
        let mut replaced = Vec::new();
        if holder.mode == HoldMode::Exclusive || busy.holders.first().is_some_and(|h| h.mode == HoldMode::Exclusive) {
            replaced = busy.holders.take_all();
        }
        replaced.extend(busy.holders.insert(holder));
        replaced
    }

    /// Removes the hold with `token`.
    pub(super) fn remove_holder(&mut self, token: u64) -> Option<Holder> {
        self.busy.as_mut()?.holders.remove(token)
    }

    /// Removes every holder (a restart that does not keep them).
    pub(super) fn clear_holders(&mut self) -> Vec<Holder> {
        self.busy.as_mut().map(|b| b.holders.take_all()).unwrap_or_default()
    }

    /// Takes the head of the queue if it can be granted now.
    pub(super) fn pop_admitted(&mut self, now: Instant) -> Option<Waiter> {
        let busy = self.busy.as_mut()?;
        let (_, head) = busy.waiters.first_key_value()?;
        if !busy.admits(head.mode, now) {
            return None;
        }
        busy.waiters.pop_first().map(|(_, w)| w)
    }

    /// Drops the busy part once nothing is going on.
    pub(super) fn settle(&mut self) {
        if self.is_idle() {
            self.busy = None;
        }
    }
}
