//! # locksmith-redis: one Redis instance as a locksmith backend
//!
//! URL: `redis://[user:pass@]host:port[/db][?mode=plain|reentrant|rwlock&prefix=P]`, with TLS
//! `rediss://…[?ca=FILE&cert=FILE&key=FILE]` (see *TLS and authentication*). Building a
//! [`RedisBackend`] does no network I/O; one command connection (reconnecting by itself) and
//! one pub/sub connection per backend are opened on first use, with 3 s connection and reply
//! timeouts. [`RedisBackend::from_client`] takes a `redis::Client` built by the caller instead.
//!
//! ## TLS and authentication
//! - **TLS** (rustls on ring; no OpenSSL): `rediss://host:port`, or `redis://host:port?tls=true`.
//!   `ca=FILE` trusts exactly the PEM certificates in FILE; without it Mozilla's public roots
//!   (compiled in, as for the SQL drivers) decide. `cert=FILE&key=FILE` presents a
//!   client certificate (mutual TLS, `tls-auth-clients yes`). The host name (or IP address)
//!   must match the server's certificate. Files are read when the URL is parsed.
//! - `#insecure` (the redis crate's spelling) turns **all** certificate verification off: the
//!   connection is encrypted but anyone on the path can pose as the server and collect the
//!   password. Only for a throw-away test setup; it must be written out, is refused with `ca=`,
//!   and shows in `describe()`.
//! - **Credentials**: `user:pass@` (an ACL user) or `:pass@` (`requirepass`). The ACL user
//!   runs the driver's Lua scripts and what they call (string, hash, sorted-set and keyspace
//!   commands, `PUBLISH`), `SCAN`, `PING` and `SUBSCRIBE`, on keys outside the prefix too (the
//!   waiter queues are `locksmith:waiters:{…}`, Redisson's counters `redisson_lock_token:{…}`)
//!   and on pub/sub channels, which Redis 7 grants new users none of: e.g.
//!   `user app on >PW ~* &* +@all`.
//! - **Errors** (never with the password): a certificate that does not verify, a client
//!   certificate the server requires but the URL lacks, TLS files that cannot be read →
//!   [`Error::Config`](locksmith_core::Error::Config) (`locksmith` exits 78); a wrong password,
//!   unknown user (`WRONGPASS`), missing credentials (`NOAUTH`), a missing permission
//!   (`NOPERM`, also inside the scripts), a client certificate the server refuses →
//!   [`Error::Auth`](locksmith_core::Error::Auth) (exit 77). Both come from the first
//!   connection attempt, within a few tens of milliseconds on a LAN, and are never retried.
//!   A plain `redis://` to a TLS-only port is reset by the server:
//!   [`Error::Unavailable`](locksmith_core::Error::Unavailable), because a server going away
//!   looks the same, with a hint to use `rediss://`; `rediss://` to a plain port is a handshake
//!   that never completes, Unavailable after 3 s with a hint to use `redis://`.
//! - Secrets that do not belong in a URL: build the `redis::Client` yourself
//!   ([`redis::Client::build_with_tls`]) and pass it to [`RedisBackend::from_client`].
//!   [`connect`] has the pieces the Redis drivers share.
//!
//! ## Layouts
//! - **plain** (default), interoperable with redis-py's `Lock`: key = prefix + name, value = a
//!   random 32-hex token per hold, set with `SET key token NX PX ttl` in one Lua script that also
//!   `INCR`s the fencing counter `<key>:fence` (never expires, never deleted) and returns it as
//!   the token. Release and renewal are owner-checked Lua (`GET == token` then `DEL` /
//!   `PEXPIRE`); a release also wakes the next queued waiter (see *Waiting*). redis-py releases
//!   publish nothing: our waiters then notice on their fallback timer.
//!   Lock names ending in `:fence` are refused
//!   ([`Error::InvalidArgument`](locksmith_core::Error::InvalidArgument)): such a key would
//!   be the counter of another lock.
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
//! **Plain mode: a FIFO waiter queue, one wake-up per release.** An acquisition whose first
//! attempt finds the lock busy (an uncontended acquisition is one script call and touches no
//! pub/sub) subscribes to its own channel `locksmith:wake:{<key>}:<waiter-id>`, and only then
//! joins the queue, so no wake-up can be missed:
//! - `locksmith:waiters:{<key>}` (zset) orders waiter ids by enqueue time (server clock, µs,
//!   strictly increasing); `locksmith:waiters:{<key>}:deadlines` (zset) holds each entry's
//!   deadline (server clock, ms). A waiter pushes its deadline 2.4 s out on every attempt and
//!   at least every second (±20 %), so a crashed or paused waiter is dropped at most 2.4 s after
//!   its last refresh. Every script reading the queue drops entries past their deadline first;
//!   both zsets expire 2.4 s after the last refresh. (A name with its own hash tag keeps it:
//!   `locksmith:waiters:{a}b` for `{a}b`, so all names of a lock share its cluster slot.)
//! - **Who may take a free key**: the live head of the queue, or, when no live waiter is queued,
//!   anyone (`try_lock`, the first attempt of `lock`, redis-py). So a `try_lock` or a new `lock`
//!   does not jump a queue of our waiters: hand-off is FIFO among locksmith clients and nobody
//!   queued starves behind newcomers. redis-py clients do not queue and may still take the key
//!   whenever it is free (they are not aware of the queue); our waiters notice their release on
//!   the fallback timer.
//! - A release (owner-checked `DEL`) publishes `0` only on the live head's channel: one wake-up
//!   per release, not one per waiter. The woken head's next attempt takes the lock and leaves
//!   the queue in the same script.
//! - Fallback timers, so that redis-py releases (which publish nothing), expiries, lost messages
//!   and crashed heads never strand a waiter: the head retries after the key's remaining TTL
//!   capped by a jittered exponential backoff (5 ms doubling to 200 ms, ±20 %); a waiter further
//!   back refreshes its entry (which also retries) about every second. A waiter learns that it is
//!   the head from each attempt's reply; one that moved up meanwhile is woken by the next
//!   release, or notices a silent one within about a second. A crashed head delays a hand-off by
//!   at most 2.4 s plus that second.
//! - Dropping the acquisition future unsubscribes and removes the queue entry in the background
//!   (best effort; if that fails the entry goes stale). If the leaver was the live head of a free
//!   lock (woken, but gone before it acted), the next waiter is woken in its place. An attempt
//!   whose reply was never seen is released (owner-checked) first.
//! - Each backend has one pub/sub connection, shared by all its waiters (each on its own
//!   channel). When it drops, every local waiter is woken and re-subscribes.
//! - The wake-up counter (`locksmith_core::metrics::wakeup`) counts each retry after a message or
//!   a fallback timer of the head; the periodic refresh of a waiter further back is not counted.
//!
//! **Reentrant mode** subscribes to Redisson's channel before its first try (Redisson's unlocks
//! publish there, ours too), and retries when a message arrives or on the same fallback timer.
//! Each message wakes one local waiter of the backend (not FIFO across clients).
//!
//! ## Sessions and renewal
//! Redis has no sessions: a session is an id plus the holds it renews. Every keep-alive renews
//! all of its holds in one owner-checked script and reports holds found deleted or taken over,
//! so the engine fires `lost()` for exactly those guards. Lock-delay is not supported.
//! `status(None)` lists every lock ever fenced under the URL's prefix and mode, found by `SCAN`
//! over their fencing counters (a walk of the whole keyspace, at most 10,000 locks; keys that
//! only look like counters are skipped); `status(Some(name))`
//! reports the holder (plain: the token value, session unknown; reentrant: uuid and owner from
//! the field), the fencing counter, the TTL left, and the waiters (plain: the live queue entries;
//! reentrant: 0, unknown).
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
pub mod connect;
mod holds;
mod layout;
mod pending;
mod router;
mod rwlock;
mod scripts;
mod semaphore;
mod session;
mod shared;
mod status;
mod url;

pub use backend::RedisBackend;
pub use layout::Mode;
