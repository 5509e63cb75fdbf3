//! # locksmith-redis: one Redis instance as a locksmith backend
//!
//! URL: `redis://[user:pass@]host:port[/db][?mode=plain|reentrant&prefix=P]`. Building a
//! [`RedisBackend`] does no I/O; one command connection (reconnecting by itself) and one pub/sub
//! connection per backend are opened on first use, with 3 s connection and reply timeouts.
//!
//! ## Layouts
//! - **plain** (default), interoperable with redis-py's `Lock`: key = prefix + name, value = a
//!   random 32-hex token per hold, set with `SET key token NX PX ttl` in one Lua script that also
//!   `INCR`s the fencing counter `<key>:fence` (never expires, never deleted) and returns it as
//!   the token. Release and renewal are owner-checked Lua (`GET == token` then `DEL` /
//!   `PEXPIRE`); a release also publishes `0` on `locksmith:released:{<key>}` so our waiters wake.
//!   redis-py releases publish nothing: our waiters then notice on their fallback timer.
//!   Note: a lock named `<other>:fence` would collide with the counter of lock `<other>`.
//! - **reentrant** (`?mode=reentrant`), interoperable with Redisson's `RLock`/`RFencedLock`: a
//!   hash at key = prefix + name whose field `<session-uuid>:<owner>` holds a hold count, with
//!   Redisson's acquire, unlock and watchdog scripts; unlocks publish `0` on
//!   `redisson_lock__channel:{<key>}`; the fencing counter is Redisson's `RFencedLock` token key
//!   `redisson_lock_token:{<key>}`, incremented on every grant as Redisson does. The engine
//!   counts reentrancy itself, so each backend acquisition is a new hold (count 1).
//!
//! Keys holding another type (say a list) are never overwritten: acquisition and status fail
//! with [`Error::Backend`](locksmith_core::Error::Backend) naming the key and its type.
//!
//! ## Waiting
//! A waiting acquisition subscribes to the lock's channel before its first try, then retries
//! when a release message arrives or when a fallback timer fires: the key's remaining TTL capped
//! by a jittered exponential backoff (5 ms doubling to 200 ms, ±20 %). All waiters of a backend
//! share one pub/sub connection; each message wakes one local waiter (not FIFO across clients).
//! Dropping the acquisition future unsubscribes, and an attempt whose reply was never seen is
//! released (owner-checked) in the background.
//!
//! ## Sessions and renewal
//! Redis has no sessions: a session is an id plus the holds it renews. Every keep-alive renews
//! all of its holds in one owner-checked script and reports holds found deleted or taken over,
//! so the engine fires `lost()` for exactly those guards. Lock-delay is not supported.
//! `status(None)` answers an empty list (Redis keeps no index of locks); `status(Some(name))`
//! reports the holder (plain: the token value, session unknown; reentrant: uuid and owner from
//! the field), the fencing counter, and the TTL left; waiters are reported as 0 (unknown).
//!
//! ## Fault model (DESIGN.md §2.1)
//! - A single instance **without `appendfsync always` loses locks on a crash**: after a restart
//!   the key is gone and a second holder can be granted while the first still believes it holds
//!   the lock (until its next renewal finds the key gone).
//! - With asynchronous replicas, a **fail-over loses locks** that had not reached the replica.
//! - **Fencing tokens survive only with persistence**: without AOF (`appendfsync always`) a crash
//!   can reset the counter and tokens can repeat. With it, tokens only grow.
#![warn(missing_docs, missing_debug_implementations, unreachable_pub, rust_2018_idioms)]

mod backend;
mod conn;
mod holds;
mod layout;
mod pending;
mod router;
mod scripts;
mod session;
mod shared;
mod url;

pub use backend::RedisBackend;
pub use layout::Mode;
