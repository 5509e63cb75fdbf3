//! One ZooKeeper session: holds are ephemeral sequential nodes.

use std::sync::Mutex;
use std::time::Duration;

use locksmith_core::driver::{CancelGuard, HoldTable};
use locksmith_core::{AcquireRequest, Acquired, Error, KeepAlive, LockName, Result};
use zookeeper_client as zk;

use crate::layout::{contenders, map_err, retry};
use crate::url::{lock_dir, NodeAcl};

/// How long `close` waits for the server to confirm the session's end.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

pub(crate) struct ZkSession {
    lease: Duration,
    /// The ACL of every node this session creates.
    acl: NodeAcl,
    client: Mutex<Option<zk::Client>>,
    id: String,
    url: String,
    base: String,
    /// Each hold's node path.
    holds: HoldTable<String>,
}

impl ZkSession {
    pub(crate) fn new(client: zk::Client, url: String, base: String, acl: NodeAcl) -> Self {
        let id = format!("{:x}", client.session_id().0);
        let lease = client.session_timeout();
        Self { lease, acl, client: Mutex::new(Some(client)), id, url, base, holds: HoldTable::default() }
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

fn uuid() -> String {
    let b: [u8; 16] = rand::random();
    let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}

/// What the cleanup of an acquisition that ended without a grant (a dropped future too) needs
/// to delete our node. The session's own client handle keeps the ZooKeeper session open until
/// the delete is done (`close` waits for that).
struct Abandoned {
    client: zk::Client,
    dir: String,
    marker: String,
    /// Known once the create answered.
    path: Option<String>,
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
            Ok(c) => c.into_iter().filter(|n| n.contains(marker)).map(|n| format!("{dir}/{n}")).collect(),
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

    /// Creates our node, then waits (watching only the predecessor) until it is the lowest.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped call deletes its node in a spawned task.
    async fn acquire(&self, req: AcquireRequest) -> Result<Acquired> {
        let client = self.client()?;
        let dir = lock_dir(&self.base, &req.name);
        let marker = format!("_c_{}-lock-", uuid());
        let prefix = format!("{dir}/{marker}");
        let abandoned = Abandoned { client: client.clone(), dir: dir.clone(), marker: marker.clone(), path: None };
        let mut cleanup = CancelGuard::new("zk acquisition", abandoned, |a| {
            Some(async move {
                let _ = delete_ours(&a.client, &a.dir, &a.marker, a.path.as_deref()).await;
            })
        });
        let node_opts = zk::CreateMode::EphemeralSequential.with_acls(self.acl.acls());
        let dir_opts = zk::CreateMode::Persistent.with_acls(self.acl.acls());
        let mut attempts = 0;
        let (path, token) = loop {
            attempts += 1;
            if attempts > 100 {
                return Err(Error::Unavailable {
                    backend: self.url.clone(),
                    message: "cannot create the lock node".into(),
                });
            }
            match client.create(&prefix, req.owner.as_bytes(), &node_opts).await {
                Ok((stat, seq)) => break (format!("{prefix}{seq}"), stat.czxid),
                Err(zk::Error::NoNode) => match client.mkdir(&dir, &dir_opts).await {
                    Ok(()) | Err(zk::Error::ConnectionLoss) => {}
                    Err(e) => return Err(self.err(e)),
                },
                Err(zk::Error::ConnectionLoss) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    // The create may have happened: find our node by its uuid.
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
        cleanup.state_mut().path = Some(path.clone());
        let token = u64::try_from(token).unwrap_or(0);
        let me = path.rsplit('/').next().unwrap_or_default().to_string();
        loop {
            let children = retry(|| client.list_children(&dir)).await.map_err(|e| self.err(e))?;
            let cs = contenders(children);
            let Some(pos) = cs.iter().position(|c| c.node == me) else {
                cleanup.disarm();
                return Err(Error::Lost(format!("lock node {path} vanished while waiting")));
            };
            if pos == 0 {
                cleanup.disarm();
                self.holds.insert(req.name.clone(), req.owner.clone(), token, path);
                return Ok(Acquired::Granted { token });
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
            let pred = format!("{dir}/{}", cs[pos - 1].node);
            match retry(|| client.check_and_watch_stat(&pred)).await.map_err(|e| self.err(e))? {
                (None, _) => continue,
                (Some(_), watcher) => {
                    watcher.changed().await;
                    // The predecessor's watch fired: listing the children again is a wake-up.
                    locksmith_core::metrics::wakeup("zk");
                }
            }
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
