//! # locksmith-memcached
//!
//! The `memcached://host[:port][?prefix=P]` backend of locksmith: locks on **one** memcached
//! server (≥ 1.6, for the meta protocol). Several servers are refused: a lock over independent
//! servers needs a quorum, which is Redlock (`redlock://`), and a lock on a sharded pool is
//! only as safe as the one shard its key hashes to.
//!
//! ```
//! let backend = locksmith_memcached::MemcachedBackend::from_url("memcached://127.0.0.1:11211")?;
//! # Ok::<(), locksmith_core::Error>(())
//! ```
//!
//! ## No fencing tokens
//!
//! memcached has nothing durable: it evicts items under memory pressure and forgets everything
//! on restart, so it cannot keep a counter that only goes up. So
//! [`Backend::provides_fencing`](locksmith_core::Backend::provides_fencing) is `false`, every
//! grant carries token 0, the engine refuses `lock()`/`try_lock()` with
//! [`Error::Unfenced`](locksmith_core::Error::Unfenced) unless the caller opts in with
//! [`LockOptions::allow_unfenced`](locksmith_core::LockOptions::allow_unfenced) (`--unfenced`
//! in the CLI), exactly as on Redlock, and
//! [`Guard::fencing_token`](locksmith_core::Guard::fencing_token) is `None`. Read/write locks,
//! semaphores and elections are refused ([`Error::Unsupported`](locksmith_core::Error::Unsupported)).
//!
//! ## The protocol
//!
//! - **Acquire**: a fresh random value per hold (`session:nonce:owner`, the same format as
//!   Redlock's); `ms KEY LEN T<secs> ME` stores it only if the key is absent (mode *add*).
//!   `HD` is a grant, `NS` busy. A dropped acquisition whose add may have been stored deletes
//!   it (owner-checked) in a spawned task.
//! - **Renewal** (every TTL/3 by the engine) and **release** are owner-checked: `mg KEY v c t`
//!   reads the value and its CAS; only if the value is ours does `ms KEY LEN T<secs> C<cas>`
//!   (renew) or `md KEY C<cas>` (release) follow, and the CAS makes it fail if anything was
//!   written in between. Both value and CAS are needed: CAS values start again from 1 when the
//!   server restarts, so a CAS alone could match someone else's item, and a value alone could
//!   be overwritten between the read and the write.
//! - **Loss**: a key found gone or holding another value at a renewal (expired, **evicted**,
//!   the server **restarted**, deleted or overwritten by another tool) is reported through the
//!   loss signal (`guard.lost()`); an unreachable server is not a verdict, and the engine's
//!   local deadline (last renewal sent + TTL − drift) ends the hold in time.
//! - **Waiting** polls with the engine's shared backoff (5 ms doubling to 200 ms, ±20 %):
//!   memcached tells nobody of a delete or an expiry. Waiters are not FIFO and `status` cannot
//!   count them (`-`).
//! - **TTL**: memcached counts whole seconds on a clock it ticks once a second, so a key is
//!   written with the TTL rounded **up to whole seconds, plus one** (1 s → `T2`): the hold lasts
//!   at least the TTL, and a crashed holder blocks others up to about two seconds longer than
//!   its TTL.
//!
//! ## Layout
//!
//! One item per held lock: key = `prefix + name` (no prefix by default; at most 250 bytes; a
//! key with a space is sent base64-encoded, which stores the same bytes), value =
//! `session:nonce:owner`, expiry = the rounded TTL. Any other client that takes a lock with a
//! plain `add KEY 0 TTL …` on the same key (what the common memcached lock recipes, e.g. on
//! pymemcache, send) and deletes it when done excludes and is excluded by locksmith; locksmith
//! never renews or deletes a value it did not write. `status` shows such a holder as an owner
//! with no session.
//!
//! ## Fault model: when it is not safe
//!
//! - **Eviction**: under memory pressure memcached may evict a held key (LRU) before it
//!   expires; another client can then take the lock while the holder learns of the loss only at
//!   its next renewal (≤ TTL/3 later): two holders for that moment. Give locks a memcached (or
//!   slab class) with room, or use a backend that never drops a held lock.
//! - **Restart**: a restarted server is empty; every hold is lost at once, and noticed by the
//!   holders only at their next renewal.
//! - **Pauses**: a holder paused (GC, SIGSTOP, swap) past its TTL keeps acting after the key
//!   expired; with no fencing token the resource cannot refuse it.
//! - **Clock**: expiry is by the server's clock; a server clock running fast (or stepped)
//!   expires keys early.
//!
//! Use it where an occasional second holder costs only efficiency (a cache stampede guard, a
//! duplicate job), never for correctness.
//!
//! ## Why a client of its own
//!
//! The driver speaks the four meta commands it needs through ~200 lines of its own on a tokio
//! `TcpStream` (one connection per backend, commands one at a time, a timeout on each connect
//! and command, reconnect after any failure or cancelled command). The text protocol's
//! `delete` cannot be made conditional on a CAS, so a lock needs the meta commands (`md C…`);
//! of the Rust crates, `async-memcached` has a meta-protocol API but brings its own parser
//! stack (nom, btoi, …) for these four commands and has neither timeouts nor reconnection,
//! which a lock driver needs on every call; the others speak only the text or binary
//! protocol, or block.
#![warn(missing_docs, missing_debug_implementations, unreachable_pub, rust_2018_idioms)]

mod backend;
mod conn;
mod expiry;
mod meta;
mod server;
mod session;
mod url;

pub use backend::MemcachedBackend;
