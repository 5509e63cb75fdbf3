//! # locksmith
//!
//! Distributed locks with fencing tokens, one contract over every backend. Pick the backend by
//! URL with [`connect`]; everything else is the same [`Client`] and [`Guard`]:
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> locksmith::Result<()> {
//! let client = locksmith::connect("memory://doc-example").await?;
//! let guard = client.lock("nightly-report").await?;
//! // Hand the token to the resource so it can refuse a stale holder.
//! println!("holding with fencing token {}", guard.token());
//! assert!(guard.is_held());
//! guard.unlock().await?;
//! # Ok(()) }
//! ```
//!
//! | URL | backend | feature |
//! |---|---|---|
//! | `locksmith://host:port` | the native lock server (`locksmith serve`) | `native` (default) |
//! | `memory://[name]` | the native server's logic in this process, for tests | `memory` (default) |
//! | `redis://[user:pass@]host:port[/db][?options]` | one Redis instance | `redis` |
//! | `redlock://h1:p1,h2:p2,…[?options]` | Redlock over N independent Redis masters (no fencing tokens) | `redlock` |
//! | `memcached://host[:port][?prefix=P]` | one memcached server, meta protocol (no fencing tokens) | `memcached` |
//! | `etcd://host:port[,host:port…]` | etcd v3, Go `concurrency.Mutex` layout (`etcdctl lock`) | `etcd` |
//! | `zk://host:port[,host:port…][/path]` | ZooKeeper, Curator `InterProcessMutex` layout | `zk` |
//! | `postgres://…`, `postgresql://…` | PostgreSQL lease table (`locksmith_locks`) with a fencing counter; `?mode=advisory`: advisory locks; `?mode=row_lock`: `SELECT … FOR UPDATE` | `sql` |
//! | `mysql://user[:pass]@host:port/db` | MySQL/MariaDB lease table with a fencing counter; `?mode=get_lock`: `GET_LOCK`; `?mode=row_lock`: `SELECT … FOR UPDATE` | `sql` |
//! | `sqlite://path` | SQLite file (created if missing) lease table with a fencing counter | `sql` |
//!
//! The contract every backend keeps (mutual exclusion within its fault model, no deadlock,
//! owner-checked release, fencing tokens, a loss signal before anyone else can be granted,
//! automatic renewal, waiting without polling, cancel safety, opt-in reentrancy) is in
//! `DESIGN.md` and is checked by one conformance suite per backend.
#![warn(missing_docs, missing_debug_implementations, unreachable_pub, rust_2018_idioms)]

use std::sync::Arc;
use std::time::Duration;

pub use locksmith_core::*;

/// The backend for `url`, without a session yet.
///
/// ```
/// assert!(locksmith::backend("locksmith://127.0.0.1:7531").is_ok());
/// assert!(matches!(locksmith::backend("gopher://x"), Err(locksmith::Error::InvalidUrl { .. })));
/// // Errors never echo a password.
/// let e = locksmith::backend("gopher://app:s3cret@x").unwrap_err();
/// assert!(!e.to_string().contains("s3cret"));
/// ```
///
/// # Errors
/// [`Error::InvalidUrl`] for an unknown scheme, a scheme whose feature is not built in, or a
/// malformed address.
pub fn backend(url: &str) -> Result<Arc<dyn Backend>> {
    // One parser decides the scheme (and refuses unknown ones without echoing credentials);
    // each driver then reads the parts it understands.
    let parsed = driver::BackendUrl::parse(url)?;
    let scheme = parsed.scheme();
    // A TLS scheme (`rediss`) goes to the driver of its base scheme.
    match scheme.base {
        #[cfg(feature = "native")]
        "locksmith" => Ok(Arc::new(locksmith_native::NativeBackend::from_url(url)?)),
        #[cfg(feature = "memory")]
        "memory" => Ok(Arc::new(locksmith_native::MemoryBackend::named(parsed.path()))),
        #[cfg(feature = "redis")]
        "redis" => Ok(Arc::new(locksmith_redis::RedisBackend::from_url(url)?)),
        #[cfg(feature = "redlock")]
        "redlock" => Ok(Arc::new(locksmith_redlock::RedlockBackend::from_url(url)?)),
        #[cfg(feature = "memcached")]
        "memcached" => Ok(Arc::new(locksmith_memcached::MemcachedBackend::from_url(url)?)),
        #[cfg(feature = "etcd")]
        "etcd" => Ok(Arc::new(locksmith_etcd::EtcdBackend::from_url(url)?)),
        #[cfg(feature = "zk")]
        "zk" => Ok(Arc::new(locksmith_zk::ZkBackend::from_url(url)?)),
        #[cfg(feature = "sql")]
        "postgres" | "postgresql" | "mysql" | "sqlite" => Ok(Arc::new(locksmith_sql::SqlBackend::from_url(url)?)),
        name => Err(parsed.invalid(format!(
            "the {name}:// backend is not built into this binary (cargo feature `{}` of the locksmith crate)",
            scheme.feature
        ))),
    }
}

/// A client for `url` with the default session TTL (10 s). Sessions open lazily, so an
/// unreachable server shows as [`Error::Unavailable`] on the first acquisition.
///
/// # Cancel safety
/// Cancel safe: nothing is opened on the backend yet.
///
/// # Errors
/// As [`backend`].
pub async fn connect(url: &str) -> Result<Client> {
    Client::with_default_ttl(backend(url)?)
}

/// A client for `url` whose session lease is `ttl`.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> locksmith::Result<()> {
/// use std::time::Duration;
/// let client = locksmith::connect_with_ttl("memory://", Duration::from_secs(2)).await?;
/// assert_eq!(client.ttl(), Duration::from_secs(2));
/// # Ok(()) }
/// ```
///
/// # Cancel safety
/// Cancel safe.
///
/// # Errors
/// As [`backend`], or [`Error::InvalidTtl`].
pub async fn connect_with_ttl(url: &str, ttl: Duration) -> Result<Client> {
    Client::new(backend(url)?, ttl)
}
