//! # locksmith-sql: PostgreSQL, MySQL/MariaDB and SQLite as locksmith backends
//!
//! URLs: `postgres://user[:pass]@host:port/db` (or `postgresql://…`),
//! `mysql://user[:pass]@host:port/db`, `sqlite://path/to/file.db` (created if missing).
//! Building a [`SqlBackend`] does no I/O; a pool of up to 4 connections opens on first use
//! (3 s connect timeout, then [`Error::Unavailable`](locksmith_core::Error::Unavailable)), and
//! every operation is bounded (8 s; PostgreSQL also sets `statement_timeout = 5s`). Errors name
//! the database (`postgres: …`, `mysql: …`, `sqlite: …`).
//!
//! ## Lease-table mode (the default, `?mode=lease`, every database)
//! Two tables, created on first use with `CREATE TABLE IF NOT EXISTS`:
//!
//! ```sql
//! -- one row per held lock; a row whose expires_at has passed is free to take over
//! CREATE TABLE locksmith_locks (name PRIMARY KEY, owner, token, expires_at);
//! -- the fencing counter per lock: never deleted, only incremented
//! CREATE TABLE locksmith_fence (name PRIMARY KEY, token);
//! ```
//!
//! | | `name` | `owner` | `token` | `expires_at` | clock |
//! |---|---|---|---|---|---|
//! | PostgreSQL | `TEXT` | `TEXT` | `BIGINT` | `TIMESTAMPTZ` | `clock_timestamp()` |
//! | MySQL/MariaDB | `VARCHAR(256) utf8mb4_bin` | `VARCHAR(512) utf8mb4_bin` | `BIGINT` | `DATETIME(6)` | `NOW(6)` (session time zone `+00:00`) |
//! | SQLite | `TEXT` | `TEXT` | `INTEGER` | `INTEGER`, ms since the epoch | `julianday('now')` (ms precision) |
//!
//! `owner` is `<session id>:<attempt nonce>:<owner id>`, unique per acquisition.
//!
//! - **Acquire** is one short transaction: bump the counter (`INSERT … ON CONFLICT/ON DUPLICATE
//!   KEY UPDATE token = token + 1`), delete the lock's row if it expired by the database
//!   clock, insert our row with `expires_at = now + ttl` by the database clock, commit. When the
//!   row is live (someone holds the lock) the transaction is rolled back, **counter included**:
//!   only grants bump the counter, so tokens are strictly increasing and consecutive per lock.
//!   The counter's row lock serializes acquirers of one lock for the few statements of the
//!   transaction. SQLite uses `BEGIN IMMEDIATE` (WAL journal, 5 s busy timeout), so several
//!   processes can share one file. Deadlocks and serialization failures are retried.
//! - **Renew**: `UPDATE … SET expires_at = now + ttl WHERE name = ? AND owner = ? AND token = ?`;
//!   0 rows means the hold is gone (the engine fires `lost()`).
//! - **Release**: `DELETE … WHERE name = ? AND owner = ? AND token = ?`; rows affected tell
//!   whether it was ours. A retried release deletes nothing and answers `false`.
//! - **Waiting** polls with a jittered exponential backoff (5 ms doubling to 200 ms, ±20 %)
//!   capped by the holder's remaining lease as the database computes it, so a waiter tries
//!   again right after an expiry. Not FIFO; `status` reports no waiters.
//! - **Cancel safety**: an acquisition dropped (or failing) while its transaction may have
//!   committed spawns an owner-checked `DELETE` of exactly that attempt's row.
//! - **Sessions**: no server-side session; a session is an id plus the holds it renews (one
//!   `UPDATE` per hold per keep-alive). Lock-delay is not supported.
//!
//! ## Session-scoped modes (`?mode=advisory` on PostgreSQL, `?mode=get_lock` on MySQL/MariaDB)
//! Each hold opens a connection of its own (outside the pool) and takes the database's own lock on
//! it without blocking in the server: `pg_try_advisory_lock(hashtextextended(name, 0))`, or
//! `GET_LOCK(name, 0)` (names over 64 characters as `SHA2(name, 256)`); waiters poll with the
//! jittered backoff. Once granted, the holding connection bumps `locksmith_fence` (same table as the
//! lease mode) and that value is the fencing token: only the holder bumps it, so tokens strictly
//! increase. Release unlocks and closes the connection. Keep-alive checks each holding connection
//! (MySQL: `IS_USED_LOCK(name) = CONNECTION_ID()`); a dead connection is reported lost. There is
//! no TTL on the server: the lock ends when the database notices the holding connection is gone
//! (at once for a killed connection or a crashed client process; after TCP timeouts for a
//! partitioned client, which may be longer than the client's TTL — the holder's local deadline
//! still fires `lost()` in time). The modes do not exclude the lease mode (or each other): all
//! clients of one lock must use one mode. Advisory-lock keys are 64-bit hashes: two names that
//! collide share a lock (over-exclusion). `status` reports the last token but no holder.
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
//! - SQLite is only as good as the file system's locking: never put the file on NFS.
#![warn(missing_docs, missing_debug_implementations, unreachable_pub, rust_2018_idioms)]

mod backend;
#[macro_use]
mod db;
mod notify;
mod renew;
mod rowlock;
mod schema;
mod scoped;
mod session;
mod url;

pub use backend::SqlBackend;
pub use schema::{schema, InitReport, FENCE_TABLE, LOCKS_TABLE, ROWS_TABLE};
pub use url::{Dialect, Mode};
