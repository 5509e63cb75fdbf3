//! A session: one etcd lease, the holds written under it, and a local per-name queue so the
//! session never has two keys for one name (etcd#10756).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use locksmith_core::driver::{CancelGuard, HoldTable};
use locksmith_core::{AcquireRequest, Acquired, Error, KeepAlive, LockName, Result, Session};
use tokio::sync::OwnedMutexGuard;

use crate::raw::pb::{event::EventType, Compare, RangeRequest, RequestOp, ResponseHeader, TxnRequest};
use crate::raw::{prefix_range, KeepAliveStream};
use crate::{prefix, Shared, CALL_TIMEOUT};

/// Most operations etcd accepts in one txn (its default `--max-txn-ops`).
const MAX_TXN_OPS: usize = 128;

type NameMap = Arc<Mutex<HashMap<LockName, Arc<tokio::sync::Mutex<()>>>>>;

/// The local per-name slot: taken while this session has (or is creating or deleting) a key
/// for the name. Frees its map entry when the last user goes.
struct NameSlot {
    guard: Option<OwnedMutexGuard<()>>,
    map: NameMap,
    name: LockName,
}

impl Drop for NameSlot {
    fn drop(&mut self) {
        self.guard = None;
        let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
        if map.get(&self.name).is_some_and(|m| Arc::strong_count(m) == 1) {
            map.remove(&self.name);
        }
    }
}

/// One session on an etcd backend: a lease.
pub(crate) struct EtcdSession {
    shared: Arc<Shared>,
    lease: i64,
    /// The lease's TTL as etcd granted it.
    granted: Duration,
    names: NameMap,
    /// Each hold keeps its name's slot (one key per name and lease) until it is released.
    holds: HoldTable<Arc<NameSlot>>,
    keeper: tokio::sync::Mutex<Option<KeepAliveStream>>,
    closed: AtomicBool,
}

impl EtcdSession {
    pub(crate) fn new(shared: Arc<Shared>, lease: i64, granted: Duration) -> Self {
        Self {
            shared,
            lease,
            granted,
            names: NameMap::default(),
            holds: HoldTable::default(),
            keeper: tokio::sync::Mutex::new(None),
            closed: AtomicBool::new(false),
        }
    }

    fn key(&self, name: &LockName) -> String {
        format!("{}{:x}", prefix(name), self.lease)
    }

    fn slot_mutex(&self, name: &LockName) -> Arc<tokio::sync::Mutex<()>> {
        let mut map = self.names.lock().unwrap_or_else(|p| p.into_inner());
        map.entry(name.clone()).or_default().clone()
    }

    fn slot(&self, name: &LockName, guard: OwnedMutexGuard<()>) -> NameSlot {
        NameSlot { guard: Some(guard), map: self.names.clone(), name: name.clone() }
    }

    /// One keep-alive request and its answer; the stream is dropped (and re-opened next time)
    /// on any failure or cancellation, so an answer is never matched to a later request.
    async fn renew(&self) -> Result<()> {
        let mut slot = self.keeper.lock().await;
        let mut stream = match slot.take() {
            Some(s) => s,
            None => {
                let mut c = self.shared.client().await?;
                self.shared.call(c.lease_keep_alive(self.lease)).await?
            }
        };
        match tokio::time::timeout(CALL_TIMEOUT, stream.renew()).await {
            Ok(Ok(Some(resp))) => {
                if resp.ttl <= 0 {
                    return Err(Error::SessionExpired);
                }
                *slot = Some(stream);
                Ok(())
            }
            Ok(Ok(None)) => Err(self.shared.unavailable("keep-alive stream closed")),
            Ok(Err(e)) => Err(self.shared.error(e)),
            Err(_) => Err(self.shared.unavailable("no keep-alive answer within 3 s")),
        }
    }

    /// Reads `(key, create_revision)` for each key (0 when missing), in as few txns as allowed.
    async fn create_revisions(&self, keys: &[String]) -> Result<Vec<i64>> {
        let mut out = Vec::with_capacity(keys.len());
        let mut c = self.shared.client().await?;
        for chunk in keys.chunks(MAX_TXN_OPS) {
            let success = chunk.iter().map(|k| RequestOp::get(k.as_str())).collect();
            let resp =
                self.shared.call(c.txn(TxnRequest { compare: Vec::new(), success, failure: Vec::new() })).await?;
            for r in &resp.responses {
                out.push(r.range().and_then(|g| g.kvs.first()).map_or(0, |kv| kv.create_revision));
            }
        }
        Ok(out)
    }

    /// The acquisition proper; `pending` cleans up if this future is dropped or fails.
    async fn acquire_inner(&self, req: &AcquireRequest, pending: &mut Pending) -> Result<Option<u64>> {
        let key = pending.key.clone();
        let pfx = prefix(&req.name);
        let mut c = self.shared.client().await?;
        let oldest = || {
            RequestOp::range(RangeRequest { limit: 1, ..prefix_range(pfx.clone().into_bytes()) }.sorted_by_create(true))
        };
        let mut attempts = 0;
        let (my_rev, owner_rev) = loop {
            let txn = TxnRequest {
                compare: vec![Compare::create_revision_is(key.as_str(), 0)],
                // The value is an election's proposal (Go's `Election.Campaign` writes it in
                // the same layout); a lock's is empty, as `concurrency.Mutex` writes it.
                success: vec![RequestOp::put(key.as_str(), req.value.as_deref().unwrap_or(""), self.lease), oldest()],
                failure: vec![RequestOp::get(key.as_str()), oldest()],
            };
            pending.sent = true;
            let resp = self.shared.call(c.txn(txn)).await?;
            let owner_rev = match resp.responses.get(1).and_then(|r| r.range()) {
                Some(g) => g.kvs.first().map(|kv| kv.create_revision),
                None => return Err(Error::Protocol("etcd: unexpected txn answer".into())),
            };
            if resp.succeeded {
                break (ResponseHeader::revision_of(resp.header.as_ref()), owner_rev);
            }
            // A key of ours left over from an attempt whose cleanup failed: delete it and start
            // afresh, so every grant gets a new create revision (a new token).
            attempts += 1;
            if attempts > 2 {
                return Err(Error::Protocol(format!("etcd: cannot replace the leftover key {key:?}")));
            }
            self.delete_own(&key, None).await?;
        };
        pending.rev = Some(my_rev);
        if owner_rev.is_none_or(|r| r == my_rev) {
            return Ok(Some(u64::try_from(my_rev).unwrap_or(0)));
        }
        if !req.wait {
            self.delete_own(&key, Some(my_rev)).await?;
            pending.sent = false;
            return Ok(None);
        }
        self.wait_deletes(&pfx, my_rev - 1).await?;
        // etcd#11456: our lease may have expired while we waited, taking our key with it.
        let g = self.shared.call(c.get(key.as_str())).await?;
        if g.kvs.first().map(|kv| kv.create_revision) != Some(my_rev) {
            pending.sent = false;
            return Err(Error::SessionExpired);
        }
        Ok(Some(u64::try_from(my_rev).unwrap_or(0)))
    }

    /// Waits until no key under `pfx` has a create revision ≤ `max_rev` (Go's `waitDeletes`):
    /// watches only the newest such key until it is deleted, then looks again.
    async fn wait_deletes(&self, pfx: &str, max_rev: i64) -> Result<()> {
        let mut c = self.shared.client().await?;
        loop {
            let req = RangeRequest { limit: 1, max_create_revision: max_rev, ..prefix_range(pfx.as_bytes().to_vec()) }
                .sorted_by_create(false);
            let resp = self.shared.call(c.range(req)).await?;
            let Some(last) = resp.kvs.first() else { return Ok(()) };
            let rev = ResponseHeader::revision_of(resp.header.as_ref());
            let mut stream = self.shared.call(c.watch(last.key.clone(), rev + 1)).await?;
            loop {
                let msg = stream.message().await.map_err(|e| self.shared.error(e))?;
                let Some(msg) = msg else { return Err(self.shared.unavailable("watch stream closed")) };
                if msg.canceled {
                    break;
                }
                if msg.events.iter().any(|e| e.r#type() == EventType::Delete) {
                    break;
                }
            }
            // The predecessor's watch fired: looking again is one wake-up.
            locksmith_core::metrics::wakeup("etcd");
        }
    }

    /// Deletes our key, checked by create revision when known, else by our lease.
    async fn delete_own(&self, key: &str, rev: Option<i64>) -> Result<bool> {
        delete_own(&self.shared, self.lease, key, rev).await
    }
}

async fn delete_own(shared: &Shared, lease: i64, key: &str, rev: Option<i64>) -> Result<bool> {
    let cmp = match rev {
        Some(r) => Compare::create_revision_is(key, r),
        None => Compare::lease_is(key, lease),
    };
    let mut c = shared.client().await?;
    let txn = TxnRequest { compare: vec![cmp], success: vec![RequestOp::delete(key)], failure: Vec::new() };
    Ok(shared.call(c.txn(txn)).await?.succeeded)
}

/// An acquisition in flight, as its cleanup needs it: if the acquisition ends without a grant
/// (or its future is dropped), our key is deleted in the background and the per-name slot stays
/// taken until that is done.
struct Pending {
    shared: Arc<Shared>,
    lease: i64,
    key: String,
    /// Our key's create revision, once known.
    rev: Option<i64>,
    /// Whether a put may have reached etcd.
    sent: bool,
    slot: NameSlot,
}

impl Pending {
    fn guard(self) -> CancelGuard<Pending> {
        CancelGuard::new("etcd acquisition", self, |p| {
            if !p.sent {
                // Nothing can be in etcd: freeing the slot (dropping `p`) is all there is to do.
                return None;
            }
            Some(async move {
                if let Err(e) = delete_own(&p.shared, p.lease, &p.key, p.rev).await {
                    tracing::debug!(key = %p.key, error = %e, "cleanup of an abandoned acquisition failed; the lease is the backstop");
                }
                drop(p.slot);
            })
        })
    }
}

#[async_trait]
impl Session for EtcdSession {
    fn id(&self) -> String {
        format!("{:x}", self.lease)
    }

    /// The TTL etcd granted: whole seconds, the asked TTL rounded up (or the server's minimum).
    fn lease(&self) -> Duration {
        self.granted
    }

    /// One `LeaseKeepAlive` round trip, then one txn checking every hold's key.
    ///
    /// # Cancel safety
    /// Cancel safe: an interrupted keep-alive stream is discarded and re-opened next time.
    async fn keep_alive(&self) -> Result<KeepAlive> {
        self.renew().await?;
        let snapshot = self.holds.snapshot();
        if snapshot.is_empty() {
            return Ok(KeepAlive::default());
        }
        let keys: Vec<String> = snapshot.iter().map(|h| self.key(&h.name)).collect();
        let revs = self.create_revisions(&keys).await?;
        let verdicts = snapshot.into_iter().zip(revs).map(|(h, rev)| {
            let ours = u64::try_from(rev).ok() == Some(h.token);
            (h, ours)
        });
        Ok(self.holds.report(verdicts, "hold found deleted on keep-alive"))
    }

    /// Acquires with Go's `concurrency.Mutex` recipe, waiting on a watch of the predecessor.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped acquisition deletes its key in the background (checked by our
    /// lease or create revision).
    async fn acquire(&self, req: AcquireRequest) -> Result<Acquired> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(Error::SessionExpired);
        }
        if req.lock_delay.is_some() {
            return Err(Error::InvalidArgument("the etcd backend does not support lock-delay".into()));
        }
        let m = self.slot_mutex(&req.name);
        let guard = if req.wait {
            m.lock_owned().await
        } else {
            match m.try_lock_owned() {
                Ok(g) => g,
                Err(_) => return Ok(Acquired::Busy),
            }
        };
        let slot = self.slot(&req.name, guard);
        let key = self.key(&req.name);
        let mut pending =
            Pending { shared: self.shared.clone(), lease: self.lease, key: key.clone(), rev: None, sent: false, slot }
                .guard();
        match self.acquire_inner(&req, pending.state_mut()).await? {
            Some(token) => {
                let slot = pending.disarm().slot;
                self.holds.insert(req.name.clone(), req.owner.clone(), token, Arc::new(slot));
                Ok(Acquired::Granted { token })
            }
            None => Ok(Acquired::Busy),
        }
    }

    /// Deletes our key if its create revision is still `token`.
    ///
    /// # Cancel safety
    /// Cancel safe; a key left behind is replaced by the next acquisition or expires with the
    /// lease.
    async fn release(&self, name: &LockName, owner: &str, token: u64) -> Result<bool> {
        // The name's slot stays taken until the delete is done.
        let hold = self.holds.take_token(name, owner, token);
        let key = self.key(name);
        let rev = i64::try_from(token).map_err(|_| Error::InvalidArgument(format!("token {token} out of range")))?;
        let deleted = self.delete_own(&key, Some(rev)).await;
        drop(hold);
        deleted
    }

    /// Revokes the lease: every key of the session is deleted.
    ///
    /// # Cancel safety
    /// Cancel safe; the lease expires anyway.
    async fn close(&self) -> Result<()> {
        self.closed.store(true, Ordering::SeqCst);
        self.keeper.lock().await.take();
        let mut c = self.shared.client().await?;
        let r = self.shared.call(c.lease_revoke(self.lease)).await;
        drop(self.holds.drain());
        match r {
            Ok(_) | Err(Error::SessionExpired) => Ok(()),
            Err(e) => Err(e),
        }
    }
}
