//! # locksmith-etcd: etcd v3 as a locksmith backend
//!
//! URL: `etcd://[user:password@]host:port[,host:port…][?exclusive=mutex|write-lock]` (port
//! defaults to 2379), over TLS `etcds://…[?ca=FILE&cert=FILE&key=FILE]` (or
//! `etcd://…?tls=true`); `exclusive=` picks the key of exclusive holds (below). Building an
//! [`EtcdBackend`] does no network I/O; the gRPC client is created on first use, with a 3 s
//! connection timeout and a 3 s bound on every unary call, so an unreachable cluster gives
//! [`Error::Unavailable`] quickly. [`EtcdBackend::with_options`] takes TLS material and
//! credentials from code instead.
//!
//! ## TLS and authentication
//! - **TLS**: rustls on ring. `ca=FILE` trusts only that CA (default: Mozilla's public roots,
//!   compiled in); `cert=FILE&key=FILE` presents a client certificate (`--client-cert-auth`).
//!   The endpoint's host name must match the server's certificate.
//! - **Authentication** (`etcdctl auth enable`): with `user:password@` the client calls
//!   `Auth.Authenticate` when it connects, sends the token with every call and stream, and
//!   authenticates again when etcd says the token is no longer valid (simple tokens expire after
//!   `--auth-token-ttl`, and a restarted member forgets them). The user needs read and write on
//!   the lock keys (a role with `readwrite` on the names' prefix).
//! - **Errors**: a certificate that does not verify, TLS spoken to a plain port and a client
//!   certificate the cluster requires are [`Error::Config`]; a wrong password, a missing token and
//!   a permission the roles do not grant are [`Error::Auth`] — neither is retried, and the
//!   password never appears in them.
//!
//! The driver speaks etcd's v3 gRPC API through [`raw`], a thin client over stubs generated from
//! the project's own `proto/etcd.proto` (compiled by protox): building needs no `protoc`.
//!
//! ## Layout: Go's `concurrency.Mutex` (`etcdctl lock`)
//! A session is one etcd lease whose TTL is the lock TTL rounded **up** to whole seconds (etcd
//! TTLs are seconds; minimum 1 s; the server may grant more, e.g. its minimum of 1.5 × election
//! timeout). A hold of lock `NAME` is the key `NAME/<lease-id in lower-case hex>` with an empty
//! value, attached to the lease, exactly as Go's `concurrency.Mutex` and `etcdctl lock NAME`
//! write it, so Go, etcdctl and locksmith contend for the same locks.
//!
//! - **Acquire** is one txn: `if create_revision(key) == 0 then put(key, "", lease); get(oldest
//!   under NAME/) else get(key); get(oldest)`. The holder is the key with the smallest create
//!   revision; the **fencing token** is our key's create revision (a cluster-wide revision:
//!   monotonic, also across restarts, since etcd persists its revision counter).
//! - **Waiting** watches only the newest key older than ours until it is deleted, then re-checks
//!   (herd-free, FIFO by revision). After waiting we confirm our own key still exists with our
//!   create revision before reporting success (etcd#11456: a lease that expired while waiting
//!   must not yield a phantom grant; that case answers [`Error::SessionExpired`]).
//! - **try** (`wait == false`) deletes its own key again when it did not get the lock, as Go's
//!   `TryLock` does.
//! - **Release** is a txn `if create_revision(key) == token then delete(key)`: never a delete by
//!   name alone (etcd#22082); a retried release answers `false`.
//!
//! ## Beyond the mutex: read/write lock, semaphore, election
//! Every kind of hold is one key under `NAME/`, attached to the session's lease (a crashed
//! holder's key goes when its lease expires), with its create revision as fencing token:
//!
//! | hold | key | value | layout of |
//! |---|---|---|---|
//! | exclusive (default) | `NAME/<lease-hex>` | empty | Go `concurrency.Mutex`, `etcdctl lock` |
//! | exclusive with a value (a campaign) | `NAME/<lease-hex>` | the proposal | Go `concurrency.Election`, `etcdctl elect` |
//! | exclusive with `?exclusive=write-lock` | `NAME/write/<unix-nanos>` | empty | Go `recipe.RWMutex` `Lock` |
//! | shared (a reader) | `NAME/read/<unix-nanos>` | empty | Go `recipe.RWMutex` `RLock` |
//! | permit of N | `NAME/permit/<unix-nanos>` | N, in decimal | locksmith (etcd has no semaphore recipe) |
//!
//! `recipe.RWMutex` is the read/write lock of etcd's `contrib/recipes`
//! (`go.etcd.io/etcd/client/v3/experimental/recipes`): `NewRWMutex(s, "NAME")` writes
//! `NAME/read/<time.Now().UnixNano()>` and `NAME/write/<…>` keys with an empty value on the
//! session's lease, created with a txn that the key does not exist yet (`newUniqueEphemeralKey`).
//! Ours have that shape; unique suffixes let one session hold several readers, writers or
//! permits of one name.
//!
//! **Who holds** (FIFO by create revision, whatever the kind, so a writer queued behind
//! readers is not starved by later ones):
//! - an exclusive key (mutex, campaign, writer) holds when no key under `NAME/` is older — Go's
//!   rule for `concurrency.Mutex` and for `recipe.RWMutex.Lock` (which compares mod revisions;
//!   these keys are never rewritten, so that is the same);
//! - a reader holds when no older key under `NAME/` is outside `NAME/read/`. Go's `RLock` waits
//!   only for keys under `NAME/write`; ours also waits for `concurrency.Mutex` keys (`etcdctl
//!   lock`, locksmith's default exclusive holds) and for keys of locks below `NAME`;
//! - a permit holds when fewer than N permit keys are older: the oldest N permit keys hold.
//!
//! **Waiting** watches one key, never polls. A mutex or writer watches the newest older key, a
//! reader the newest older key outside `NAME/read/` (either must go before it can hold), then
//! looks again. A permit's first waiter (exactly N older permit keys) watches the permit keys
//! and looks again after any deletion, so the permit of *whichever* holder leaves is taken at
//! once; a later waiter watches only the waiter just before it, which rewrites its own key (same
//! value, same lease, checked by create revision) when it gets its permit. A release thus wakes
//! the first waiter alone, and each grant the next one. (Watching "the N-th older key" instead
//! would leave a waiter sleeping while a permit is free, when a younger holder leaves first.)
//! After waiting, every kind confirms its key still exists with its create revision (the
//! permit's rewrite does it), so a lease that expired meanwhile gives [`Error::SessionExpired`],
//! never a phantom grant (etcd#11456).
//!
//! **Tokens.** Each grant's token is its key's create revision: distinct, and a holder's is
//! greater than those of every earlier holder it had to wait for. Readers (and permit holders)
//! let in together by one release get tokens in their arrival order, but may report their grants
//! in any order.
//!
//! **A lock or a semaphore, and one N.** The create is one txn whose compares (over key ranges,
//! and a nested txn: etcd ≥ 3.3) make it atomic: a lock key is created only while no permit key
//! exists under `NAME/permit/`; a permit key only while no other key exists under `NAME/` and
//! every permit key there says the same N (or there is none). Otherwise the acquisition is
//! refused with [`Error::InvalidArgument`] naming the key in the way (or the N in use) and leaves
//! nothing behind. Of two first users racing with different N, etcd orders the two creates, and
//! the second sees the first's key: exactly one gets a permit. So among locksmith clients, a
//! name is never a lock and a semaphore at once, and all permit keys present always say the same
//! N; a new N is accepted as soon as every permit is released. Keys written by other tools are
//! not checked. While `NAME` is a semaphore, lock `NAME/permit` is one of its parts, not a lock
//! of its own; and a semaphore cannot be created on `NAME` while a lock below it (`NAME/sub`) is
//! held (its keys are under `NAME/`).
//!
//! **What interoperates.** `etcdctl lock NAME`, Go's `concurrency.Mutex`/`Election` and Go's
//! `recipe.RWMutex` writers wait for every older key under `NAME/` (ours of every kind
//! included), and our locks of every kind wait for theirs (a permit is refused while one of
//! their keys exists). Go's `recipe.RWMutex` readers share with our readers and wait for our
//! `write-lock` writers, but **do not see** `concurrency.Mutex` keys (they look only under
//! `NAME/write`): where Go readers share a name, use `?exclusive=write-lock`, so that our
//! exclusive holds are writer keys (which Go mutexes and `etcdctl lock` wait for too). No Go
//! program runs in the tests (no Go toolchain there): the recipe's side is played by writing its
//! keys with `etcdctl put --lease`, at the layout level; `etcdctl lock` is the real Go
//! `concurrency.Mutex`. A value given with a shared hold or a permit is not stored.
//!
//! ## Names that are prefixes of others
//! Go's layout finds a lock's contenders by the key prefix `NAME/`, which also covers the keys of
//! every lock below it: lock `jobs` waits for the holder of `jobs/nightly` (whose key
//! `jobs/nightly/<lease>` starts with `jobs/`), while `jobs/nightly` does not wait for `jobs`.
//! This is what Go's `concurrency.Mutex` and `etcdctl lock` do, so it is kept for
//! interoperability; `status(Some("jobs"))` then reports the blocking key (e.g.
//! `jobs/nightly/694d…`) as the holder's owner. Give locks that must be independent names
//! that are not path prefixes of each other.
//!
//! ## One lease, many holds (etcd#10756)
//! Go's mutex layout has one key per lease and lock name, so two holds of one session on one
//! name would share a key. This driver keeps **one lease per session** and a local per-name queue
//! (a FIFO async mutex) for those keys: a session never has two outstanding mutex keys for one
//! name. A second exclusive acquisition (or campaign) of the same name through the same session
//! waits locally (or answers busy for a try) until the first hold is released; only then does it
//! write its own key, with a new create revision and so a new token. Readers, `write-lock`
//! writers and permits have unique keys and need no such queue.
//!
//! ## Keep-alive and loss
//! Each [`Session::keep_alive`](locksmith_core::Session::keep_alive) call sends one `LeaseKeepAlive` request and reads its answer;
//! a TTL of 0 or "lease not found" is [`Error::SessionExpired`], on which the engine declares
//! every hold of the session lost. The same call checks, in one txn, that every hold's key still
//! exists with its create revision; holds deleted by a third party are reported in
//! [`KeepAlive::lost`](locksmith_core::KeepAlive::lost).
//!
//! ## Cancel safety
//! Dropping an acquisition future spawns a cleanup on the etcd client (not the dropped context,
//! as Go's `m.Unlock(client.Ctx())`) that deletes our key (of any kind) if it still carries our
//! lease or create revision; a mutex key's per-name slot stays taken until that cleanup is done.
//! Closing a session revokes its lease.
//!
//! ## Status
//! `status(Some(name))` reads every key under `NAME/` and applies the rules above: every holder
//! (the oldest exclusive key, the readers before the first exclusive key, or a semaphore's oldest
//! N permit keys) with its lease in hex as session, its key as owner, its create revision as
//! token, its lease's remaining TTL, its kind ([`HoldMode`]) and, for an exclusive key, its
//! value (a campaign's proposal); a semaphore's N as [`LockStatus::permits`]; the other keys as
//! waiters and the newest create revision as `last_token`. `status(None)` lists every lock with a
//! holder or a waiter now: the names of keys in one of the layouts' shapes (`<name>/<hex>` whose
//! hex is the key's own lease, or `<name>/read|write|permit/<digits>` on a lease), found by one
//! keys-only read of the whole keyspace (at most 100,000 keys; free locks leave no key), each then
//! read as `status(Some(name))` does.
//!
//! ## Fault model
//! etcd is CP (Raft): a partitioned minority cannot grant or renew, so mutual exclusion holds
//! under partitions. A paused client is covered by the lease plus the engine's local deadline
//! (measured from when a renewal was *sent*). Lock-delay is not supported. The read/write lock
//! and the semaphore need etcd ≥ 3.3 (range compares and nested txns, which older servers do
//! not know).
#![warn(missing_docs, missing_debug_implementations, unreachable_pub, rust_2018_idioms)]

mod layout;
mod options;
pub mod raw;
mod session;

pub use layout::ExclusiveLayout;
pub use options::{Credentials, EtcdOptions};

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use locksmith_core::driver::{BackendUrl, TlsFiles};
use locksmith_core::{Error, HoldMode, HolderStatus, LockName, LockStatus, Result};
use tokio::sync::OnceCell;
use tonic::{Code, Status};

use crate::raw::pb::KeyValue;
use crate::raw::CONNECT_TIMEOUT;
use crate::session::EtcdSession;

/// Bound on every unary call.
pub(crate) const CALL_TIMEOUT: Duration = Duration::from_secs(3);

/// etcd v3 as a locksmith backend (see the crate docs for the layout and fault model).
#[derive(Debug, Clone)]
pub struct EtcdBackend {
    shared: Arc<Shared>,
}

/// What sessions of one backend share: the endpoints, how to reach them, and the lazily
/// created client.
pub(crate) struct Shared {
    pub(crate) url: String,
    hosts: Vec<(String, u16)>,
    options: EtcdOptions,
    client: OnceCell<raw::Client>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared").field("url", &self.url).finish()
    }
}

impl Shared {
    /// The etcd client, created on first use (authenticated when there are credentials).
    pub(crate) async fn client(&self) -> Result<raw::Client> {
        let c = self
            .client
            .get_or_try_init(|| async {
                match tokio::time::timeout(CONNECT_TIMEOUT, raw::Client::connect_with(&self.hosts, &self.options)).await
                {
                    Ok(Ok(c)) => Ok(c),
                    Ok(Err(raw::ConnectError::Status(s))) => Err(self.error_probing(s).await),
                    Ok(Err(raw::ConnectError::Transport(e))) => {
                        if let Some(f) = locksmith_core::driver::tls_failure(&e, "etcd") {
                            return Err(self.tls_error(f));
                        }
                        let message = locksmith_core::error_chain(&e);
                        if self.options.tls.is_some() && message.contains("handshake eof") {
                            // A plain port closes on a TLS ClientHello.
                            return Err(Error::Config {
                                backend: self.url.clone(),
                                message: format!(
                                    "TLS: the server closed the connection in the handshake ({message}): does it \
                                     serve TLS on this port? use etcd://"
                                ),
                            });
                        }
                        Err(self.unavailable(&message))
                    }
                    Err(_) => Err(self.unavailable("no connection within 3 s")),
                }
            })
            .await?;
        Ok(c.clone())
    }

    /// Runs one unary call bounded by [`CALL_TIMEOUT`].
    pub(crate) async fn call<T>(
        &self,
        fut: impl std::future::Future<Output = std::result::Result<T, Status>>,
    ) -> Result<T> {
        match tokio::time::timeout(CALL_TIMEOUT, fut).await {
            Ok(r) => r.map_err(|e| self.error(e)),
            Err(_) => Err(self.unavailable("no answer within 3 s")),
        }
    }

    pub(crate) fn unavailable(&self, message: &str) -> Error {
        Error::Unavailable { backend: self.url.clone(), message: message.to_string() }
    }

    /// [`Shared::error`], and for a TLS connection the server closed, one direct handshake to
    /// learn why: a client certificate a TLS 1.3 server wanted (or refused) shows only there.
    async fn error_probing(&self, s: Status) -> Error {
        let e = self.error(s);
        if let (Error::Unavailable { message, .. }, Some(tls)) = (&e, &self.options.tls) {
            if locksmith_core::driver::connection_dropped(message) {
                for (host, port) in &self.hosts {
                    if let Some(f) = locksmith_core::driver::tls_probe(host, *port, tls, "etcd").await {
                        return f.into_error(self.url.clone());
                    }
                }
            }
        }
        e
    }

    /// Classifies a gRPC status from etcd.
    pub(crate) fn error(&self, s: Status) -> Error {
        let text = s.message();
        if let Some(f) = locksmith_core::driver::tls_failure(&s, "etcd") {
            self.tls_error(f)
        } else if s.code() == Code::NotFound || text.contains("lease not found") {
            Error::SessionExpired
        } else if text.contains("authentication failed") || text.contains("user name not found") {
            self.auth("the user name or password is wrong (etcd: authentication failed)".into())
        } else if text.contains("user name is empty")
            || text.contains("token") && s.code() == Code::Unauthenticated
            || self.options.credentials.is_none() && text.contains("permission denied")
        {
            self.auth(format!(
                "the cluster has authentication on: give user:password@ in the URL or the options' credentials \
                 ({text})"
            ))
        } else if s.code() == Code::PermissionDenied || text.contains("permission denied") {
            self.auth(format!(
                "permission denied: the user's roles must allow read and write on the lock keys ({text})"
            ))
        } else if text.contains("authentication is not enabled") {
            Error::Config {
                backend: self.url.clone(),
                message: "the cluster has authentication off: drop user:password@ (or enable auth)".into(),
            }
        } else if matches!(s.code(), Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled | Code::Unknown)
            || text.contains("transport error")
        {
            let mut message = locksmith_core::message_with_causes(text, std::error::Error::source(&s));
            if self.options.tls.is_none() && locksmith_core::driver::connection_dropped(&message) {
                // A TLS port answers HTTP/2's preface with an alert record.
                message.push_str(" (if the cluster serves TLS, use etcds:// or ?tls=true)");
            }
            self.unavailable(&message)
        } else {
            Error::Backend(format!("etcd {}: {text}", self.url))
        }
    }

    /// A TLS failure as an error; a refused certificate is a missing one when we sent none.
    fn tls_error(&self, f: locksmith_core::driver::TlsFailure) -> Error {
        let no_cert = self.options.tls.as_ref().is_none_or(|t| t.identity.is_none());
        match no_cert {
            true => f.without_client_cert().into_error(self.url.clone()),
            false => f.into_error(self.url.clone()),
        }
    }

    fn auth(&self, message: String) -> Error {
        Error::Auth { backend: self.url.clone(), message }
    }
}

impl EtcdBackend {
    /// Parses `etcd://[user:password@]host:port[,host:port…]`, or over TLS
    /// `etcds://…[?ca=FILE&cert=FILE&key=FILE]` (also `etcd://…?tls=true`, or any of `ca`, `cert`,
    /// `key`), with `exclusive=mutex|write-lock` choosing the key of exclusive holds
    /// ([`ExclusiveLayout`]). TLS files are read now; the network is not touched (no runtime
    /// needed).
    ///
    /// ```
    /// use locksmith_core::Backend;
    /// let b = locksmith_etcd::EtcdBackend::from_url("etcds://locks:s3cret@etcd-1:2379,etcd-2:2379")?;
    /// assert_eq!(b.describe(), "etcds://locks@etcd-1:2379,etcd-2:2379");
    /// # Ok::<(), locksmith_core::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::InvalidUrl`] when the URL is not of that form (a user without a password, a
    /// certificate without its key…); [`Error::Config`] for a TLS file that cannot be read.
    pub fn from_url(url: &str) -> Result<Self> {
        let mut u = BackendUrl::parse(url)?;
        if u.scheme().base != "etcd" {
            return Err(u.invalid("expected etcd://host:port[,host:port…] or etcds://…".into()));
        }
        let tls_scheme = u.scheme().tls;
        let tls = TlsFiles::take_from(&mut u, tls_scheme)?;
        let exclusive = match u.take_option("exclusive").as_deref() {
            None | Some("mutex") => ExclusiveLayout::Mutex,
            Some("write-lock") => ExclusiveLayout::WriteLock,
            Some(other) => return Err(u.invalid(format!("exclusive={other:?}: expected mutex or write-lock"))),
        };
        u.refuse_extras(true, false, false)?;
        let credentials = match (u.username(), u.password()) {
            (None, None) => None,
            (Some(user), Some(password)) if !user.is_empty() => Some(Credentials::new(user, password)),
            _ => return Err(u.invalid("etcd authentication needs user:password@".into())),
        };
        let mut shown = Vec::new();
        if tls.is_some() && !tls_scheme {
            shown.push(("tls", "true"));
        }
        if exclusive == ExclusiveLayout::WriteLock {
            shown.push(("exclusive", "write-lock"));
        }
        let describe = u.describe(&shown);
        let hosts = u.hosts().iter().map(|h| (h.host.clone(), h.port)).collect();
        Ok(Self::build(describe, hosts, EtcdOptions { tls, credentials, exclusive }))
    }

    /// A backend for `endpoints` (`host[:port]`, port 2379 when omitted) with TLS material and
    /// credentials given in code — for secrets that do not belong in a URL. No I/O. See
    /// [`EtcdOptions`] for an example.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for no or malformed endpoints.
    pub fn with_options<I, S>(endpoints: I, options: EtcdOptions) -> Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let list: Vec<String> = endpoints.into_iter().map(|e| e.as_ref().to_string()).collect();
        let scheme = if options.tls.is_some() { "etcds" } else { "etcd" };
        if list.is_empty() || list.iter().any(|e| e.is_empty() || e.contains(['/', '?', '#', '@', ','])) {
            return Err(Error::InvalidArgument(format!("etcd: expected host[:port] for every endpoint, got {list:?}")));
        }
        let u = BackendUrl::parse(&format!("{scheme}://{}", list.join(",")))
            .map_err(|e| Error::InvalidArgument(format!("etcd: {e}")))?;
        let shown: &[(&str, &str)] = match options.exclusive {
            ExclusiveLayout::WriteLock => &[("exclusive", "write-lock")],
            _ => &[],
        };
        let mut describe = u.describe(shown);
        if let Some(c) = &options.credentials {
            describe = describe.replacen("://", &format!("://{}@", c.user()), 1);
        }
        let hosts = u.hosts().iter().map(|h| (h.host.clone(), h.port)).collect();
        Ok(Self::build(describe, hosts, options))
    }

    fn build(url: String, hosts: Vec<(String, u16)>, options: EtcdOptions) -> Self {
        Self { shared: Arc::new(Shared { url, hosts, options, client: OnceCell::new() }) }
    }
}

#[async_trait::async_trait]
impl locksmith_core::Backend for EtcdBackend {
    fn describe(&self) -> String {
        self.shared.url.clone()
    }

    fn scheme(&self) -> &'static str {
        "etcd"
    }

    /// Grants a lease of `ttl` rounded up to whole seconds (at least 1 s).
    ///
    /// # Cancel safety
    /// Cancel safe: a lease granted by a dropped call expires after its TTL.
    async fn open_session(&self, ttl: Duration) -> Result<Box<dyn locksmith_core::Session>> {
        let secs = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
        let secs = i64::try_from(secs.max(1)).unwrap_or(i64::MAX);
        let mut c = self.shared.client().await?;
        let granted = self.shared.call(c.lease_grant(secs)).await?;
        if !granted.error.is_empty() {
            return Err(Error::Backend(format!("etcd {}: lease grant: {}", self.shared.url, granted.error)));
        }
        let lease = Duration::from_secs(u64::try_from(granted.ttl).unwrap_or(0));
        Ok(Box::new(EtcdSession::new(self.shared.clone(), granted.id, lease)))
    }

    /// The mutex (Go's `concurrency.Mutex`), the read/write lock (the keys of the Go
    /// `recipe.RWMutex`) and the semaphore (locksmith's own layout); see the crate docs.
    fn supports(&self, mode: HoldMode) -> bool {
        matches!(mode, HoldMode::Exclusive | HoldMode::Shared | HoldMode::Permit(_))
    }

    /// Go's `concurrency.Election`: the same keys as the mutex, the proposal as the value, so
    /// `etcdctl elect` and locksmith campaign in one election.
    fn supports_election(&self) -> bool {
        true
    }

    /// A watch on the lock's prefix: after each change, the keys are read again and the holders
    /// reported (Go's `Election.Observe` does the same for the leader).
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the receiver ends the observation and its watch.
    async fn observe(&self, name: &LockName) -> Result<tokio::sync::mpsc::Receiver<Result<LockStatus>>> {
        let mut c = self.shared.client().await?;
        let pfx = layout::prefix(name);
        let first = self.shared.call(c.get_prefix(pfx.clone())).await?;
        let rev = raw::pb::ResponseHeader::revision_of(first.header.as_ref());
        let mut watch = self.shared.call(c.watch_prefix(pfx.clone(), rev + 1)).await?;
        let (tx, rx) = tokio::sync::mpsc::channel(16);
        let backend = self.clone();
        let name = name.clone();
        tokio::spawn(async move {
            let mut kvs = first.kvs;
            loop {
                kvs.sort_by_key(|kv| kv.create_revision);
                let refs: Vec<&KeyValue> = kvs.iter().collect();
                let status = backend.lock_status(&mut c, name.to_string(), &refs).await;
                if tx.send(Ok(status)).await.is_err() {
                    return;
                }
                match watch.message().await {
                    Ok(Some(m)) if !m.canceled => {}
                    Ok(_) => {
                        let _ = tx.send(Err(backend.shared.unavailable("etcd watch ended"))).await;
                        return;
                    }
                    Err(e) => {
                        let _ = tx.send(Err(backend.shared.error(e))).await;
                        return;
                    }
                }
                kvs = match backend.shared.call(c.get_prefix(pfx.clone())).await {
                    Ok(r) => r.kvs,
                    Err(e) => {
                        let _ = tx.send(Err(e)).await;
                        return;
                    }
                };
            }
        });
        Ok(rx)
    }

    /// The holders and waiters of one lock (every key under `NAME/`); with `None`, of every lock
    /// that has a holder or a waiter now: the names of keys in one of the layouts' shapes
    /// (`<name>/<its lease in hex>`, `<name>/read|write|permit/<digits>` under a lease), found by
    /// one keys-only read of the whole keyspace (meant for operators; at most 100,000 keys are
    /// read), each then read as `status(Some(name))` reads it.
    ///
    /// # Cancel safety
    /// Cancel safe: read only.
    async fn status(&self, name: Option<&LockName>) -> Result<Vec<LockStatus>> {
        let mut c = self.shared.client().await?;
        let Some(name) = name else {
            let req =
                raw::pb::RangeRequest { keys_only: true, limit: MAX_LISTED_KEYS, ..raw::prefix_range(Vec::new()) };
            let resp = self.shared.call(c.range(req)).await?;
            let names: BTreeSet<String> = resp.kvs.iter().filter_map(layout::lock_of_key).collect();
            let mut out = Vec::with_capacity(names.len());
            for name in names {
                let resp = self.shared.call(c.get_prefix(format!("{name}/"))).await?;
                if resp.kvs.is_empty() {
                    // Released since the listing.
                    continue;
                }
                let kvs: Vec<&KeyValue> = resp.kvs.iter().collect();
                out.push(self.lock_status(&mut c, name, &kvs).await);
            }
            return Ok(out);
        };
        let resp = self.shared.call(c.get_prefix(layout::prefix(name))).await?;
        let kvs: Vec<&KeyValue> = resp.kvs.iter().collect();
        Ok(vec![self.lock_status(&mut c, name.to_string(), &kvs).await])
    }
}

/// Most keys `status(None)` reads.
const MAX_LISTED_KEYS: i64 = 100_000;

impl EtcdBackend {
    /// The status of lock `name` from its keys in create order, by the hold rules
    /// ([`layout::holding`]): each holder with its lease in hex as session, its key as owner,
    /// its create revision as token, its lease's remaining TTL, its kind, and for an exclusive
    /// key its value (an election's proposal).
    async fn lock_status(&self, c: &mut raw::Client, name: String, kvs: &[&KeyValue]) -> LockStatus {
        let holding = layout::holding(&format!("{name}/"), kvs);
        let mut ttls: HashMap<i64, Duration> = HashMap::new();
        let mut holders = Vec::with_capacity(holding.holders.len());
        for (i, mode) in holding.holders {
            let Some(kv) = kvs.get(i) else { continue };
            let ttl_left = match ttls.get(&kv.lease) {
                Some(t) => *t,
                None => {
                    let t = match self.shared.call(c.lease_time_to_live(kv.lease)).await {
                        Ok(t) => Duration::from_secs(u64::try_from(t.ttl).unwrap_or(0)),
                        Err(_) => Duration::ZERO,
                    };
                    ttls.insert(kv.lease, t);
                    t
                }
            };
            // A permit key's value is its N, a reader's is empty: only an exclusive key's value
            // (a proposal) is the holder's own.
            let value = (mode == HoldMode::Exclusive && !kv.value.is_empty())
                .then(|| String::from_utf8_lossy(&kv.value).into_owned());
            let token = u64::try_from(kv.create_revision).unwrap_or(0);
            let key = String::from_utf8_lossy(&kv.key).into_owned();
            holders.push(HolderStatus::new(format!("{:x}", kv.lease), key, token, ttl_left).with_mode(mode, value));
        }
        let last = kvs.iter().map(|kv| kv.create_revision).max().unwrap_or(0);
        let waiters = u64::try_from(holding.waiters).unwrap_or(0);
        LockStatus::new(name, None, waiters, u64::try_from(last).unwrap_or(0))
            .with_holders(holders)
            .with_permits(holding.permits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_or_are_refused() {
        let hosts = |u: &str| {
            EtcdBackend::from_url(u).map(|b| b.shared.hosts.iter().map(|(h, p)| format!("{h}:{p}")).collect::<Vec<_>>())
        };
        assert_eq!(hosts("etcd://127.0.0.1:2379").unwrap(), vec!["127.0.0.1:2379"]);
        assert_eq!(hosts("etcd://a:1,b").unwrap(), vec!["a:1", "b:2379"]);
        for bad in
            ["redis://x", "etcd://", "etcd://a:x", "etcd://u@a:1", "etcd://a:1/p", "etcd://a:0", "etcd://:pw@a:1"]
        {
            assert!(matches!(EtcdBackend::from_url(bad), Err(Error::InvalidUrl { .. })), "{bad}");
        }
    }

    /// `exclusive=` picks the key of exclusive holds; the non-default layout is shown.
    #[test]
    fn the_exclusive_layout_comes_from_the_url_or_the_options() {
        let layout = |u: &str| EtcdBackend::from_url(u).map(|b| (b.shared.options.exclusive, b.shared.url.clone()));
        assert_eq!(layout("etcd://a:1").unwrap(), (ExclusiveLayout::Mutex, "etcd://a:1".into()));
        assert_eq!(layout("etcd://a:1?exclusive=mutex").unwrap(), (ExclusiveLayout::Mutex, "etcd://a:1".into()));
        let w = layout("etcds://a:1?exclusive=write-lock").unwrap();
        assert_eq!(w, (ExclusiveLayout::WriteLock, "etcds://a:1?exclusive=write-lock".into()));
        for bad in ["etcd://a:1?exclusive=writer", "etcd://a:1?exclusive=", "etcd://a:1?other=1"] {
            assert!(matches!(EtcdBackend::from_url(bad), Err(Error::InvalidUrl { .. })), "{bad}");
        }
        let b = EtcdBackend::with_options(["a:1"], EtcdOptions::new().exclusive(ExclusiveLayout::WriteLock)).unwrap();
        assert_eq!(b.shared.url, "etcd://a:1?exclusive=write-lock");
    }

    /// TLS by scheme or option, credentials, and no password in what is shown.
    #[test]
    fn tls_and_credentials_come_from_the_url() {
        let b = EtcdBackend::from_url("etcds://locks:s3cret@a:1,b:2").unwrap();
        assert!(b.shared.options.tls.is_some());
        assert_eq!(b.shared.options.credentials.as_ref().map(Credentials::user), Some("locks"));
        assert_eq!(b.shared.url, "etcds://locks@a:1,b:2");
        assert!(!format!("{b:?}").contains("s3cret"));
        let b = EtcdBackend::from_url("etcd://a:1?tls=true").unwrap();
        assert_eq!((b.shared.options.tls.is_some(), b.shared.url.as_str()), (true, "etcd://a:1?tls=true"));
        assert!(EtcdBackend::from_url("etcd://a:1").unwrap().shared.options.tls.is_none());
        assert!(matches!(EtcdBackend::from_url("etcds://a:1?ca=/nonexistent/ca.pem"), Err(Error::Config { .. })));
        assert!(matches!(EtcdBackend::from_url("etcds://a:1?tls=false"), Err(Error::InvalidUrl { .. })));
        let b = EtcdBackend::with_options(["a:1"], EtcdOptions::new().credentials(Credentials::new("u", "s3cret")));
        assert_eq!(b.map(|b| b.shared.url.clone()).ok().as_deref(), Some("etcd://u@a:1"));
        assert!(matches!(
            EtcdBackend::with_options(Vec::<String>::new(), EtcdOptions::new()),
            Err(Error::InvalidArgument(_))
        ));
    }
}
