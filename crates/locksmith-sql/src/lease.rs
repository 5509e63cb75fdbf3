//! The lease tables' statements on each database: the acquire transaction of each kind of hold,
//! the look at what is in the way, a waiting writer's announcement, owner-checked release, and
//! status. Every expiry is computed by the database from its own clock.
//!
//! Exclusive holds (the mutex, a read/write lock's writer) are rows of `locksmith_locks`, keyed
//! by name, exactly as before read locks and semaphores existed; read holds, permits and waiting
//! writers' announcements are rows of `locksmith_holds`, keyed by `(name, owner)`. Every
//! acquisition of a name, whatever its kind, first bumps the name's `locksmith_fence` row, whose
//! row lock serializes them for the few statements of the transaction: each then sees every
//! grant committed before it, in both tables.

use std::time::Duration;

use locksmith_core::{ConflictKind, Error, HoldMode, ModeConflict, Result};
use sqlx::Row;

use crate::db::{Db, Pool, BUMP_FENCE_POSTGRES};
use crate::schema::{KIND_PERMIT, KIND_SHARED, KIND_WRITER_WAITING};

/// Which table a hold's row is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Table {
    /// `locksmith_locks`: exclusive holds, one row per name.
    Locks,
    /// `locksmith_holds`: read holds, permits and waiting writers.
    Holds,
}

impl Table {
    /// The table's name, for statements built at run time ([`on_table!`] for static text).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Table::Locks => crate::schema::LOCKS_TABLE,
            Table::Holds => crate::schema::HOLDS_TABLE,
        }
    }

    /// Where a hold of `mode` lives.
    pub(crate) fn of(mode: HoldMode) -> Self {
        match mode {
            HoldMode::Exclusive => Table::Locks,
            _ => Table::Holds,
        }
    }
}

/// One statement's text for each table (sqlx takes static text only).
macro_rules! on_table {
    ($table:expr, $($before:expr),+ ; $($after:expr),+) => {
        match $table {
            $crate::lease::Table::Locks => concat!($($before,)+ "locksmith_locks", $($after),+),
            $crate::lease::Table::Holds => concat!($($before,)+ "locksmith_holds", $($after),+),
        }
    };
}
pub(crate) use on_table;

/// How long a waiting writer's announcement lasts unless refreshed: a writer that crashed while
/// waiting keeps new readers out for at most this long.
pub(crate) const ANNOUNCEMENT_LEASE: Duration = Duration::from_secs(2);
/// A waiting writer with an announcement retries (and so refreshes it) at least this often.
pub(crate) const ANNOUNCEMENT_REFRESH: Duration = Duration::from_millis(500);

/// The outcome of one acquire transaction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// The row is ours, with this token.
    Granted(u64),
    /// Held by others (or announced by a waiting writer, for a reader).
    Busy {
        /// Until the first of the holds in the way ends, by the database clock, if one was seen.
        left: Option<Duration>,
        /// Readers are in the way (of a writer, which then announces itself).
        readers: bool,
    },
    /// The hold can never be granted while the name is used this way (a semaphore of another
    /// number of permits, a lock asked for as a semaphore, …): the message says why.
    Refused(String),
}

/// Live rows of one kind on a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Live {
    pub(crate) count: i64,
    /// Until the first of them ends, by the database clock.
    pub(crate) left_ms: i64,
}

/// What a busy acquisition saw on its name: the live rows by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Seen {
    pub(crate) exclusive: Option<Live>,
    pub(crate) shared: Option<Live>,
    /// Permits, with the smallest and largest N they were granted under.
    pub(crate) permits: Option<(Live, i64, i64)>,
    pub(crate) writers_waiting: Option<Live>,
    /// Rows of a kind this version does not know (written by a newer one): counted as in the way.
    pub(crate) other: Option<Live>,
}

impl Seen {
    fn add(&mut self, kind: &str, live: Live, min_n: Option<i64>, max_n: Option<i64>) {
        match kind {
            "exclusive" => self.exclusive = Some(live),
            KIND_SHARED => self.shared = Some(live),
            KIND_PERMIT => self.permits = Some((live, min_n.unwrap_or(0), max_n.unwrap_or(0))),
            KIND_WRITER_WAITING => self.writers_waiting = Some(live),
            _ => self.other = Some(live),
        }
    }
}

fn left(live: Option<Live>) -> Option<Duration> {
    live.and_then(|l| u64::try_from(l.left_ms).ok()).map(Duration::from_millis)
}

impl Seen {
    /// How the name is in use, as a lock and as a semaphore (both only in a table written by
    /// hand): a waiting writer's announcement makes it a lock. For a semaphore whose permits
    /// rows disagree, the number that is not `asked`'s.
    fn in_use(&self, asked: HoldMode) -> [Option<HoldMode>; 2] {
        let lock = match (self.exclusive, self.shared.or(self.writers_waiting)) {
            (Some(_), _) => Some(HoldMode::Exclusive),
            (None, Some(_)) => Some(HoldMode::Shared),
            (None, None) => None,
        };
        let asked_n = match asked {
            HoldMode::Permit(n) => i64::from(n),
            _ => 0,
        };
        let semaphore = self.permits.map(|(_, lo, hi)| {
            let n = if lo != asked_n { lo } else { hi };
            HoldMode::Permit(u32::try_from(n).unwrap_or(u32::MAX))
        });
        [lock, semaphore]
    }
}

/// Why an acquisition of `mode` that was not granted could not be: busy (with how long the first
/// hold in its way has left) or refused. Which holds go together and which are refused are the
/// rules of `locksmith_core::holding` (the statements above apply them atomically, in SQL);
/// this judges what the look saw. A waiting writer's announcement keeps new readers out
/// (writer preference); it does not stop writers or permits.
pub(crate) fn verdict(mode: HoldMode, name: &str, seen: &Seen) -> Attempt {
    if let Some(why) = seen.in_use(mode).into_iter().flatten().find_map(|in_use| ConflictKind::between(in_use, mode)) {
        return Attempt::Refused(ModeConflict::new(name, why).to_string());
    }
    // Nothing in the way any more (released between the insert and the look): try again soon.
    let again = Attempt::Busy { left: Some(Duration::ZERO), readers: false };
    let busy = |live: Option<Live>, readers: bool| Attempt::Busy { left: left(live), readers };
    match mode {
        HoldMode::Exclusive | HoldMode::Shared => {
            if seen.exclusive.is_some() {
                return busy(seen.exclusive, false);
            }
            if mode == HoldMode::Exclusive {
                return match (seen.shared, seen.other) {
                    (Some(readers), _) => busy(Some(readers), true),
                    (None, Some(other)) => busy(Some(other), false),
                    (None, None) => again,
                };
            }
            match seen.writers_waiting.or(seen.other) {
                Some(w) => busy(Some(w), false),
                None => again,
            }
        }
        HoldMode::Permit(n) => match seen.permits {
            Some((live, _, _)) if live.count >= i64::from(n) => busy(Some(live), false),
            _ => match seen.other {
                Some(other) => busy(Some(other), false),
                None => again,
            },
        },
        // A kind this version does not know is refused by `supports` before it gets here.
        _ => Attempt::Refused(format!("{name:?}: {mode} holds are not offered by the sql backends")),
    }
}

/// What one acquisition asks for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ask<'a> {
    pub(crate) name: &'a str,
    /// The attempt's owner column (unique per attempt).
    pub(crate) owner: &'a str,
    pub(crate) mode: HoldMode,
    pub(crate) ttl_ms: i64,
    /// This writer's announcement, deleted in the granting transaction.
    pub(crate) announced: Option<&'a str>,
}

impl Ask<'_> {
    /// A semaphore's N as the tables store it.
    fn permits(&self) -> i32 {
        match self.mode {
            HoldMode::Permit(n) => i32::try_from(n).unwrap_or(i32::MAX),
            _ => 0,
        }
    }
}

/// The transaction's result before it is judged: the bumped counter of a grant, or what was in
/// the way (the transaction, counter bump included, was rolled back).
enum Outcome {
    Granted(i64),
    Seen(Seen),
}

// ---- PostgreSQL --------------------------------------------------------------------------

macro_rules! pg_live {
    () => {
        "expires_at >= clock_timestamp()"
    };
}

/// Exclusive: the mutex's insert, as before, unless readers or permits are live.
const PG_INSERT_EXCLUSIVE: &str = concat!(
    "INSERT INTO locksmith_locks (name, owner, token, expires_at) SELECT $1, $2, $3, ",
    pg_in_ms!("4"),
    " WHERE NOT EXISTS (SELECT 1 FROM locksmith_holds h WHERE h.name = $1 \
     AND h.kind <> 'writer-waiting' AND h.",
    pg_live!(),
    ") ON CONFLICT (name) DO NOTHING"
);
/// Shared: unless a writer holds or waits (announced), or the name is a semaphore.
const PG_INSERT_SHARED: &str = concat!(
    "INSERT INTO locksmith_holds (name, owner, token, kind, permits, expires_at) \
     SELECT $1, $2, $3, 'shared', NULL::integer, ",
    pg_in_ms!("4"),
    " WHERE NOT EXISTS (SELECT 1 FROM locksmith_locks l WHERE l.name = $1 AND l.",
    pg_live!(),
    ") AND NOT EXISTS (SELECT 1 FROM locksmith_holds h WHERE h.name = $1 AND h.kind <> 'shared' AND h.",
    pg_live!(),
    ")"
);
/// Permit of N: fewer than N live permits, all of N, and nothing else on the name.
const PG_INSERT_PERMIT: &str = concat!(
    "INSERT INTO locksmith_holds (name, owner, token, kind, permits, expires_at) \
     SELECT $1, $2, $3, 'permit', $5, ",
    pg_in_ms!("4"),
    " WHERE NOT EXISTS (SELECT 1 FROM locksmith_locks l WHERE l.name = $1 AND l.",
    pg_live!(),
    ") AND NOT EXISTS (SELECT 1 FROM locksmith_holds h WHERE h.name = $1 \
     AND (h.kind <> 'permit' OR h.permits <> $5) AND h.",
    pg_live!(),
    ") AND (SELECT count(*) FROM locksmith_holds h WHERE h.name = $1 AND h.",
    pg_live!(),
    ") < $5"
);
/// The live rows of a name by kind (both tables), for a busy or refused acquisition.
const PG_LOOK: &str = concat!(
    "SELECT kind, count(*), min(permits)::bigint, max(permits)::bigint, \
     (EXTRACT(EPOCH FROM (min(expires_at) - clock_timestamp())) * 1000)::bigint FROM (\
     SELECT 'exclusive'::text AS kind, NULL::integer AS permits, expires_at FROM locksmith_locks \
     WHERE name = $1 AND ",
    pg_live!(),
    " UNION ALL SELECT kind, permits, expires_at FROM locksmith_holds WHERE name = $1 AND ",
    pg_live!(),
    ") AS live GROUP BY kind"
);
const PG_DELETE_ANNOUNCEMENT: &str =
    "DELETE FROM locksmith_holds WHERE name = $1 AND owner = $2 AND kind = 'writer-waiting'";
const PG_ANNOUNCE: &str = concat!(
    "INSERT INTO locksmith_holds (name, owner, token, kind, permits, expires_at) \
     VALUES ($1, $2, 0, 'writer-waiting', NULL, ",
    pg_in_ms!("3"),
    ") ON CONFLICT (name, owner) DO UPDATE SET expires_at = EXCLUDED.expires_at"
);

async fn acquire_postgres(p: &sqlx::PgPool, a: Ask<'_>) -> Result<Outcome, sqlx::Error> {
    let mut tx = p.begin().await?;
    // The counter row lock serializes acquirers of this name until commit/rollback.
    let token: i64 = sqlx::query_scalar(BUMP_FENCE_POSTGRES).bind(a.name).fetch_one(&mut *tx).await?;
    let table = Table::of(a.mode);
    // Expired rows of the table we insert into go first ("whoever looks next cleans up").
    sqlx::query(on_table!(table, "DELETE FROM "; " WHERE name = $1 AND expires_at < clock_timestamp()"))
        .bind(a.name)
        .execute(&mut *tx)
        .await?;
    let insert = match a.mode {
        HoldMode::Exclusive => PG_INSERT_EXCLUSIVE,
        HoldMode::Shared => PG_INSERT_SHARED,
        _ => PG_INSERT_PERMIT,
    };
    let mut q = sqlx::query(insert).bind(a.name).bind(a.owner).bind(token).bind(a.ttl_ms);
    if matches!(a.mode, HoldMode::Permit(_)) {
        q = q.bind(a.permits());
    }
    if q.execute(&mut *tx).await?.rows_affected() == 1 {
        if let Some(announced) = a.announced {
            sqlx::query(PG_DELETE_ANNOUNCEMENT).bind(a.name).bind(announced).execute(&mut *tx).await?;
        }
        tx.commit().await?;
        return Ok(Outcome::Granted(token));
    }
    let rows = sqlx::query(PG_LOOK).bind(a.name).fetch_all(&mut *tx).await?;
    tx.rollback().await?;
    seen(&rows).map(Outcome::Seen)
}

// ---- MySQL / MariaDB ---------------------------------------------------------------------

macro_rules! my_live {
    () => {
        "expires_at >= NOW(6)"
    };
}

/// See [`PG_INSERT_EXCLUSIVE`]; a live row of the name is a duplicate-key error here.
const MY_INSERT_EXCLUSIVE: &str = concat!(
    "INSERT INTO locksmith_locks (name, owner, token, expires_at) \
     SELECT ?, ?, ?, NOW(6) + INTERVAL ? MICROSECOND FROM DUAL WHERE NOT EXISTS (\
     SELECT 1 FROM locksmith_holds h WHERE h.name = ? AND h.kind <> 'writer-waiting' AND h.",
    my_live!(),
    ")"
);
const MY_INSERT_SHARED: &str = concat!(
    "INSERT INTO locksmith_holds (name, owner, token, kind, permits, expires_at) \
     SELECT ?, ?, ?, 'shared', NULL, NOW(6) + INTERVAL ? MICROSECOND FROM DUAL \
     WHERE NOT EXISTS (SELECT 1 FROM locksmith_locks l WHERE l.name = ? AND l.",
    my_live!(),
    ") AND NOT EXISTS (SELECT 1 FROM locksmith_holds h WHERE h.name = ? AND h.kind <> 'shared' AND h.",
    my_live!(),
    ")"
);
const MY_INSERT_PERMIT: &str = concat!(
    "INSERT INTO locksmith_holds (name, owner, token, kind, permits, expires_at) \
     SELECT ?, ?, ?, 'permit', ?, NOW(6) + INTERVAL ? MICROSECOND FROM DUAL \
     WHERE NOT EXISTS (SELECT 1 FROM locksmith_locks l WHERE l.name = ? AND l.",
    my_live!(),
    ") AND NOT EXISTS (SELECT 1 FROM locksmith_holds h WHERE h.name = ? \
     AND (h.kind <> 'permit' OR h.permits <> ?) AND h.",
    my_live!(),
    ") AND (SELECT COUNT(*) FROM locksmith_holds h WHERE h.name = ? AND h.",
    my_live!(),
    ") < ?"
);
const MY_LOOK: &str = concat!(
    "SELECT kind, CAST(COUNT(*) AS SIGNED), CAST(MIN(permits) AS SIGNED), CAST(MAX(permits) AS SIGNED), \
     CAST(TIMESTAMPDIFF(MICROSECOND, NOW(6), MIN(expires_at)) DIV 1000 AS SIGNED) FROM (\
     SELECT 'exclusive' AS kind, NULL AS permits, expires_at FROM locksmith_locks WHERE name = ? AND ",
    my_live!(),
    " UNION ALL SELECT kind, permits, expires_at FROM locksmith_holds WHERE name = ? AND ",
    my_live!(),
    ") AS live GROUP BY kind"
);
const MY_DELETE_ANNOUNCEMENT: &str =
    "DELETE FROM locksmith_holds WHERE name = ? AND owner = ? AND kind = 'writer-waiting'";
const MY_ANNOUNCE: &str = "INSERT INTO locksmith_holds (name, owner, token, kind, permits, expires_at) \
     VALUES (?, ?, 0, 'writer-waiting', NULL, NOW(6) + INTERVAL ? MICROSECOND) \
     ON DUPLICATE KEY UPDATE expires_at = NOW(6) + INTERVAL ? MICROSECOND";

async fn acquire_mysql(p: &sqlx::MySqlPool, a: Ask<'_>) -> Result<Outcome, sqlx::Error> {
    let mut tx = p.begin().await?;
    sqlx::query("INSERT INTO locksmith_fence (name, token) VALUES (?, 1) ON DUPLICATE KEY UPDATE token = token + 1")
        .bind(a.name)
        .execute(&mut *tx)
        .await?;
    let token: i64 = sqlx::query_scalar("SELECT token FROM locksmith_fence WHERE name = ? FOR UPDATE")
        .bind(a.name)
        .fetch_one(&mut *tx)
        .await?;
    let table = Table::of(a.mode);
    sqlx::query(on_table!(table, "DELETE FROM "; " WHERE name = ? AND expires_at < NOW(6)"))
        .bind(a.name)
        .execute(&mut *tx)
        .await?;
    let ttl_us = a.ttl_ms.saturating_mul(1000);
    let q = match a.mode {
        HoldMode::Exclusive => {
            sqlx::query(MY_INSERT_EXCLUSIVE).bind(a.name).bind(a.owner).bind(token).bind(ttl_us).bind(a.name)
        }
        HoldMode::Shared => {
            sqlx::query(MY_INSERT_SHARED).bind(a.name).bind(a.owner).bind(token).bind(ttl_us).bind(a.name).bind(a.name)
        }
        _ => sqlx::query(MY_INSERT_PERMIT)
            .bind(a.name)
            .bind(a.owner)
            .bind(token)
            .bind(a.permits())
            .bind(ttl_us)
            .bind(a.name)
            .bind(a.name)
            .bind(a.permits())
            .bind(a.name)
            .bind(a.permits()),
    };
    let inserted = match q.execute(&mut *tx).await {
        Ok(r) => r.rows_affected() == 1,
        // A live exclusive row (the mutex's key): busy, as before.
        Err(sqlx::Error::Database(d)) if d.is_unique_violation() => false,
        Err(e) => return Err(e),
    };
    if inserted {
        if let Some(announced) = a.announced {
            sqlx::query(MY_DELETE_ANNOUNCEMENT).bind(a.name).bind(announced).execute(&mut *tx).await?;
        }
        tx.commit().await?;
        return Ok(Outcome::Granted(token));
    }
    let rows = sqlx::query(MY_LOOK).bind(a.name).bind(a.name).fetch_all(&mut *tx).await?;
    tx.rollback().await?;
    seen(&rows).map(Outcome::Seen)
}

// ---- SQLite ------------------------------------------------------------------------------

macro_rules! sqlite_live {
    () => {
        concat!("expires_at >= ", sqlite_now_ms!())
    };
}

const SQLITE_INSERT_EXCLUSIVE: &str = concat!(
    "INSERT INTO locksmith_locks (name, owner, token, expires_at) SELECT ?1, ?2, ?3, ",
    sqlite_now_ms!(),
    " + ?4 WHERE NOT EXISTS (SELECT 1 FROM locksmith_holds h WHERE h.name = ?1 \
     AND h.kind <> 'writer-waiting' AND h.",
    sqlite_live!(),
    ") ON CONFLICT (name) DO NOTHING"
);
const SQLITE_INSERT_SHARED: &str = concat!(
    "INSERT INTO locksmith_holds (name, owner, token, kind, permits, expires_at) \
     SELECT ?1, ?2, ?3, 'shared', NULL, ",
    sqlite_now_ms!(),
    " + ?4 WHERE NOT EXISTS (SELECT 1 FROM locksmith_locks l WHERE l.name = ?1 AND l.",
    sqlite_live!(),
    ") AND NOT EXISTS (SELECT 1 FROM locksmith_holds h WHERE h.name = ?1 AND h.kind <> 'shared' AND h.",
    sqlite_live!(),
    ")"
);
const SQLITE_INSERT_PERMIT: &str = concat!(
    "INSERT INTO locksmith_holds (name, owner, token, kind, permits, expires_at) \
     SELECT ?1, ?2, ?3, 'permit', ?5, ",
    sqlite_now_ms!(),
    " + ?4 WHERE NOT EXISTS (SELECT 1 FROM locksmith_locks l WHERE l.name = ?1 AND l.",
    sqlite_live!(),
    ") AND NOT EXISTS (SELECT 1 FROM locksmith_holds h WHERE h.name = ?1 \
     AND (h.kind <> 'permit' OR h.permits <> ?5) AND h.",
    sqlite_live!(),
    ") AND (SELECT COUNT(*) FROM locksmith_holds h WHERE h.name = ?1 AND h.",
    sqlite_live!(),
    ") < ?5"
);
const SQLITE_LOOK: &str = concat!(
    "SELECT kind, COUNT(*), MIN(permits), MAX(permits), MIN(expires_at) - ",
    sqlite_now_ms!(),
    " FROM (SELECT 'exclusive' AS kind, NULL AS permits, expires_at FROM locksmith_locks WHERE name = ?1 AND ",
    sqlite_live!(),
    " UNION ALL SELECT kind, permits, expires_at FROM locksmith_holds WHERE name = ?1 AND ",
    sqlite_live!(),
    ") AS live GROUP BY kind"
);
const SQLITE_DELETE_ANNOUNCEMENT: &str =
    "DELETE FROM locksmith_holds WHERE name = ?1 AND owner = ?2 AND kind = 'writer-waiting'";
const SQLITE_ANNOUNCE: &str = concat!(
    "INSERT INTO locksmith_holds (name, owner, token, kind, permits, expires_at) \
     VALUES (?1, ?2, 0, 'writer-waiting', NULL, ",
    sqlite_now_ms!(),
    " + ?3) ON CONFLICT (name, owner) DO UPDATE SET expires_at = excluded.expires_at"
);

async fn acquire_sqlite(p: &sqlx::SqlitePool, a: Ask<'_>) -> Result<Outcome, sqlx::Error> {
    // IMMEDIATE: take the write lock up front, so two processes never deadlock upgrading.
    let mut tx = p.begin_with("BEGIN IMMEDIATE").await?;
    let token: i64 = sqlx::query_scalar(
        "INSERT INTO locksmith_fence (name, token) VALUES (?1, 1) \
         ON CONFLICT (name) DO UPDATE SET token = token + 1 RETURNING token",
    )
    .bind(a.name)
    .fetch_one(&mut *tx)
    .await?;
    let table = Table::of(a.mode);
    sqlx::query(on_table!(table, "DELETE FROM "; " WHERE name = ?1 AND expires_at < ", sqlite_now_ms!()))
        .bind(a.name)
        .execute(&mut *tx)
        .await?;
    let insert = match a.mode {
        HoldMode::Exclusive => SQLITE_INSERT_EXCLUSIVE,
        HoldMode::Shared => SQLITE_INSERT_SHARED,
        _ => SQLITE_INSERT_PERMIT,
    };
    let mut q = sqlx::query(insert).bind(a.name).bind(a.owner).bind(token).bind(a.ttl_ms);
    if matches!(a.mode, HoldMode::Permit(_)) {
        q = q.bind(a.permits());
    }
    if q.execute(&mut *tx).await?.rows_affected() == 1 {
        if let Some(announced) = a.announced {
            sqlx::query(SQLITE_DELETE_ANNOUNCEMENT).bind(a.name).bind(announced).execute(&mut *tx).await?;
        }
        tx.commit().await?;
        return Ok(Outcome::Granted(token));
    }
    let rows = sqlx::query(SQLITE_LOOK).bind(a.name).fetch_all(&mut *tx).await?;
    tx.rollback().await?;
    seen(&rows).map(Outcome::Seen)
}

/// The look's rows: `(kind, count, min permits, max permits, ms left of the first to end)`.
fn seen<R: Row>(rows: &[R]) -> Result<Seen, sqlx::Error>
where
    usize: sqlx::ColumnIndex<R>,
    for<'a> String: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> i64: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
{
    let mut out = Seen::default();
    for r in rows {
        let kind: String = r.try_get(0)?;
        let count: i64 = r.try_get(1)?;
        let (lo, hi): (Option<i64>, Option<i64>) = (r.try_get(2)?, r.try_get(3)?);
        let left_ms: Option<i64> = r.try_get(4)?;
        out.add(&kind, Live { count, left_ms: left_ms.unwrap_or(0).max(0) }, lo, hi);
    }
    Ok(out)
}

/// A hold as `status` reports it.
#[derive(Debug, Clone)]
pub(crate) struct HolderRow {
    /// The owner column (`<session>:<nonce>:<owner>`, or whatever a foreign client wrote).
    pub(crate) column: String,
    pub(crate) token: i64,
    pub(crate) left_ms: i64,
    pub(crate) mode: HoldMode,
}

/// One lock as `status` reports it.
#[derive(Debug, Clone)]
pub(crate) struct LockRow {
    pub(crate) name: String,
    pub(crate) last_token: i64,
    /// Live holders: the exclusive one, or readers / permits by token.
    pub(crate) holders: Vec<HolderRow>,
    /// A semaphore's N while it has live permits.
    pub(crate) permits: Option<u32>,
}

impl Db {
    /// One acquire transaction: bump the fencing counter, delete the name's expired rows of the
    /// hold's table, insert ours if it fits (and delete this writer's announcement with it).
    /// Not granted: everything is rolled back, the counter included, and what was in the way
    /// decides between busy and refused.
    pub(crate) async fn try_acquire(&self, ask: Ask<'_>) -> Result<Attempt> {
        let pool = self.pool().await?;
        let outcome = self
            .timed(move || async move {
                match pool {
                    Pool::Postgres(p) => acquire_postgres(p, ask).await,
                    Pool::MySql(p) => acquire_mysql(p, ask).await,
                    Pool::Sqlite(p) => acquire_sqlite(p, ask).await,
                }
            })
            .await?;
        match outcome {
            Outcome::Granted(token) => u64::try_from(token).map(Attempt::Granted).map_err(|_| {
                Error::Protocol(format!(
                    "{}: fencing counter of {:?} is negative ({token})",
                    self.dialect().label(),
                    ask.name
                ))
            }),
            Outcome::Seen(seen) => Ok(match verdict(ask.mode, ask.name, &seen) {
                Attempt::Refused(why) => Attempt::Refused(format!("{}: {why}", self.dialect().label())),
                other => other,
            }),
        }
    }

    /// A waiting writer announces itself (or refreshes its announcement): new readers of `name`
    /// wait while it is live. Its own short lease, by the database clock; not a hold.
    pub(crate) async fn announce_writer(&self, name: &str, owner: &str) -> Result<()> {
        let pool = self.pool().await?;
        let ms = i64::try_from(ANNOUNCEMENT_LEASE.as_millis()).unwrap_or(i64::MAX);
        self.timed(move || async move {
            match pool {
                Pool::Postgres(p) => {
                    sqlx::query(PG_ANNOUNCE).bind(name).bind(owner).bind(ms).execute(p).await.map(drop)
                }
                Pool::MySql(p) => sqlx::query(MY_ANNOUNCE)
                    .bind(name)
                    .bind(owner)
                    .bind(ms.saturating_mul(1000))
                    .bind(ms.saturating_mul(1000))
                    .execute(p)
                    .await
                    .map(drop),
                Pool::Sqlite(p) => {
                    sqlx::query(SQLITE_ANNOUNCE).bind(name).bind(owner).bind(ms).execute(p).await.map(drop)
                }
            }
        })
        .await
    }

    /// Owner-checked release of a hold in `table`. True: the row was ours and is gone.
    pub(crate) async fn release(&self, table: Table, name: &str, owner: &str, token: u64) -> Result<bool> {
        let pool = self.pool().await?;
        let token = i64::try_from(token).unwrap_or(i64::MAX);
        let n = self
            .timed(move || async move {
                match pool {
                    Pool::Postgres(p) => sqlx::query(on_table!(table,
                        "WITH d AS (DELETE FROM ";
                        " WHERE name = $1 AND owner = $2 AND token = $3 RETURNING name) \
                         SELECT pg_notify('locksmith', name) FROM d"))
                    .bind(name)
                    .bind(owner)
                    .bind(token)
                    .fetch_all(p)
                    .await
                    .map(|r| r.len() as u64),
                    Pool::MySql(p) => {
                        sqlx::query(on_table!(table, "DELETE FROM "; " WHERE name = ? AND owner = ? AND token = ?"))
                            .bind(name)
                            .bind(owner)
                            .bind(token)
                            .execute(p)
                            .await
                            .map(|r| r.rows_affected())
                    }
                    Pool::Sqlite(p) => sqlx::query(on_table!(table,
                        "DELETE FROM "; " WHERE name = ?1 AND owner = ?2 AND token = ?3"))
                    .bind(name)
                    .bind(owner)
                    .bind(token)
                    .execute(p)
                    .await
                    .map(|r| r.rows_affected()),
                }
            })
            .await?;
        Ok(n > 0)
    }

    /// Deletes the row of `owner` in `table` whatever its token (cleanup of an attempt whose
    /// outcome was never seen, or of a writer's announcement; owner columns are unique per
    /// attempt).
    pub(crate) async fn delete_owner(&self, table: Table, name: &str, owner: &str) -> Result<bool> {
        let pool = self.pool().await?;
        let n = self
            .timed(move || async move {
                match pool {
                    Pool::Postgres(p) => sqlx::query(on_table!(table,
                        "WITH d AS (DELETE FROM ";
                        " WHERE name = $1 AND owner = $2 RETURNING name) SELECT pg_notify('locksmith', name) FROM d"))
                    .bind(name)
                    .bind(owner)
                    .fetch_all(p)
                    .await
                    .map(|r| r.len() as u64),
                    Pool::MySql(p) => sqlx::query(on_table!(table, "DELETE FROM "; " WHERE name = ? AND owner = ?"))
                        .bind(name)
                        .bind(owner)
                        .execute(p)
                        .await
                        .map(|r| r.rows_affected()),
                    Pool::Sqlite(p) => sqlx::query(on_table!(table, "DELETE FROM "; " WHERE name = ?1 AND owner = ?2"))
                        .bind(name)
                        .bind(owner)
                        .execute(p)
                        .await
                        .map(|r| r.rows_affected()),
                }
            })
            .await?;
        Ok(n > 0)
    }

    /// Every lock that ever had a token (`name == None`) or one lock, with its live holders: two
    /// reads, the counters with the exclusive holder, then the read holds and permits.
    pub(crate) async fn status(&self, name: Option<&str>) -> Result<Vec<LockRow>> {
        let pool = self.pool().await?;
        // `name IS NULL` selects all: one statement for both cases.
        let (locks, holds) = self
            .timed(move || async move {
                match pool {
                    Pool::Postgres(p) => {
                        let locks = sqlx::query(
                            "SELECT f.name, f.token, l.owner, l.token AS held, \
                             (EXTRACT(EPOCH FROM (l.expires_at - clock_timestamp())) * 1000)::bigint AS left_ms \
                             FROM locksmith_fence f LEFT JOIN locksmith_locks l \
                             ON l.name = f.name AND l.expires_at >= clock_timestamp() \
                             WHERE $1::text IS NULL OR f.name = $1 ORDER BY f.name",
                        )
                        .bind(name)
                        .fetch_all(p)
                        .await?;
                        let holds = sqlx::query(
                            "SELECT name, owner, token, \
                             (EXTRACT(EPOCH FROM (expires_at - clock_timestamp())) * 1000)::bigint, kind, \
                             permits::bigint FROM locksmith_holds WHERE ($1::text IS NULL OR name = $1) \
                             AND kind <> 'writer-waiting' AND expires_at >= clock_timestamp() \
                             ORDER BY name, token",
                        )
                        .bind(name)
                        .fetch_all(p)
                        .await?;
                        Ok((decode_all(&locks, decode_lock)?, decode_all(&holds, decode_hold)?))
                    }
                    Pool::MySql(p) => {
                        let locks = sqlx::query(
                            "SELECT f.name, f.token, l.owner, l.token AS held, \
                             CAST(TIMESTAMPDIFF(MICROSECOND, NOW(6), l.expires_at) DIV 1000 AS SIGNED) AS left_ms \
                             FROM locksmith_fence f LEFT JOIN locksmith_locks l \
                             ON l.name = f.name AND l.expires_at >= NOW(6) \
                             WHERE ? IS NULL OR f.name = ? ORDER BY f.name",
                        )
                        .bind(name)
                        .bind(name)
                        .fetch_all(p)
                        .await?;
                        let holds = sqlx::query(
                            "SELECT name, owner, token, \
                             CAST(TIMESTAMPDIFF(MICROSECOND, NOW(6), expires_at) DIV 1000 AS SIGNED), kind, \
                             CAST(permits AS SIGNED) FROM locksmith_holds WHERE (? IS NULL OR name = ?) \
                             AND kind <> 'writer-waiting' AND expires_at >= NOW(6) ORDER BY name, token",
                        )
                        .bind(name)
                        .bind(name)
                        .fetch_all(p)
                        .await?;
                        Ok((decode_all(&locks, decode_lock)?, decode_all(&holds, decode_hold)?))
                    }
                    Pool::Sqlite(p) => {
                        let locks = sqlx::query(concat!(
                            "SELECT f.name, f.token, l.owner, l.token AS held, l.expires_at - ",
                            sqlite_now_ms!(),
                            " AS left_ms FROM locksmith_fence f LEFT JOIN locksmith_locks l \
                             ON l.name = f.name AND l.expires_at >= ",
                            sqlite_now_ms!(),
                            " WHERE ?1 IS NULL OR f.name = ?1 ORDER BY f.name"
                        ))
                        .bind(name)
                        .fetch_all(p)
                        .await?;
                        let holds = sqlx::query(concat!(
                            "SELECT name, owner, token, expires_at - ",
                            sqlite_now_ms!(),
                            ", kind, permits FROM locksmith_holds WHERE (?1 IS NULL OR name = ?1) \
                             AND kind <> 'writer-waiting' AND ",
                            sqlite_live!(),
                            " ORDER BY name, token"
                        ))
                        .bind(name)
                        .fetch_all(p)
                        .await?;
                        Ok((decode_all(&locks, decode_lock)?, decode_all(&holds, decode_hold)?))
                    }
                }
            })
            .await?;
        Ok(merge(locks, holds))
    }
}

/// Joins the counters (with any exclusive holder) and the read holds / permits by name. By a
/// map, not by the rows' order: the database's collation need not sort as Rust does.
fn merge(locks: Vec<LockRow>, holds: Vec<(String, HolderRow, Option<u32>)>) -> Vec<LockRow> {
    let mut by_name: std::collections::HashMap<String, Vec<(HolderRow, Option<u32>)>> =
        std::collections::HashMap::new();
    for (name, hold, n) in holds {
        by_name.entry(name).or_default().push((hold, n));
    }
    let mut out = locks;
    // A hold whose name has no counter (a foreign row) is not shown: the counters list the locks.
    for lock in &mut out {
        for (hold, n) in by_name.remove(&lock.name).unwrap_or_default() {
            lock.holders.push(hold);
            lock.permits = lock.permits.or(n);
        }
    }
    out
}

fn decode_all<R, T>(rows: &[R], f: fn(&R) -> Result<T, sqlx::Error>) -> Result<Vec<T>, sqlx::Error> {
    rows.iter().map(f).collect()
}

fn decode_lock<R: Row>(r: &R) -> Result<LockRow, sqlx::Error>
where
    usize: sqlx::ColumnIndex<R>,
    for<'a> String: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> i64: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
{
    let name: String = r.try_get(0)?;
    let last_token: i64 = r.try_get(1)?;
    let owner: Option<String> = r.try_get(2)?;
    let held: Option<i64> = r.try_get(3)?;
    let left: Option<i64> = r.try_get(4)?;
    let holders = match (owner, held) {
        (Some(column), Some(token)) => {
            vec![HolderRow { column, token, left_ms: left.unwrap_or(0).max(0), mode: HoldMode::Exclusive }]
        }
        _ => Vec::new(),
    };
    Ok(LockRow { name, last_token, holders, permits: None })
}

/// `(name, holder, the semaphore's N if a permit)`.
fn decode_hold<R: Row>(r: &R) -> Result<(String, HolderRow, Option<u32>), sqlx::Error>
where
    usize: sqlx::ColumnIndex<R>,
    for<'a> String: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
    for<'a> i64: sqlx::Decode<'a, R::Database> + sqlx::Type<R::Database>,
{
    let name: String = r.try_get(0)?;
    let column: String = r.try_get(1)?;
    let token: i64 = r.try_get(2)?;
    let left: Option<i64> = r.try_get(3)?;
    let kind: String = r.try_get(4)?;
    let permits: Option<i64> = r.try_get(5)?;
    let n = permits.and_then(|n| u32::try_from(n).ok());
    let mode = match (kind.as_str(), n) {
        (KIND_PERMIT, Some(n)) => HoldMode::Permit(n),
        // Shared, or a row this version does not know: shown as a shared hold.
        _ => HoldMode::Shared,
    };
    let n = if matches!(mode, HoldMode::Permit(_)) { n } else { None };
    Ok((name, HolderRow { column, token, left_ms: left.unwrap_or(0).max(0), mode }, n))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live(count: i64, left_ms: i64) -> Option<Live> {
        Some(Live { count, left_ms })
    }

    #[test]
    fn a_writer_waits_for_readers_and_says_so_so_it_can_announce_itself() {
        let seen = Seen { shared: live(3, 40), ..Seen::default() };
        assert_eq!(
            verdict(HoldMode::Exclusive, "x", &seen),
            Attempt::Busy { left: Some(Duration::from_millis(40)), readers: true }
        );
        let seen = Seen { exclusive: live(1, 900), ..Seen::default() };
        assert_eq!(
            verdict(HoldMode::Exclusive, "x", &seen),
            Attempt::Busy { left: Some(Duration::from_millis(900)), readers: false }
        );
    }

    #[test]
    fn readers_wait_for_a_writer_holding_or_announced_but_writers_ignore_announcements() {
        let announced = Seen { shared: live(2, 40), writers_waiting: live(1, 1500), ..Seen::default() };
        assert_eq!(
            verdict(HoldMode::Shared, "x", &Seen { writers_waiting: live(1, 1500), ..Seen::default() }),
            Attempt::Busy { left: Some(Duration::from_millis(1500)), readers: false }
        );
        assert!(matches!(verdict(HoldMode::Exclusive, "x", &announced), Attempt::Busy { readers: true, .. }));
        let only_announced = Seen { writers_waiting: live(1, 1500), ..Seen::default() };
        assert_eq!(
            verdict(HoldMode::Exclusive, "x", &only_announced),
            Attempt::Busy { left: Some(Duration::ZERO), readers: false },
            "nothing in a writer's way: it tries again at once"
        );
    }

    #[test]
    fn a_semaphore_refuses_another_number_of_permits_and_locks_while_in_use() {
        let sem = Seen { permits: Some((Live { count: 2, left_ms: 10 }, 2, 2)), ..Seen::default() };
        for mode in [HoldMode::Exclusive, HoldMode::Shared] {
            assert!(
                matches!(verdict(mode, "s", &sem), Attempt::Refused(m) if m.contains("semaphore of 2 permits")),
                "{mode}"
            );
        }
        assert!(
            matches!(verdict(HoldMode::Permit(5), "s", &sem), Attempt::Refused(m) if m.contains("asked for one of 5"))
        );
        assert_eq!(
            verdict(HoldMode::Permit(2), "s", &sem),
            Attempt::Busy { left: Some(Duration::from_millis(10)), readers: false }
        );
        assert_eq!(
            verdict(HoldMode::Permit(3), "s", &Seen { permits: Some((Live { count: 2, left_ms: 10 }, 3, 3)), ..sem }),
            Attempt::Busy { left: Some(Duration::ZERO), readers: false },
            "a permit was released meanwhile"
        );
    }

    #[test]
    fn a_lock_in_use_refuses_permits() {
        for seen in [
            Seen { exclusive: live(1, 10), ..Seen::default() },
            Seen { shared: live(1, 10), ..Seen::default() },
            Seen { writers_waiting: live(1, 10), ..Seen::default() },
        ] {
            assert!(
                matches!(verdict(HoldMode::Permit(2), "l", &seen), Attempt::Refused(m) if m.contains("in use as a lock"))
            );
        }
    }

    #[test]
    fn status_joins_holds_to_their_counters_by_name() {
        let lock = |name: &str| LockRow { name: name.into(), last_token: 9, holders: vec![], permits: None };
        let hold = |name: &str, token, mode| {
            (
                name.to_string(),
                HolderRow { column: "c".into(), token, left_ms: 5, mode },
                match mode {
                    HoldMode::Permit(n) => Some(n),
                    _ => None,
                },
            )
        };
        let out = merge(
            vec![lock("a"), lock("b"), lock("d")],
            vec![
                hold("a", 7, HoldMode::Shared),
                hold("a", 8, HoldMode::Shared),
                hold("c", 1, HoldMode::Shared),
                hold("d", 3, HoldMode::Permit(4)),
            ],
        );
        let tokens: Vec<Vec<i64>> = out.iter().map(|l| l.holders.iter().map(|h| h.token).collect()).collect();
        assert_eq!(tokens, vec![vec![7, 8], vec![], vec![3]]);
        assert_eq!(out[2].permits, Some(4));
    }

    #[test]
    fn statements_name_the_kinds_the_schema_allows() {
        for dialect in [crate::Dialect::Postgres, crate::Dialect::MySql, crate::Dialect::Sqlite] {
            for ddl in crate::schema(dialect).iter().filter(|s| s.contains("locksmith_holds")) {
                for kind in [KIND_SHARED, KIND_PERMIT, KIND_WRITER_WAITING] {
                    assert!(ddl.contains(&format!("'{kind}'")), "{dialect:?}: {kind}");
                }
            }
        }
        assert!(PG_INSERT_EXCLUSIVE.contains("'writer-waiting'") && PG_ANNOUNCE.contains("'writer-waiting'"));
        assert!(PG_INSERT_SHARED.contains("'shared'") && PG_INSERT_PERMIT.contains("'permit'"));
    }
}
