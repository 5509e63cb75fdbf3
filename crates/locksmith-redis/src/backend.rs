//! The backend: URL, shared connections, sessions and status.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use locksmith_core::{Backend, Error, HolderStatus, LockName, LockStatus, Result, Session};
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
    /// Parses `redis://[user:pass@]host:port[/db][?mode=plain|reentrant&prefix=P]`. Does no I/O
    /// and needs no runtime: connections open on first use, and an unreachable server shows
    /// then as [`Error::Unavailable`] (after at most about 3 s).
    ///
    /// ```
    /// let b = locksmith_redis::RedisBackend::from_url("redis://user:secret@127.0.0.1:6379/1?mode=reentrant")?;
    /// use locksmith_core::Backend;
    /// assert_eq!(b.describe(), "redis://127.0.0.1:6379/1?mode=reentrant");
    /// assert_eq!(b.mode(), locksmith_redis::Mode::Reentrant);
    /// # Ok::<(), locksmith_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidUrl`] for a malformed URL, an unknown option or mode.
    pub fn from_url(url: &str) -> Result<Self> {
        let config = Config::parse(url)?;
        let shared = Shared {
            conn: Conn::new(config.client.clone(), config.describe),
            router: Router::new(config.client),
            layout: Layout { mode: config.mode, prefix: config.prefix },
        };
        Ok(Self { shared: Arc::new(shared) })
    }

    /// The lock layout in use.
    pub fn mode(&self) -> Mode {
        self.shared.layout.mode
    }

    async fn status_of(&self, name: &LockName) -> Result<LockStatus> {
        let conn = &self.shared.conn;
        let key = self.shared.layout.key(name.as_str());
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
            Mode::Reentrant => "hash",
        };
        let waiters = self.shared.waiters(&key).await?;
        if ty == "none" {
            return Ok(LockStatus::new(name.to_string(), None, waiters, last_token));
        }
        if ty != expected {
            return Err(Error::Backend(format!("redis: key {key:?} holds a {ty}, not a lock")));
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
            Mode::Reentrant => {
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
        Ok(LockStatus::new(name.to_string(), holder, waiters, last_token))
    }
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

    /// Opens a session after one round trip, so an unreachable server is reported at once.
    ///
    /// # Cancel safety
    /// Cancel safe: nothing is created in Redis.
    async fn open_session(&self, ttl: Duration) -> Result<Box<dyn Session>> {
        self.shared.ping().await?;
        Ok(Box::new(RedisSession::new(self.shared.clone(), ttl)))
    }

    /// One lock's holder, last token, TTL left and waiters (plain: the live entries of its waiter
    /// queue; reentrant: not known, always 0). With `name == None` this answers an empty list:
    /// Redis keeps no index of lock keys.
    ///
    /// # Cancel safety
    /// Cancel safe: read only.
    async fn status(&self, name: Option<&LockName>) -> Result<Vec<LockStatus>> {
        match name {
            Some(name) => Ok(vec![self.status_of(name).await?]),
            None => Ok(Vec::new()),
        }
    }
}
