//! The lock state machine: sessions, holders, FIFO waiters, fencing counters, lock-delay and
//! expiry. Pure: no I/O, no clock (every call takes `now`), no async. The service around it
//! persists the [`Record`]s it emits and delivers the [`Effect`]s; the same machine can later be
//! the state machine of a Raft group unchanged.
//!
//! Invariants kept by every method:
//! - a lock with no holder and no running lock-delay has no waiters (a free lock is granted to
//!   the head of the queue at once);
//! - a token is `counter + 1` and the counter only grows, also across [`Machine::restore`];
//! - every hold and every waiter belongs to a live session.
//!
//! Two [`Durability`] modes decide what must be on disk before a client hears of a grant:
//! every grant (`Grants`: after a restart sessions and holds are restored and get a grace
//! period, as Chubby does), or only reserved token blocks and the longest lease in use
//! (`Leases`: nothing is known about holders after a restart, so every lock ever granted stays
//! unavailable until every lease of the previous run has certainly expired — DESIGN.md §4).

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::time::{Duration, Instant};

mod command;

pub use command::{Acquire, InvalidOwner, Owner, Release};
/// Lock names, validated by `locksmith-core` (the same rules on every backend).
pub use locksmith_core::LockName;

/// Session id: `epoch << 32 | n`, unique across restarts (see [`Record::Boot`]).
pub type SessionId = u64;

/// Server limits, checked by the machine on every request.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Smallest session TTL.
    pub min_ttl: Duration,
    /// Largest session TTL.
    pub max_ttl: Duration,
    /// Largest lock-delay.
    pub max_lock_delay: Duration,
    /// Longest owner id, in bytes.
    pub max_owner_len: usize,
    /// Waiters queued on one lock.
    pub max_waiters_per_lock: usize,
    /// Live sessions on the server.
    pub max_sessions: usize,
}

impl Default for Limits {
    /// The limits every locksmith client checks too (`locksmith_core`'s TTL range, lock-delay
    /// and owner maximums), so a request a client accepted is never refused here for its size.
    fn default() -> Self {
        Self {
            min_ttl: locksmith_core::MIN_TTL,
            max_ttl: locksmith_core::MAX_TTL,
            max_lock_delay: locksmith_core::MAX_LOCK_DELAY,
            max_owner_len: locksmith_core::MAX_OWNER_LEN,
            max_waiters_per_lock: 100_000,
            max_sessions: 100_000,
        }
    }
}

/// Tokens reserved per [`Record::Reserve`] in [`Durability::Leases`]: one synced record per
/// this many grants of a lock; a restart skips what was left of the block.
pub const RESERVE_BLOCK: u64 = 1024;

/// What must be durable before a client hears of a grant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Durability {
    /// Every grant: each hand-off waits for a log sync (shared by concurrent grants); after a
    /// restart, sessions and their holds are restored and get one TTL to reconnect.
    #[default]
    Grants,
    /// Only token blocks (a sync per [`RESERVE_BLOCK`] grants of a lock) and the longest TTL
    /// and lock-delay in use: grants need no sync. After a restart holders are unknown, so
    /// every lock ever granted is unavailable for that longest TTL + lock-delay.
    Leases,
}

/// What the machine wants persisted, in order. `Grant` must be durable before the grantee
/// hears of it; the rest may be written lazily (losing them on a crash only delays a release
/// until the restored session expires, it never creates a second holder).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Record {
    /// A new boot; session ids carry this epoch.
    Boot {
        /// The epoch.
        epoch: u64,
    },
    /// A session was opened.
    Session {
        /// Its id.
        id: SessionId,
        /// Its TTL.
        ttl: Duration,
    },
    /// A lock was granted.
    Grant {
        /// Lock name.
        name: String,
        /// Holder session.
        session: SessionId,
        /// Holder owner id.
        owner: String,
        /// Fencing token.
        token: u64,
        /// Lock-delay to apply if the session expires while holding.
        lock_delay: Duration,
    },
    /// The hold with this token was released (`delay` > 0 when freed by expiry with lock-delay).
    Release {
        /// Lock name.
        name: String,
        /// The hold's token.
        token: u64,
        /// Lock-delay that started.
        delay: Duration,
    },
    /// A session ended (closed or expired).
    SessionEnd {
        /// Its id.
        id: SessionId,
    },
    /// [`Durability::Leases`]: tokens up to `upto` may have been issued on `name`; after a
    /// restart its counter continues above.
    Reserve {
        /// Lock name.
        name: String,
        /// Highest token that may have been issued.
        upto: u64,
    },
    /// [`Durability::Leases`]: the longest session TTL and lock-delay granted so far, i.e. how
    /// long after a restart a lease of the previous run may still be trusted by its client.
    Horizon {
        /// Longest session TTL.
        ttl: Duration,
        /// Longest lock-delay.
        lock_delay: Duration,
    },
    /// Snapshot only: the fencing counter of a lock that has no holder, and the lock-delay
    /// still to run on it.
    Counter {
        /// Lock name.
        name: String,
        /// Last token issued.
        token: u64,
        /// Lock-delay left.
        delay: Duration,
    },
}

impl Record {
    /// Whether the record must be on disk before the effects that follow it are delivered.
    pub fn needs_sync(&self) -> bool {
        matches!(self, Record::Grant { .. } | Record::Boot { .. } | Record::Reserve { .. } | Record::Horizon { .. })
    }
}

/// Something the service must deliver to a session (after the records before it are durable).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Effect {
    /// A queued acquire (message id `request`) was granted.
    Granted {
        /// Grantee.
        session: SessionId,
        /// The acquire's message id.
        request: u64,
        /// Fencing token.
        token: u64,
    },
    /// The session expired; its stream should be told and closed.
    Expired {
        /// The session.
        session: SessionId,
    },
}

/// Answer to an acquire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AcquireOutcome {
    /// Granted now.
    Granted(u64),
    /// Held by someone else (no-wait).
    Busy,
    /// Queued; a [`Effect::Granted`] follows when it is our turn.
    Queued,
}

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Refusal {
    /// Unknown or expired session.
    #[error("session expired")]
    SessionExpired,
    /// Bad argument.
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// A limit was hit.
    #[error("limit exceeded: {0}")]
    Limit(String),
}

#[derive(Debug)]
struct Session {
    ttl: Duration,
    deadline: Instant,
    holds: HashSet<String>,
    /// Queued acquires: request id → lock name.
    waits: HashMap<u64, String>,
}

#[derive(Debug, Clone)]
struct Holder {
    session: SessionId,
    owner: String,
    token: u64,
    lock_delay: Duration,
}

#[derive(Debug, Clone)]
struct Waiter {
    session: SessionId,
    request: u64,
    owner: String,
    lock_delay: Duration,
}

#[derive(Debug, Default)]
struct Lock {
    holder: Option<Holder>,
    waiters: VecDeque<Waiter>,
    delay_until: Option<Instant>,
    /// Last token issued; never decreases, never forgotten.
    counter: u64,
    /// [`Durability::Leases`]: highest token covered by a [`Record::Reserve`].
    reserved: u64,
}

/// A lock's state for introspection.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockView {
    /// Lock name.
    pub name: String,
    /// `(session, owner, token, ttl left)` of the holder.
    pub holder: Option<(SessionId, String, u64, Duration)>,
    /// Queued waiters.
    pub waiters: u64,
    /// Last token issued.
    pub last_token: u64,
    /// Lock-delay left.
    pub delay_left: Option<Duration>,
}

/// The state machine.
#[derive(Debug)]
pub struct Machine {
    limits: Limits,
    durability: Durability,
    /// Longest (TTL, lock-delay) recorded in [`Record::Horizon`].
    horizon: (Duration, Duration),
    epoch: u64,
    next_session: u64,
    sessions: HashMap<SessionId, Session>,
    /// Expiry index: (deadline, session).
    deadlines: BTreeSet<(Instant, SessionId)>,
    locks: HashMap<String, Lock>,
    /// Lock-delay index: (until, name).
    delays: BTreeSet<(Instant, String)>,
    records: Vec<Record>,
    effects: Vec<Effect>,
}

impl Machine {
    /// A fresh machine in `epoch` (use 1 for an in-memory server).
    pub fn new(limits: Limits, epoch: u64) -> Self {
        Self {
            limits,
            durability: Durability::Grants,
            horizon: (Duration::ZERO, Duration::ZERO),
            epoch,
            next_session: 1,
            sessions: HashMap::new(),
            deadlines: BTreeSet::new(),
            locks: HashMap::new(),
            delays: BTreeSet::new(),
            records: Vec::new(),
            effects: Vec::new(),
        }
    }

    /// Rebuilds state from persisted records at `now` in a new boot. Restored sessions keep
    /// their holds and get one full TTL from `now` to reconnect (their clients stopped trusting
    /// their holds at most one TTL after their last renewal, which came before the crash, so
    /// nobody else can be granted their locks while they may still act on them). Waiters are not
    /// restored: clients re-send them when they resume. Emits the records of a snapshot of the
    /// restored state (starting with the new `Boot`) for the caller to write as the new log.
    pub fn restore(limits: Limits, records: impl IntoIterator<Item = Record>, now: Instant) -> Self {
        Self::restore_with(limits, Durability::Grants, records, now)
    }

    /// [`Machine::restore`] in a chosen [`Durability`]. Whatever mode wrote the log: if grants
    /// of the previous run may be missing from it (it was a `Leases` run), or this run will
    /// not keep the restored holders (`Leases`), every lock ever granted stays unavailable
    /// until the longest lease (+ lock-delay) of the previous run has passed from `now`.
    pub fn restore_with(
        limits: Limits,
        durability: Durability,
        records: impl IntoIterator<Item = Record>,
        now: Instant,
    ) -> Self {
        let mut m = Self::new(limits, 1);
        m.durability = durability;
        let mut leases_log = false;
        let mut max_epoch = 0;
        for r in records {
            match r {
                Record::Boot { epoch } => max_epoch = max_epoch.max(epoch),
                Record::Session { id, ttl } => {
                    max_epoch = max_epoch.max(id >> 32);
                    m.sessions.insert(id, Session { ttl, deadline: now, holds: HashSet::new(), waits: HashMap::new() });
                }
                Record::Grant { name, session, owner, token, lock_delay } => {
                    let lock = m.locks.entry(name.clone()).or_default();
                    lock.counter = lock.counter.max(token);
                    // A lock is only granted once its lock-delay is over.
                    lock.delay_until = None;
                    if m.sessions.contains_key(&session) {
                        if let Some(old) = lock.holder.take() {
                            if let Some(os) = m.sessions.get_mut(&old.session) {
                                os.holds.remove(&name);
                            }
                        }
                        lock.holder = Some(Holder { session, owner, token, lock_delay });
                        if let Some(s) = m.sessions.get_mut(&session) {
                            s.holds.insert(name);
                        }
                    }
                }
                Record::Release { name, token, delay } => {
                    let lock = m.locks.entry(name.clone()).or_default();
                    lock.counter = lock.counter.max(token);
                    if lock.holder.as_ref().is_some_and(|h| h.token == token) {
                        if let Some(h) = lock.holder.take() {
                            if let Some(s) = m.sessions.get_mut(&h.session) {
                                s.holds.remove(&name);
                            }
                        }
                        if !delay.is_zero() {
                            // We do not know when it started: count it from now (later is safer).
                            lock.delay_until = Some(now + delay);
                        }
                    }
                }
                Record::SessionEnd { id } => {
                    if let Some(s) = m.sessions.remove(&id) {
                        for name in s.holds {
                            if let Some(lock) = m.locks.get_mut(&name) {
                                if lock.holder.as_ref().is_some_and(|h| h.session == id) {
                                    lock.holder = None;
                                }
                            }
                        }
                    }
                }
                Record::Counter { name, token, delay } => {
                    let lock = m.locks.entry(name).or_default();
                    lock.counter = lock.counter.max(token);
                    if !delay.is_zero() {
                        lock.delay_until = Some(now + delay);
                    }
                }
                Record::Reserve { name, upto } => {
                    leases_log = true;
                    let lock = m.locks.entry(name).or_default();
                    lock.counter = lock.counter.max(upto);
                }
                Record::Horizon { ttl, lock_delay } => {
                    leases_log = true;
                    m.horizon = (m.horizon.0.max(ttl), m.horizon.1.max(lock_delay));
                }
            }
        }
        m.epoch = max_epoch + 1;
        if durability == Durability::Leases {
            // Restored holders will not be kept: their clients may trust them for one more TTL
            // (+ lock-delay if they expire), which the quiet period below must cover.
            for s in m.sessions.values() {
                m.horizon.0 = m.horizon.0.max(s.ttl);
            }
            for lock in m.locks.values_mut() {
                if let Some(h) = lock.holder.take() {
                    m.horizon.1 = m.horizon.1.max(h.lock_delay);
                }
            }
            m.sessions.clear();
        }
        if leases_log || durability == Durability::Leases {
            let quiet = m.horizon.0 + m.horizon.1;
            if !quiet.is_zero() {
                for lock in m.locks.values_mut().filter(|l| l.counter > 0 && l.holder.is_none()) {
                    lock.delay_until = Some(lock.delay_until.map_or(now + quiet, |t| t.max(now + quiet)));
                }
            }
        }
        for lock in m.locks.values_mut() {
            lock.reserved = lock.counter;
        }
        for (id, s) in m.sessions.iter_mut() {
            s.deadline = now + s.ttl;
            m.deadlines.insert((s.deadline, *id));
        }
        for (name, lock) in &m.locks {
            if let Some(until) = lock.delay_until {
                m.delays.insert((until, name.clone()));
            }
        }
        m.records = m.snapshot(now);
        m
    }

    /// The current state at `now` as records (a compacted log), starting with this boot's epoch.
    pub fn snapshot(&self, now: Instant) -> Vec<Record> {
        let mut out = vec![Record::Boot { epoch: self.epoch }];
        if self.durability == Durability::Leases {
            if self.horizon != (Duration::ZERO, Duration::ZERO) {
                out.push(Record::Horizon { ttl: self.horizon.0, lock_delay: self.horizon.1 });
            }
            for (name, lock) in &self.locks {
                out.push(Record::Counter {
                    name: name.clone(),
                    // Tokens up to the reservation may be out there: continue above it.
                    token: lock.counter.max(lock.reserved),
                    delay: lock.delay_until.map(|t| t.saturating_duration_since(now)).unwrap_or_default(),
                });
            }
            return out;
        }
        for (id, s) in &self.sessions {
            out.push(Record::Session { id: *id, ttl: s.ttl });
        }
        for (name, lock) in &self.locks {
            match &lock.holder {
                Some(h) => out.push(Record::Grant {
                    name: name.clone(),
                    session: h.session,
                    owner: h.owner.clone(),
                    token: h.token,
                    lock_delay: h.lock_delay,
                }),
                None => out.push(Record::Counter {
                    name: name.clone(),
                    token: lock.counter,
                    delay: lock.delay_until.map(|t| t.saturating_duration_since(now)).unwrap_or_default(),
                }),
            }
        }
        out
    }

    /// This boot's epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Takes the records emitted since the last call, in order.
    pub fn take_records(&mut self) -> Vec<Record> {
        std::mem::take(&mut self.records)
    }

    /// Takes the effects emitted since the last call, in order.
    pub fn take_effects(&mut self) -> Vec<Effect> {
        std::mem::take(&mut self.effects)
    }

    /// The next instant at which [`Machine::tick`] has work (a session deadline or the end of a
    /// lock-delay).
    pub fn next_deadline(&self) -> Option<Instant> {
        let s = self.deadlines.first().map(|(t, _)| *t);
        let d = self.delays.first().map(|(t, _)| *t);
        match (s, d) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Opens a session, or resumes `resume` if it is still alive (renewing it).
    ///
    /// # Errors
    /// TTL out of range, too many sessions, or (resume) the session is gone.
    pub fn open(
        &mut self,
        now: Instant,
        ttl: Duration,
        resume: Option<SessionId>,
    ) -> Result<(SessionId, Duration), Refusal> {
        self.expire_due(now);
        if let Some(id) = resume {
            self.keep_alive(now, id)?;
            let ttl = self.sessions.get(&id).map(|s| s.ttl).unwrap_or(ttl);
            return Ok((id, ttl));
        }
        if ttl < self.limits.min_ttl || ttl > self.limits.max_ttl {
            return Err(Refusal::Invalid(format!(
                "ttl {ttl:?} outside {:?}..={:?}",
                self.limits.min_ttl, self.limits.max_ttl
            )));
        }
        if self.sessions.len() >= self.limits.max_sessions {
            return Err(Refusal::Limit(format!("{} sessions", self.limits.max_sessions)));
        }
        let id = (self.epoch << 32) | (self.next_session & 0xffff_ffff);
        self.next_session += 1;
        let deadline = now + ttl;
        self.sessions.insert(id, Session { ttl, deadline, holds: HashSet::new(), waits: HashMap::new() });
        self.deadlines.insert((deadline, id));
        self.log(Record::Session { id, ttl });
        if self.durability == Durability::Leases && ttl > self.horizon.0 {
            self.horizon.0 = ttl;
            self.records.push(Record::Horizon { ttl, lock_delay: self.horizon.1 });
        }
        Ok((id, ttl))
    }

    /// Renews a session's lease from `now`.
    ///
    /// # Errors
    /// [`Refusal::SessionExpired`] if it is gone or its deadline has passed.
    pub fn keep_alive(&mut self, now: Instant, id: SessionId) -> Result<(), Refusal> {
        self.expire_due(now);
        let s = self.sessions.get_mut(&id).ok_or(Refusal::SessionExpired)?;
        self.deadlines.remove(&(s.deadline, id));
        s.deadline = now + s.ttl;
        self.deadlines.insert((s.deadline, id));
        Ok(())
    }

    /// Acquires `cmd.name` for `(cmd.session, cmd.owner)`: granted at once when the lock is
    /// free (or already ours), otherwise busy, or queued as `cmd.request` if `cmd.wait`.
    ///
    /// # Errors
    /// Expired session, a lock-delay or owner id above the limits, or a full queue.
    pub fn acquire(&mut self, now: Instant, cmd: Acquire) -> Result<AcquireOutcome, Refusal> {
        self.expire_due(now);
        let Acquire { session, request, name, owner, wait, lock_delay } = cmd;
        let (name, owner) = (name.as_str(), owner.as_str());
        if !self.sessions.contains_key(&session) {
            return Err(Refusal::SessionExpired);
        }
        if lock_delay > self.limits.max_lock_delay {
            return Err(Refusal::Invalid(format!("lock delay {lock_delay:?} above {:?}", self.limits.max_lock_delay)));
        }
        if owner.len() > self.limits.max_owner_len {
            return Err(Refusal::Invalid(format!(
                "owner id is {} bytes, the maximum is {}",
                owner.len(),
                self.limits.max_owner_len
            )));
        }
        if self.durability == Durability::Leases && lock_delay > self.horizon.1 {
            self.horizon.1 = lock_delay;
            self.records.push(Record::Horizon { ttl: self.horizon.0, lock_delay });
        }
        let max_waiters = self.limits.max_waiters_per_lock;
        let lock = self.locks.entry(name.to_string()).or_default();
        if let Some(h) = &lock.holder {
            if h.session == session && h.owner == owner {
                // Idempotent: a retried or resumed acquire of our own hold.
                return Ok(AcquireOutcome::Granted(h.token));
            }
        }
        if lock.holder.is_none() && lock.waiters.is_empty() && lock.delay_until.is_none() {
            let token = self.grant(name, session, owner.to_string(), lock_delay);
            return Ok(AcquireOutcome::Granted(token));
        }
        if !wait {
            return Ok(AcquireOutcome::Busy);
        }
        if lock.waiters.iter().any(|w| w.session == session && w.request == request) {
            return Ok(AcquireOutcome::Queued);
        }
        if self.sessions.get(&session).is_some_and(|s| s.waits.contains_key(&request)) {
            // `waits` and `cancel` know a queued acquire by (session, request) alone.
            return Err(Refusal::Invalid(format!("request {request} is already queued on another lock")));
        }
        if lock.waiters.len() >= max_waiters {
            return Err(Refusal::Limit(format!("{max_waiters} waiters on lock {name:?}")));
        }
        lock.waiters.push_back(Waiter { session, request, owner: owner.to_string(), lock_delay });
        if let Some(s) = self.sessions.get_mut(&session) {
            s.waits.insert(request, name.to_string());
        }
        Ok(AcquireOutcome::Queued)
    }

    /// Releases the hold `(cmd.session, cmd.owner, cmd.token)` on `cmd.name` and hands the lock
    /// to the next waiter. Returns whether that hold existed. Never touches anyone else's hold.
    pub fn release(&mut self, now: Instant, cmd: Release) -> bool {
        self.expire_due(now);
        let (session, name, owner, token) = (cmd.session, cmd.name.as_str(), cmd.owner.as_str(), cmd.token);
        let Some(lock) = self.locks.get_mut(name) else { return false };
        let ours = lock.holder.as_ref().is_some_and(|h| h.session == session && h.owner == owner && h.token == token);
        if !ours {
            return false;
        }
        lock.holder = None;
        if let Some(s) = self.sessions.get_mut(&session) {
            s.holds.remove(name);
        }
        self.log(Record::Release { name: name.to_string(), token, delay: Duration::ZERO });
        self.grant_next(now, name);
        true
    }

    /// Withdraws a queued acquire. Returns whether it was still queued (if not, it was granted
    /// or never existed).
    pub fn cancel(&mut self, now: Instant, session: SessionId, request: u64) -> bool {
        self.expire_due(now);
        let Some(name) = self.sessions.get_mut(&session).and_then(|s| s.waits.remove(&request)) else {
            return false;
        };
        if let Some(lock) = self.locks.get_mut(&name) {
            lock.waiters.retain(|w| !(w.session == session && w.request == request));
        }
        self.forget_if_idle(&name);
        true
    }

    /// Ends a session now: frees its holds (no lock-delay: this is a clean close) and drops its
    /// waiters.
    pub fn close(&mut self, now: Instant, session: SessionId) {
        self.expire_due(now);
        self.end_session(now, session, false);
    }

    /// Expires every session whose deadline has passed and ends lock-delays that are over.
    pub fn tick(&mut self, now: Instant) {
        self.expire_due(now);
    }

    /// Introspection: one lock, or all known locks.
    pub fn status(&self, now: Instant, name: Option<&str>) -> Vec<LockView> {
        let view = |name: &String, lock: &Lock| LockView {
            name: name.clone(),
            holder: lock.holder.as_ref().map(|h| {
                let left = self
                    .sessions
                    .get(&h.session)
                    .map(|s| s.deadline.saturating_duration_since(now))
                    .unwrap_or_default();
                (h.session, h.owner.clone(), h.token, left)
            }),
            waiters: lock.waiters.len() as u64,
            last_token: lock.counter,
            delay_left: lock.delay_until.map(|t| t.saturating_duration_since(now)),
        };
        match name {
            Some(n) => self.locks.get_key_value(n).map(|(k, l)| view(k, l)).into_iter().collect(),
            None => {
                let mut all: Vec<_> = self.locks.iter().map(|(k, l)| view(k, l)).collect();
                all.sort_by(|a, b| a.name.cmp(&b.name));
                all
            }
        }
    }

    /// The session's TTL left, if it is alive.
    pub fn session_ttl_left(&self, now: Instant, id: SessionId) -> Option<Duration> {
        self.sessions.get(&id).map(|s| s.deadline.saturating_duration_since(now))
    }

    fn grant(&mut self, name: &str, session: SessionId, owner: String, lock_delay: Duration) -> u64 {
        let lock = self.locks.entry(name.to_string()).or_default();
        lock.counter += 1;
        let token = lock.counter;
        lock.holder = Some(Holder { session, owner: owner.clone(), token, lock_delay });
        if self.durability == Durability::Leases && token > lock.reserved {
            lock.reserved = token + RESERVE_BLOCK - 1;
            self.records.push(Record::Reserve { name: name.to_string(), upto: lock.reserved });
        }
        if let Some(s) = self.sessions.get_mut(&session) {
            s.holds.insert(name.to_string());
        }
        self.log(Record::Grant { name: name.to_string(), session, owner, token, lock_delay });
        token
    }

    /// Hands a free lock to the head of its queue.
    fn grant_next(&mut self, now: Instant, name: &str) {
        let Some(lock) = self.locks.get_mut(name) else { return };
        if lock.holder.is_some() || lock.delay_until.is_some_and(|t| t > now) {
            return;
        }
        let Some(w) = lock.waiters.pop_front() else {
            self.forget_if_idle(name);
            return;
        };
        if let Some(s) = self.sessions.get_mut(&w.session) {
            s.waits.remove(&w.request);
        }
        let token = self.grant(name, w.session, w.owner, w.lock_delay);
        self.effects.push(Effect::Granted { session: w.session, request: w.request, token });
    }

    fn expire_due(&mut self, now: Instant) {
        while let Some(&(deadline, id)) = self.deadlines.first() {
            if deadline > now {
                break;
            }
            self.end_session(now, id, true);
            self.effects.push(Effect::Expired { session: id });
        }
        while let Some((until, name)) = self.delays.first().cloned() {
            if until > now {
                break;
            }
            self.delays.remove(&(until, name.clone()));
            if let Some(lock) = self.locks.get_mut(&name) {
                if lock.delay_until == Some(until) {
                    lock.delay_until = None;
                }
            }
            self.grant_next(now, &name);
        }
    }

    fn end_session(&mut self, now: Instant, id: SessionId, expired: bool) {
        let Some(s) = self.sessions.remove(&id) else { return };
        self.deadlines.remove(&(s.deadline, id));
        for (request, name) in s.waits {
            if let Some(lock) = self.locks.get_mut(&name) {
                lock.waiters.retain(|w| !(w.session == id && w.request == request));
            }
            self.forget_if_idle(&name);
        }
        for name in s.holds {
            let Some(lock) = self.locks.get_mut(&name) else { continue };
            let Some(h) = lock.holder.take_if(|h| h.session == id) else { continue };
            let delay = if expired { h.lock_delay } else { Duration::ZERO };
            if !delay.is_zero() {
                let until = now + delay;
                lock.delay_until = Some(until);
                self.delays.insert((until, name.clone()));
            }
            self.log(Record::Release { name: name.clone(), token: h.token, delay });
            self.grant_next(now, &name);
        }
        self.log(Record::SessionEnd { id });
    }

    /// Emits a record unless the durability mode does not keep that kind: `Leases` keeps no
    /// sessions, holders or releases (it never restores them).
    fn log(&mut self, r: Record) {
        let kept = match self.durability {
            Durability::Grants => true,
            Durability::Leases => matches!(r, Record::Boot { .. } | Record::Reserve { .. } | Record::Horizon { .. }),
        };
        if kept {
            self.records.push(r);
        }
    }

    /// Keeps the map small: a lock with nothing going on is forgotten unless its counter must be
    /// remembered (it always must once a token was issued, so only never-granted entries go).
    fn forget_if_idle(&mut self, name: &str) {
        if let Some(lock) = self.locks.get(name) {
            if lock.counter == 0 && lock.holder.is_none() && lock.waiters.is_empty() && lock.delay_until.is_none() {
                self.locks.remove(name);
            }
        }
    }
}
