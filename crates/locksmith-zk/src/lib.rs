//! # locksmith-zk: ZooKeeper as a locksmith backend
//!
//! URL: `zk://[user:password@]host[:port][,host[:port]…][/path][?acl=creator|creator-read|open]`
//! (port 2181 when omitted). Building a [`ZkBackend`] does no I/O; sessions
//! connect when opened (within 3 s, else [`Error::Unavailable`]). The URL path is the **base**
//! under which lock directories live (default `/locksmith`); it is a plain path prefix, not a
//! ZooKeeper chroot, and is created on demand.
//!
//! ## Layout (Curator `InterProcessMutex` compatible)
//! Lock `NAME` is the directory `<base>/NAME` (each `/`-separated segment of the name is kept;
//! segments ZooKeeper would refuse — empty, `.`, `..`, containing `%` or forbidden characters —
//! are %-escaped). Each hold is one EPHEMERAL_SEQUENTIAL node `_c_<uuid>-lock-<seq>` holding
//! the owner id as data, exactly as Curator's `InterProcessMutex` names its nodes, so a Curator
//! client using `<base>/NAME` as its lock path contends with us. kazoo's `<id>__lock__<seq>`
//! nodes are counted as contenders too (kazoo needs `extra_lock_patterns=["-lock-"]` to count
//! ours). Contenders are ordered by the sequence after the last `-lock-` / `__lock__`; the
//! lowest holds the lock. Waiters are FIFO: each watches only its predecessor and re-checks when
//! it goes (no herd). The fencing token is the czxid of the holder's node: zxids grow across
//! the whole ensemble, so tokens grow per lock. Release deletes our node; if the connection
//! was lost while creating it, the node is found again by its uuid.
//!
//! ## Authentication and ACLs
//! `zk://user:password@host/…` authenticates the session with ZooKeeper's `digest` scheme, and
//! every node the driver creates (the base path, lock directories, lock nodes) gets a
//! creator-only ACL (`auth` ALL): other credentials and anonymous clients can neither delete our
//! nodes nor join or list our locks; `?acl=creator-read` adds `world:anyone` READ so that
//! anyone may observe (status, Curator/kazoo observers) but not change them; `?acl=open` keeps
//! the world-writable ACL. Without credentials nodes are world-writable (ZooKeeper has no identity
//! to restrict them to) — the layout Curator and kazoo use by default. An operation the ACL
//! denies is [`Error::Auth`] ("the node's ACL does not grant it to these credentials"): with
//! digest authentication a wrong password is not refused at login, it is a different identity.
//! All clients that share locks must use the same credentials (or `creator-read` to observe).
//!
//! TLS (ZooKeeper's `secureClientPort`) is not offered: the `zookeeper-client` crate's `tls`
//! feature turns on rustls's default features, which build the aws-lc-rs crypto provider next to
//! the workspace's one (ring), and Debian's ZooKeeper 3.8 needs Netty added to its classpath for
//! a TLS port. Use a TLS tunnel or a private network to the ensemble.
//!
//! ## Sessions and the fault model
//! One locksmith session is one ZooKeeper session whose timeout is the lock TTL. The server
//! clamps timeouts to `[minSessionTimeout, maxSessionTimeout]` (default 2..20 × tickTime, i.e.
//! 4 s..40 s with the default `tickTime=2000`); a TTL the server would not honour exactly is
//! refused with [`Error::InvalidArgument`] naming the negotiated timeout, because a shorter
//! server timeout would break the loss signal and a longer one the TTL promise. The client
//! library pings by itself; [`Session::keep_alive`](locksmith_core::Session::keep_alive) does
//! one cheap read round trip, checks that each hold's node still exists (a node deleted by a
//! third party is reported lost) and maps session expiry to [`Error::SessionExpired`] and
//! connection loss to [`Error::Unavailable`]. Mutual exclusion holds as long as the ensemble
//! keeps a quorum and its transaction log (ZooKeeper fsyncs before acknowledging); a holder
//! paused past its session timeout loses its node, and the engine's local deadline tells it so
//! first. A server restart within the session timeout keeps the session and its nodes.
//! Lock-delay is not supported (ignored).
//!
//! ## Status
//! `status(Some(name))` lists the lock's contenders: holder = lowest sequence (session id in
//! hex, owner = node data), waiters = contenders − 1, token and last token = holder's czxid.
//! The holder's `ttl_left` is unknown to ZooKeeper clients and reported as unknown (`None`). `status(None)`
//! walks the tree under the base and reports every directory with contenders.
#![warn(missing_docs, missing_debug_implementations, unreachable_pub, rust_2018_idioms)]

mod inspect;
mod layout;
mod options;
mod session;
mod url;

pub use options::ZkOptions;
pub use url::{ExclusiveLayout, NodeAcl};

use std::time::Duration;

use locksmith_core::{Error, HoldMode, LockName, LockStatus, Result};
use tokio::sync::Mutex;
use zookeeper_client as zk;

use crate::layout::{map_err, retry};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
const STATUS_SESSION_TIMEOUT: Duration = Duration::from_secs(10);
const MAX_STATUS_NODES: usize = 100_000;

/// A ZooKeeper ensemble reached through `zk://host:port[,host:port…][/path]`.
#[derive(Debug)]
pub struct ZkBackend {
    url: String,
    parsed: url::ZkUrl,
    status_client: Mutex<Option<zk::Client>>,
}

impl ZkBackend {
    /// Parses the URL; connects lazily (no I/O, no runtime needed).
    ///
    /// # Errors
    /// [`Error::InvalidUrl`] when the URL is not `zk://host:port[,host:port…][/path]` or the
    /// path is not a valid ZooKeeper path.
    pub fn from_url(url: &str) -> Result<Self> {
        let parsed = url::parse(url)?;
        Ok(Self { url: parsed.describe.clone(), parsed, status_client: Mutex::new(None) })
    }

    /// A backend for the ensemble `hosts` (`host[:port]`, port 2181 when omitted) with
    /// `options` (credentials, base path, ACL) given in code rather than in a URL — for
    /// passwords that do not belong in one. No I/O. See [`ZkOptions`] for an example.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for no or malformed hosts, a base path ZooKeeper would refuse,
    /// or a creator ACL without credentials. No message shows the password.
    pub fn with_options<I, S>(hosts: I, options: ZkOptions) -> Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let hosts: Vec<String> = hosts.into_iter().map(|h| h.as_ref().to_string()).collect();
        let invalid = |reason: String| Error::InvalidArgument(format!("zk: {reason}"));
        // The hosts and base go through the URL parser (no credentials in this string), so they
        // are checked exactly as in a URL.
        let mut shown = format!("zk://{}", hosts.join(","));
        if hosts.is_empty() || hosts.iter().any(|h| h.is_empty() || h.contains(['/', '?', '#', '@', ','])) {
            return Err(invalid(format!("expected host[:port] for every host, got {hosts:?}")));
        }
        let base = url::check_base(options.base.as_deref().unwrap_or("")).map_err(invalid)?;
        let acl = url::resolve_acl(options.acl, options.digest.is_some()).map_err(invalid)?;
        if base != url::DEFAULT_BASE {
            shown.push_str(&base);
        }
        let parsed = locksmith_core::driver::BackendUrl::parse(&shown).map_err(|e| invalid(e.to_string()))?;
        let mut describe = url::describe(&parsed, acl, options.exclusive);
        if let Some(user) = &options.user {
            describe = describe.replacen("zk://", &format!("zk://{user}@"), 1);
        }
        let hosts: Vec<String> = parsed.hosts().iter().map(ToString::to_string).collect();
        let parsed = url::ZkUrl {
            hosts: hosts.join(","),
            base,
            digest: options.digest,
            acl,
            exclusive: options.exclusive,
            describe,
        };
        Ok(Self { url: parsed.describe.clone(), parsed, status_client: Mutex::new(None) })
    }

    /// The base path under which lock directories live.
    pub fn base(&self) -> &str {
        &self.parsed.base
    }

    async fn connect(&self, timeout: Duration) -> Result<zk::Client> {
        connect(&self.url, &self.parsed, timeout).await
    }

    async fn status_client(&self) -> Result<zk::Client> {
        let mut slot = self.status_client.lock().await;
        if let Some(c) = slot.as_ref() {
            if !c.state().is_terminated() {
                return Ok(c.clone());
            }
        }
        let c = self.connect(STATUS_SESSION_TIMEOUT).await?;
        *slot = Some(c.clone());
        Ok(c)
    }

    async fn inspector(&self) -> Result<inspect::Inspector> {
        Ok(inspect::Inspector { client: self.status_client().await?, url: self.url.clone() })
    }
}

pub(crate) async fn connect(url: &str, parsed: &url::ZkUrl, session_timeout: Duration) -> Result<zk::Client> {
    let mut connector = zk::Client::connector().with_session_timeout(session_timeout);
    if let Some(digest) = &parsed.digest {
        connector = connector.with_auth("digest", digest.0.as_bytes());
    }
    let fut = connector.connect(&parsed.hosts);
    match tokio::time::timeout(CONNECT_TIMEOUT, fut).await {
        Ok(Ok(c)) => Ok(c),
        Ok(Err(e)) => Err(map_err(url, e)),
        Err(_) => Err(Error::Unavailable {
            backend: url.to_string(),
            message: format!("no session established within {CONNECT_TIMEOUT:?}"),
        }),
    }
}

#[async_trait::async_trait]
impl locksmith_core::Backend for ZkBackend {
    fn describe(&self) -> String {
        self.url.clone()
    }

    fn scheme(&self) -> &'static str {
        "zk"
    }

    /// Opens one ZooKeeper session with timeout `ttl`.
    ///
    /// # Cancel safety
    /// Cancel safe: a session opened by a dropped call is closed when its client is dropped.
    async fn open_session(&self, ttl: Duration) -> Result<Box<dyn locksmith_core::Session>> {
        let client = self.connect(ttl).await?;
        let negotiated = client.session_timeout();
        if negotiated != ttl {
            return Err(Error::InvalidArgument(format!(
                "ttl {ttl:?}: the ZooKeeper server at {} granted a session timeout of {negotiated:?} \
                 (it clamps to its minSessionTimeout..maxSessionTimeout); choose a ttl in that range",
                self.url
            )));
        }
        Ok(Box::new(session::ZkSession::new(
            client,
            self.url.clone(),
            self.parsed.base.clone(),
            self.parsed.acl,
            self.parsed.exclusive,
        )))
    }

    /// Mutex, read/write lock (Curator `InterProcessReadWriteLock`) and semaphore (Curator
    /// `InterProcessSemaphoreV2`).
    fn supports(&self, mode: HoldMode) -> bool {
        matches!(mode, HoldMode::Exclusive | HoldMode::Shared | HoldMode::Permit(_))
    }

    /// Curator `LeaderLatch`: an exclusive hold with a value is a latch participant whose data is
    /// the proposal.
    fn supports_election(&self) -> bool {
        true
    }

    /// A child watch on the lock's directory; after each change its status is read again and
    /// reported (for an election: the lowest participant, its proposal and czxid as the term).
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the receiver ends the observation and its watch.
    async fn observe(&self, name: &LockName) -> Result<tokio::sync::mpsc::Receiver<Result<LockStatus>>> {
        let inspector = self.inspector().await?;
        Ok(inspector.observe(url::lock_dir(&self.parsed.base, name), name.as_str().to_string()))
    }

    /// Status of one lock, or of every lock directory under the base.
    ///
    /// # Cancel safety
    /// Cancel safe: read only.
    async fn status(&self, name: Option<&LockName>) -> Result<Vec<LockStatus>> {
        let inspector = self.inspector().await?;
        let client = &inspector.client;
        let base = &self.parsed.base;
        if let Some(name) = name {
            let dir = url::lock_dir(base, name);
            let s = inspector.status_of(&dir, name.as_str().to_string()).await?;
            return Ok(vec![s.unwrap_or_else(|| LockStatus::new(name.as_str().to_string(), None, 0, 0))]);
        }
        let mut out = Vec::new();
        let mut stack = vec![base.clone()];
        let mut seen = 0usize;
        while let Some(dir) = stack.pop() {
            seen += 1;
            if seen > MAX_STATUS_NODES {
                break;
            }
            let children = match retry(|| client.list_children(&dir)).await {
                Ok(c) => c,
                Err(zk::Error::NoNode) => continue,
                Err(e) => return Err(map_err(&self.url, e)),
            };
            let maybe_lock = children.iter().any(|c| layout::is_contender(c) || c == layout::SEMAPHORE_LEASES);
            let mut semaphore = false;
            if maybe_lock {
                if let Some(name) = url::name_of(base, &dir) {
                    if let Some(s) = inspector.status_of(&dir, name).await? {
                        semaphore =
                            s.permits.is_some() || s.holders.iter().any(|h| matches!(h.mode, HoldMode::Permit(_)));
                        out.push(s);
                    }
                }
            }
            for c in &children {
                // A semaphore's `locks` and `leases` are its own parts, not locks of their own.
                let part = semaphore && (c == layout::SEMAPHORE_LOCKS || c == layout::SEMAPHORE_LEASES);
                if !layout::is_contender(c) && !part {
                    stack.push(format!("{dir}/{c}"));
                }
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }
}
