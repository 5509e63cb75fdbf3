//! `RedlockBackend`: the URL, the shared instance set, sessions and `status`.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures_util::future::join_all;
use locksmith_core::driver::parse_hold_value;
use locksmith_core::{Backend, Error, HolderStatus, LockName, LockStatus, Result, Session};

use crate::cluster::Cluster;
use crate::instance::Reply;
use crate::session::RedlockSession;
use crate::timing::Timeouts;
use crate::url::RedlockUrl;

/// Time limits for `status`, which has no session TTL: as for a 2 s TTL (200 ms per step).
const STATUS_TIMEOUTS_TTL: Duration = Duration::from_secs(2);
/// At most this many keys per instance are listed by `status(None)`.
const STATUS_LIST_LIMIT: usize = 1000;

/// Redlock over N (odd, ≥ 3) independent Redis masters. See the crate docs for the fault model;
/// this backend gives **no fencing tokens**.
///
/// ```
/// use locksmith_core::Backend;
/// let b = locksmith_redlock::RedlockBackend::from_url("redlock://:pw@10.0.0.1:6379,10.0.0.2:6379,10.0.0.3:6379")?;
/// assert_eq!(b.describe(), "redlock://10.0.0.1:6379,10.0.0.2:6379,10.0.0.3:6379");
/// assert!(!b.provides_fencing());
/// assert_eq!(b.quorum(), 2);
/// # Ok::<(), locksmith_core::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct RedlockBackend {
    cluster: Arc<Cluster>,
}

impl RedlockBackend {
    /// Parses `redlock://[user:pass@]h1:p1,h2:p2,…[?prefix=P]`, with TLS for every instance
    /// `…?tls=true[&ca=FILE&cert=FILE&key=FILE]` (see the crate docs). No network I/O (TLS
    /// files are read now): every instance is connected lazily, independently, with short
    /// timeouts, on first use.
    ///
    /// `prefix` is prepended to lock names to form Redis keys (default: none, key = name, as
    /// redis-py's `Lock` does); it also lets `status` list every lock.
    ///
    /// # Errors
    /// [`Error::InvalidUrl`] unless the URL names an odd number (≥ 3) of distinct `host:port`
    /// pairs, for an unknown option or a contradictory TLS setting; [`Error::Config`] for TLS
    /// files that cannot be read or used.
    pub fn from_url(url: &str) -> Result<Self> {
        let url = RedlockUrl::parse(url)?;
        let clients = url.instances.iter().map(|addr| url.instance_client(addr)).collect::<Result<Vec<_>>>()?;
        Ok(Self { cluster: Arc::new(Cluster::new(url.describe(), url.prefix.clone(), clients)) })
    }

    /// Redlock over clients built by the caller, one per instance: for credentials that do not
    /// belong in a URL, and for what one URL cannot say — TLS on some instances only, other
    /// CAs, client certificates or users per instance. `prefix` is what `?prefix=` would be
    /// (`""` for none). No I/O. TLS clients are built with the redis crate's API
    /// ([`redis::Client::build_with_tls`]); ring is then installed as rustls' crypto provider
    /// unless the process has one.
    ///
    /// ```
    /// use locksmith_core::Backend;
    /// let clients = ["redis://r1:6379", "redis://r2:6379", "redis://r3:6379"].map(|u| redis::Client::open(u).unwrap());
    /// let b = locksmith_redlock::RedlockBackend::from_clients(clients.to_vec(), "locks:")?;
    /// assert_eq!(b.describe(), "redlock[redis://r1:6379, redis://r2:6379, redis://r3:6379]?prefix=locks:");
    /// # Ok::<(), locksmith_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] unless there is an odd number (≥ 3) of clients for distinct
    /// addresses, or for a prefix with control characters.
    pub fn from_clients(clients: Vec<redis::Client>, prefix: &str) -> Result<Self> {
        if prefix.chars().any(char::is_control) {
            return Err(Error::InvalidArgument("redlock: the prefix has control characters".into()));
        }
        let names: Vec<String> = clients.iter().map(locksmith_redis::connect::describe).collect();
        let keys =
            clients.iter().zip(&names).map(|(c, name)| (c.get_connection_info().addr().to_string(), name.clone()));
        crate::url::check_instances(keys).map_err(|reason| Error::InvalidArgument(format!("redlock: {reason}")))?;
        if clients.iter().any(locksmith_redis::connect::is_tls) {
            locksmith_redis::connect::install_crypto_provider();
        }
        let mut describe = format!("redlock[{}]", names.join(", "));
        if !prefix.is_empty() {
            describe.push_str(&format!("?prefix={prefix}"));
        }
        Ok(Self { cluster: Arc::new(Cluster::new(describe, prefix.to_string(), clients)) })
    }

    /// Number of instances (N).
    pub fn instance_count(&self) -> usize {
        self.cluster.instances.len()
    }

    /// Votes needed for a grant: N/2 + 1.
    pub fn quorum(&self) -> usize {
        self.cluster.quorum()
    }

    async fn status_of(&self, name: &str, t: Timeouts) -> Result<LockStatus> {
        let replies = self.cluster.inspect(&self.cluster.key(name), t).await;
        let quorum = self.cluster.quorum();
        if replies.iter().filter(|r| r.reachable()).count() < quorum {
            return Err(self.cluster.failure(&replies));
        }
        let mut by_value: HashMap<&str, Vec<i64>> = HashMap::new();
        for r in &replies {
            if let Reply::Value((Some(v), pttl)) = r {
                by_value.entry(v.as_str()).or_default().push(*pttl);
            }
        }
        let holder = by_value.into_iter().find(|(_, ttls)| ttls.len() >= quorum).map(|(value, mut ttls)| {
            // The hold ends when its quorum-th longest-living key expires.
            ttls.sort_unstable_by(|a, b| b.cmp(a));
            let pttl = ttls.get(quorum - 1).copied().unwrap_or(0);
            // PTTL -1: a key without expiry (not written by locksmith); it never ends by itself.
            let left = if pttl == -1 { Duration::MAX } else { Duration::from_millis(pttl.max(0).unsigned_abs()) };
            let (session, owner) = parse_hold_value(value);
            HolderStatus::new(session, owner, 0, left)
        });
        // Redlock waiters retry on their own: none is visible to the instances.
        Ok(LockStatus::new(name.to_string(), holder, 0, 0).waiters_unknown())
    }
}

#[async_trait]
impl Backend for RedlockBackend {
    fn describe(&self) -> String {
        self.cluster.describe.clone()
    }

    fn scheme(&self) -> &'static str {
        "redlock"
    }

    /// Always `false`: a Redlock grant has no safe fencing token (see the crate docs).
    fn provides_fencing(&self) -> bool {
        false
    }

    /// No I/O: a Redlock "session" is the expiry of its holds' keys.
    ///
    /// # Cancel safety
    /// Cancel safe: nothing happens on the instances.
    /// Fails with [`Error::Unavailable`] when fewer than a quorum of instances answer a
    /// `PING` now (or with the refusal, when their credentials or TLS settings rule a quorum
    /// out): no lock could be taken, and a waiting `lock()` would only wait.
    async fn open_session(&self, ttl: Duration) -> Result<Box<dyn Session>> {
        let replies = self.cluster.ping(Timeouts::for_ttl(ttl)).await;
        if replies.iter().filter(|r| r.reachable()).count() < self.cluster.quorum() {
            return Err(self.cluster.failure(&replies));
        }
        Ok(Box::new(RedlockSession::new(self.cluster.clone(), ttl)))
    }

    /// One lock: the holder if a majority of instances agree on one value (token 0, no waiters:
    /// Redis keeps no queue). All locks: only with a `prefix` (SCAN on every instance).
    ///
    /// # Cancel safety
    /// Cancel safe: read only.
    async fn status(&self, name: Option<&LockName>) -> Result<Vec<LockStatus>> {
        let t = Timeouts::for_ttl(STATUS_TIMEOUTS_TTL);
        if let Some(name) = name {
            return Ok(vec![self.status_of(name.as_str(), t).await?]);
        }
        let prefix = &self.cluster.prefix;
        if prefix.is_empty() {
            return Err(Error::InvalidArgument(
                "redlock: listing every lock needs a key prefix (redlock://…?prefix=locks:); or name one lock".into(),
            ));
        }
        let listed = self.cluster.scan_prefix(STATUS_LIST_LIMIT, t).await;
        if listed.iter().filter(|r| r.reachable()).count() < self.cluster.quorum() {
            return Err(self.cluster.failure(&listed));
        }
        let names: BTreeSet<String> = listed
            .iter()
            .filter_map(|r| match r {
                Reply::Value(keys) => Some(keys),
                _ => None,
            })
            .flatten()
            .filter_map(|k| k.strip_prefix(prefix.as_str()).map(str::to_string))
            .collect();
        let all = join_all(names.iter().map(|n| self.status_of(n, t))).await;
        Ok(all.into_iter().filter_map(Result::ok).filter(|s| s.holder.is_some()).collect())
    }
}
