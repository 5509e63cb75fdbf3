//! Row-lock mode (`?mode=row_lock`, PostgreSQL and MySQL/MariaDB): the hold is
//! `SELECT … FOR UPDATE` on the lock's row of `locksmith_rows`, in a transaction left open on a
//! dedicated connection until release (ROLLBACK). A variant of the session-scoped modes
//! ([`crate::scoped`]): the connection is the lease, and these are the statements that differ.
//!
//! Waiting happens in the database's own lock queue, in chunks of [`WAIT_CHUNK`]
//! (`lock_timeout` / `innodb_lock_wait_timeout`), so every statement stays bounded and a
//! waiter whose client vanished leaves the queue within a chunk even if the kill below fails.

use std::sync::Arc;
use std::time::Duration;

use locksmith_core::{Error, Result};
use sqlx::Executor;

use locksmith_core::driver::CancelGuard;

use crate::db::{Db, Dedicated};

/// Longest single wait in the database's lock queue before the waiter re-queues (seconds: the
/// unit of `innodb_lock_wait_timeout`).
const WAIT_CHUNK: Duration = Duration::from_secs(2);

/// Armed until the outcome of a row-lock acquisition on connection `id` is known: a dropped
/// acquisition's connection is ended on the server, because a connection blocked in a lock wait
/// does not notice that its client went away and would be granted the row (briefly blocking
/// everyone) before it does.
pub(crate) fn kill_on_drop(db: Arc<Db>, id: i64) -> CancelGuard<(Arc<Db>, i64)> {
    CancelGuard::new("row-lock waiter", (db, id), |(db, id)| {
        Some(async move {
            if let Err(e) = db.kill_connection(id).await {
                tracing::debug!(id, error = %e, "could not end an abandoned row-lock waiter; its lock wait times out");
            }
        })
    })
}

/// Prepares a fresh dedicated connection: bounded lock waits, the lock's row in place
/// (inserted idempotently and committed, so `FOR UPDATE` always has a row to lock). Returns the
/// connection's server-side id.
pub(crate) async fn prepare(db: &Db, conn: &mut Dedicated, name: &str) -> Result<i64> {
    db.on(async {
        match conn {
            Dedicated::Postgres(c) => {
                // = WAIT_CHUNK
                c.execute("SET lock_timeout = '2s'").await?;
                sqlx::query_scalar::<_, i32>(
                    "WITH i AS (INSERT INTO locksmith_rows (name) VALUES ($1) ON CONFLICT (name) DO NOTHING) \
                     SELECT pg_backend_pid()",
                )
                .bind(name)
                .fetch_one(&mut *c)
                .await
                .map(i64::from)
            }
            Dedicated::MySql(c) => {
                // = WAIT_CHUNK
                c.execute("SET SESSION innodb_lock_wait_timeout = 2").await?;
                // InnoDB locks an existing row on a duplicate insert (and waits for its holder),
                // so look first with a plain consistent read, which takes no lock.
                let present: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM locksmith_rows WHERE name = ?")
                    .bind(name)
                    .fetch_one(&mut *c)
                    .await?;
                if present == 0 {
                    match sqlx::query("INSERT IGNORE INTO locksmith_rows (name) VALUES (?)")
                        .bind(name)
                        .execute(&mut *c)
                        .await
                    {
                        // A racing acquirer inserted and locked it meanwhile: the row is there.
                        Err(e) if busy(&e) => {}
                        r => r.map(drop)?,
                    }
                }
                sqlx::query_scalar::<_, i64>("SELECT CAST(CONNECTION_ID() AS SIGNED)").fetch_one(&mut *c).await
            }
        }
    })
    .await
}

/// One attempt: `BEGIN; SELECT … FOR UPDATE [NOWAIT]`. True: the row is locked and the
/// transaction stays open. False: busy (NOWAIT), or the wait chunk ended; the transaction was
/// rolled back.
pub(crate) async fn attempt(db: &Db, conn: &mut Dedicated, name: &str, wait: bool) -> Result<bool> {
    // The statement may wait a whole chunk in the lock queue.
    let r = tokio::time::timeout(WAIT_CHUNK + Duration::from_secs(5), async {
        match conn {
            Dedicated::Postgres(c) => {
                c.execute("BEGIN").await?;
                let q = match wait {
                    true => "SELECT name FROM locksmith_rows WHERE name = $1 FOR UPDATE",
                    false => "SELECT name FROM locksmith_rows WHERE name = $1 FOR UPDATE NOWAIT",
                };
                sqlx::query_scalar::<_, String>(q).bind(name).fetch_optional(&mut *c).await
            }
            Dedicated::MySql(c) => {
                c.execute("BEGIN").await?;
                let q = match wait {
                    true => "SELECT name FROM locksmith_rows WHERE name = ? FOR UPDATE",
                    false => "SELECT name FROM locksmith_rows WHERE name = ? FOR UPDATE NOWAIT",
                };
                sqlx::query_scalar::<_, String>(q).bind(name).fetch_optional(&mut *c).await
            }
        }
    })
    .await;
    let r = match r {
        Ok(r) => r,
        Err(_) => {
            return Err(Error::Unavailable {
                backend: db.describe().to_string(),
                message: format!("{}: a row-lock wait did not end within its chunk", db.dialect().label()),
            })
        }
    };
    match r {
        Ok(Some(_)) => Ok(true),
        // The row was deleted by hand: put it back, try again.
        Ok(None) => {
            rollback(db, conn).await?;
            prepare(db, conn, name).await?;
            Ok(false)
        }
        Err(e) if busy(&e) => {
            rollback(db, conn).await?;
            Ok(false)
        }
        Err(e) => Err(db.map_err(e)),
    }
}

/// Ends the transaction (and with it the row lock). True: it was still open on a live connection.
pub(crate) async fn rollback(db: &Db, conn: &mut Dedicated) -> Result<bool> {
    db.on(async {
        match conn {
            Dedicated::Postgres(c) => c.execute("ROLLBACK").await.map(drop),
            Dedicated::MySql(c) => c.execute("ROLLBACK").await.map(drop),
        }
    })
    .await
    .map(|()| true)
}

/// Whether the holding transaction is alive. On PostgreSQL an aborted transaction fails every
/// statement (`25P02`). MySQL/MariaDB roll a transaction back on their own only when it is a
/// deadlock victim or its lock wait times out, and a transaction that holds one row and waits for
/// nothing is neither: a live connection is a live hold.
pub(crate) async fn alive(db: &Db, conn: &mut Dedicated) -> Result<bool> {
    db.on(async {
        match conn {
            Dedicated::Postgres(c) => sqlx::query_scalar::<_, i32>("SELECT 1").fetch_one(c).await.map(|_| true),
            Dedicated::MySql(c) => sqlx::query_scalar::<_, i64>("SELECT 1").fetch_one(c).await.map(|_| true),
        }
    })
    .await
}

/// The lock was not available: NOWAIT refused, or the wait chunk ran out.
fn busy(e: &sqlx::Error) -> bool {
    let sqlx::Error::Database(d) = e else { return false };
    if let Some(my) = d.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>() {
        // 1205 lock wait timeout (also MariaDB's NOWAIT), 3572 MySQL 8's NOWAIT.
        return matches!(my.number(), 1205 | 3572);
    }
    // lock_not_available: NOWAIT or lock_timeout.
    d.code().as_deref() == Some("55P03")
}
