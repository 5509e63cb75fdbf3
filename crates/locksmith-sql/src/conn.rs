//! Dedicated connections of the connection-scoped modes: each is given a server-side lease
//! when it starts serving an acquisition, and a connection that ended cleanly (lock released, or
//! never taken) is kept for the next acquisition instead of closed — opening one costs a
//! PostgreSQL backend fork (milliseconds), many times the lock itself.

use std::time::Duration;

use locksmith_core::Result;
use sqlx::{AssertSqlSafe, Executor};

use crate::db::{Db, Dedicated};

/// Idle connections kept per backend (they count against the server's `max_connections`).
const IDLE_MAX: usize = 4;

/// A connection leased for one acquisition: a kept one if any still answers, else a new one.
pub(crate) async fn open(db: &Db, ttl: Duration) -> Result<Dedicated> {
    while let Some(mut c) = db.take_idle() {
        // The lease statement doubles as the liveness check of a connection that sat idle.
        match lease(db, &mut c, ttl).await {
            Ok(()) => return Ok(c),
            Err(e) => tracing::debug!(error = %e, "a kept connection died while idle; dropped"),
        }
    }
    let mut c = db.connect_dedicated().await?;
    lease(db, &mut c, ttl).await?;
    Ok(c)
}

/// Keeps a connection that holds nothing (after a successful unlock / `ROLLBACK`, or an
/// attempt that found the lock busy) for reuse, its lease removed; closes it if the cache is
/// full or the reset fails.
pub(crate) async fn retire(db: &Db, mut c: Dedicated) {
    if db.idle_len() >= IDLE_MAX {
        return;
    }
    let reset = db
        .on(async {
            match &mut c {
                // Back to the connection's defaults: no idle timeouts, no lock_timeout, and no
                // advisory lock left behind (a writer's announcement whose give-back failed).
                Dedicated::Postgres(p) => p.execute("SELECT pg_advisory_unlock_all(); RESET ALL").await.map(drop),
                Dedicated::MySql(m) => m.execute("SET SESSION wait_timeout = DEFAULT").await.map(drop),
            }
        })
        .await;
    if reset.is_ok() {
        db.put_idle(c, IDLE_MAX);
    }
}

/// Gives the connection a lease on the server: it is ended (and its lock freed) once idle
/// for the TTL (at least 1 s, above the 200 ms polling backoff of a waiting connection). The
/// keep-alive runs a statement on every holding connection each TTL/3, so only a holder that
/// stopped (paused, partitioned, its host frozen) is cut off — by the database's timer, after
/// the holder's own deadline has passed (the idle timer starts when a keep-alive statement
/// ends, the holder's deadline when it was sent). Without this a paused process keeps its TCP
/// connection, and so its lock, for as long as it is paused.
async fn lease(db: &Db, conn: &mut Dedicated, ttl: Duration) -> Result<()> {
    let ms = ttl.max(Duration::from_secs(1)).as_millis().min(i32::MAX as u128);
    db.on(async {
        match conn {
            Dedicated::Postgres(c) => {
                // Row-lock mode idles inside a transaction.
                c.execute(AssertSqlSafe(format!("SET idle_in_transaction_session_timeout = {ms}"))).await?;
                // Advisory locks idle outside one; PostgreSQL < 14 lacks this setting
                // (undefined_object): the lock then lasts as long as the connection.
                match c.execute(AssertSqlSafe(format!("SET idle_session_timeout = {ms}"))).await {
                    Err(sqlx::Error::Database(d)) if d.code().as_deref() == Some("42704") => Ok(()),
                    r => r.map(drop),
                }
            }
            // Whole seconds, rounded up: never before the holder's deadline.
            Dedicated::MySql(c) => {
                c.execute(AssertSqlSafe(format!("SET SESSION wait_timeout = {}", ms.div_ceil(1000)))).await.map(drop)
            }
        }
    })
    .await
}
