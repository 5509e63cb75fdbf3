//! The backend: URL, shared connections, sessions and status.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use locksmith_core::{Backend, Error, HoldMode, HolderStatus, LockName, LockStatus, Result, Session};
use redis::Value;

use crate::conn::Conn;
use crate::layout::{Layout, Mode};
use crate::router::Router;
use crate::scripts::as_int;
use crate::session::RedisSession;
use crate::shared::Shared;
use crate::url::Config;

/// One Redis instance as a locksmith backend (`redis://…`). Cheap to clone; clones share one
/// command connection and one pub/sub connection.
#[derive(Debug, Clone)]
pub struct RedisBackend {
    shared: Arc<Shared>,
}

impl RedisBackend {
    /// Parses `redis://[user:pass@]host:port[/db][?mode=plain|reentrant|rwlock&prefix=P]`, or with TLS
    /// `rediss://…[?ca=FILE&cert=FILE&key=FILE]` (also `redis://…?tls=true…`; see
    /// [`connect`](crate::connect) and the crate docs). Does no network I/O (TLS files are read
    /// now) and needs no runtime: connections open on first use, and an unreachable server shows
    /// then as [`Error::Unavailable`] (after at most about 3 s), a refused password as
    /// [`Error::Auth`], a certificate that does not verify as [`Error::Config`] (both within
    /// about a second, never retried).
    ///
    /// ```
    /// let b = locksmith_redis::RedisBackend::from_url("redis://user:secret@127.0.0.1:6379/1?mode=reentrant")?;
    /// use locksmith_core::Backend;
    /// assert_eq!(b.describe(), "redis://user@127.0.0.1:6379/1?mode=reentrant");
    /// assert_eq!(b.mode(), locksmith_redis::Mode::Reentrant);
    /// // Semaphores in every mode; read locks only where exclusive holds are Redisson write locks.
    /// use locksmith_core::HoldMode;
    /// assert!(b.supports(HoldMode::Permit(3)) && !b.supports(HoldMode::Shared));
    /// let rw = locksmith_redis::RedisBackend::from_url("redis://127.0.0.1:6379?mode=rwlock")?;
    /// assert!(rw.supports(HoldMode::Shared) && !rw.supports_election());
    /// # Ok::<(), locksmith_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidUrl`] for a malformed URL, an unknown option or mode, a contradictory TLS
    /// setting; [`Error::Config`] for TLS files that cannot be read or hold no usable PEM.
    pub fn from_url(url: &str) -> Result<Self> {
        let config = Config::parse(url)?;
        Ok(Self::build(config.client, config.describe, config.mode, config.prefix))
    }

    /// A backend over a `redis::Client` built by the caller — for credentials or keys that do
    /// not belong in a URL (a secret store, a password file), or connection settings a URL
    /// cannot say. `mode` and `prefix` are what `?mode=` and `?prefix=` would be. No I/O.
    ///
    /// A TLS client is built with the redis crate's own API
    /// ([`redis::Client::build_with_tls`]); when it is one, ring is installed as rustls' crypto
    /// provider unless the process has one (see [`connect::install_crypto_provider`]).
    ///
    /// ```
    /// use locksmith_core::Backend;
    /// use locksmith_redis::{Mode, RedisBackend};
    ///
    /// let secret = String::from("from-a-vault"); // never in a URL, a log or a message
    /// let info = redis::ConnectionAddr::TcpTls { host: "cache.internal".into(), port: 6380, insecure: false, tls_params: None };
    /// let info = redis::IntoConnectionInfo::into_connection_info(info)?.set_redis_settings(
    ///     redis::RedisConnectionInfo::default().set_username("app").set_password(&secret),
    /// );
    /// let ca = b"-----BEGIN CERTIFICATE-----\n...".to_vec(); // the PEM of the CA to trust
    /// # let ca = Vec::new();
    /// let client = redis::Client::build_with_tls(info, redis::TlsCertificates {
    ///     client_tls: None,
    ///     root_cert: Some(ca).filter(|c| !c.is_empty()),
    /// })?;
    /// let backend = RedisBackend::from_client(client, Mode::Plain, "jobs:");
    /// assert_eq!(backend.describe(), "rediss://app@cache.internal:6380");
    /// # Ok::<(), redis::RedisError>(())
    /// ```
    ///
    /// [`connect::install_crypto_provider`]: crate::connect::install_crypto_provider
    pub fn from_client(client: redis::Client, mode: Mode, prefix: &str) -> Self {
        if crate::connect::is_tls(&client) {
            crate::connect::install_crypto_provider();
        }
        let describe = crate::connect::describe(&client);
        Self::build(client, describe, mode, prefix.to_string())
    }

    fn build(client: redis::Client, describe: String, mode: Mode, prefix: String) -> Self {
        let shared = Shared {
            conn: Conn::new(client.clone(), describe),
            router: Router::new(client),
            layout: Layout { mode, prefix },
        };
        Self { shared: Arc::new(shared) }
    }

    /// The lock layout in use.
    pub fn mode(&self) -> Mode {
        self.shared.layout.mode
    }

    /// One lock's or semaphore's status, or `Ok(Err(why))` when its key holds something that
    /// is neither.
    async fn status_of(&self, name: &LockName) -> Result<std::result::Result<LockStatus, String>> {
        let conn = &self.shared.conn;
        let key = self.shared.layout.key(name.as_str());
        if crate::status::is_semaphore(&self.shared, &key).await? {
            return crate::status::semaphore(&self.shared, name, &key).await;
        }
        if self.shared.layout.mode == Mode::RwLock {
            return crate::status::rwlock(&self.shared, name, &key).await;
        }
        let fence = self.shared.layout.fence_key(&key);
        let mut p = redis::pipe();
        p.cmd("TYPE").arg(&key).cmd("PTTL").arg(&key).cmd("GET").arg(&fence);
        let replies = conn.pipe(&p).await?;
        let [ty, pttl, last] = replies.as_slice() else {
            return Err(Error::Protocol(format!("redis: unexpected status reply {replies:?}")));
        };
        let ty = match ty {
            Value::SimpleString(s) => s.clone(),
            Value::Okay => "ok".into(),
            other => return Err(Error::Protocol(format!("redis: unexpected TYPE reply {other:?}"))),
        };
        let last_token = as_int(last).and_then(|n| u64::try_from(n).ok()).unwrap_or(0);
        let ttl_left = Duration::from_millis(as_int(pttl).and_then(|n| u64::try_from(n).ok()).unwrap_or(0));
        let expected = match self.shared.layout.mode {
            Mode::Plain => "string",
            Mode::Reentrant | Mode::RwLock => "hash",
        };
        let waiters = self.shared.waiters(&key).await?;
        if ty == "none" {
            return Ok(Ok(LockStatus::new(name.to_string(), None, waiters, last_token)));
        }
        if ty != expected {
            return Ok(Err(format!("redis: key {key:?} holds a {ty}, not a lock")));
        }
        let holder = match self.shared.layout.mode {
            // Plain: the value is the holder's random token; which session it belongs to is not
            // recorded in Redis (redis-py compatible layout).
            Mode::Plain => {
                let mut p = redis::pipe();
                p.cmd("GET").arg(&key);
                let v = conn.pipe(&p).await?;
                text(v.first()).map(|owner| (String::new(), owner))
            }
            // Reentrant: the field is `<session uuid>:<owner>`.
            Mode::Reentrant | Mode::RwLock => {
                let mut p = redis::pipe();
                p.cmd("HKEYS").arg(&key);
                let v = conn.pipe(&p).await?;
                first_field(v.first()).map(|f| match f.split_once(':') {
                    Some((s, o)) => (s.to_string(), o.to_string()),
                    None => (String::new(), f),
                })
            }
        };
        let holder = holder.map(|(session, owner)| HolderStatus::new(session, owner, last_token, ttl_left));
        Ok(Ok(LockStatus::new(name.to_string(), holder, waiters, last_token)))
    }

    /// Every lock this layout has ever fenced, and every semaphore: the fencing counters found
    /// by `SCAN` (never deleted, so a free lock is listed too), in name order, at most
    /// [`MAX_LISTED`]. Keys of other applications that happen to match are skipped: a name is
    /// kept only if it maps back to the counter, the counter is a positive integer, and the
    /// lock's key is free or a lock.
    async fn list(&self) -> Result<Vec<LockStatus>> {
        let layout = &self.shared.layout;
        let mut names = BTreeSet::new();
        for pattern in layout.fence_patterns() {
            let mut cursor = String::from("0");
            loop {
                let mut p = redis::pipe();
                p.cmd("SCAN").arg(&cursor).arg("MATCH").arg(&pattern).arg("COUNT").arg(1000).arg("TYPE").arg("string");
                let replies = self.shared.conn.pipe(&p).await?;
                let (next, keys) = scan_page(replies.first())?;
                names.extend(keys.iter().filter_map(|k| layout.name_of_fence(k)));
                if next == "0" || names.len() >= MAX_LISTED {
                    break;
                }
                cursor = next;
            }
        }
        let mut out = Vec::new();
        for name in names.into_iter().take(MAX_LISTED) {
            let Ok(name) = LockName::new(name) else { continue };
            if let Ok(s) = self.status_of(&name).await? {
                if s.last_token > 0 {
                    out.push(s);
                }
            }
        }
        Ok(out)
    }
}

/// Most locks `status` lists: it costs a few round trips per lock.
const MAX_LISTED: usize = 10_000;

/// One `SCAN` reply: the next cursor and the keys of this page.
fn scan_page(reply: Option<&Value>) -> Result<(String, Vec<String>)> {
    let bad = || Error::Protocol(format!("redis: unexpected SCAN reply {reply:?}"));
    let Some(Value::Array(parts)) = reply else { return Err(bad()) };
    let [cursor, Value::Array(keys)] = parts.as_slice() else { return Err(bad()) };
    let cursor = text(Some(cursor)).ok_or_else(bad)?;
    Ok((cursor, keys.iter().filter_map(|k| text(Some(k))).collect()))
}

fn text(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

fn first_field(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::Array(items) | Value::Set(items) => text(items.first()),
        _ => None,
    }
}

#[async_trait]
impl Backend for RedisBackend {
    fn describe(&self) -> String {
        self.shared.conn.describe().to_string()
    }

    fn scheme(&self) -> &'static str {
        "redis"
    }

    /// Exclusive holds and semaphore permits in every mode; read locks with `?mode=rwlock`
    /// (there exclusive holds are Redisson's write lock).
    fn supports(&self, mode: HoldMode) -> bool {
        self.shared.layout.kind(mode).is_some()
    }

    /// Opens a session after one round trip, so an unreachable server is reported at once.
    ///
    /// # Cancel safety
    /// Cancel safe: nothing is created in Redis.
    async fn open_session(&self, ttl: Duration) -> Result<Box<dyn Session>> {
        self.shared.ping().await?;
        Ok(Box::new(RedisSession::new(self.shared.clone(), ttl)))
    }

    /// One lock's holders, last token, TTL left and waiters (plain, rwlock and semaphores: the
    /// live entries of its waiter queue; reentrant: not known, always 0); a semaphore's number of
    /// permits; a key of another type is an [`Error::Backend`]. With `name == None`, every lock
    /// ever fenced under this URL's prefix and mode and every semaphore, found by `SCAN` over the
    /// keyspace (a walk of the whole database: meant for operators, not hot paths), at most
    /// 10,000.
    ///
    /// # Cancel safety
    /// Cancel safe: read only.
    async fn status(&self, name: Option<&LockName>) -> Result<Vec<LockStatus>> {
        match name {
            Some(name) => Ok(vec![self.status_of(name).await?.map_err(Error::Backend)?]),
            None => self.list().await,
        }
    }
}
