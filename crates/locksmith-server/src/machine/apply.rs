//! [`Machine::apply`]: the one implementation of every recorded state change. The live path
//! calls it for each record a command emits; [`Machine::restore`] calls it for each record of
//! the log. Nothing here decides anything (tokens, who is next, whether a delay starts): the
//! record says it, so applying the same records gives the same state.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::time::Instant;

use super::{Holder, Lock, Machine, Record, Session};

/// The lock `name` in `locks`, created (never granted, counters at zero) if the machine does not
/// know it. Looked up by `&str` first, so the name is copied only for a new lock (the entry API
/// would copy it on every grant and release). A macro, not a function: returning the reference
/// from a function after a failed `get_mut` needs a second lookup to satisfy the borrow checker.
macro_rules! lock_entry {
    ($locks:expr, $name:expr) => {{
        let name: &str = $name;
        match $locks.get_mut(name) {
            Some(lock) => lock,
            None => $locks.entry(name.into()).or_insert_with(Lock::default),
        }
    }};
}

impl Machine {
    /// Applies one record at `now`: the change it describes, and nothing else (no hand-off, no
    /// effect, no record). Durations in a record count from `now`: a session's deadline
    /// (`now + ttl`), a lock-delay (`now + delay`); on replay `now` is the restart, which
    /// gives restored sessions a full TTL and lock-delays their full length again (later is
    /// safer: the log does not say when they began).
    ///
    /// Records that do not fit the current state are applied as far as they are safe: a
    /// counter only grows, a grant to an unknown session only moves the counter, a release of
    /// a hold that is not there (or no longer) changes nothing else.
    pub fn apply(&mut self, now: Instant, record: &Record) {
        match record {
            Record::Boot { epoch } => self.seen_epoch = self.seen_epoch.max(*epoch),
            Record::Session { id, ttl, secret } => {
                self.seen_epoch = self.seen_epoch.max(id >> 32);
                let deadline = now + *ttl;
                let s = self.sessions.entry(*id).or_insert_with(|| Session {
                    ttl: *ttl,
                    secret: *secret,
                    deadline,
                    holds: HashSet::new(),
                    waits: HashMap::new(),
                });
                self.deadlines.remove(&(s.deadline, *id));
                s.ttl = *ttl;
                s.deadline = deadline;
                self.deadlines.insert((deadline, *id));
            }
            Record::Grant { name, session, owner, token, lock_delay, mode, value } => {
                self.touched(name);
                let lock = lock_entry!(self.locks, name);
                lock.counter = lock.counter.max(*token);
                // A lock is granted only once its lock-delay is over.
                set_delay(&mut self.delays, lock, name, None);
                let Some(s) = self.sessions.get_mut(session) else {
                    lock.settle();
                    return;
                };
                s.holds.insert((name.as_str().into(), *token));
                let holder = Holder {
                    session: *session,
                    owner: owner.clone(),
                    token: *token,
                    lock_delay: *lock_delay,
                    mode: *mode,
                    value: value.clone(),
                };
                // Not on the live path (a hold is released before one that excludes it is
                // granted): holds a replayed log did not release.
                for old in lock.add_holder(holder) {
                    if let Some(s) = self.sessions.get_mut(&old.session) {
                        s.holds.remove(&(name.as_str().into(), old.token));
                    }
                }
            }
            Record::Release { name, token, delay } => {
                self.touched(name);
                let lock = lock_entry!(self.locks, name);
                lock.counter = lock.counter.max(*token);
                if let Some(h) = lock.remove_holder(*token) {
                    if let Some(s) = self.sessions.get_mut(&h.session) {
                        s.holds.remove(&(name.as_str().into(), *token));
                    }
                    if !delay.is_zero() {
                        set_delay(&mut self.delays, lock, name, Some(now + *delay));
                    }
                }
                lock.settle();
            }
            Record::SessionEnd { id } => {
                let Some(s) = self.sessions.remove(id) else { return };
                self.deadlines.remove(&(s.deadline, *id));
                for wait in s.waits.values() {
                    self.drop_waiter(wait);
                }
                // Holds the log did not release one by one (the live path releases each first,
                // so this finds none there).
                for (name, token) in s.holds {
                    if let Some(lock) = self.locks.get_mut(&name) {
                        lock.remove_holder(token);
                        lock.settle();
                    }
                }
            }
            Record::Counter { name, token, delay } => {
                let lock = lock_entry!(self.locks, name);
                lock.counter = lock.counter.max(*token);
                if !delay.is_zero() {
                    set_delay(&mut self.delays, lock, name, Some(now + *delay));
                }
            }
            Record::Reserve { name, upto } => {
                let lock = lock_entry!(self.locks, name);
                lock.reserved = lock.reserved.max(*upto);
            }
            Record::Horizon { ttl, lock_delay } => {
                self.horizon = (self.horizon.0.max(*ttl), self.horizon.1.max(*lock_delay));
            }
            Record::Floor { upto } => self.floor = self.floor.max(*upto),
        }
    }
}

/// Sets (or ends) the lock-delay of the lock `name`, keeping the index in step.
pub(super) fn set_delay(
    delays: &mut BTreeSet<(Instant, Box<str>)>,
    lock: &mut Lock,
    name: &str,
    until: Option<Instant>,
) {
    if lock.delay_until() == until {
        return;
    }
    let busy = lock.busy_mut();
    if let Some(old) = busy.delay_until.take() {
        delays.remove(&(old, name.into()));
    }
    if let Some(t) = until {
        delays.insert((t, name.into()));
    }
    busy.delay_until = until;
    lock.settle();
}
