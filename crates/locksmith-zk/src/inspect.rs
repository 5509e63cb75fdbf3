//! Reading a lock directory as other clients see it: `status` and `observe`.

use std::time::Duration;

use locksmith_core::{Error, HoldMode, HolderStatus, LockStatus, Result};
use tokio::sync::mpsc;
use zookeeper_client as zk;

use crate::layout::{self, contenders, map_err, retry, Kind};

/// Most lease nodes one semaphore's status reads.
const MAX_STATUS_LEASES: usize = 1_000;

/// A status reader on one ZooKeeper session (the backend's shared status session).
#[derive(Clone)]
pub(crate) struct Inspector {
    pub(crate) client: zk::Client,
    pub(crate) url: String,
}

impl Inspector {
    fn err(&self, e: zk::Error) -> Error {
        map_err(&self.url, e)
    }

    /// The status of the lock directory `dir` named `name`: a semaphore's when its `leases`
    /// child has lease nodes, else its contenders'. `None` when nothing holds or waits.
    pub(crate) async fn status_of(&self, dir: &str, name: String) -> Result<Option<LockStatus>> {
        let children = match retry(|| self.client.list_children(dir)).await {
            Ok(c) => c,
            Err(zk::Error::NoNode) => return Ok(None),
            Err(e) => return Err(self.err(e)),
        };
        self.status_from(dir, name, children).await
    }

    /// [`Inspector::status_of`] from a listing of `dir` already read (an observer's watched
    /// listing, so a change costs one listing, not two).
    async fn status_from(&self, dir: &str, name: String, children: Vec<String>) -> Result<Option<LockStatus>> {
        if children.iter().any(|c| c == layout::SEMAPHORE_LEASES) {
            if let Some(s) = self.semaphore_status(dir, name.clone()).await? {
                return Ok(Some(s));
            }
        }
        self.contender_status(dir, name, children).await
    }

    /// Holders by [`layout::holders`] (the first exclusive node, or the readers before the
    /// first exclusive node), each with its session, owner, czxid as token and kind; a
    /// `LeaderLatch` participant's data is its proposal (the value), and its node name stands
    /// for the owner (Curator stores no other id).
    async fn contender_status(&self, dir: &str, name: String, children: Vec<String>) -> Result<Option<LockStatus>> {
        let cs = contenders(children);
        if cs.is_empty() {
            return Ok(None);
        }
        let n = layout::holders(&cs);
        let mut holders = Vec::with_capacity(n);
        for c in &cs[..n] {
            let path = format!("{dir}/{}", c.node);
            let (data, stat) = match retry(|| self.client.get_data(&path)).await {
                Ok(r) => r,
                // Gone since the listing: the next status shows who follows.
                Err(zk::Error::NoNode) => continue,
                Err(e) => return Err(self.err(e)),
            };
            let data = String::from_utf8_lossy(&data).into_owned();
            let (owner, mode, value) = match c.kind {
                Kind::Latch => (c.node.clone(), HoldMode::Exclusive, (!data.is_empty()).then_some(data)),
                Kind::Reader => (data, HoldMode::Shared, None),
                _ => (data, HoldMode::Exclusive, None),
            };
            holders.push(holder(&stat, owner, mode, value));
        }
        let last = holders.iter().map(|h| h.token).max().unwrap_or(0);
        let waiters = (cs.len() - n) as u64;
        Ok(Some(LockStatus::new(name, None, waiters, last).with_holders(holders)))
    }

    /// A Curator `InterProcessSemaphoreV2`: the lease nodes in sequence order. The permits are
    /// known from our leases' data (Curator keeps the number nowhere); the first `permits`
    /// leases are the holders (Curator grants while the leases number at most its
    /// `maxLeases`, and only the holder of the internal lock waits with a lease, the newest);
    /// waiters are the leases beyond and the acquirers queued on the internal lock. With no
    /// lease of ours the permits are unknown and every lease is shown as a holder.
    async fn semaphore_status(&self, dir: &str, name: String) -> Result<Option<LockStatus>> {
        let leases = format!("{dir}/{}", layout::SEMAPHORE_LEASES);
        let children = match retry(|| self.client.list_children(&leases)).await {
            Ok(c) => c,
            Err(zk::Error::NoNode) => return Ok(None),
            Err(e) => return Err(self.err(e)),
        };
        let mut nodes: Vec<(u64, String)> =
            children.into_iter().filter_map(|c| layout::lease_sequence(&c).map(|s| (s, c))).collect();
        if nodes.is_empty() {
            return Ok(None);
        }
        nodes.sort();
        let total = nodes.len();
        let mut permits = None;
        let mut read = Vec::new();
        for (_, node) in nodes.into_iter().take(MAX_STATUS_LEASES) {
            match retry(|| self.client.get_data(&format!("{leases}/{node}"))).await {
                Ok((data, stat)) => {
                    let (owner, n) = match layout::parse_lease_data(&data) {
                        Some((n, owner)) => (owner, Some(n)),
                        None => (String::from_utf8_lossy(&data).into_owned(), None),
                    };
                    permits = permits.or(n);
                    read.push((owner, stat));
                }
                Err(zk::Error::NoNode) => {}
                Err(e) => return Err(self.err(e)),
            }
        }
        let shown = permits.map_or(read.len(), |p| read.len().min(p as usize));
        let mode = HoldMode::Permit(permits.unwrap_or(u32::try_from(total).unwrap_or(u32::MAX)));
        let last = read.iter().map(|(_, s)| u64::try_from(s.czxid).unwrap_or(0)).max().unwrap_or(0);
        let holders: Vec<HolderStatus> =
            read.into_iter().take(shown).map(|(owner, stat)| holder(&stat, owner, mode, None)).collect();
        let locks = format!("{dir}/{}", layout::SEMAPHORE_LOCKS);
        let queued = match retry(|| self.client.list_children(&locks)).await {
            Ok(c) => contenders(c).len().saturating_sub(1),
            Err(zk::Error::NoNode) => 0,
            Err(e) => return Err(self.err(e)),
        };
        let waiters = (total - holders.len() + queued) as u64;
        Ok(Some(LockStatus::new(name, None, waiters, last).with_holders(holders).with_permits(permits)))
    }

    /// Follows the lock directory `dir`: its status now, then after every change of its children
    /// (a child watch, set again before each read, so no change between two reads is missed).
    /// While the directory does not exist, its creation is watched.
    pub(crate) fn observe(self, dir: String, name: String) -> mpsc::Receiver<Result<LockStatus>> {
        let (tx, rx) = mpsc::channel(16);
        tokio::spawn(async move {
            loop {
                // The listing the watch is set with is the one the status is read from: a change
                // after it fires the watch, so none is missed.
                let (children, watcher) = match retry(|| self.client.list_and_watch_children(&dir)).await {
                    Ok((children, w)) => (Some(children), w),
                    Err(zk::Error::NoNode) => match retry(|| self.client.check_and_watch_stat(&dir)).await {
                        Ok((None, w)) => (None, w),
                        // Created meanwhile: watch its children.
                        Ok((Some(_), _)) => continue,
                        Err(e) => {
                            let _ = tx.send(Err(self.err(e))).await;
                            return;
                        }
                    },
                    Err(e) => {
                        let _ = tx.send(Err(self.err(e))).await;
                        return;
                    }
                };
                let status = match children {
                    Some(children) => self.status_from(&dir, name.clone(), children).await,
                    // No directory: nothing holds or waits.
                    None => Ok(None),
                };
                let status = match status {
                    Ok(s) => Ok(s.unwrap_or_else(|| LockStatus::new(name.clone(), None, 0, 0))),
                    Err(e) => Err(e),
                };
                let failed = status.is_err();
                if tx.send(status).await.is_err() || failed {
                    return;
                }
                let event = tokio::select! {
                    event = watcher.changed() => event,
                    // Nobody observes any more: drop the watch.
                    () = tx.closed() => return,
                };
                if event.event_type == zk::EventType::Session && event.session_state.is_terminated() {
                    let e = match event.session_state {
                        zk::SessionState::Expired => zk::Error::SessionExpired,
                        zk::SessionState::AuthFailed => zk::Error::AuthFailed,
                        _ => zk::Error::ClientClosed,
                    };
                    let _ = tx.send(Err(self.err(e))).await;
                    return;
                }
            }
        });
        rx
    }
}

/// A holder as ZooKeeper shows one: its session is the node's ephemeral owner, its token the
/// node's creation zxid; ZooKeeper does not say how long a session has left.
fn holder(stat: &zk::Stat, owner: String, mode: HoldMode, value: Option<String>) -> HolderStatus {
    HolderStatus::new(
        format!("{:x}", stat.ephemeral_owner),
        owner,
        u64::try_from(stat.czxid).unwrap_or(0),
        Duration::ZERO,
    )
    .ttl_left_unknown()
    .with_mode(mode, value)
}
