//! The driver trait: the few primitives a backend provides. Everything else (keep-alive
//! scheduling, loss detection, guards, reentrancy, timeouts) lives once, in the engine.

use std::time::Duration;

use async_trait::async_trait;

use crate::{Error, HoldMode, LockName, Result};

/// A backend family reached through one URL (`locksmith://…`, `memory://…`, `redis://…`).
#[async_trait]
pub trait Backend: Send + Sync + std::fmt::Debug + 'static {
    /// The URL (without credentials) for messages and logs.
    fn describe(&self) -> String;

    /// The URL scheme (`locksmith`, `redis`, `postgres`…): the `backend` label of metrics.
    fn scheme(&self) -> &'static str;

    /// Whether grants carry safe fencing tokens (DESIGN.md §2.4). Backends that cannot give one
    /// (Redlock) return `false`; the engine then refuses to lock unless the caller opted in with
    /// [`LockOptions::allow_unfenced`](crate::LockOptions::allow_unfenced), and guards report
    /// [`Guard::fencing_token`](crate::Guard::fencing_token) as `None`.
    fn provides_fencing(&self) -> bool {
        true
    }

    /// Opens a session: a lease of `ttl` that the engine keeps alive. The session reports the
    /// lease the backend actually granted ([`Session::lease`]).
    ///
    /// # Cancel safety
    /// Cancel safe: a session opened by a dropped call expires on the server after `ttl`.
    async fn open_session(&self, ttl: Duration) -> Result<Box<dyn Session>>;

    /// Introspection: one lock, or every lock the backend knows when `name` is `None`.
    ///
    /// # Cancel safety
    /// Cancel safe: read only.
    async fn status(&self, name: Option<&LockName>) -> Result<Vec<LockStatus>>;

    /// Whether this backend offers holds of `mode` (read locks, semaphore permits). Only the
    /// exclusive mutex unless a driver says more; the engine refuses the others with
    /// [`Error::Unsupported`] before asking the backend.
    fn supports(&self, mode: HoldMode) -> bool {
        mode == HoldMode::Exclusive
    }

    /// Whether this backend offers leader election: it keeps a hold's value (the proposal) and
    /// can be [observed](Backend::observe).
    fn supports_election(&self) -> bool {
        false
    }

    /// Follows lock `name`: its status now, then again after every change of its holders, for
    /// as long as the receiver is kept (a leader election's observers). Backends without a way
    /// to be told of changes refuse with [`Error::Unsupported`].
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the receiver ends the observation.
    async fn observe(&self, name: &LockName) -> Result<tokio::sync::mpsc::Receiver<Result<LockStatus>>> {
        Err(Error::Unsupported(format!("{} cannot be observed (no change notifications for {name})", self.describe())))
    }
}

/// What an acquisition asks for.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct AcquireRequest {
    /// The lock.
    pub name: LockName,
    /// Owner id, unique per hold within the session unless the caller asked for reentrancy.
    pub owner: String,
    /// Queue until granted (`true`) or answer at once (`false`).
    pub wait: bool,
    /// Lock-delay after this holder's session expires.
    pub lock_delay: Option<Duration>,
    /// The kind of hold (exclusive unless the backend [`supports`](Backend::supports) more).
    pub mode: HoldMode,
    /// A value others see with the hold (an election's proposal).
    pub value: Option<String>,
}

impl AcquireRequest {
    /// An exclusive request for `name` by `owner`.
    pub fn new(name: LockName, owner: impl Into<String>, wait: bool) -> Self {
        Self { name, owner: owner.into(), wait, lock_delay: None, mode: HoldMode::Exclusive, value: None }
    }
}

/// The answer to an acquisition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acquired {
    /// The lock is ours, with this fencing token.
    Granted {
        /// Fencing token: greater than every token issued before for this lock (0 from a
        /// backend whose [`Backend::provides_fencing`] is false).
        token: u64,
    },
    /// Somebody else holds it (only for `wait == false`).
    Busy,
}

/// What a keep-alive learned besides "the session lives".
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct KeepAlive {
    /// Holds the backend found gone (deleted by a third party, taken over).
    pub lost: Vec<LostHold>,
}

/// One hold a keep-alive found gone, named exactly as it was acquired: `(name, owner, token)`.
/// The owner tells holds of one session apart even on backends whose tokens are all 0.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LostHold {
    /// The lock.
    pub name: LockName,
    /// The owner id the hold was acquired as.
    pub owner: String,
    /// The token it was granted with.
    pub token: u64,
}

impl LostHold {
    /// A lost-hold report.
    pub fn new(name: LockName, owner: impl Into<String>, token: u64) -> Self {
        Self { name, owner: owner.into(), token }
    }
}

/// One session (lease) on a backend. Implementations must make [`Session::acquire`] cancel
/// safe: a dropped call leaves no waiter entry and no hold on the backend.
#[async_trait]
pub trait Session: Send + Sync + 'static {
    /// The session id as the backend names it.
    fn id(&self) -> String;

    /// The lease the backend granted: what it waits without a keep-alive before it ends the
    /// session (etcd rounds up to whole seconds, ZooKeeper negotiates a timeout, the native
    /// server answers with its own). The engine renews and keeps its local deadline by the
    /// shorter of this and the TTL asked for.
    fn lease(&self) -> Duration;

    /// When the message that started the lease was sent, for a driver that may spend a while
    /// before sending it (the native driver finding a cluster's leader through an election):
    /// the engine counts the first lease from here instead of from the start of the call that
    /// opened the session, which would leave less of the first lease than the backend gives.
    /// Never earlier than that call; `None` (the default): from the call.
    fn lease_started(&self) -> Option<tokio::time::Instant> {
        None
    }

    /// Whether every call this session makes to its backend has a time limit of its own (a
    /// third of the lease at most), after which the next call starts afresh on a new
    /// connection. The engine then lets a renewal run until the hold's local deadline instead
    /// of cutting it at a third of the lease: an answer that comes before the deadline still
    /// keeps the hold (a renewal of two round trips on a loaded machine), while a hung call is
    /// ended by the driver's own limit and retried. `false` (the default): the engine gives each
    /// renewal a third of the lease, and retries one that takes longer.
    fn bounds_its_calls(&self) -> bool {
        false
    }

    /// Renews the lease. `Err(Error::SessionExpired)` is definite; other errors are retried.
    ///
    /// # Cancel safety
    /// Cancel safe.
    async fn keep_alive(&self) -> Result<KeepAlive>;

    /// Acquires, or queues until granted when `req.wait`.
    ///
    /// # Cancel safety
    /// Must be cancel safe: dropping the future leaves no waiter and no hold behind.
    async fn acquire(&self, req: AcquireRequest) -> Result<Acquired>;

    /// Releases the hold `(name, owner, token)`. Returns whether it was still ours.
    /// Idempotent: a retried release returns `false` and changes nothing.
    ///
    /// # Cancel safety
    /// Cancel safe, but the release may or may not have happened; the lease is the backstop.
    async fn release(&self, name: &LockName, owner: &str, token: u64) -> Result<bool>;

    /// Ends the session and frees its holds.
    ///
    /// # Cancel safety
    /// Cancel safe; the lease expires anyway.
    async fn close(&self) -> Result<()>;
}

/// The state of one lock as a backend reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockStatus {
    /// The lock.
    pub name: String,
    /// Current holder, if any: the exclusive holder, or the first of several shared holders or
    /// permit holders (all of them are in [`LockStatus::holders`]).
    pub holder: Option<HolderStatus>,
    /// Every holder: one for an exclusive hold, several readers or permit holders.
    pub holders: Vec<HolderStatus>,
    /// A semaphore's number of permits, while it is in use.
    pub permits: Option<u32>,
    /// Number of queued waiters; `None` where the backend cannot see its waiters (e.g. SQLite,
    /// whose waiters poll).
    pub waiters: Option<u64>,
    /// The last token issued for this lock (0 if none).
    pub last_token: u64,
    /// Time left of a lock-delay, if one is running.
    pub lock_delay_left: Option<Duration>,
}

/// Who holds a lock.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HolderStatus {
    /// Holder's session id.
    pub session: String,
    /// Holder's owner id.
    pub owner: String,
    /// Holder's fencing token.
    pub token: u64,
    /// Time until the holder's session expires unless renewed; `None` where other clients cannot
    /// see it (ZooKeeper sessions).
    pub ttl_left: Option<Duration>,
    /// The kind of hold.
    pub mode: HoldMode,
    /// The value held with it (an election's proposal), if any.
    pub value: Option<String>,
}

impl LockStatus {
    /// A status record.
    pub fn new(name: String, holder: Option<HolderStatus>, waiters: u64, last_token: u64) -> Self {
        let holders = holder.iter().cloned().collect();
        Self { name, holder, holders, permits: None, waiters: Some(waiters), last_token, lock_delay_left: None }
    }

    /// With several holders (readers, permit holders): [`LockStatus::holder`] becomes the first.
    pub fn with_holders(mut self, holders: Vec<HolderStatus>) -> Self {
        self.holder = holders.first().cloned();
        self.holders = holders;
        self
    }

    /// With a semaphore's number of permits.
    pub fn with_permits(mut self, permits: Option<u32>) -> Self {
        self.permits = permits;
        self
    }

    /// With the number of waiters unknown to this backend.
    pub fn waiters_unknown(mut self) -> Self {
        self.waiters = None;
        self
    }

    /// The number of waiters, 0 when unknown (for code that only asks "anyone waiting?").
    pub fn waiters_or_zero(&self) -> u64 {
        self.waiters.unwrap_or(0)
    }

    /// With a running lock-delay.
    pub fn with_lock_delay_left(mut self, left: Option<Duration>) -> Self {
        self.lock_delay_left = left;
        self
    }
}

impl HolderStatus {
    /// A holder record.
    pub fn new(session: String, owner: String, token: u64, ttl_left: Duration) -> Self {
        Self { session, owner, token, ttl_left: Some(ttl_left), mode: HoldMode::Exclusive, value: None }
    }

    /// With the time left unknown to other clients.
    pub fn ttl_left_unknown(mut self) -> Self {
        self.ttl_left = None;
        self
    }

    /// With its kind of hold and value.
    pub fn with_mode(mut self, mode: HoldMode, value: Option<String>) -> Self {
        self.mode = mode;
        self.value = value;
        self
    }
}
