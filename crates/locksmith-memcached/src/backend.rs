//! `MemcachedBackend`: the URL, the connection shared by its sessions, and `status`.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use locksmith_core::driver::parse_hold_value;
use locksmith_core::{Backend, Error, HolderStatus, LockName, LockStatus, Result, Session};

use crate::conn::{Conn, Timeouts};
use crate::server::Server;
use crate::session::MemcachedSession;
use crate::url::MemcachedUrl;

/// Time limits for `status`, which has no session TTL: as for a 4 s TTL (1 s per step).
const STATUS_TIMEOUTS_TTL: Duration = Duration::from_secs(4);

/// Locks on one memcached server (≥ 1.6, meta protocol). See the crate docs for the fault
/// model; this backend gives **no fencing tokens**.
///
/// ```
/// use locksmith_core::Backend;
/// let b = locksmith_memcached::MemcachedBackend::from_url("memcached://cache1?prefix=locks:")?;
/// assert_eq!(b.describe(), "memcached://cache1:11211?prefix=locks:");
/// assert!(!b.provides_fencing());
/// # Ok::<(), locksmith_core::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct MemcachedBackend {
    server: Arc<Server>,
}

impl MemcachedBackend {
    /// Parses `memcached://host[:port][?prefix=P]` (port 11211 by default). No network I/O:
    /// the server is connected on first use, and again after any failure.
    ///
    /// `prefix` is prepended to lock names to form keys (default: none, key = name).
    ///
    /// # Errors
    /// [`Error::InvalidUrl`] for more than one server (a quorum of independent servers is
    /// Redlock), credentials (memcached's text protocol has none), a path, or an unknown option.
    pub fn from_url(url: &str) -> Result<Self> {
        let url = MemcachedUrl::parse(url)?;
        let conn = Conn::new(&url.server.host, url.server.port, url.describe().to_string());
        Ok(Self { server: Arc::new(Server::new(url.describe().to_string(), url.prefix.clone(), conn)) })
    }
}

#[async_trait]
impl Backend for MemcachedBackend {
    fn describe(&self) -> String {
        self.server.describe.clone()
    }

    fn scheme(&self) -> &'static str {
        "memcached"
    }

    /// Always `false`: memcached keeps no counter that survives eviction or a restart, so a
    /// grant carries token 0 (see the crate docs).
    fn provides_fencing(&self) -> bool {
        false
    }

    /// No I/O: a memcached "session" is the expiry of its holds' keys.
    ///
    /// # Cancel safety
    /// Cancel safe: nothing happens on the server.
    async fn open_session(&self, ttl: Duration) -> Result<Box<dyn Session>> {
        Ok(Box::new(MemcachedSession::new(self.server.clone(), ttl)))
    }

    /// One lock: its holder (token 0, the seconds memcached has left on the key; waiters
    /// unknown: they poll). All locks: refused, memcached cannot list keys by prefix.
    ///
    /// # Cancel safety
    /// Cancel safe: read only.
    async fn status(&self, name: Option<&LockName>) -> Result<Vec<LockStatus>> {
        let Some(name) = name else {
            return Err(Error::InvalidArgument(
                "memcached cannot list its keys: name one lock (locksmith status NAME)".into(),
            ));
        };
        let key = self.server.key(name.as_str())?;
        let item = self.server.read(&key, Timeouts::for_ttl(STATUS_TIMEOUTS_TTL)).await?;
        let holder = item.map(|item| {
            let (session, owner) = parse_hold_value(&String::from_utf8_lossy(&item.value));
            // No expiry: a key written by another tool without one never ends by itself.
            HolderStatus::new(session, owner, 0, item.ttl.unwrap_or(Duration::MAX))
        });
        Ok(vec![LockStatus::new(name.to_string(), holder, 0, 0).waiters_unknown()])
    }
}
