//! One ZooKeeper session: holds are ephemeral sequential nodes in Curator's layouts.

use std::sync::Mutex;
use std::time::Duration;

use locksmith_core::driver::{CancelGuard, HoldTable};
use locksmith_core::{
    AcquireRequest, Acquired, ConflictKind, Error, HoldMode, KeepAlive, LockName, ModeConflict, Result,
};
use zookeeper_client as zk;

use crate::layout::{self, contenders, map_err, retry, Kind, Verdict};
use crate::url::{lock_dir, ExclusiveLayout, NodeAcl};

/// How long `close` waits for the server to confirm the session's end.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// Most other lease nodes a permit acquisition reads to learn the semaphore's permits (Curator's
/// leases carry no number; ours all agree, so the first of ours settles it).
const MAX_LEASES_READ: usize = 64;

pub(crate) struct ZkSession {
    lease: Duration,
    /// The ACL of every node this session creates.
    acl: NodeAcl,
    /// The node kind of an exclusive hold without a value.
    exclusive: ExclusiveLayout,
    client: Mutex<Option<zk::Client>>,
    id: String,
    url: String,
    base: String,
    /// Each hold's node path (a permit's: its lease node).
    holds: HoldTable<String>,
}

impl ZkSession {
    pub(crate) fn new(client: zk::Client, url: String, base: String, acl: NodeAcl, exclusive: ExclusiveLayout) -> Self {
        let id = format!("{:x}", client.session_id().0);
        let lease = client.session_timeout();
        Self { lease, acl, exclusive, client: Mutex::new(Some(client)), id, url, base, holds: HoldTable::default() }
    }

    fn client(&self) -> Result<zk::Client> {
        let c = self.client.lock().unwrap_or_else(|p| p.into_inner()).clone();
        match c {
            Some(c) if c.state() == zk::SessionState::Expired => Err(Error::SessionExpired),
            Some(c) => Ok(c),
            None => Err(Error::SessionExpired),
        }
    }

    fn err(&self, e: zk::Error) -> Error {
        map_err(&self.url, e)
    }
}

use locksmith_core::driver::identity::random_uuid as uuid;

/// Curator's protected name before the sequence: `_c_<uuid>-<recipe name>`. The uuid finds the
/// node again after a connection loss during its create, as Curator's `withProtection` does.
fn protected(recipe: &str) -> String {
    format!("_c_{}-{recipe}", uuid())
}

/// The last segment of a node path.
fn node_name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or_default()
}

/// One node an acquisition created (or may have created) and must delete unless it is granted.
struct Pending {
    dir: String,
    marker: String,
    /// Known once the create answered.
    path: Option<String>,
}

/// What the cleanup of an acquisition that ended without a grant (a dropped future too) needs
/// to delete its nodes. The session's own client handle keeps the ZooKeeper session open until
/// the deletes are done (`close` waits for that).
struct Abandoned {
    client: zk::Client,
    nodes: Vec<Pending>,
}

type Cleanup = CancelGuard<Abandoned>;

fn cleanup_for(client: &zk::Client) -> Cleanup {
    CancelGuard::new("zk acquisition", Abandoned { client: client.clone(), nodes: Vec::new() }, |a| {
        Some(async move {
            // The newest first: a semaphore's lease before its internal lock, so the next holder
            // of the lock never counts our lease.
            for p in a.nodes.iter().rev() {
                let _ = delete_ours(&a.client, &p.dir, &p.marker, p.path.as_deref()).await;
            }
        })
    })
}

/// Deletes our node: by path when known, else by our uuid among the children.
async fn delete_ours(
    client: &zk::Client,
    dir: &str,
    marker: &str,
    path: Option<&str>,
) -> std::result::Result<(), zk::Error> {
    let paths: Vec<String> = match path {
        Some(p) => vec![p.to_string()],
        None => match retry(|| client.list_children(dir)).await {
            Ok(c) => c.into_iter().filter(|n| n.starts_with(marker)).map(|n| format!("{dir}/{n}")).collect(),
            Err(zk::Error::NoNode) => Vec::new(),
            Err(e) => return Err(e),
        },
    };
    for p in paths {
        match retry(|| client.delete(&p, None)).await {
            Ok(()) | Err(zk::Error::NoNode) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// How a wait in a lock directory ended.
enum Turn {
    Held,
    Busy,
    /// Our node is gone (deleted by a third party, or the session ended).
    Vanished,
}

impl ZkSession {
    /// Creates the ephemeral sequential node `<dir>/<marker><seq>` holding `data`, creating `dir`
    /// (and its parents) when missing, and records its path in `cleanup`'s newest entry. After a
    /// connection loss the create may have happened: the node is then found by its uuid.
    async fn create_node(&self, client: &zk::Client, cleanup: &mut Cleanup, data: &[u8]) -> Result<(String, u64)> {
        let Some(p) = cleanup.state().nodes.last() else {
            return Err(Error::Internal("zk: a node to create was not registered for cleanup".into()));
        };
        let (dir, marker) = (p.dir.clone(), p.marker.clone());
        let prefix = format!("{dir}/{marker}");
        let node_opts = zk::CreateMode::EphemeralSequential.with_acls(self.acl.acls());
        let dir_opts = zk::CreateMode::Persistent.with_acls(self.acl.acls());
        let mut attempts = 0;
        let (path, czxid) = loop {
            attempts += 1;
            if attempts > 100 {
                return Err(Error::Unavailable {
                    backend: self.url.clone(),
                    message: "cannot create the lock node".into(),
                });
            }
            match client.create(&prefix, data, &node_opts).await {
                Ok((stat, seq)) => break (format!("{prefix}{seq}"), stat.czxid),
                // A directory Curator created as a container may also vanish once empty
                // (ZooKeeper reaps empty containers): create it again.
                Err(zk::Error::NoNode) => match client.mkdir(&dir, &dir_opts).await {
                    Ok(()) | Err(zk::Error::ConnectionLoss) => {}
                    Err(e) => return Err(self.err(e)),
                },
                Err(zk::Error::ConnectionLoss) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    let found = match retry(|| client.list_children(&dir)).await {
                        Ok(c) => c.into_iter().find(|n| n.starts_with(&marker)),
                        Err(zk::Error::NoNode) => None,
                        Err(e) => return Err(self.err(e)),
                    };
                    if let Some(n) = found {
                        let p = format!("{dir}/{n}");
                        match retry(|| client.check_stat(&p)).await.map_err(|e| self.err(e))? {
                            Some(stat) => break (p, stat.czxid),
                            None => continue,
                        }
                    }
                }
                Err(e) => return Err(self.err(e)),
            }
        };
        if let Some(p) = cleanup.state_mut().nodes.last_mut() {
            p.path = Some(path.clone());
        }
        Ok((path, u64::try_from(czxid).unwrap_or(0)))
    }

    /// Waits until our node `me` in `dir` holds by [`layout::verdict`], watching only the node
    /// whose deletion can change that; answers at once when `!wait`. With `refuse_semaphore`,
    /// the first listing also refuses the name when it is a semaphore in use.
    async fn wait_turn(
        &self,
        client: &zk::Client,
        name: &LockName,
        dir: &str,
        me: &str,
        wait: bool,
        refuse_semaphore: bool,
    ) -> Result<Turn> {
        let mut first = refuse_semaphore;
        loop {
            let children = retry(|| client.list_children(dir)).await.map_err(|e| self.err(e))?;
            if std::mem::take(&mut first) && children.iter().any(|c| c == layout::SEMAPHORE_LEASES) {
                self.refuse_if_semaphore(client, name, dir).await?;
            }
            let cs = contenders(children);
            let ahead = match layout::verdict(&cs, me) {
                Verdict::Holds => return Ok(Turn::Held),
                Verdict::Gone => return Ok(Turn::Vanished),
                Verdict::WaitsFor(ahead) => ahead,
            };
            if !wait {
                return Ok(Turn::Busy);
            }
            let watched = format!("{dir}/{}", ahead.node);
            match retry(|| client.check_and_watch_stat(&watched)).await.map_err(|e| self.err(e))? {
                (None, _) => continue,
                (Some(_), watcher) => {
                    watcher.changed().await;
                    // The watched node went: listing the children again is a wake-up.
                    locksmith_core::metrics::wakeup("zk");
                }
            }
        }
    }

    /// Refuses a lock (mutex, read/write, election) on a name whose `leases` child has lease
    /// nodes: it is a semaphore in use. Our node already exists, so a permit acquisition that
    /// starts now sees it and refuses itself (its check lists this directory after creating its
    /// lease): one of two racing first users is refused, possibly both.
    async fn refuse_if_semaphore(&self, client: &zk::Client, name: &LockName, dir: &str) -> Result<()> {
        let leases = format!("{dir}/{}", layout::SEMAPHORE_LEASES);
        let children = match retry(|| client.list_children(&leases)).await {
            Ok(c) => c,
            Err(zk::Error::NoNode) => return Ok(()),
            Err(e) => return Err(self.err(e)),
        };
        let Some(node) = children.iter().find(|c| layout::lease_sequence(c).is_some()) else { return Ok(()) };
        let permits = match retry(|| client.get_data(&format!("{leases}/{node}"))).await {
            Ok((data, _)) => layout::parse_lease_data(&data).map(|(n, _)| n),
            Err(zk::Error::NoNode) => None,
            Err(e) => return Err(self.err(e)),
        };
        let conflict = ModeConflict::new(name.as_str(), ConflictKind::SemaphoreAsLock { permits });
        Err(match permits {
            Some(_) => conflict,
            None => conflict.seen_at(format!("Curator InterProcessSemaphoreV2 lease {leases}/{node}")),
        }
        .into())
    }

    /// Refuses a permit when other leases say the semaphore has another number of permits, or
    /// when the name is in use as a lock. Runs after our lease node exists (see
    /// [`ZkSession::refuse_if_semaphore`] for the race).
    async fn refuse_other_permits(
        &self,
        client: &zk::Client,
        name: &LockName,
        dir: &str,
        children: &[String],
        me: &str,
        permits: u32,
    ) -> Result<()> {
        let leases = format!("{dir}/{}", layout::SEMAPHORE_LEASES);
        let mut others: Vec<(u64, &String)> =
            children.iter().filter(|c| *c != me).filter_map(|c| layout::lease_sequence(c).map(|s| (s, c))).collect();
        others.sort();
        for (_, node) in others.into_iter().take(MAX_LEASES_READ) {
            match retry(|| client.get_data(&format!("{leases}/{node}"))).await {
                // Every lease of ours agreed with the others when it was created: one settles it.
                Ok((data, _)) => match layout::parse_lease_data(&data) {
                    Some((n, _)) if n != permits => {
                        let why = ConflictKind::OtherPermits { permits: Some(n), asked: permits };
                        return Err(ModeConflict::new(name.as_str(), why).into());
                    }
                    Some(_) => break,
                    None => {}
                },
                Err(zk::Error::NoNode) => {}
                Err(e) => return Err(self.err(e)),
            }
        }
        match retry(|| client.list_children(dir)).await {
            Ok(c) if c.iter().any(|n| layout::is_contender(n)) => {
                Err(ModeConflict::new(name.as_str(), ConflictKind::LockAsSemaphore { asked: permits }).into())
            }
            Ok(_) | Err(zk::Error::NoNode) => Ok(()),
            Err(e) => Err(self.err(e)),
        }
    }

    /// A mutex, a reader or writer of a read/write lock, or a `LeaderLatch` participant: one
    /// node of `kind` in the lock's directory, granted by [`layout::verdict`].
    async fn acquire_in_dir(&self, req: AcquireRequest, kind: Kind) -> Result<Acquired> {
        let client = self.client()?;
        let dir = lock_dir(&self.base, &req.name);
        // A latch participant's data is its id (the proposal), which Curator's `getLeader` reads;
        // the other recipes' data is the owner id (for status).
        let data = match kind {
            Kind::Latch => req.value.clone().unwrap_or_default(),
            _ => req.owner.clone(),
        };
        let mut cleanup = cleanup_for(&client);
        let marker = protected(kind.curator_name());
        cleanup.state_mut().nodes.push(Pending { dir: dir.clone(), marker, path: None });
        let (path, token) = self.create_node(&client, &mut cleanup, data.as_bytes()).await?;
        match self.wait_turn(&client, &req.name, &dir, node_name(&path), req.wait, true).await? {
            Turn::Held => {
                cleanup.disarm();
                self.holds.insert(req.name.clone(), req.owner.clone(), token, path);
                Ok(Acquired::Granted { token })
            }
            Turn::Busy => match retry(|| client.delete(&path, None)).await {
                Ok(()) | Err(zk::Error::NoNode) => {
                    cleanup.disarm();
                    Ok(Acquired::Busy)
                }
                Err(e) => Err(self.err(e)),
            },
            Turn::Vanished => {
                cleanup.disarm();
                Err(Error::Lost(format!("lock node {path} vanished while waiting")))
            }
        }
    }

    /// One permit of a Curator `InterProcessSemaphoreV2` of `permits` leases.
    ///
    /// Waiting, it is Curator's algorithm: take the internal mutex `<dir>/locks`, create the
    /// lease `<dir>/leases/_c_<uuid>-lease-<seq>`, and while the leases number more than
    /// `permits` wait on a watch of the leases' children, then release the internal mutex. One
    /// acquirer at a time waits for a lease (the others queue FIFO on the mutex, each watching
    /// its predecessor), so a returned lease wakes one waiter, not a herd.
    ///
    /// Without waiting the internal mutex is skipped (a waiter holding it for long means no
    /// permit is free, and taking it would answer busy wrongly while it changes hands): the
    /// lease is created and kept when the leases number at most `permits`. This stays safe
    /// without the mutex: of two leases, the one created later is listed after the other
    /// exists (a ZooKeeper server applies transactions in order and answers a session's read
    /// after its own writes), so each holder saw every older holder's lease when it counted.
    async fn acquire_permit(&self, req: AcquireRequest, permits: u32) -> Result<Acquired> {
        let client = self.client()?;
        let dir = lock_dir(&self.base, &req.name);
        let locks = format!("{dir}/{}", layout::SEMAPHORE_LOCKS);
        let leases = format!("{dir}/{}", layout::SEMAPHORE_LEASES);
        let mut cleanup = cleanup_for(&client);
        let mut internal_lock = None;
        if req.wait {
            let marker = protected(Kind::Mutex.curator_name());
            cleanup.state_mut().nodes.push(Pending { dir: locks.clone(), marker, path: None });
            let (path, _) = self.create_node(&client, &mut cleanup, req.owner.as_bytes()).await?;
            match self.wait_turn(&client, &req.name, &locks, node_name(&path), true, false).await? {
                Turn::Held => internal_lock = Some(path),
                Turn::Busy | Turn::Vanished => {
                    return Err(Error::Lost(format!(
                        "the semaphore's internal lock node {path} vanished while waiting"
                    )))
                }
            }
        }
        let marker = protected(layout::LEASE_NAME);
        cleanup.state_mut().nodes.push(Pending { dir: leases.clone(), marker, path: None });
        let data = layout::lease_data(permits, &req.owner);
        let (path, token) = self.create_node(&client, &mut cleanup, data.as_bytes()).await?;
        let me = node_name(&path);
        let mut checked = false;
        loop {
            let (children, watcher) =
                retry(|| client.list_and_watch_children(&leases)).await.map_err(|e| self.err(e))?;
            if !children.iter().any(|c| c == me) {
                return Err(Error::Lost(format!("lease node {path} vanished while waiting")));
            }
            if !std::mem::replace(&mut checked, true) {
                self.refuse_other_permits(&client, &req.name, &dir, &children, me, permits).await?;
            }
            // Curator's rule: every child of `leases` counts, ours included.
            if children.len() <= permits as usize {
                break;
            }
            if !req.wait {
                return match retry(|| client.delete(&path, None)).await {
                    Ok(()) | Err(zk::Error::NoNode) => {
                        cleanup.disarm();
                        Ok(Acquired::Busy)
                    }
                    Err(e) => Err(self.err(e)),
                };
            }
            watcher.changed().await;
            locksmith_core::metrics::wakeup("zk");
        }
        // Granted. Curator releases its internal mutex only now; until this delete is confirmed
        // the cleanup (still armed) would delete both nodes, so a dropped call holds nothing.
        if let Some(lock) = internal_lock {
            match retry(|| client.delete(&lock, None)).await {
                Ok(()) | Err(zk::Error::NoNode) => {}
                Err(e) => return Err(self.err(e)),
            }
        }
        cleanup.disarm();
        self.holds.insert(req.name.clone(), req.owner.clone(), token, path);
        Ok(Acquired::Granted { token })
    }
}

#[async_trait::async_trait]
impl locksmith_core::Session for ZkSession {
    fn id(&self) -> String {
        self.id.clone()
    }

    /// The session timeout the server negotiated (equal to the TTL: another is refused when the
    /// session opens).
    fn lease(&self) -> Duration {
        self.lease
    }

    /// One read round trip plus an existence check per hold.
    ///
    /// # Cancel safety
    /// Cancel safe: read only.
    async fn keep_alive(&self) -> Result<KeepAlive> {
        let client = self.client()?;
        retry(|| client.check_stat("/")).await.map_err(|e| self.err(e))?;
        let mut verdicts = Vec::new();
        for h in self.holds.snapshot() {
            let stat = retry(|| client.check_stat(&h.value)).await.map_err(|e| self.err(e))?;
            let ours = stat.is_some_and(|stat| stat.ephemeral_owner == client.session_id().0);
            verdicts.push((h, ours));
        }
        Ok(self.holds.report(verdicts, "lock node deleted or taken over"))
    }

    /// Creates our node in the layout of the hold's kind, then waits (watching one node) until
    /// it holds: an exclusive hold with a value is a `LeaderLatch` participant, without one a
    /// mutex (or write-lock) node; a shared hold a read-lock node; a permit a semaphore lease.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped call deletes its nodes in a spawned task.
    async fn acquire(&self, req: AcquireRequest) -> Result<Acquired> {
        match req.mode {
            HoldMode::Exclusive if req.value.is_some() => self.acquire_in_dir(req, Kind::Latch).await,
            HoldMode::Exclusive => {
                let kind = match self.exclusive {
                    ExclusiveLayout::Mutex => Kind::Mutex,
                    ExclusiveLayout::WriteLock => Kind::Writer,
                };
                self.acquire_in_dir(req, kind).await
            }
            HoldMode::Shared => self.acquire_in_dir(req, Kind::Reader).await,
            HoldMode::Permit(n) => self.acquire_permit(req, n).await,
            other => Err(locksmith_core::driver::unsupported(&self.url, other)),
        }
    }

    /// Deletes the hold's node (owner-checked: only a node this session created for
    /// `(name, owner, token)`).
    ///
    /// # Cancel safety
    /// Cancel safe; the hold stays recorded until the delete is confirmed.
    async fn release(&self, name: &LockName, owner: &str, token: u64) -> Result<bool> {
        let Some(hold) = self.holds.get(name, owner).filter(|h| h.token == token) else { return Ok(false) };
        let client = self.client()?;
        let r = retry(|| client.delete(&hold.value, None)).await;
        match r {
            Ok(()) | Err(zk::Error::NoNode) => {
                self.holds.remove(name, owner, hold.id);
                Ok(r.is_ok())
            }
            Err(e) => Err(self.err(e)),
        }
    }

    /// Closes the ZooKeeper session: its ephemeral nodes vanish.
    ///
    /// # Cancel safety
    /// Cancel safe.
    async fn close(&self) -> Result<()> {
        drop(self.holds.drain());
        let c = self.client.lock().unwrap_or_else(|p| p.into_inner()).take();
        let Some(c) = c else { return Ok(()) };
        // The library sends CloseSession once the last handle is gone (a pending cleanup of a
        // dropped acquisition may hold one for a round trip): wait for it, so the ephemeral
        // nodes are gone when this returns even if the process exits right after.
        let mut state = c.state_watcher();
        drop(c);
        let _ = tokio::time::timeout(CLOSE_WAIT, async {
            while !state.peek_state().is_terminated() {
                state.changed().await;
            }
        })
        .await;
        Ok(())
    }
}
