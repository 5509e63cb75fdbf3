//! Connection-scoped modes: PostgreSQL `pg_advisory_lock` (`?mode=advisory`, with read locks on
//! `pg_advisory_lock_shared`), MySQL/MariaDB
//! `GET_LOCK` (`?mode=get_lock`) and row locks on both (`?mode=row_lock`, statements in
//! [`crate::rowlock`]). Each hold owns a dedicated connection; the database frees the lock when
//! that connection ends: at once for a crashed holder, and after the TTL for a paused or
//! partitioned one, whose connection the server ends once idle that long (see `lease`).
//! The fencing token is bumped in `locksmith_fence` after the lock was granted: on the holding
//! connection for advisory locks and `GET_LOCK`; in a separate committed statement for row
//! locks (a bump inside the still-open transaction would roll back with a lost hold, and the
//! next holder would repeat the token).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use locksmith_core::driver::HoldTable;
use locksmith_core::{AcquireRequest, Acquired, Backoff, Error, HoldMode, KeepAlive, LockName, Result, Session};
use tokio::sync::Mutex as AsyncMutex;

use crate::conn;
use crate::db::{Db, Dedicated, BUMP_FENCE_MYSQL, BUMP_FENCE_POSTGRES, LAST_FENCE_MYSQL};
use crate::rowlock;
use crate::url::Mode;

/// The advisory-lock key of a name: a 64-bit hash computed by the server (names whose hashes
/// collide share one lock: over-exclusion, never under-exclusion).
macro_rules! pg_key {
    () => {
        "hashtextextended($1, 0)"
    };
}
/// The key of a name's writer announcement (advisory mode's read/write locks): another hash of
/// the name. A waiting writer holds it in shared mode; a reader that cannot take it exclusively
/// (at once given back) knows a writer waits.
macro_rules! pg_announce_key {
    () => {
        "hashtextextended($1, 1)"
    };
}
/// `GET_LOCK` names are at most 64 characters: longer names are hashed (SHA-256, 64 hex).
macro_rules! my_name {
    () => {
        "IF(CHAR_LENGTH(?) <= 64, ?, SHA2(?, 256))"
    };
}

type Conn = Arc<AsyncMutex<Dedicated>>;

/// One session whose holds are database sessions.
pub(crate) struct ScopedSession {
    db: Arc<Db>,
    id: String,
    /// The session's lease: a holding connection idle this long is ended by the server.
    ttl: Duration,
    /// Each hold's dedicated connection and kind (advisory mode: exclusive or shared).
    holds: HoldTable<(Conn, HoldMode)>,
    closed: AtomicBool,
}

impl ScopedSession {
    pub(crate) fn new(db: Arc<Db>, ttl: Duration) -> Self {
        let id = format!("{:016x}", locksmith_core::driver::identity::random_u64());
        Self { db, id, ttl, holds: HoldTable::default(), closed: AtomicBool::new(false) }
    }

    /// Tries the lock once on `conn` (never blocks in the server). A reader (advisory mode) gets
    /// in only if no writer has announced itself: it takes the announcement key exclusively and
    /// gives it back at once, then takes the lock shared — one statement (`CASE` evaluates in
    /// order).
    async fn try_lock(&self, conn: &mut Dedicated, name: &str, mode: HoldMode) -> Result<bool> {
        self.db
            .on(async {
                match conn {
                    Dedicated::Postgres(c) if mode == HoldMode::Shared => {
                        sqlx::query_scalar::<_, bool>(concat!(
                            "SELECT CASE WHEN NOT pg_try_advisory_lock(",
                            pg_announce_key!(),
                            ") THEN false WHEN NOT pg_advisory_unlock(",
                            pg_announce_key!(),
                            ") THEN false ELSE pg_try_advisory_lock_shared(",
                            pg_key!(),
                            ") END"
                        ))
                        .bind(name)
                        .fetch_one(c)
                        .await
                    }
                    Dedicated::Postgres(c) => {
                        sqlx::query_scalar::<_, bool>(concat!("SELECT pg_try_advisory_lock(", pg_key!(), ")"))
                            .bind(name)
                            .fetch_one(c)
                            .await
                    }
                    Dedicated::MySql(c) => {
                        sqlx::query_scalar::<_, Option<i64>>(concat!("SELECT GET_LOCK(", my_name!(), ", 0)"))
                            .bind(name)
                            .bind(name)
                            .bind(name)
                            .fetch_one(c)
                            .await
                            .map(|v| v == Some(1))
                    }
                }
            })
            .await
    }

    /// Bumps the counter on the holding connection and returns the new value.
    async fn bump(&self, conn: &mut Dedicated, name: &str) -> Result<u64> {
        let token = self
            .db
            .on(async {
                match conn {
                    Dedicated::Postgres(c) => {
                        sqlx::query_scalar::<_, i64>(BUMP_FENCE_POSTGRES).bind(name).fetch_one(c).await
                    }
                    Dedicated::MySql(c) => {
                        sqlx::query(BUMP_FENCE_MYSQL).bind(name).execute(&mut *c).await?;
                        sqlx::query_scalar::<_, i64>(LAST_FENCE_MYSQL).fetch_one(&mut *c).await
                    }
                }
            })
            .await?;
        u64::try_from(token).map_err(|_| {
            Error::Protocol(format!("{}: fencing counter of {name:?} is negative ({token})", self.db.dialect().label()))
        })
    }

    /// Whether `conn` is alive and still holds `name`.
    async fn still_held(&self, conn: &mut Dedicated, name: &str) -> Result<bool> {
        if self.db.mode() == Mode::RowLock {
            return rowlock::alive(&self.db, conn).await;
        }
        self.db
            .on(async {
                match conn {
                    // An advisory lock is only freed by its own session (unlock) or its end.
                    Dedicated::Postgres(c) => sqlx::query_scalar::<_, i32>("SELECT 1").fetch_one(c).await.map(|_| true),
                    Dedicated::MySql(c) => sqlx::query_scalar::<_, Option<i64>>(concat!(
                        "SELECT CAST(IS_USED_LOCK(",
                        my_name!(),
                        ") = CONNECTION_ID() AS SIGNED)"
                    ))
                    .bind(name)
                    .bind(name)
                    .bind(name)
                    .fetch_one(c)
                    .await
                    .map(|v| v == Some(1)),
                }
            })
            .await
    }

    async fn unlock(&self, conn: &mut Dedicated, name: &str, mode: HoldMode) -> Result<bool> {
        if self.db.mode() == Mode::RowLock {
            return rowlock::rollback(&self.db, conn).await;
        }
        self.db
            .on(async {
                match conn {
                    Dedicated::Postgres(c) if mode == HoldMode::Shared => {
                        sqlx::query_scalar::<_, bool>(concat!("SELECT pg_advisory_unlock_shared(", pg_key!(), ")"))
                            .bind(name)
                            .fetch_one(c)
                            .await
                    }
                    Dedicated::Postgres(c) => {
                        sqlx::query_scalar::<_, bool>(concat!("SELECT pg_advisory_unlock(", pg_key!(), ")"))
                            .bind(name)
                            .fetch_one(c)
                            .await
                    }
                    Dedicated::MySql(c) => {
                        sqlx::query_scalar::<_, Option<i64>>(concat!("SELECT RELEASE_LOCK(", my_name!(), ")"))
                            .bind(name)
                            .bind(name)
                            .bind(name)
                            .fetch_one(c)
                            .await
                            .map(|v| v == Some(1))
                    }
                }
            })
            .await
    }

    /// Unlocks on the holding connection, then keeps it for reuse if it ended cleanly and no
    /// keep-alive is looking at it; otherwise it is dropped (closed).
    async fn finish(&self, conn: Conn, mode: HoldMode, name: &str) -> Result<bool> {
        let released = {
            let mut c = conn.lock().await;
            self.unlock(&mut c, name, mode).await
        };
        if matches!(released, Ok(true)) {
            if let Ok(c) = Arc::try_unwrap(conn) {
                conn::retire(&self.db, c.into_inner()).await;
            }
        }
        released
    }

    /// Advisory lock / `GET_LOCK`: tries without blocking in the server, polling with the
    /// jittered backoff while waiting; once granted, bumps the counter on the holding
    /// connection. `None`: busy (only when not waiting).
    ///
    /// Advisory mode, writer preference: a writer that has to wait announces itself by holding
    /// the name's announcement key in shared mode on its connection (several writers may), so new
    /// readers stay out; it gives the key back once granted, and a writer that gives up drops its
    /// connection, which ends the announcement with it.
    async fn poll_lock(&self, conn: &mut Dedicated, name: &str, mode: HoldMode, wait: bool) -> Result<Option<u64>> {
        let mut backoff = Backoff::new();
        let mut announced = false;
        loop {
            if self.try_lock(conn, name, mode).await? {
                if announced {
                    self.announce(conn, name, false).await?;
                }
                return self.bump(conn, name).await.map(Some);
            }
            if !wait {
                return Ok(None);
            }
            if !announced && mode == HoldMode::Exclusive && matches!(conn, Dedicated::Postgres(_)) {
                // Taken shared, so it fails only while a reader checks it: tried again next time.
                announced = self.announce(conn, name, true).await?;
            }
            tokio::time::sleep(backoff.delay(None)).await;
            locksmith_core::metrics::wakeup(self.db.dialect().label());
        }
    }

    /// Takes (`on`) or gives back a writer's announcement of `name` (PostgreSQL advisory mode);
    /// whether it was taken / given back.
    async fn announce(&self, conn: &mut Dedicated, name: &str, on: bool) -> Result<bool> {
        let Dedicated::Postgres(c) = conn else { return Ok(false) };
        let sql = match on {
            true => concat!("SELECT pg_try_advisory_lock_shared(", pg_announce_key!(), ")"),
            false => concat!("SELECT pg_advisory_unlock_shared(", pg_announce_key!(), ")"),
        };
        self.db.on(sqlx::query_scalar::<_, bool>(sql).bind(name).fetch_one(c)).await
    }

    /// Row lock: waits in the database's lock queue (in bounded chunks) until `FOR UPDATE`
    /// returns, bumps the counter in its own committed statement, then checks that the holding
    /// transaction is still alive — so the lock was held from before the bump to after it, and no
    /// later holder can have bumped first. `None`: busy (only when not waiting).
    async fn lock_row(&self, conn: &mut Dedicated, name: &str, wait: bool) -> Result<Option<u64>> {
        let id = rowlock::prepare(&self.db, conn, name).await?;
        // Armed until the outcome is known: a dropped acquisition may be queued in the server.
        let kill = rowlock::kill_on_drop(self.db.clone(), id);
        while !rowlock::attempt(&self.db, conn, name, wait).await? {
            if !wait {
                kill.disarm();
                return Ok(None);
            }
            // Re-queued after a wait chunk ran out (or the row was restored).
            locksmith_core::metrics::wakeup(self.db.dialect().label());
        }
        let token = self.db.bump_fence(name).await?;
        if !rowlock::alive(&self.db, conn).await.unwrap_or(false) {
            return Err(Error::Unavailable {
                backend: self.db.describe().to_string(),
                message: format!(
                    "{}: the connection holding the row lock of {name:?} ended while granting it",
                    self.db.dialect().label()
                ),
            });
        }
        kill.disarm();
        Ok(Some(token))
    }
}

#[async_trait]
impl Session for ScopedSession {
    fn id(&self) -> String {
        self.id.clone()
    }

    /// The server ends a holding connection idle for the TTL.
    fn lease(&self) -> Duration {
        self.ttl
    }

    /// Checks every hold's connection (on MySQL `GET_LOCK` also that it still owns the lock; in
    /// row-lock mode that the transaction is alive); a dead connection means the database has
    /// freed, or will free, the lock: reported lost.
    ///
    /// # Cancel safety
    /// Cancel safe.
    async fn keep_alive(&self) -> Result<KeepAlive> {
        let snapshot = self.holds.snapshot();
        if snapshot.is_empty() {
            self.db.ping().await?;
            return Ok(KeepAlive::default());
        }
        let mut verdicts = Vec::with_capacity(snapshot.len());
        for h in snapshot {
            let held = {
                let mut c = h.value.0.lock().await;
                self.still_held(&mut c, h.name.as_str()).await
            };
            // An error on the holding connection is a lost hold: the lock lives and dies with it.
            verdicts.push((h, matches!(held, Ok(true))));
        }
        Ok(self.holds.report(verdicts, "the connection holding the lock is gone"))
    }

    /// Opens a dedicated connection and takes the lock on it: `pg_try_advisory_lock` (a
    /// reader: `pg_try_advisory_lock_shared`, unless a writer has announced itself) /
    /// `GET_LOCK(name, 0)` polled with a jittered exponential backoff while waiting, or
    /// `SELECT … FOR UPDATE [NOWAIT]` waiting in the database's lock queue.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped acquisition drops its connection, and the database frees a lock
    /// taken on it (and a waiting writer's announcement); a row-lock acquisition dropped while
    /// queued in the server also has its connection killed (from the pool), so it leaves no
    /// waiter that would later hold the row.
    async fn acquire(&self, req: AcquireRequest) -> Result<Acquired> {
        crate::session::admit(&self.closed, &req)?;
        // The engine asks `supports` first; this is the backstop.
        if !crate::backend::scoped_supports(self.db.mode(), req.mode) {
            return Err(Error::Unsupported(format!(
                "{}: {} holds need the lease mode (the default) here; ?mode={} holds the database's own lock",
                self.db.dialect().label(),
                req.mode,
                self.db.mode().as_str()
            )));
        }
        if let Some(stale) = self.holds.take(&req.name, &req.owner) {
            let (conn, mode) = stale.value;
            let mut c = conn.lock().await;
            let _ = self.unlock(&mut c, req.name.as_str(), mode).await;
        }
        let name = req.name.as_str();
        let mut conn = conn::open(&self.db, self.ttl).await?;
        let granted = match self.db.mode() {
            Mode::RowLock => self.lock_row(&mut conn, name, req.wait).await?,
            _ => self.poll_lock(&mut conn, name, req.mode, req.wait).await?,
        };
        let Some(token) = granted else {
            // Busy: the connection holds nothing (a refused try, a rolled-back NOWAIT).
            conn::retire(&self.db, conn).await;
            return Ok(Acquired::Busy);
        };
        if self.closed.load(Ordering::SeqCst) {
            return Err(Error::SessionExpired);
        }
        self.holds.insert(req.name.clone(), req.owner.clone(), token, (Arc::new(AsyncMutex::new(conn)), req.mode));
        Ok(Acquired::Granted { token })
    }

    /// Unlocks on the holding connection (`ROLLBACK` in row-lock mode), then closes it.
    ///
    /// # Cancel safety
    /// Cancel safe: if dropped, the connection is dropped and the database frees the lock.
    async fn release(&self, name: &LockName, owner: &str, token: u64) -> Result<bool> {
        let Some((conn, mode)) = self.holds.take_token(name, owner, token) else { return Ok(false) };
        self.finish(conn, mode, name.as_str()).await
    }

    /// Releases every hold (closing its connection).
    ///
    /// # Cancel safety
    /// Cancel safe; dropped connections free their locks.
    async fn close(&self) -> Result<()> {
        self.closed.store(true, Ordering::SeqCst);
        for h in self.holds.drain() {
            let _ = self.finish(h.value.0, h.value.1, h.name.as_str()).await;
        }
        Ok(())
    }
}
