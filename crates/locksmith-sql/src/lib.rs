//! # locksmith-sql: PostgreSQL, MySQL/MariaDB and SQLite as locksmith backends
//!
//! URLs: `postgres://user[:pass]@host:port/db` (or `postgresql://…`),
//! `mysql://user[:pass]@host:port/db`, `sqlite://path/to/file.db` (created if missing), with
//! `?mode=lease|advisory|get_lock|row_lock`, `?schema=auto|external` (below) and
//! `?pool_size=N` (1–100, default 5); other query options go to the database driver. Building a
//! [`SqlBackend`] does no I/O; a pool of up to `pool_size` connections (PostgreSQL: one more,
//! held by the `LISTEN` wake-up listener) opens on first use (3 s connect timeout, then
//! [`Error::Unavailable`](locksmith_core::Error::Unavailable)), and every operation is bounded
//! (8 s; PostgreSQL pool connections also set `statement_timeout = 5s`). The connection-scoped
//! modes use one more connection per hold (and per waiter); a connection that ended cleanly
//! (released, or found the lock busy) is reset and kept for the next acquisition, up to 4 idle
//! ones per backend, because opening one (a PostgreSQL backend fork) costs several times the
//! lock itself. Errors name the database (`postgres: …`,
//! `mysql: …`, `sqlite: …`).
//!
//! ## Schema
//! Four tables (three on SQLite), created on first use with `CREATE TABLE IF NOT EXISTS`:
//!
//! ```sql
//! -- lease mode: one row per exclusive hold (the mutex, a read/write lock's writer); a row whose
//! -- expires_at has passed is free to take over
//! CREATE TABLE locksmith_locks (name PRIMARY KEY, owner, token, expires_at);
//! -- lease mode beyond the mutex: one row per read hold, per semaphore permit, and per waiting
//! -- writer's announcement, each with its own lease
//! CREATE TABLE locksmith_holds (name, owner, token, kind, permits, expires_at, PRIMARY KEY (name, owner));
//! -- every mode: the fencing counter per lock, never deleted, only incremented
//! CREATE TABLE locksmith_fence (name PRIMARY KEY, token);
//! -- row-lock mode (PostgreSQL, MySQL/MariaDB): one row per lock name, locked FOR UPDATE
//! CREATE TABLE locksmith_rows (name PRIMARY KEY);
//! ```
//!
//! The exact DDL per database comes from one place, [`schema()`]; `locksmith sql schema --db
//! postgres|mysql|sqlite` prints it for migration tools and `locksmith sql init URL` applies it
//! ([`SqlBackend::init_schema`]). With `?schema=external` in the URL the driver never runs DDL
//! (for users without `CREATE` rights, or teams whose migrations own the schema): it checks
//! once that its tables exist and otherwise fails with an error naming `locksmith sql init`.
//!
//! ### Upgrading a database from before read locks and semaphores
//! The upgrade adds one table, `locksmith_holds`; `locksmith_locks`, `locksmith_fence` and
//! `locksmith_rows` and their rows are not touched (a lock held during the upgrade stays held,
//! and fencing counters continue).
//! - `?schema=auto` (the default): nothing to do; the first use creates the table.
//! - `?schema=external`: create it before deploying this version, with `locksmith sql init URL`
//!   (run as a user that may `CREATE`; idempotent, prints `created locksmith_holds`) or with the
//!   `locksmith_holds` statement of `locksmith sql schema --db …` in your migration tool. Until
//!   then the lease mode refuses to start with an error naming the table and `locksmith sql
//!   init`: a writer that could not see readers would not be safe.
//!
//! Clients of the previous version keep working on an upgraded database, for the mutex: their
//! rows are in `locksmith_locks` as before, and this version's readers, writers and permits
//! respect them. They do not know `locksmith_holds`, so they would not see readers or permits:
//! use read locks and semaphores on a name only once every client of that name runs this
//! version.
//!
//! ## Lease-table mode (the default, `?mode=lease`, every database)
//!
//! | | `name` | `owner` | `token` | `expires_at` | clock |
//! |---|---|---|---|---|---|
//! | PostgreSQL | `TEXT` | `TEXT` | `BIGINT` | `TIMESTAMPTZ` | `clock_timestamp()` |
//! | MySQL/MariaDB | `VARCHAR(256) utf8mb4_bin` | `VARCHAR(512) utf8mb4_bin` | `BIGINT` | `DATETIME(6)` | `NOW(6)` (session time zone `+00:00`) |
//! | SQLite | `TEXT` | `TEXT` | `INTEGER` | `INTEGER`, ms since the epoch | `julianday('now')` (ms precision) |
//!
//! `owner` is `<session id>:<attempt nonce>:<owner id>`, unique per acquisition.
//! `locksmith_holds` has the same columns plus `kind` (`shared`, `permit` or `writer-waiting`)
//! and `permits` (a permit's semaphore size, else `NULL`); its key is `(name, owner)`.
//!
//! - **Acquire** is one short transaction: bump the counter (`INSERT … ON CONFLICT/ON DUPLICATE
//!   KEY UPDATE token = token + 1`), delete the lock's row if it expired by the database
//!   clock, insert our row with `expires_at = now + ttl` by the database clock, commit. When the
//!   row is live (someone holds the lock) the transaction is rolled back, **counter included**:
//!   only grants bump the counter, so tokens are strictly increasing and consecutive per lock.
//!   The counter's row lock serializes acquirers of one lock for the few statements of the
//!   transaction. SQLite uses `BEGIN IMMEDIATE` (WAL journal, 5 s busy timeout), so several
//!   processes can share one file. Deadlocks and serialization failures are retried.
//! - **Renew**: one statement per keep-alive for every hold of the session (one more when it
//!   also has read holds or permits, for `locksmith_holds`):
//!   `UPDATE … SET expires_at = now + ttl WHERE (name, owner, token) IN (…)` (PostgreSQL joins
//!   `unnest` arrays and SQLite uses `RETURNING`; MySQL/MariaDB update and read back in one
//!   short transaction). A hold missing from the answer is gone (the engine fires `lost()`).
//! - **Release**: `DELETE … WHERE name = ? AND owner = ? AND token = ?`; rows affected tell
//!   whether it was ours. A retried release deletes nothing and answers `false`.
//! - **Waiting** polls with a jittered exponential backoff (5 ms doubling to 200 ms, ±20 %)
//!   capped by the first remaining lease in the way as the database computes it, so a waiter
//!   tries again right after an expiry. Not FIFO; `status` reports no waiters.
//! - **Cancel safety**: an acquisition dropped (or failing) while its transaction may have
//!   committed spawns an owner-checked `DELETE` of exactly that attempt's row.
//! - **Sessions**: no server-side session; a session is an id plus the holds it renews.
//!   Lock-delay is not supported.
//!
//! ### Read/write locks and semaphores (`LockOptions::shared()`, `LockOptions::permits(n)`)
//! Same lease, renewal, release, cancel safety and clock as the mutex; the acquire transaction
//! is the mutex's with another insert, and every kind bumps the same counter first, so the
//! counter's row lock serializes all acquirers of a name and **every grant of every kind takes
//! the next token**. What may go together (the native server's rules):
//! - an exclusive hold (a mutex, a writer) is a row of `locksmith_locks`, inserted only if no
//!   read hold or permit of the name is live; a read hold is a `shared` row of
//!   `locksmith_holds`, inserted only if no exclusive hold is live and no writer waits (below);
//! - a permit of a semaphore of N is a `permit` row carrying N, inserted only while fewer than N
//!   permits are live and all of them carry the same N. **N is stored with the permits**, so it
//!   is agreed while any permit is live: another N is refused with
//!   [`Error::InvalidArgument`](locksmith_core::Error::InvalidArgument) naming both numbers, as is
//!   a lock (read or write) on a semaphore's name or a permit of a name in use as a lock. Once
//!   no permit is live the name is free for anything (another N too).
//! - A row whose lease ended by the database clock counts for nothing; the next acquisition of
//!   the name deletes the expired rows of the table it inserts into.
//!
//! **Writer preference** (not FIFO: waiters poll, and nothing orders them). A writer that finds
//! readers in its way announces itself with a `writer-waiting` row (token 0; not a hold, not in
//! `status`) with its own lease of 2 s by the database clock, refreshed at each retry (at least
//! every 500 ms) and deleted in the transaction that grants the writer, or at once when it gives
//! up (a timeout, a dropped future: the same background cleanup as an unfinished attempt). New
//! readers wait while any announcement is live; readers already in finish, and the writer gets
//! in when the last leaves — so a stream of readers cannot starve a writer. Writers do not
//! wait for each other's announcements; a writer that crashed while waiting keeps new readers
//! out for at most 2 s. The flip side of writer preference: readers can wait as long as writers
//! keep coming; and a reader that asks for a second read hold of a name while a writer waits
//! waits behind that writer, which waits for the first read hold (no upgrade, no reentrancy by
//! kind: as on the native server, such a client needs a timeout).
//!
//! **PostgreSQL wake-ups**: each release notifies as before; in each process one waiter of the
//! name wakes, and a reader or permit holder that gets in wakes the next (one release may admit
//! several).
//!
//! **Cost**: the mutex's acquisition is the same statements as before (three in its transaction;
//! four on MySQL/MariaDB, which reads the bumped counter back); its insert also checks that
//! `locksmith_holds` has no live reader or permit of the name (one index probe), and a busy
//! attempt reads what is in its way in one more statement, as before. Readers and permits cost the same;
//! a writer waiting behind readers adds one autocommit statement per retry (its announcement).
//! `status` reads the two tables in two statements.
//!
//! ## Row-lock mode (`?mode=row_lock` on PostgreSQL and MySQL/MariaDB)
//! The mutex only (read locks and semaphores need the lease mode): a row lock is exclusive.
//!
//! The lock is `SELECT name FROM locksmith_rows WHERE name = ? FOR UPDATE`, held in a
//! transaction left open on a dedicated connection for the life of the guard. The lock's row is
//! inserted idempotently and committed before the first lock (MySQL looks first with a plain
//! read: InnoDB would lock an existing row on a duplicate insert). Waiters queue in the
//! database's own lock queue, re-queueing every 2 s (`lock_timeout = '2s'` /
//! `innodb_lock_wait_timeout = 2`) so no statement is unbounded; `try_lock` uses `FOR UPDATE
//! NOWAIT` (MariaDB ≥ 10.3, MySQL ≥ 8.0). Once the row is locked the counter in
//! `locksmith_fence` is bumped **in a separate, committed statement** (a bump inside the open
//! transaction would roll back with a lost hold and the next holder would repeat the token),
//! then the holding transaction is checked to be alive, so the lock was held across the bump and
//! tokens strictly increase. Release is `ROLLBACK` and closes the connection; keep-alive runs
//! `SELECT 1` in the transaction (PostgreSQL fails it once the transaction aborted); a dead
//! connection is reported lost. An acquisition dropped while queued has its connection killed
//! from the pool (`pg_terminate_backend` / `KILL`), since a backend blocked in a lock wait does
//! not notice its client left and would be granted the row after the holder. `status` reports
//! the last token but no holder.
//!
//! **Costs** — use this mode when the data you protect already lives in this database and you
//! want the lock to be the database's own row lock (the seeds' `SELECT … FOR UPDATE`); otherwise
//! prefer the lease mode:
//! - one connection **and one open transaction per holder** (plus one per queued waiter):
//!   size the database's `max_connections` (and any pooler in front: transaction-mode PgBouncer
//!   cannot carry a transaction across statements of different clients, use session mode) for
//!   the number of concurrent holders and waiters;
//! - PostgreSQL: a long-held lock is a long-running transaction; it holds back the xmin horizon,
//!   so `VACUUM` cannot remove dead rows of *any* table meanwhile (bloat), and
//!   `idle_in_transaction_session_timeout`, if set on the server, ends holders (they see
//!   `lost()`);
//! - MySQL/MariaDB: waiting is bounded by `innodb_lock_wait_timeout`, which the driver sets to 2 s
//!   on its own connections only; a long-open transaction also keeps undo history from being
//!   purged;
//! - like the session-scoped modes (below) the connection is the lease, ended by the server
//!   when idle for the TTL (`idle_in_transaction_session_timeout` / `wait_timeout` set on the
//!   holding connection), so a paused or partitioned holder loses the row after the TTL.
//!
//! SQLite has no row locks (it locks the whole file): `?mode=row_lock` on `sqlite://` is refused
//! with [`Error::InvalidArgument`](locksmith_core::Error::InvalidArgument).
//!
//! ## Session-scoped modes (`?mode=advisory` on PostgreSQL, `?mode=get_lock` on MySQL/MariaDB)
//! Each hold opens a connection of its own (outside the pool) and takes the database's own lock on
//! it without blocking in the server: `pg_try_advisory_lock(hashtextextended(name, 0))`, or
//! `GET_LOCK(name, 0)` (names over 64 characters as `SHA2(name, 256)`); waiters poll with the
//! jittered backoff. Once granted, the holding connection bumps `locksmith_fence` (same table as the
//! lease mode) and that value is the fencing token: only the holder bumps it, so tokens strictly
//! increase. Release unlocks and closes the connection. Keep-alive checks each holding connection
//! (MySQL: `IS_USED_LOCK(name) = CONNECTION_ID()`); a dead connection is reported lost.
//!
//! **The connection is the lease.** The lock ends when the holding connection ends: at once for
//! a killed connection or a crashed client process. A paused or partitioned client keeps its TCP
//! connection, so each holding connection also gets a server-side idle timeout equal to the TTL
//! (PostgreSQL `idle_session_timeout` (14+) and `idle_in_transaction_session_timeout`;
//! MySQL/MariaDB `wait_timeout`, whole seconds rounded up). The keep-alive runs a statement on
//! every holding connection each TTL/3, so only a holder that stopped is cut off, by the
//! database's timer, after its own deadline fired `lost()`. On a server without these settings
//! (PostgreSQL < 14 in advisory mode) a paused holder keeps the lock while paused; its own
//! `lost()` still fires in time. The modes do not exclude the lease mode (or each other): all
//! clients of one lock must use one mode. Advisory-lock keys are 64-bit hashes: two names that
//! collide share a lock (over-exclusion). `status` reports the last token but no holder.
//!
//! **Read/write locks in advisory mode** (`LockOptions::shared()` with `?mode=advisory`): a reader
//! holds `pg_advisory_lock_shared` on the name's key, a writer `pg_advisory_lock` as the mutex
//! does; each grant bumps `locksmith_fence` as above, so every grant takes the next token.
//! Writer preference, as in the lease mode: a writer that has to wait also holds a second key
//! of the name (`hashtextextended(name, 1)`) in shared mode on its connection — its
//! announcement — and a reader gets in only if it can take that key exclusively (and gives it
//! back at once, in the same statement as its try), so new readers stay out while a writer
//! waits. The announcement ends with the writer's grant, or with its connection when it gives
//! up (a dropped or timed-out acquisition closes it; a paused one is ended by the idle timeout).
//! Waiting never blocks in the server (both sides poll), so a dropped acquisition leaves
//! nothing queued. The announcement key is another 64-bit hash: a collision with another name's
//! key only over-excludes. Not offered elsewhere: a semaphore on advisory locks would need N keys and a
//! fair way to pick a free one; `GET_LOCK` has no shared mode; and in row-lock mode a queued
//! `FOR UPDATE` does not stop new `FOR SHARE` lockers, so writers could starve. These are
//! refused with [`Error::Unsupported`](locksmith_core::Error::Unsupported) — use the lease mode.
//!
//! ## TLS and authentication
//! TLS is the database driver's own (sqlx on rustls with the ring provider; Mozilla's root set,
//! compiled in, unless a CA file is named — loading the system store cost tens of milliseconds
//! per connection), spelled as each database spells it:
//! - PostgreSQL: `?sslmode=disable|prefer|require|verify-ca|verify-full&sslrootcert=FILE`
//!   (`sslcert`/`sslkey` for a client certificate). `prefer`, libpq's and the default, falls back
//!   to plaintext when the server offers no TLS: name `require` or better in production, and
//!   `verify-full` to check the server's name too.
//! - MySQL/MariaDB: `?ssl-mode=DISABLED|PREFERRED|REQUIRED|VERIFY_CA|VERIFY_IDENTITY&ssl-ca=FILE`
//!   (`ssl-cert`/`ssl-key`). `PREFERRED` (the default) falls back like `prefer`. MySQL 8's
//!   `caching_sha2_password` completes its full authentication over TLS; without TLS it would need
//!   RSA key exchange (sqlx's `mysql-rsa`, whose only pure-Rust RSA crate carries
//!   RUSTSEC-2023-0071), which is not built: use TLS for such accounts. Debian 12 ships MariaDB,
//!   not MySQL 8, so that path is not tested here.
//!
//! Errors say what is wrong and are never retried: a certificate that does not verify, TLS
//! required by one side only or refused by the account are [`Error::Config`](locksmith_core::Error::Config)
//! (exit 78); a wrong password, an unknown user or a connection the server's access rules
//! (`pg_hba.conf`, MySQL grants) reject are [`Error::Auth`](locksmith_core::Error::Auth) (exit 77). Connection refused stays
//! [`Error::Unavailable`](locksmith_core::Error::Unavailable), with the database's own reason (a pool time-out is followed by one
//! direct attempt that names it).
//!
//! ## Fault model (DESIGN.md §2.1)
//! - Expiry is decided by the **database server's clock only**; clients' clocks never enter
//!   the tables, so client clock skew cannot shorten or extend a lease. A jump of the database
//!   host's clock does (forward: leases end early; the holder's local deadline still fires
//!   first only if the jump is smaller than the drift margin).
//! - Safety is as durable as the database's commits: with `fsync` on (the default of all three)
//!   a crash loses neither a lock row nor a counter value. With asynchronous replication a
//!   fail-over can lose recently granted rows (a second holder) and counter increments
//!   (**tokens may then repeat**).
//! - SQLite is only as good as the file system's locking: never put the file on NFS. SQLite has
//!   no server, so its "database clock" is the clock of each process on the file's host
//!   (`julianday('now')` runs in the client): one host, one clock — but a process whose wall
//!   clock is faked or wrong does move the leases it writes.
//!
//! ## Metrics
//! Every time a waiting acquisition goes back to the database to re-check the lock (after a
//! NOTIFY, a poll interval or a row-lock wait chunk; never for its first attempt) it counts
//! [`locksmith_core::metrics::WAKEUPS`] with `backend` = `postgres`, `mysql` or `sqlite`.
#![warn(missing_docs, missing_debug_implementations, unreachable_pub, rust_2018_idioms)]

mod attempt;
mod backend;
mod conn;
#[macro_use]
mod db;
mod lease;
mod notify;
mod options;
mod renew;
mod rowlock;
mod schema;
mod scoped;
mod session;
mod url;

pub use backend::SqlBackend;
pub use options::{ConnectOptions, SqlSettings};
pub use schema::{schema, InitReport, FENCE_TABLE, HOLDS_TABLE, LOCKS_TABLE, ROWS_TABLE};
pub use url::{Dialect, Mode};

/// The sqlx this crate is built with, for [`SqlBackend::from_options`]' connect options.
pub use sqlx;
