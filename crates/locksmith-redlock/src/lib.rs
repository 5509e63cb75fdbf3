//! # locksmith-redlock
//!
//! The `redlock://h1:p1,h2:p2,…[?prefix=P]` backend of locksmith: the Redlock algorithm over N
//! (odd, ≥ 3) **independent** Redis masters (no replication between them).
//!
//! ```
//! let backend = locksmith_redlock::RedlockBackend::from_url("redlock://r1:6379,r2:6379,r3:6379")?;
//! # Ok::<(), locksmith_core::Error>(())
//! ```
//!
//! ## No fencing tokens
//!
//! Redlock cannot give a safe fencing token: there is no single ordered counter across the
//! independent instances, and a counter on each of them would not be monotonic across failures.
//! So [`Backend::provides_fencing`](locksmith_core::Backend::provides_fencing) is `false`, every
//! grant carries token 0, the engine refuses `lock()`/`try_lock()` with
//! [`Error::Unfenced`](locksmith_core::Error::Unfenced) unless the caller opts in with
//! [`LockOptions::allow_unfenced`](locksmith_core::LockOptions::allow_unfenced), and
//! [`Guard::fencing_token`](locksmith_core::Guard::fencing_token) is `None`. Use Redlock only
//! where an occasional second holder is tolerable (efficiency, not correctness), or use a
//! backend with fencing tokens.
//!
//! ## The algorithm
//!
//! - **Acquire**: a fresh random value per hold; `SET key value NX PX ttl` on all instances
//!   concurrently, each bounded by its own timeouts (connect ≤ min(200 ms, TTL/5), command ≤
//!   min(250 ms, TTL/10)). Granted if a majority (N/2 + 1) said OK and the round took less than
//!   the validity TTL − drift (drift = TTL·1 % + 2 ms). Otherwise the round's value is deleted
//!   on **all** instances (owner-checked Lua) and a waiting `lock()` retries after a jittered
//!   exponential delay (first in [d/2, d] with d = clamp(TTL/50, 2 ms, 50 ms), doubling up to
//!   clamp(TTL/10, d, 200 ms)); `try_lock()` answers after one round. Fewer than a majority of
//!   instances *reachable* gives [`Error::Unavailable`](locksmith_core::Error::Unavailable)
//!   ("only K of N instances reachable, need M") to a no-wait attempt; a waiting one keeps
//!   trying until its timeout.
//! - **Release**: owner-checked delete (`if GET == value then DEL`) on all instances; `true` if
//!   a majority confirmed the key was ours.
//! - **Renewal** (every TTL/3 by the engine): owner-checked `PEXPIRE` on all instances; a hold
//!   not renewed on a majority within the validity is reported lost (`guard.lost()` fires). If
//!   a majority is unreachable the renewal fails and the engine's local deadline (last renewal
//!   sent + TTL − drift) ends every hold in time.
//! - **Cancel safety**: dropping an acquisition at any point releases its value on all instances
//!   in a spawned task.
//! - **Waiting** polls: Redis keeps no queue, so waiters are neither FIFO nor listed by `status`.
//!
//! Each instance has one connection, connected and reconnected on its own: a dead or frozen
//! (SIGSTOPped) instance costs a missing vote for at most the timeouts above, never a stall.
//!
//! ## Fault model: when Redlock is not safe
//!
//! Redlock's mutual exclusion assumes **bounded process pauses, bounded network delay and
//! bounded clock drift**. In particular:
//!
//! - a holder paused (GC, SIGSTOP, swapping) longer than the validity time, or a message delayed
//!   that long, can keep acting after its keys expired while another client acquired the lock:
//!   two holders. The engine's local deadline makes the *guard* report the loss, but code that
//!   was paused mid-action cannot notice; a fencing token would catch it, and there is none;
//! - a **clock jump** on an instance (or a clock running fast) expires keys early: two holders;
//! - an instance **restarted without persistence** within the TTL comes back empty and can vote
//!   for a second client. Restart instances only after a delay of at least the longest TTL
//!   (antirez's "delayed restarts"), or run them with `appendfsync always`.
//!
//! Keys are `prefix + name` (no prefix by default, the same plain-string layout as redis-py's
//! `Lock`); values are `session:nonce:owner`.
#![warn(missing_docs, missing_debug_implementations, unreachable_pub, rust_2018_idioms)]

mod backend;
mod cluster;
mod instance;
mod session;
mod timing;
mod url;

pub use backend::RedlockBackend;
