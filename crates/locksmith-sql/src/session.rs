//! A session: SQL has no lease of its own here, so a session is an id plus the holds it renews.
//! Each lock row carries its own `expires_at`; the engine's keep-alive renews every hold,
//! owner-checked. Exclusive holds are rows of `locksmith_locks`; read holds and permits rows of
//! `locksmith_holds` (see [`crate::lease`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use locksmith_core::driver::{millis, HoldTable, WaitLoop};
use locksmith_core::{AcquireRequest, Acquired, Backoff, Error, HoldMode, KeepAlive, LockName, Result, Session};

use crate::attempt::SqlAttempt;
use crate::db::Db;
use crate::lease::Table;

/// Largest fallback delay of a waiter that also gets NOTIFY wake-ups (PostgreSQL); always
/// capped by the holder's remaining lease.
const PUSHED_FALLBACK: Duration = Duration::from_secs(1);

/// One session on a SQL backend.
pub(crate) struct SqlSession {
    pub(crate) db: Arc<Db>,
    id: String,
    pub(crate) ttl_ms: i64,
    /// Each hold's table and owner column.
    pub(crate) holds: HoldTable<(Table, String)>,
    pub(crate) closed: AtomicBool,
}

impl SqlSession {
    pub(crate) fn new(db: Arc<Db>, ttl: Duration) -> Self {
        let ttl_ms = i64::try_from(millis(ttl)).unwrap_or(i64::MAX);
        let id = format!("{:016x}", locksmith_core::driver::identity::random_u64());
        Self { db, id, ttl_ms, holds: HoldTable::default(), closed: AtomicBool::new(false) }
    }

    /// The owner column of one attempt: `<session>:<nonce>:<owner>`.
    pub(crate) fn column(&self, owner: &str) -> String {
        format!("{}:{:08x}:{owner}", self.id, locksmith_core::driver::identity::random_u32())
    }
}

/// What the lease mode refuses before it touches the database: a kind of hold it does not know
/// (the engine asks [`SqlBackend::supports`](crate::SqlBackend) first; this is the backstop).
fn check_mode(describe: &str, mode: HoldMode) -> Result<()> {
    match mode {
        HoldMode::Exclusive | HoldMode::Shared => Ok(()),
        HoldMode::Permit(n) if n > 0 => Ok(()),
        HoldMode::Permit(_) => Err(Error::InvalidArgument("a semaphore has at least 1 permit".into())),
        other => Err(locksmith_core::driver::unsupported(describe, other)),
    }
}

/// What every SQL session refuses before it touches the database: a closed session, and a
/// lock-delay (no SQL mode has one).
pub(crate) fn admit(closed: &AtomicBool, req: &AcquireRequest) -> Result<()> {
    if closed.load(Ordering::SeqCst) {
        return Err(Error::SessionExpired);
    }
    if req.lock_delay.is_some() {
        return Err(Error::InvalidArgument("the sql backends do not support lock-delay".into()));
    }
    Ok(())
}

/// `<session>:<nonce>:<owner>` → `(session, owner)`; foreign rows keep the whole value as owner.
pub(crate) fn split_column(column: &str) -> (String, String) {
    let mut parts = column.splitn(3, ':');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(s), Some(_), Some(o)) => (s.to_string(), o.to_string()),
        _ => (String::new(), column.to_string()),
    }
}

#[async_trait]
impl Session for SqlSession {
    fn id(&self) -> String {
        self.id.clone()
    }

    /// Each row's `expires_at` is the TTL ahead, by the database clock.
    fn lease(&self) -> Duration {
        Duration::from_millis(u64::try_from(self.ttl_ms).unwrap_or(0))
    }

    /// Renews every hold of this session in one owner-checked statement (one short
    /// transaction on MySQL/MariaDB); reports holds whose row is gone or taken over.
    ///
    /// # Cancel safety
    /// Cancel safe.
    async fn keep_alive(&self) -> Result<KeepAlive> {
        let snapshot = self.holds.snapshot();
        if snapshot.is_empty() {
            self.db.ping().await?;
            return Ok(KeepAlive::default());
        }
        // Each hold's name and owner are copied once, for the statement, and then moved into
        // the key its verdict is looked up by.
        let batch: Vec<_> = snapshot
            .iter()
            .map(|h| (h.value.0, (h.name.to_string(), h.value.1.clone(), i64::try_from(h.token).unwrap_or(i64::MAX))))
            .collect();
        let renewed = self.db.renew_all(&batch, self.ttl_ms).await?;
        let verdicts = snapshot.into_iter().zip(batch).map(|(h, (_, (name, owner, _)))| {
            let ours = renewed.contains(&(name, owner));
            (h, ours)
        });
        Ok(self.holds.report(verdicts, "hold found gone or taken on renewal"))
    }

    /// Acquires in one short transaction per attempt; a waiter retries on a jittered exponential
    /// backoff capped by the first remaining lease in its way (read by the database clock). A
    /// writer that finds readers in its way announces itself (a `writer-waiting` row with a short
    /// lease, refreshed at each retry), and new readers wait until it got in or gave up.
    ///
    /// # Cancel safety
    /// Cancel safe: an attempt whose outcome was never seen is deleted in the background
    /// (owner-checked), so is a waiting writer's announcement, and nothing else is left behind.
    async fn acquire(&self, req: AcquireRequest) -> Result<Acquired> {
        admit(&self.closed, &req)?;
        check_mode(self.db.describe(), req.mode)?;
        let table = Table::of(req.mode);
        // A hold the engine dropped without releasing (it considered it dead) is freed first.
        if let Some(stale) = self.holds.take(&req.name, &req.owner) {
            self.db.release(stale.value.0, req.name.as_str(), &stale.value.1, stale.token).await?;
        }
        // PostgreSQL waiters are woken by NOTIFY; the timer is then only a fallback.
        let waiting = match req.wait {
            true => self.db.register_waiter(req.name.as_str()).await?,
            false => None,
        };
        let backoff = match waiting {
            Some(_) => Backoff::with_max(PUSHED_FALLBACK),
            None => Backoff::new(),
        };
        let mut attempt = SqlAttempt { session: self, req: &req, table, waiting, announced: None };
        WaitLoop::new(self.db.dialect().label(), req.wait).backoff(backoff).run(&mut attempt).await
    }

    /// Owner-checked release (`DELETE … WHERE name, owner, token`); renewal of the hold stops
    /// before the release is sent.
    ///
    /// # Cancel safety
    /// Cancel safe; the release may or may not have happened, `expires_at` is the backstop.
    async fn release(&self, name: &LockName, owner: &str, token: u64) -> Result<bool> {
        let Some((table, column)) = self.holds.take_token(name, owner, token) else { return Ok(false) };
        self.db.release(table, name.as_str(), &column, token).await
    }

    /// Releases every hold of the session.
    ///
    /// # Cancel safety
    /// Cancel safe; holds not released expire after the TTL.
    async fn close(&self) -> Result<()> {
        self.closed.store(true, Ordering::SeqCst);
        let mut first = None;
        for h in self.holds.drain() {
            if let Err(e) = self.db.release(h.value.0, h.name.as_str(), &h.value.1, h.token).await {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }
}
