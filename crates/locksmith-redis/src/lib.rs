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
//!   waiter queues are `locksmith:waiters:{…}`, the counters `redisson_lock_token:{…}` and
//!   `locksmith:*_token:{…}`, the holder records `locksmith:holders:{…}`, a semaphore's timeout
//!   set `{…}:timeout`) and on pub/sub channels, which Redis 7 grants new users none of: e.g.
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
//! - **rwlock** (`?mode=rwlock`), interoperable with Redisson's `RReadWriteLock`: shared holds
//!   (`LockOptions::shared()`) are its read lock, exclusive holds its write lock (see *Read/write
//!   locks*). Read locks are offered only in this mode: in the other two an exclusive hold is a
//!   redis-py or `RLock` key, which Redisson's read lock would not respect (it would add `mode`
//!   to an `RLock` hash and share it), so `shared()` there is refused with
//!   [`Error::Unsupported`](locksmith_core::Error::Unsupported).
//! - **semaphores** (`LockOptions::permits(n)`, every mode), interoperable with Redisson's
//!   `RPermitExpirableSemaphore` (see *Semaphores*).
//!
//! Keys holding another type (say a list) are never overwritten: acquisition and status fail
//! with [`Error::Backend`](locksmith_core::Error::Backend) naming the key and its type. A name
//! used as a semaphore is refused as a lock and the reverse, in every mode, with
//! [`Error::InvalidArgument`](locksmith_core::Error::InvalidArgument).
//!
//! ## Read/write locks (`?mode=rwlock`)
//! Redisson's layout (`RedissonReadLock`, `RedissonWriteLock`), which Java services using
//! `redisson.getReadWriteLock(name)` share with locksmith clients:
//! - a hash at key = prefix + name with field `mode` = `read` or `write`;
//! - each reader's field `<session-uuid>:<owner>` = its count (our owner plays Redisson's thread
//!   id; the engine counts reentrancy, so a locksmith hold is always 1), and per count a timeout
//!   key `{<key>}:<session-uuid>:<owner>:rwlock_timeout:<n>` whose `PX` is the reader's lease;
//!   the hash lives as long as its longest-lived reader; a reader whose timeout keys have gone
//!   (it crashed) no longer keeps anyone out once the others leave;
//! - the writer's field `<session-uuid>:<owner>:write` = 1, the hash's `PX` its lease;
//! - releases publish Redisson's messages on `redisson_rwlock:{<key>}`: `0` when the last reader
//!   leaves, `1` when the writer leaves;
//! - renewal is Redisson's watchdog, done by the engine's keep-alive: the reader's timeout keys
//!   and the hash (never shortened), or the writer's hash.
//!
//! locksmith adds, and Redisson ignores: a fencing token per grant from the counter
//! `locksmith:rwlock_token:{<key>}` (never expires, never deleted; Redisson's read/write lock has
//! none); `locksmith:holders:{<key>}`, a hash of each holder's `<token>:<session>:<owner>` for
//! `status` (it expires with the lock); and **FIFO order** for locksmith clients. Redisson's
//! read/write lock is documented "non-fair": a reader joins whenever the lock is in read mode, so
//! a stream of readers can starve a writer. locksmith's waiters queue as in plain mode (the
//! `locksmith:waiters:{<key>}` zsets, plus `…:writers`): a locksmith reader joins other readers
//! only when no live writer is queued before it, a writer takes a free lock only at the head of
//! the queue, and a release wakes the queued writer at the head, or every reader before the next
//! queued writer. Java readers do not queue and can still starve a locksmith writer; Java writers
//! compete for a free lock without queueing.
//!
//! **TTL with Java readers**: Redisson's watchdog renews a Java reader by setting the hash's
//! expiry to its own lease (`lockWatchdogTimeout`, 30 s by default), which can shorten it. While
//! locksmith readers renew (every TTL/3) that does no harm, but a locksmith reader that stops
//! renewing (paused, partitioned) could see the hash expire before its own lease, and so before
//! its guard's loss signal. When Java readers share a lock, keep locksmith's TTL at or below
//! Redisson's watchdog lease.
//!
//! Where locksmith is stricter than Redisson, never looser: a hash without `mode` (an `RLock`,
//! `?mode=reentrant`) is held, never joined; a locksmith reader never joins a write-mode hash
//! (Redisson lets the writing thread also read; locksmith holds have distinct owners); a release
//! acts only on a hash in its own mode.
//!
//! ## Semaphores (every mode)
//! Redisson's `RPermitExpirableSemaphore` layout, shared with Java services using
//! `redisson.getPermitExpirableSemaphore(name)`:
//! - key = prefix + name holds the number of **available** permits (a string integer without
//!   expiry, never deleted). The first user sets it to N, as Redisson's `trySetPermits(N)` does;
//!   N is then fixed for good (Redisson never deletes the key): everyone, Java included, must ask
//!   for the same N, computed as available + leased (Redisson's `getPermits`); another N is
//!   refused with [`Error::InvalidArgument`](locksmith_core::Error::InvalidArgument). A Java
//!   `addPermits`/`setPermits` changes N, and locksmith clients must follow.
//! - `{<key>}:timeout` (a zset; Redisson's `suffixName(name, "timeout")`) scores each leased
//!   permit's id, 16 random bytes as Redisson's `generateId`, with the end of its lease (ms since
//!   the epoch). A locksmith permit's lease is the session TTL from the Redis server's clock, and
//!   the keep-alive pushes it out (Redisson's `updateLeaseTime`); a permit found past its lease is
//!   reported lost.
//! - Every script, Redisson's and locksmith's, first reclaims permits past their lease (removes
//!   them, adds them to the count, publishes the count): a crashed holder's permit comes back to
//!   whoever looks next, at most its TTL after its last renewal.
//! - Grants and releases keep `available + leased = N`; releases and reclaims publish the new count
//!   on `redisson_sc:{<key>}`.
//!
//! locksmith adds, and Redisson ignores: a fencing token per grant from
//! `locksmith:semaphore_token:{<key>}` (never expires, never deleted; its existence also marks the
//! name as a semaphore for the lock scripts), the holder records `locksmith:holders:{<key>}`
//! (permit id → `<token>:<session>:<owner>`, for `status`), and FIFO order for locksmith clients
//! (the same waiter queue: a locksmith client takes a free permit only when the waiters queued
//! before it leave one for it; a release wakes as many waiters as there are free permits). Java
//! clients do not queue and take any free permit.
//!
//! **Clocks**: Java clients compute lease ends and reclaim with their own clocks, locksmith with
//! the Redis server's. A Java client whose clock is ahead by d reclaims every permit d early (and
//! a locksmith permit may then be handed out while its holder still works): keep clocks in sync
//! (NTP) when Java and Rust share a semaphore.
//!
//! **Redlock** (`redlock://`) offers neither read/write locks nor semaphores; it refuses them
//! with [`Error::Unsupported`](locksmith_core::Error::Unsupported). Leader election is not
//! offered on Redis (Redisson has no election recipe); [`Backend::supports_election`] is false.
//!
//! [`Backend::supports_election`]: locksmith_core::Backend::supports_election
//!
//! ## Waiting
//! **Plain mode, read/write locks and semaphores: a FIFO waiter queue, one wake-up per admitted
//! waiter.** (Below for plain mode; read/write locks and semaphores use the same queue with their
//! own admission rules, above.) An acquisition whose first attempt finds the lock busy (an
//! uncontended acquisition is one script call and touches no pub/sub) subscribes to its own
//! channel `locksmith:wake:{<key>}:<waiter-id>`, and only then joins the queue, so no wake-up can
//! be missed:
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
//! **Java holders of read/write locks and semaphores** announce their release only on Redisson's
//! channel (`redisson_rwlock:{<key>}`, `redisson_sc:{<key>}`). The acquire scripts tell a waiter
//! when a holder without a locksmith record blocks it; the waiter then subscribes to Redisson's
//! channel too (and tries again before waiting, so that release is not missed). Each message
//! there wakes one local waiter of the backend. Between locksmith clients only, nobody listens
//! there, so hand-offs stay one wake-up per admitted waiter; locksmith's releases still publish
//! Redisson's messages for Java waiters.
//!
//! **Reentrant mode** subscribes to Redisson's channel before its first try (Redisson's unlocks
//! publish there, ours too), and retries when a message arrives or on the same fallback timer.
//! Each message wakes one local waiter of the backend (not FIFO across clients).
//!
//! ## Sessions and renewal
//! Redis has no sessions: a session is an id plus the holds it renews. Every keep-alive renews
//! all of its holds in one owner-checked script and reports holds found deleted or taken over,
//! so the engine fires `lost()` for exactly those guards. Lock-delay is not supported.
//! `status(None)` lists every lock ever fenced under the URL's prefix and mode, and every
//! semaphore, found by `SCAN` over their fencing counters (a walk of the whole keyspace, at most
//! 10,000 locks; keys that only look like counters are skipped); `status(Some(name))`
//! reports the holder (plain: the token value, session unknown; reentrant: uuid and owner from
//! the field), the fencing counter, the TTL left, and the waiters (plain, rwlock and semaphores:
//! the live queue entries; reentrant: 0, unknown). Read/write locks list every live reader
//! (`shared`, with its own token and lease) or the writer; semaphores their number of permits and
//! every permit within its lease (`permit of N`); a Java holder shows with token 0 (and a permit
//! with its id, in hex, as the owner and no session). The value a hold may carry
//! (`LockOptions::value`) is not stored.
//!
//! ## Fault model (DESIGN.md §2.1)
//! - A single instance **without `appendfsync always` loses locks on a crash**: after a restart
//!   the key is gone and a second holder can be granted while the first still believes it holds
//!   the lock (until its next renewal finds the key gone).
//! - With asynchronous replicas, a **fail-over loses locks** that had not reached the replica.
//! - **Fencing tokens survive only with persistence**: without AOF (`appendfsync always`) a crash
//!   can reset the counter and tokens can repeat. With it, tokens only grow.
//! - The same holds for read/write locks and semaphores: without fsync a crash can lose read and
//!   write holds, **leased permits** (the count and the timeout set come back older or empty: more
//!   permits can be handed out than N while their earlier holders still work) and the token
//!   counters (`locksmith:rwlock_token:{…}`, `locksmith:semaphore_token:{…}`).
//! - Tokens increase per name **within one layout**: each mode keeps its own counter, so a name
//!   used both as a plain lock and as a read/write lock has two unrelated sequences. Use one mode
//!   per name (Redisson itself needs one object type per name).
#![warn(missing_docs, missing_debug_implementations, unreachable_pub, rust_2018_idioms)]

mod attempt;
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
