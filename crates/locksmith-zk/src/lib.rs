//! # locksmith-zk: ZooKeeper as a locksmith backend
//!
//! URL: `zk://[user:password@]host[:port][,host[:port]…][/path][?acl=creator|creator-read|open][&exclusive=mutex|write-lock]`
//! (port 2181 when omitted). Building a [`ZkBackend`] does no I/O; sessions
//! connect when opened (within 3 s, else [`Error::Unavailable`]). The URL path is the **base**
//! under which lock directories live (default `/locksmith`); it is a plain path prefix, not a
//! ZooKeeper chroot, and is created on demand.
//!
//! ## Layouts (Curator's)
//! Lock `NAME` is the directory `<base>/NAME` (each `/`-separated segment of the name is kept;
//! segments ZooKeeper would refuse — empty, `.`, `..`, containing `%` or forbidden characters —
//! are %-escaped). Each hold is one EPHEMERAL_SEQUENTIAL node named as Curator 5 names it,
//! `_c_<uuid>-<recipe name><10-digit sequence>`, so a Curator client whose recipe uses
//! `<base>/NAME` as its path contends with us:
//!
//! | hold | nodes | data | Curator recipe |
//! |---|---|---|---|
//! | exclusive (the mutex; a writer) | `NAME/_c_<uuid>-lock-<seq>` | owner id | `InterProcessMutex` |
//! | exclusive with `?exclusive=write-lock` | `NAME/_c_<uuid>-__WRIT__<seq>` | owner id | `InterProcessReadWriteLock` write lock |
//! | shared (a reader) | `NAME/_c_<uuid>-__READ__<seq>` | owner id | `InterProcessReadWriteLock` read lock |
//! | exclusive **with a value** (a campaign) | `NAME/_c_<uuid>-latch-<seq>` | the proposal | `LeaderLatch` (the proposal is the participant id) |
//! | permit of N | `NAME/leases/_c_<uuid>-lease-<seq>`, internal mutex `NAME/locks/_c_<uuid>-lock-<seq>` | `permits=N;owner=<owner>` | `InterProcessSemaphoreV2` with `maxLeases` N |
//!
//! kazoo's `<id>__lock__<seq>` nodes count as exclusive contenders too (kazoo needs
//! `extra_lock_patterns=["-lock-"]` to count ours). A ZooKeeper lock **with a value is a
//! `LeaderLatch` election**: that is how a campaign (an exclusive hold carrying the proposal)
//! is told from a mutex. A value given with a shared hold or a permit is not stored.
//!
//! **Who holds.** Sequences come from one counter per directory, so they order every kind in
//! arrival order. An exclusive node (mutex, writer, latch, kazoo) holds when no node of any kind
//! is before it; a reader holds when no exclusive node is before it (Curator's rules:
//! `ourIndex < 1` for its mutex and write lock, `readLockPredicate` for its read lock). Waiters
//! are FIFO across kinds, so a writer queued behind readers is not starved by later readers.
//! Each waiter watches one node whose deletion can change its verdict — an exclusive one its
//! predecessor, a reader the nearest exclusive node before it — and re-checks when it goes (no
//! herd). A permit, as in Curator: take the internal mutex, create the lease, wait on a watch of
//! the leases' children while they number more than N, release the internal mutex (one
//! acquirer at a time waits for a lease; the others queue on the mutex). `try_lock` of a permit
//! skips the internal mutex and keeps its lease if the leases number at most N: safe because of
//! two leases the later one's creator lists the leases after the earlier one exists. Leases are
//! ephemeral: a crashed holder's permit comes back with its session.
//!
//! **Tokens.** The fencing token is the czxid of the hold's own node (a leader's term: of its
//! latch node): zxids grow across the whole ensemble, so a holder's token is greater than every
//! earlier holder's (readers and permit holders get distinct tokens in arrival order; two
//! readers let in by one writer leaving are granted together). Release deletes our node; if the
//! connection was lost while creating it, the node is found again by its uuid, as Curator's
//! `withProtection` does. A dropped or timed-out acquisition deletes its nodes (a permit's lease
//! and internal-mutex node both) in a spawned task.
//!
//! ## What interoperates with what
//! - Curator `InterProcessMutex` and kazoo `Lock` ↔ locksmith exclusive holds (default layout).
//! - Curator `InterProcessReadWriteLock`: its writers ↔ locksmith readers in either layout, its
//!   readers ↔ locksmith readers (they share); its readers ↔ locksmith writers **only with
//!   `?exclusive=write-lock`**: Curator's readers count only `__WRIT__` nodes as writers, and
//!   its recipes ignore each other's nodes, so the Java side's recipe decides the layout (with
//!   `write-lock`, an `InterProcessMutex` no longer sees locksmith's exclusive holds). locksmith
//!   clients respect both exclusive kinds whatever their own setting.
//! - Curator `InterProcessSemaphoreV2` ↔ locksmith permits of the same N.
//! - Curator `LeaderLatch` ↔ locksmith campaigns and observers: each waits while the other leads;
//!   `LeaderLatch.getLeader().getId()` reads a locksmith leader's proposal, and a locksmith
//!   observer sees a Curator leader's participant id as its value.
//!
//! ## What is not enforced
//! - **The number of permits across Curator clients.** Curator keeps N nowhere (each client
//!   passes its own `maxLeases`). locksmith writes N into its own leases' data (Curator never
//!   reads a lease's data), so a locksmith client asking for another N while a locksmith lease
//!   exists is refused; a Curator client with another `maxLeases` is neither seen nor refused.
//!   N is not kept in the data of the `leases` node because that node outlives its leases (it
//!   is persistent, or a Curator container reaped only later): a stale N would refuse the next
//!   user's, while a lease's data ends with the lease.
//! - **Mixed recipes on one name on the Java side.** Curator's recipes do not see each other's
//!   nodes (a mutex does not see latch or read nodes); locksmith orders every kind in a
//!   directory together, so locksmith clients stay safe whatever the mix, but a Java peer is
//!   excluded only by nodes of its own recipe: use one recipe per name on both sides.
//! - **Semaphore vs lock on one name** is refused by locksmith (a permit where contender nodes
//!   exist, a lock where leases exist), after creating its own node, so of two racing first
//!   users at least one is refused; Curator does not check. While `NAME` is a semaphore, the
//!   names `NAME/locks` and `NAME/leases` are its parts, not locks of their own.
//! - **Reentrancy** is the engine's (by owner id, whatever the kind): Curator's rule that the
//!   thread holding the write lock may read applies within one Curator process only.
//! - **Observing** follows a lock directory's children: elections, mutexes and read/write locks.
//!   A semaphore's leases are shown by `status`, not observed.
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
//! ## Status and observation
//! `status(Some(name))` reads the lock's directory. Holders by the rules above (the first
//! exclusive node, or every reader before the first exclusive node), each with its session id in
//! hex, owner (node data; a latch node's name, its data being the proposal, shown as the
//! holder's value), czxid as token, kind ([`HoldMode`]); waiters = the other contenders. A
//! semaphore (its `leases` has lease nodes) shows its permits when a locksmith lease tells them
//! ([`LockStatus::permits`]), the first N leases as holders, and as waiters the leases beyond
//! and the acquirers queued on the internal mutex; with only Curator leases N is unknown and
//! every lease is shown. A holder's `ttl_left` is unknown to ZooKeeper clients (`None`).
//! `status(None)` walks the tree under the base and reports every directory with contenders or
//! leases. [`observe`](locksmith_core::Backend::observe) sets a child watch on the lock's
//! directory (or an existence watch while it does not exist) and reports its status after every
//! change: for an election, the lowest participant, its proposal and its term.
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
