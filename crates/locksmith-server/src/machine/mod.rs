//! The lock state machine: sessions, holders, FIFO waiters, fencing counters, lock-delay and
//! expiry. Pure: no I/O, no clock (every call takes `now`), no async. The service around it
//! persists the [`Record`]s it emits and delivers the [`Effect`]s; the same machine can later be
//! the state machine of a Raft group unchanged.
//!
//! # One implementation of every state change
//! A command ([`Machine::acquire`], [`Machine::release`], [`Machine::close`], an expiry in
//! [`Machine::tick`], …) decides what happens: who is granted, with which token, which hold
//! ends. It then describes each change as a [`Record`] and hands it to [`Machine::apply`], the
//! only code that changes holders, counters and sessions; the record goes on to the log.
//! [`Machine::restore`] replays a log through that same `apply`, so a restored machine is
//! exactly the one that wrote the log, and a replicated log can later drive followers the same
//! way. What no log keeps (queued waiters, keep-alives, the end of a lock-delay) changes state
//! directly: after a restart clients re-send their waits, every session gets a full TTL, and a
//! lock-delay runs again from the restart (later is safer).
//!
//! Invariants kept by every method:
//! - a lock with no holder and no running lock-delay has no waiters (a free lock is granted to
//!   the head of the queue at once);
//! - a token is `max(counter, base) + 1` and the counter only grows, also across
//!   [`Machine::restore`]; `base` is the token floor of this boot (every token any earlier boot
//!   may have issued is at or below it, see [`Record::Floor`]);
//! - every hold and every waiter belongs to a live session;
//! - no command costs more than O(log n) in the number of locks, sessions or waiters, except
//!   ending a session, which costs O(log n) per hold and wait of that session only.
//!
//! # Memory
//! Every lock ever granted is remembered for its fencing counter, so the map of locks only
//! grows: a lock nobody holds, waits for or is delayed on is a name and two counters (about 100
//! bytes at a million locks, measured in docs/benchmarks.md); what a busy lock needs more (holder,
//! queue, lock-delay) lives in a separate allocation only while it is busy. The map is ordered,
//! so listing locks is paged by name ([`Machine::status_page`]).
//!
//! Two [`Durability`] modes decide what must be on disk before a client hears of a grant:
//! every grant (`Grants`: after a restart sessions and holds are restored and get a grace
//! period, as Chubby does), or only reserved token blocks and the longest lease in use
//! (`Leases`: nothing is known about holders after a restart, so every lock ever granted stays
//! unavailable until every lease of the previous run has certainly expired — DESIGN.md §4).
//!
//! Files: `command.rs` (typed inputs), `record.rs` (the log's vocabulary), `apply.rs` (the one
//! implementation of recorded changes), `restore.rs` (replay, the restart policy, snapshots).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::ops::Bound;
use std::time::{Duration, Instant};

mod apply;
mod command;
mod holders;
pub(crate) mod ids;
mod lock;
mod record;
mod restore;

use lock::{Holder, Lock, Waiter};

pub use command::{Acquire, InvalidOwner, Owner, Release};
/// The kind of hold (exclusive, shared, permit of N), as `locksmith-core` defines it.
pub use locksmith_core::HoldMode;
/// Lock names, validated by `locksmith-core` (the same rules on every backend).
pub use locksmith_core::LockName;
use locksmith_core::ModeConflict;
pub use record::Record;

/// Session id: `epoch << 32 | n`, unique across restarts (see [`Record::Boot`]).
pub type SessionId = u64;

/// SHA-256 of a session's resume secret: what the machine keeps and the log stores (see
/// `crate::secret`).
pub type SecretDigest = [u8; 32];

/// Compares two digests in time independent of where they differ.
fn same_digest(a: &SecretDigest, b: &SecretDigest) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Server limits, checked by the machine on every request (the per-client one by the service).
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
    /// Holds plus queued acquires of one session: one client cannot fill the server's memory
    /// through a single session.
    pub max_entries_per_session: usize,
    /// Live sessions of one client (its principal, or its connection without authentication).
    /// Checked by the service, which knows who a client is; the machine does not.
    pub max_sessions_per_client: usize,
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
            max_entries_per_session: 10_000,
            max_sessions_per_client: 10_000,
        }
    }
}

/// Tokens reserved per [`Record::Reserve`] in [`Durability::Leases`]: one synced record per
/// this many grants of a lock; a restart skips what was left of the block.
pub const RESERVE_BLOCK: u64 = 1024;

/// How far ahead of the highest token issued the server-wide token floor ([`Record::Floor`]) is
/// reserved: one synced floor record per this many tokens of the busiest lock.
pub const FLOOR_BLOCK: u64 = 1024;

/// Most locks [`Machine::status_page`] looks at in one call, whatever it returns: a page of a
/// principal that may observe few of many locks stays cheap for the task that serves them all.
pub const STATUS_SCAN: usize = 10_000;

/// How long a restored session that holds nothing gets to resume, at most (it keeps its TTL
/// when that is shorter). Sessions with holds get a full TTL: their clients may trust their
/// holds that long. A session without holds has no guard to protect, and a client whose session
/// expired opens a new one, so a table filled with idle long-TTL sessions does not outlive a
/// restart by an hour.
pub const RESTORED_IDLE_GRACE: Duration = Duration::from_secs(10);

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

/// Which limit refused a request: said where the refusal is made, so that what counts refusals
/// (the server's metrics) never has to read it back from the words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LimitKind {
    /// The server's live session limit.
    Sessions,
    /// Live sessions of one client (principal or address).
    SessionsPerClient,
    /// Holds and waits of one session.
    EntriesPerSession,
    /// Waiters on one lock.
    WaitersPerLock,
    /// Anything else the server ran short of.
    Other,
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
    /// A limit was hit: which one, and in words.
    #[error("limit exceeded: {1}")]
    Limit(LimitKind, String),
    /// A resume with a wrong or missing secret: nothing changed.
    #[error("permission denied: {0}")]
    Denied(String),
    /// This cluster node does not serve clients (it does not lead): the text says where the
    /// leader is, when known.
    #[error("{0}")]
    NotLeader(String),
}

#[derive(Debug)]
struct Session {
    ttl: Duration,
    /// Digest of the resume secret; `None` for a session restored from a log written before
    /// secrets existed (it cannot be resumed).
    secret: Option<SecretDigest>,
    deadline: Instant,
    /// Holds: `(lock, token)`; a session may hold several permits or read locks of one name.
    holds: HashSet<(Box<str>, u64)>,
    /// Queued acquires: request id → where the waiter stands.
    waits: HashMap<u64, Wait>,
}

/// Where a session's queued acquire stands: its lock and its key in that lock's queue.
#[derive(Debug)]
struct Wait {
    name: Box<str>,
    seq: u64,
}

/// A lock's state for introspection.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockView {
    /// Lock name.
    pub name: String,
    /// `(session, owner, token, ttl left)` of the holder (the first, when several hold it).
    pub holder: Option<(SessionId, String, u64, Duration)>,
    /// Every holder, by token.
    pub holders: Vec<HolderView>,
    /// A semaphore's number of permits, while it is in use.
    pub permits: Option<u32>,
    /// Queued waiters.
    pub waiters: u64,
    /// Last token issued.
    pub last_token: u64,
    /// Lock-delay left.
    pub delay_left: Option<Duration>,
}

/// One holder of a lock, for introspection.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HolderView {
    /// Its session.
    pub session: SessionId,
    /// Its owner id.
    pub owner: String,
    /// Its fencing token.
    pub token: u64,
    /// Its session's TTL left.
    pub ttl_left: Duration,
    /// The kind of hold.
    pub mode: HoldMode,
    /// The value held with it (an election's proposal).
    pub value: Option<String>,
}

/// One page of [`Machine::status_page`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct StatusPage {
    /// The locks of this page, in name order.
    pub locks: Vec<LockView>,
    /// Where the next page starts (exclusive): `None` when this is the last page.
    pub next: Option<String>,
}

/// The state machine.
#[derive(Debug)]
pub struct Machine {
    limits: Limits,
    durability: Durability,
    /// Longest (TTL, lock-delay) recorded in [`Record::Horizon`].
    horizon: (Duration, Duration),
    epoch: u64,
    /// Highest epoch any applied record names (a `Boot`, or a session id's high half): a
    /// restore starts the epoch after it.
    seen_epoch: u64,
    next_session: u64,
    /// Server-made ids only (see `ids`).
    sessions: ids::IdMap<Session>,
    /// Expiry index: (deadline, session).
    deadlines: BTreeSet<(Instant, SessionId)>,
    locks: BTreeMap<Box<str>, Lock>,
    /// Lock-delay index: (until, name).
    delays: BTreeSet<(Instant, Box<str>)>,
    /// Queue keys: each queued acquire gets the next one, so a queue's order is its key order.
    next_seq: u64,
    /// Highest token any lock may have issued: a [`Record::Floor`] is durable before a token
    /// above it is handed out.
    floor: u64,
    /// This boot's token base: tokens start above it on every lock (the floor at boot).
    base: u64,
    records: Vec<Record>,
    effects: Vec<Effect>,
    /// Locks someone observes, and those of them whose holders changed since
    /// [`Machine::take_changed`].
    watched: HashSet<Box<str>>,
    changed: Vec<Box<str>>,
}

impl Machine {
    /// A fresh machine in `epoch` (use 1 for an in-memory server).
    pub fn new(limits: Limits, epoch: u64) -> Self {
        Self {
            limits,
            durability: Durability::Grants,
            horizon: (Duration::ZERO, Duration::ZERO),
            epoch,
            seen_epoch: 0,
            next_session: 1,
            sessions: ids::IdMap::default(),
            deadlines: BTreeSet::new(),
            locks: BTreeMap::new(),
            delays: BTreeSet::new(),
            next_seq: 0,
            floor: 0,
            base: 0,
            records: Vec::new(),
            effects: Vec::new(),
            watched: HashSet::new(),
            changed: Vec::new(),
        }
    }

    /// Starts (`true`) or stops noting changes of `name`'s holders for [`Machine::take_changed`].
    pub fn watch(&mut self, name: &str, on: bool) {
        if on {
            self.watched.insert(name.into());
        } else {
            self.watched.remove(name);
        }
    }

    /// Takes the watched locks whose holders changed since the last call (each once, in the
    /// order of their first change).
    pub fn take_changed(&mut self) -> Vec<Box<str>> {
        std::mem::take(&mut self.changed)
    }

    /// Notes a change of `name`'s holders if someone watches it.
    fn touched(&mut self, name: &str) {
        if !self.watched.is_empty() && self.watched.contains(name) && !self.changed.iter().any(|c| &**c == name) {
            self.changed.push(name.into());
        }
    }

    /// The limits it checks.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// This boot's epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The server-wide token floor: no lock has issued (or will issue before a new
    /// [`Record::Floor`]) a token above it.
    pub fn floor(&self) -> u64 {
        self.floor
    }

    /// Locks known (each remembered for its fencing counter).
    pub fn lock_count(&self) -> usize {
        self.locks.len()
    }

    /// Live sessions.
    pub fn session_count(&self) -> usize {
        self.sessions.len()
    }

    /// Takes the records emitted since the last call, in order.
    pub fn take_records(&mut self) -> Vec<Record> {
        std::mem::take(&mut self.records)
    }

    /// Takes the effects emitted since the last call, in order.
    pub fn take_effects(&mut self) -> Vec<Effect> {
        std::mem::take(&mut self.effects)
    }

    /// Moves the records emitted since the last call to the end of `out`, in order. Unlike
    /// [`Machine::take_records`] the machine keeps its buffer: the grant path does not
    /// allocate one per batch.
    pub fn move_records_to(&mut self, out: &mut Vec<Record>) {
        out.append(&mut self.records);
    }

    /// Moves the effects emitted since the last call to the end of `out`, in order, keeping
    /// the machine's buffer (see [`Machine::move_records_to`]).
    pub fn move_effects_to(&mut self, out: &mut Vec<Effect>) {
        out.append(&mut self.effects);
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

    /// Opens a session whose resume secret has digest `secret`, or resumes `resume` if it is
    /// still alive (renewing it) and `secret` is the digest of its resume secret. The secret
    /// itself is made (and hashed) by the caller: the machine has no randomness of its own.
    ///
    /// # Errors
    /// TTL out of range, too many sessions, or (resume) the session is gone or `secret` is not
    /// its secret's digest ([`Refusal::Denied`]; nothing changes then, the session keeps its
    /// stream and holds).
    pub fn open(
        &mut self,
        now: Instant,
        ttl: Duration,
        resume: Option<SessionId>,
        secret: SecretDigest,
    ) -> Result<(SessionId, Duration), Refusal> {
        self.expire_due(now);
        if let Some(id) = resume {
            let s = self.sessions.get(&id).ok_or(Refusal::SessionExpired)?;
            if !s.secret.is_some_and(|d| same_digest(&d, &secret)) {
                return Err(Refusal::Denied("wrong resume secret for this session".into()));
            }
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
            return Err(Refusal::Limit(
                LimitKind::Sessions,
                format!("{} sessions on the server", self.limits.max_sessions),
            ));
        }
        let id = (self.epoch << 32) | (self.next_session & 0xffff_ffff);
        self.next_session += 1;
        self.emit(now, Record::Session { id, ttl, secret: Some(secret) });
        if self.durability == Durability::Leases && ttl > self.horizon.0 {
            self.emit(now, Record::Horizon { ttl, lock_delay: self.horizon.1 });
        }
        Ok((id, ttl))
    }

    /// Pushes every session's deadline to at least `now + at_least` (a new cluster leader's
    /// grace: no client that renewed before the fail-over loses its session to it).
    pub fn extend_sessions(&mut self, now: Instant, at_least: Duration) {
        let until = now + at_least;
        for (id, s) in self.sessions.iter_mut().filter(|(_, s)| s.deadline < until) {
            self.deadlines.remove(&(s.deadline, *id));
            s.deadline = until;
            self.deadlines.insert((until, *id));
        }
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

    /// Acquires `cmd.name` for `(cmd.session, cmd.owner)` in `cmd.mode`: granted at once when
    /// the hold fits the current holders and nobody is queued before it (or when it is already
    /// ours), otherwise busy, or queued as `cmd.request` if `cmd.wait`.
    ///
    /// # Errors
    /// Expired session, a lock-delay or owner id above the limits, a lock-delay on a hold that is
    /// not exclusive, a semaphore asked for with another number of permits (or as a lock), a full
    /// queue, or a session with too many holds and waits.
    pub fn acquire(&mut self, now: Instant, cmd: Acquire) -> Result<AcquireOutcome, Refusal> {
        self.expire_due(now);
        let Acquire { session, request, name, owner, wait, lock_delay, mode, value } = cmd;
        let Some(s) = self.sessions.get(&session) else {
            return Err(Refusal::SessionExpired);
        };
        let entries = s.holds.len() + s.waits.len();
        let queued_here = s.waits.get(&request).map(|w| &*w.name == name.as_str());
        if lock_delay > self.limits.max_lock_delay {
            return Err(Refusal::Invalid(format!("lock delay {lock_delay:?} above {:?}", self.limits.max_lock_delay)));
        }
        if !lock_delay.is_zero() && mode != HoldMode::Exclusive {
            return Err(Refusal::Invalid(format!(
                "a lock-delay applies to exclusive holds only, not to a {mode} hold"
            )));
        }
        if owner.as_str().len() > self.limits.max_owner_len {
            return Err(Refusal::Invalid(format!(
                "owner id is {} bytes, the maximum is {}",
                owner.as_str().len(),
                self.limits.max_owner_len
            )));
        }
        let name = name.as_str();
        let lock = self.locks.get(name);
        if let Some(h) = lock.and_then(|l| l.hold_of(session, owner.as_str())) {
            // Idempotent: a retried or resumed acquire of our own hold.
            return Ok(AcquireOutcome::Granted(h.token));
        }
        if let Some(why) = lock.and_then(|l| l.refuses(mode)) {
            return Err(Refusal::Invalid(ModeConflict::new(name, why).to_string()));
        }
        let free = lock.is_none_or(|l| l.grants_now(mode, now));
        if !free && !wait {
            return Ok(AcquireOutcome::Busy);
        }
        if !free {
            match queued_here {
                // A retried acquire that is queued already.
                Some(true) => return Ok(AcquireOutcome::Queued),
                // `waits` and `cancel` know a queued acquire by (session, request) alone.
                Some(false) => {
                    return Err(Refusal::Invalid(format!("request {request} is already queued on another lock")))
                }
                None => {}
            }
        }
        let max = self.limits.max_entries_per_session;
        if entries >= max {
            return Err(Refusal::Limit(
                LimitKind::EntriesPerSession,
                format!("{max} locks held and waited for by one session"),
            ));
        }
        let waiting = lock.map_or(0, Lock::waiters);
        let last = lock.map_or((0, 0), |l| (l.counter, l.reserved));
        if !free && waiting >= self.limits.max_waiters_per_lock {
            return Err(Refusal::Limit(
                LimitKind::WaitersPerLock,
                format!("{} waiters on lock {name:?}", self.limits.max_waiters_per_lock),
            ));
        }
        if self.durability == Durability::Leases && lock_delay > self.horizon.1 {
            self.emit(now, Record::Horizon { ttl: self.horizon.0, lock_delay });
        }
        let waiter = Waiter { session, request, owner: owner.into_string(), lock_delay, mode, value };
        if free {
            let token = self.grant(now, name, waiter, last);
            return Ok(AcquireOutcome::Granted(token));
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        if let Some(lock) = self.locks.get_mut(name) {
            lock.busy_mut().waiters.insert(seq, waiter);
        }
        if let Some(s) = self.sessions.get_mut(&session) {
            s.waits.insert(request, Wait { name: name.into(), seq });
        }
        Ok(AcquireOutcome::Queued)
    }

    /// Releases the hold `(cmd.session, cmd.owner, cmd.token)` on `cmd.name` and hands the lock
    /// to the next waiters that now fit. Returns whether that hold existed. Never touches anyone
    /// else's hold.
    pub fn release(&mut self, now: Instant, cmd: Release) -> bool {
        self.expire_due(now);
        let name = cmd.name.as_str();
        let ours = self
            .locks
            .get(name)
            .and_then(|l| l.hold(cmd.token))
            .is_some_and(|h| h.session == cmd.session && h.owner == cmd.owner.as_str());
        if !ours {
            return false;
        }
        self.emit(now, Record::Release { name: name.to_owned(), token: cmd.token, delay: Duration::ZERO });
        self.grant_next(now, name);
        true
    }

    /// Withdraws a queued acquire. Returns whether it was still queued (if not, it was granted
    /// or never existed).
    pub fn cancel(&mut self, now: Instant, session: SessionId, request: u64) -> bool {
        self.expire_due(now);
        let Some(wait) = self.sessions.get_mut(&session).and_then(|s| s.waits.remove(&request)) else {
            return false;
        };
        self.drop_waiter(&wait);
        true
    }

    /// Ends a session now: frees its holds (no lock-delay: this is a clean close) and drops its
    /// waiters.
    pub fn close(&mut self, now: Instant, session: SessionId) {
        self.expire_due(now);
        self.end_session(now, session, false);
    }

    /// An administrator's release of a stuck lock: revokes the session of every holder of
    /// `name` (only `session`'s, when given) as if its lease had run out, without lock-delay:
    /// its holds are released and handed on to the next waiters (with greater tokens, as every
    /// grant), its waits dropped, and its client told the session expired, so a `locksmith run`
    /// holding it stops its command. Applied through [`apply`](Self::apply) and recorded like
    /// every change: `Release` and `SessionEnd` records for the log. Returns the holds it revoked (none: nothing changed).
    pub fn revoke(&mut self, now: Instant, name: &str, session: Option<SessionId>) -> Vec<HolderView> {
        self.expire_due(now);
        let Some(lock) = self.locks.get(name) else { return Vec::new() };
        let revoked: Vec<HolderView> = lock
            .holders()
            .filter(|h| session.is_none_or(|s| s == h.session))
            .map(|h| HolderView {
                session: h.session,
                owner: h.owner.clone(),
                token: h.token,
                ttl_left: self.session_ttl_left(now, h.session).unwrap_or_default(),
                mode: h.mode,
                value: h.value.clone(),
            })
            .collect();
        let mut ended = BTreeSet::new();
        for h in &revoked {
            if ended.insert(h.session) {
                self.end_session(now, h.session, false);
                self.effects.push(Effect::Expired { session: h.session });
            }
        }
        revoked
    }

    /// Expires every session whose deadline has passed and ends lock-delays that are over.
    pub fn tick(&mut self, now: Instant) {
        self.expire_due(now);
    }

    /// Introspection: one lock, or (`None`) every known lock in name order. Listing every lock
    /// costs O(n); a server answers listings with [`Machine::status_page`].
    pub fn status(&self, now: Instant, name: Option<&str>) -> Vec<LockView> {
        match name {
            Some(n) => self.locks.get_key_value(n).map(|(k, l)| self.view(now, k, l)).into_iter().collect(),
            None => self.locks.iter().map(|(k, l)| self.view(now, k, l)).collect(),
        }
    }

    /// Introspection by pages: up to `limit` locks whose names come after `after` (from the
    /// first lock when `None`) and pass `visible`, in name order. Looks at no more than
    /// [`STATUS_SCAN`] locks, so a page may hold fewer than `limit` locks and still have a next
    /// one: O(log n + limit + [`STATUS_SCAN`]) whatever the number of locks.
    pub fn status_page(
        &self,
        now: Instant,
        after: Option<&str>,
        limit: usize,
        visible: &dyn Fn(&str) -> bool,
    ) -> StatusPage {
        let from = after.map_or(Bound::Unbounded, Bound::Excluded);
        let mut entries = self.locks.range::<str, _>((from, Bound::Unbounded)).peekable();
        let (mut locks, mut scanned) = (Vec::new(), 0);
        while let Some((name, lock)) = entries.next() {
            scanned += 1;
            if visible(name) {
                locks.push(self.view(now, name, lock));
            }
            if (locks.len() >= limit.max(1) || scanned >= STATUS_SCAN) && entries.peek().is_some() {
                return StatusPage { locks, next: Some(name.to_string()) };
            }
        }
        StatusPage { locks, next: None }
    }

    /// [`status_page`](Self::status_page) for a caller that may observe only the names under
    /// `prefixes`: only those names are looked at, and the cursor `next` is always one of them,
    /// so no page, cursor or page size depends on a lock the caller may not observe (a filter
    /// over every name let a binary search on `after` recover hidden names from `next`).
    pub fn status_page_within(&self, now: Instant, after: Option<&str>, limit: usize, prefixes: &[&str]) -> StatusPage {
        // Disjoint prefixes in order: one that another one starts with adds nothing, and the
        // names under two disjoint prefixes never interleave.
        let mut sorted: Vec<&str> = prefixes.to_vec();
        sorted.sort_unstable();
        let mut disjoint: Vec<&str> = Vec::with_capacity(sorted.len());
        for p in sorted {
            if disjoint.last().is_none_or(|q| !p.starts_with(q)) {
                disjoint.push(p);
            }
        }
        let limit = limit.max(1);
        let mut locks = Vec::new();
        for prefix in disjoint {
            let from = match after {
                Some(a) if a >= prefix => Bound::Excluded(a),
                _ => Bound::Included(prefix),
            };
            for (name, lock) in self.locks.range::<str, _>((from, Bound::Unbounded)) {
                if !name.starts_with(prefix) {
                    break;
                }
                if locks.len() == limit {
                    let next = locks.last().map(|v: &LockView| v.name.clone());
                    return StatusPage { locks, next };
                }
                locks.push(self.view(now, name, lock));
            }
        }
        StatusPage { locks, next: None }
    }

    fn view(&self, now: Instant, name: &str, lock: &Lock) -> LockView {
        let ttl_left = |session: SessionId| {
            self.sessions.get(&session).map(|s| s.deadline.saturating_duration_since(now)).unwrap_or_default()
        };
        let holders: Vec<HolderView> = lock
            .holders()
            .map(|h| HolderView {
                session: h.session,
                owner: h.owner.clone(),
                token: h.token,
                ttl_left: ttl_left(h.session),
                mode: h.mode,
                value: h.value.clone(),
            })
            .collect();
        LockView {
            name: name.to_string(),
            holder: holders.first().map(|h| (h.session, h.owner.clone(), h.token, h.ttl_left)),
            holders,
            permits: lock.permits(),
            waiters: lock.waiters() as u64,
            last_token: lock.counter,
            delay_left: lock.delay_until().map(|t| t.saturating_duration_since(now)),
        }
    }

    /// The session's TTL left, if it is alive.
    pub fn session_ttl_left(&self, now: Instant, id: SessionId) -> Option<Duration> {
        self.sessions.get(&id).map(|s| s.deadline.saturating_duration_since(now))
    }

    /// Applies a change this machine decided and keeps its record for the log (unless the
    /// durability mode does not store that kind).
    fn emit(&mut self, now: Instant, record: Record) {
        self.apply(now, &record);
        if record.is_kept_in(self.durability) {
            self.records.push(record);
        }
    }

    /// Grants `name` to the waiter `w` (asked now, or the head of the queue) with the next
    /// token; returns the token. `(counter, reserved)` are the lock's, which every caller has
    /// just looked at (passed in to spare a third lookup of the name on the hot path).
    fn grant(&mut self, now: Instant, name: &str, w: Waiter, (counter, reserved): (u64, u64)) -> u64 {
        let token = counter.max(self.base) + 1;
        if token > self.floor {
            // Durable before the grant is answered: a restart, whatever happened to the log,
            // starts every lock above it.
            self.emit(now, Record::Floor { upto: token + FLOOR_BLOCK - 1 });
        }
        if self.durability == Durability::Leases && token > reserved {
            // Synced before the grant is answered: a restart continues above the block.
            self.emit(now, Record::Reserve { name: name.to_owned(), upto: token + RESERVE_BLOCK - 1 });
        }
        let Waiter { session, owner, lock_delay, mode, value, .. } = w;
        self.emit(now, Record::Grant { name: name.to_owned(), session, owner, token, lock_delay, mode, value });
        token
    }

    /// Hands `name` to as many waiters from the head of its queue as now fit (one writer, a run
    /// of readers, free permits).
    fn grant_next(&mut self, now: Instant, name: &str) {
        loop {
            let Some(lock) = self.locks.get_mut(name) else { return };
            let Some(w) = lock.pop_admitted(now) else {
                lock.settle();
                return;
            };
            let last = (lock.counter, lock.reserved);
            if let Some(s) = self.sessions.get_mut(&w.session) {
                s.waits.remove(&w.request);
            }
            let (session, request) = (w.session, w.request);
            let token = self.grant(now, name, w, last);
            self.effects.push(Effect::Granted { session, request, token });
        }
    }

    fn expire_due(&mut self, now: Instant) {
        while let Some(&(deadline, id)) = self.deadlines.first() {
            if deadline > now {
                break;
            }
            // Popped here, not only by the session's end: an index entry without a session
            // must not stop the loop.
            self.deadlines.pop_first();
            self.end_session(now, id, true);
            self.effects.push(Effect::Expired { session: id });
        }
        while self.delays.first().is_some_and(|(until, _)| *until <= now) {
            let Some((until, name)) = self.delays.pop_first() else { break };
            if let Some(busy) = self.locks.get_mut(&name).and_then(|l| l.busy.as_mut()) {
                if busy.delay_until == Some(until) {
                    busy.delay_until = None;
                }
            }
            self.grant_next(now, &name);
        }
    }

    /// Ends a session: drops its waiters, releases each hold (starting its lock-delay if it
    /// `expired`) and hands it on, then records the end. Costs O(log n) per hold and wait of
    /// this session, whatever the length of the queues it stands in.
    fn end_session(&mut self, now: Instant, id: SessionId, expired: bool) {
        let Some(s) = self.sessions.get_mut(&id) else { return };
        let waits = std::mem::take(&mut s.waits);
        let holds = std::mem::take(&mut s.holds);
        // Waiters first: the hand-offs below must not go to this session.
        for wait in waits.values() {
            self.drop_waiter(wait);
        }
        for (name, token) in holds {
            let Some(h) = self.locks.get(&name).and_then(|l| l.hold(token)).filter(|h| h.session == id) else {
                continue;
            };
            let delay = if expired { h.lock_delay } else { Duration::ZERO };
            self.emit(now, Record::Release { name: name.to_string(), token, delay });
            self.grant_next(now, &name);
        }
        // Also drops the deadline (for an expiry, the one that ended it).
        self.emit(now, Record::SessionEnd { id });
    }

    /// Takes a queued acquire out of its lock's queue.
    fn drop_waiter(&mut self, wait: &Wait) {
        if let Some(lock) = self.locks.get_mut(&wait.name) {
            if let Some(busy) = lock.busy.as_mut() {
                busy.waiters.remove(&wait.seq);
            }
            lock.settle();
            // Never granted: nothing to remember (a free lock is granted at once, so a lock
            // with waiters has had a holder; this only tidies up after replays).
            if lock.counter == 0 && lock.busy.is_none() {
                self.locks.remove(&wait.name);
            }
        }
    }
}
