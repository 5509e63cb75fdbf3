//! A session: one etcd lease, the holds written under it, and a local per-name queue so the
//! session never has two `concurrency.Mutex` keys for one name (etcd#10756).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use locksmith_core::driver::{CancelGuard, HoldTable};
use locksmith_core::{
    AcquireRequest, Acquired, ConflictKind, Error, HoldMode, KeepAlive, LockName, ModeConflict, Result, Session,
    MAX_PERMITS,
};
use tokio::sync::OwnedMutexGuard;

use crate::layout::{self, ExclusiveLayout, KeyRange, PERMIT, READ, WRITE};
use crate::raw::pb::{
    event::EventType, Compare, RangeRequest, RequestOp, ResponseHeader, TxnRequest, TxnResponse, WatchResponse,
};
use crate::raw::{key_range, KeepAliveStream, Watcher};
use crate::{Shared, CALL_TIMEOUT};

/// Most operations etcd accepts in one txn (its default `--max-txn-ops`).
const MAX_TXN_OPS: usize = 128;

type NameMap = Arc<Mutex<HashMap<LockName, Arc<tokio::sync::Mutex<()>>>>>;

/// The local per-name slot: taken while this session has (or is creating or deleting) a
/// `concurrency.Mutex` key for the name. Frees its map entry when the last user goes.
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

/// Which key an acquisition writes, and so how it decides and waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// Go's `concurrency.Mutex` / `Election` key `NAME/<lease-hex>` (value: the proposal): holds
    /// when it is the oldest key under `NAME/`.
    Mutex,
    /// The `recipe.RWMutex` writer key `NAME/write/<nanos>`: the same rule as the mutex.
    Writer,
    /// The `recipe.RWMutex` reader key `NAME/read/<nanos>`: holds when no key outside
    /// `NAME/read/` is older.
    Reader,
    /// A permit key `NAME/permit/<nanos>` (value: N): holds when fewer than N permit keys are
    /// older.
    Permit(u32),
}

/// A granted hold as the session keeps it: its key, and for a mutex key the name's slot.
struct Held {
    key: String,
    _slot: Option<NameSlot>,
}

/// What a create attempt came to.
enum Created {
    /// Our key exists with create revision `rev`; `holds`: already granted.
    Yes { rev: i64, holds: bool },
    /// The key we tried is taken (a leftover of ours, or another client's unique key).
    KeyTaken,
}

/// One session on an etcd backend: a lease.
pub(crate) struct EtcdSession {
    shared: Arc<Shared>,
    lease: i64,
    /// The lease's TTL as etcd granted it.
    granted: Duration,
    names: NameMap,
    /// Each hold keeps its key (and a mutex key its name's slot) until it is released.
    holds: HoldTable<Arc<Held>>,
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

    fn slot_mutex(&self, name: &LockName) -> Arc<tokio::sync::Mutex<()>> {
        let mut map = self.names.lock().unwrap_or_else(|p| p.into_inner());
        map.entry(name.clone()).or_default().clone()
    }

    fn slot(&self, name: &LockName, guard: OwnedMutexGuard<()>) -> NameSlot {
        NameSlot { guard: Some(guard), map: self.names.clone(), name: name.clone() }
    }

    /// The kind of key `req` writes.
    fn kind(&self, req: &AcquireRequest) -> Result<Kind> {
        match req.mode {
            // A campaign is Go's `Election`, whose keys are the mutex's.
            HoldMode::Exclusive if req.value.is_some() => Ok(Kind::Mutex),
            HoldMode::Exclusive => Ok(match self.shared.options.exclusive {
                ExclusiveLayout::WriteLock => Kind::Writer,
                _ => Kind::Mutex,
            }),
            HoldMode::Shared => Ok(Kind::Reader),
            HoldMode::Permit(n) if (1..=MAX_PERMITS).contains(&n) => Ok(Kind::Permit(n)),
            HoldMode::Permit(n) => {
                Err(Error::InvalidArgument(format!("a semaphore has 1..={MAX_PERMITS} permits, not {n}")))
            }
            other => Err(locksmith_core::driver::unsupported(&self.shared.url, other)),
        }
    }

    /// A fresh key of `kind` for `name`.
    fn new_key(&self, name: &LockName, kind: Kind) -> String {
        match kind {
            Kind::Mutex => layout::mutex_key(name, self.lease),
            Kind::Writer => layout::unique_key(name, WRITE),
            Kind::Reader => layout::unique_key(name, READ),
            Kind::Permit(_) => layout::unique_key(name, PERMIT),
        }
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
            let resp = self.shared.call(c.txn(read_txn(success))).await?;
            for r in &resp.responses {
                out.push(r.range().and_then(|g| g.kvs.first()).map_or(0, |kv| kv.create_revision));
            }
        }
        Ok(out)
    }

    /// The acquisition proper; `pending` cleans up if this future is dropped or fails.
    async fn acquire_inner(&self, req: &AcquireRequest, kind: Kind, pending: &mut Pending) -> Result<Option<u64>> {
        let mut c = self.shared.client().await?;
        let mut attempts = 0;
        let (my_rev, holds) = loop {
            let txn = self.create_txn(req, kind, &pending.key);
            pending.sent = true;
            let resp = self.shared.call(c.txn(txn)).await?;
            match created(req, kind, &pending.key, &resp)? {
                Created::Yes { rev, holds } => break (rev, holds),
                Created::KeyTaken => {}
            }
            attempts += 1;
            if attempts > 2 {
                return Err(Error::Protocol(format!("etcd: cannot create a key of our own under {}/", req.name)));
            }
            match kind {
                // A key of ours left over from an attempt whose cleanup failed: delete it and
                // start afresh, so every grant gets a new create revision (a new token).
                Kind::Mutex => {
                    self.delete_own(&pending.key, None).await?;
                }
                // Another client's key of the same nanosecond: pick another.
                _ => pending.key = self.new_key(&req.name, kind),
            }
        };
        pending.rev = Some(my_rev);
        let token = u64::try_from(my_rev).unwrap_or(0);
        if holds {
            return Ok(Some(token));
        }
        if !req.wait {
            self.delete_own(&pending.key, Some(my_rev)).await?;
            pending.sent = false;
            return Ok(None);
        }
        let key = pending.key.clone();
        let confirmed = match kind {
            Kind::Mutex | Kind::Writer => {
                self.wait_older_gone(&[layout::prefix_range(&req.name)], my_rev - 1).await?;
                self.still_ours(&key, my_rev).await?
            }
            Kind::Reader => {
                self.wait_older_gone(&layout::outside_part(&req.name, READ), my_rev - 1).await?;
                self.still_ours(&key, my_rev).await?
            }
            Kind::Permit(n) => {
                self.wait_for_permit(&req.name, my_rev, n).await?;
                // Rewriting our key (checked by its create revision) confirms it, and wakes the
                // waiter behind us: it watches our key, and is now first in line.
                let txn = TxnRequest {
                    compare: vec![Compare::create_revision_is(key.as_str(), my_rev)],
                    success: vec![RequestOp::put(key.as_str(), n.to_string(), self.lease)],
                    failure: Vec::new(),
                };
                self.shared.call(c.txn(txn)).await?.succeeded
            }
        };
        // etcd#11456: our lease may have expired while we waited, taking our key with it.
        if !confirmed {
            pending.sent = false;
            return Err(Error::SessionExpired);
        }
        Ok(Some(token))
    }

    /// The txn that creates our key if the name is free of the other kind (a semaphore's permit
    /// keys for a lock, lock keys for a semaphore; a semaphore's N agreed), then reads what
    /// decides whether we hold at once. Its failure branch reads what says why.
    fn create_txn(&self, req: &AcquireRequest, kind: Kind, key: &str) -> TxnRequest {
        let absent = || Compare::create_revision_is(key, 0);
        let (permit_start, permit_end) = layout::part_range(&req.name, PERMIT);
        let first = |(start, end): &KeyRange, ascending: bool| {
            RequestOp::range(
                RangeRequest { limit: 1, ..key_range(start.clone(), end.clone()) }.sorted_by_create(ascending),
            )
        };
        let permit_range = (permit_start.clone(), permit_end.clone());
        match kind {
            Kind::Mutex | Kind::Writer | Kind::Reader => {
                // The value is an election's proposal (Go's `Election.Campaign` writes it in the
                // mutex's layout); a lock's is empty, as the Go recipes write it.
                let value = if kind == Kind::Mutex { req.value.as_deref().unwrap_or("") } else { "" };
                let mut success = vec![RequestOp::put(key, value, self.lease)];
                match kind {
                    // A reader holds if these two reads (the newest key outside `NAME/read/`, on
                    // either side of it) find nothing: ours is not among them.
                    Kind::Reader => {
                        success.extend(layout::outside_part(&req.name, READ).iter().map(|r| first(r, false)));
                    }
                    // A mutex or writer holds if the oldest key under the prefix is ours.
                    _ => success.push(first(&layout::prefix_range(&req.name), true)),
                }
                TxnRequest {
                    compare: vec![absent(), Compare::range_is_empty(permit_start, permit_end)],
                    success,
                    failure: vec![RequestOp::get(key), first(&permit_range, true)],
                }
            }
            Kind::Permit(n) => {
                let says = n.to_string();
                let locks = layout::outside_part(&req.name, PERMIT);
                let no_locks = || locks.iter().map(|(s, e)| Compare::range_is_empty(s.clone(), e.clone()));
                let put_and_read = || {
                    let first_n = RangeRequest {
                        limit: i64::from(n),
                        keys_only: true,
                        ..key_range(permit_start.clone(), permit_end.clone())
                    }
                    .sorted_by_create(true);
                    vec![RequestOp::put(key, says.as_str(), self.lease), RequestOp::range(first_n)]
                };
                // A range compare on values fails over no key at all, so "no permit key, or every
                // permit key says N" is two compares: the first user's, and everyone else's in a
                // nested txn decided at the same revision.
                let mut if_in_use: Vec<Compare> = vec![absent()];
                if_in_use.extend(no_locks());
                if_in_use.push(Compare::range_values_are(permit_start.clone(), permit_end.clone(), says.as_str()));
                let in_use = TxnRequest {
                    compare: if_in_use,
                    success: put_and_read(),
                    failure: vec![
                        RequestOp::get(key),
                        first(&locks[0], true),
                        first(&locks[1], true),
                        first(&permit_range, true),
                    ],
                };
                let mut if_first: Vec<Compare> = vec![absent()];
                if_first.extend(no_locks());
                if_first.push(Compare::range_is_empty(permit_start.clone(), permit_end.clone()));
                TxnRequest { compare: if_first, success: put_and_read(), failure: vec![RequestOp::txn(in_use)] }
            }
        }
    }

    /// Waits until no key in `ranges` has a create revision ≤ `max_rev` (Go's `waitDeletes`,
    /// over several ranges): watches only the newest such key until it is deleted, then looks
    /// again. That key must go before we can hold, so no wake-up is wasted on the others.
    async fn wait_older_gone(&self, ranges: &[KeyRange], max_rev: i64) -> Result<()> {
        let mut c = self.shared.client().await?;
        loop {
            let reads = ranges
                .iter()
                .map(|(start, end)| {
                    let r = RangeRequest {
                        limit: 1,
                        keys_only: true,
                        max_create_revision: max_rev,
                        ..key_range(start.clone(), end.clone())
                    };
                    RequestOp::range(r.sorted_by_create(false))
                })
                .collect();
            let resp = self.shared.call(c.txn(read_txn(reads))).await?;
            let newest = resp
                .responses
                .iter()
                .filter_map(|r| r.range().and_then(|g| g.kvs.first()))
                .max_by_key(|kv| kv.create_revision);
            let Some(last) = newest else { return Ok(()) };
            let rev = ResponseHeader::revision_of(resp.header.as_ref());
            let mut stream = self.shared.call(c.watch(last.key.clone(), rev + 1)).await?;
            self.until_event(&mut stream, |m| m.events.iter().any(|e| e.r#type() == EventType::Delete)).await?;
            // The watched key went: looking again is one wake-up.
            locksmith_core::metrics::wakeup("etcd");
        }
    }

    /// Waits until fewer than `n` permit keys of `name` are older than ours (`my_rev`). The
    /// first waiter (exactly `n` older keys) watches the permit keys, and any deletion may let
    /// it in; a later waiter watches only the waiter just before it, which rewrites its key
    /// when it gets its permit (or deletes it when it gives up). So a release wakes the first
    /// waiter alone, and each grant the next one, whichever holder leaves.
    async fn wait_for_permit(&self, name: &LockName, my_rev: i64, n: u32) -> Result<()> {
        let (start, end) = layout::part_range(name, PERMIT);
        let mut c = self.shared.client().await?;
        let n = usize::try_from(n).unwrap_or(usize::MAX);
        loop {
            let older = |limit: usize, ascending: bool| {
                let r = RangeRequest {
                    limit: i64::try_from(limit).unwrap_or(i64::MAX),
                    keys_only: true,
                    max_create_revision: my_rev - 1,
                    ..key_range(start.clone(), end.clone())
                };
                RequestOp::range(r.sorted_by_create(ascending))
            };
            let resp =
                self.shared.call(c.txn(read_txn(vec![older(n.saturating_add(1), true), older(1, false)]))).await?;
            let ranges: Vec<_> = resp.responses.iter().filter_map(|r| r.range()).collect();
            let &[first_n, newest] = ranges.as_slice() else {
                return Err(Error::Protocol("etcd: unexpected txn answer".into()));
            };
            let ahead = first_n.kvs.len();
            if ahead < n {
                return Ok(());
            }
            let rev = ResponseHeader::revision_of(resp.header.as_ref());
            if ahead == n {
                let mut stream = self.shared.call(c.watch_prefix(start.clone(), rev + 1)).await?;
                self.until_event(&mut stream, |m| m.events.iter().any(|e| e.r#type() == EventType::Delete)).await?;
            } else {
                let Some(before) = newest.kvs.first() else {
                    return Err(Error::Protocol("etcd: more permit keys than read".into()));
                };
                let mut stream = self.shared.call(c.watch(before.key.clone(), rev + 1)).await?;
                self.until_event(&mut stream, |m| !m.events.is_empty()).await?;
            }
            locksmith_core::metrics::wakeup("etcd");
        }
    }

    /// Reads `stream` until an answer `wanted` accepts: then, or when etcd cancelled the watch
    /// because its start revision was compacted away, it is time to look again. A watch etcd
    /// refuses (a role without read on the keys) is an error, not a reason to look again at once.
    async fn until_event(&self, stream: &mut Watcher, wanted: impl Fn(&WatchResponse) -> bool) -> Result<()> {
        loop {
            let msg = stream.message().await.map_err(|e| self.shared.error(e))?;
            let Some(msg) = msg else { return Err(self.shared.unavailable("watch stream closed")) };
            if msg.canceled {
                if msg.compact_revision > 0 {
                    return Ok(());
                }
                let why = format!("etcd cancelled the watch: {}", msg.cancel_reason);
                return Err(match msg.cancel_reason.contains("permission denied") {
                    true => self.shared.error(tonic::Status::permission_denied(why)),
                    false => self.shared.unavailable(&why),
                });
            }
            if wanted(&msg) {
                return Ok(());
            }
        }
    }

    /// Whether `key` still exists with create revision `rev` (etcd#11456).
    async fn still_ours(&self, key: &str, rev: i64) -> Result<bool> {
        let mut c = self.shared.client().await?;
        let g = self.shared.call(c.get(key)).await?;
        Ok(g.kvs.first().map(|kv| kv.create_revision) == Some(rev))
    }

    /// Deletes our key, checked by create revision when known, else by our lease.
    async fn delete_own(&self, key: &str, rev: Option<i64>) -> Result<bool> {
        delete_own(&self.shared, self.lease, key, rev).await
    }

    /// Deletes the key of ours under `name` whose create revision is `rev`, found by a read
    /// (a release the hold table no longer knows: a retry, or a hold reported lost).
    async fn delete_by_revision(&self, name: &LockName, rev: i64) -> Result<bool> {
        let mut c = self.shared.client().await?;
        let (start, end) = layout::prefix_range(name);
        let req = RangeRequest {
            keys_only: true,
            min_create_revision: rev,
            max_create_revision: rev,
            ..key_range(start, end)
        };
        let resp = self.shared.call(c.range(req)).await?;
        match resp.kvs.iter().find(|kv| kv.lease == self.lease) {
            Some(kv) => delete_own(&self.shared, self.lease, &String::from_utf8_lossy(&kv.key), Some(rev)).await,
            None => Ok(false),
        }
    }
}

/// A txn that only reads.
fn read_txn(success: Vec<RequestOp>) -> TxnRequest {
    TxnRequest { compare: Vec::new(), success, failure: Vec::new() }
}

/// Reads a create txn's answer (see [`EtcdSession::create_txn`]).
fn created(req: &AcquireRequest, kind: Kind, key: &str, resp: &TxnResponse) -> Result<Created> {
    let unexpected = || Error::Protocol("etcd: unexpected txn answer".into());
    let rev = ResponseHeader::revision_of(resp.header.as_ref());
    let read = |resp: &TxnResponse, i: usize| resp.responses.get(i).and_then(|r| r.range()).map(|g| g.kvs.clone());
    match kind {
        Kind::Mutex | Kind::Writer | Kind::Reader if resp.succeeded => {
            let holds = match kind {
                // No key outside `NAME/read/` (ours is not among them): no writer is before us.
                Kind::Reader => {
                    let mut blockers = 0;
                    for i in 1..resp.responses.len() {
                        blockers += read(resp, i).ok_or_else(unexpected)?.len();
                    }
                    blockers == 0
                }
                _ => read(resp, 1).ok_or_else(unexpected)?.first().is_none_or(|kv| kv.create_revision == rev),
            };
            Ok(Created::Yes { rev, holds })
        }
        Kind::Mutex | Kind::Writer | Kind::Reader => {
            if let Some(permit) = read(resp, 1).ok_or_else(unexpected)?.first() {
                let why = ConflictKind::SemaphoreAsLock { permits: layout::permits_of(permit) };
                return Err(ModeConflict::new(req.name.as_str(), why).seen_at(key_text(&permit.key)).into());
            }
            if read(resp, 0).ok_or_else(unexpected)?.is_empty() {
                return Err(unexpected());
            }
            Ok(Created::KeyTaken)
        }
        Kind::Permit(n) => {
            let answer = match resp.succeeded {
                true => resp,
                false => resp.responses.first().and_then(|r| r.txn()).ok_or_else(unexpected)?,
            };
            if answer.succeeded {
                let first_n = read(answer, 1).ok_or_else(unexpected)?;
                return Ok(Created::Yes { rev, holds: first_n.iter().any(|kv| kv.key == key.as_bytes()) });
            }
            for i in [1, 2] {
                if let Some(lock) = read(answer, i).ok_or_else(unexpected)?.first() {
                    let why = ConflictKind::LockAsSemaphore { asked: n };
                    return Err(ModeConflict::new(req.name.as_str(), why).seen_at(key_text(&lock.key)).into());
                }
            }
            let oldest = read(answer, 3).ok_or_else(unexpected)?;
            let theirs = oldest.first().map(layout::permits_of);
            if !read(answer, 0).ok_or_else(unexpected)?.is_empty() && theirs == Some(Some(n)) {
                return Ok(Created::KeyTaken);
            }
            let why = ConflictKind::OtherPermits { permits: theirs.flatten().filter(|m| *m != n), asked: n };
            let conflict = ModeConflict::new(req.name.as_str(), why);
            Err(match oldest.first() {
                Some(kv) => conflict.seen_at(key_text(&kv.key)),
                None => conflict,
            }
            .into())
        }
    }
}

/// A key as an operator reads it, for a refusal's "seen at".
fn key_text(key: &[u8]) -> String {
    format!("key {}", String::from_utf8_lossy(key))
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
/// (or its future is dropped), our key is deleted in the background and the per-name slot (a
/// mutex key's) stays taken until that is done.
struct Pending {
    shared: Arc<Shared>,
    lease: i64,
    key: String,
    /// Our key's create revision, once known.
    rev: Option<i64>,
    /// Whether a put may have reached etcd.
    sent: bool,
    slot: Option<NameSlot>,
}

impl Pending {
    fn guard(self) -> CancelGuard<Pending> {
        CancelGuard::new("etcd acquisition", self, |p| {
            if !p.sent {
                // Nothing can be in etcd: freeing the slot (dropping `p`) is all there is to do.
                return None;
            }
            Some(async move {
                // By create revision when known, else by our lease: a unique key another client
                // had taken first carries its lease, not ours.
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
        let keys: Vec<String> = snapshot.iter().map(|h| h.value.key.clone()).collect();
        let revs = self.create_revisions(&keys).await?;
        let verdicts = snapshot.into_iter().zip(revs).map(|(h, rev)| {
            let ours = u64::try_from(rev).ok() == Some(h.token);
            (h, ours)
        });
        Ok(self.holds.report(verdicts, "hold found deleted on keep-alive"))
    }

    /// Acquires in the layout of the hold's kind (see the crate docs): a mutex or a campaign
    /// with Go's `concurrency.Mutex`/`Election` recipe, a reader or writer with the Go
    /// `recipe.RWMutex`'s keys, a permit with locksmith's semaphore; waiting on a watch of one
    /// key that must change first.
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
        let kind = self.kind(&req)?;
        // Go's mutex key is one per lease and name: a second acquisition of the name through
        // this session queues here. Keys with a unique suffix need no such queue.
        let slot = match kind {
            Kind::Mutex => {
                let m = self.slot_mutex(&req.name);
                let guard = if req.wait {
                    m.lock_owned().await
                } else {
                    match m.try_lock_owned() {
                        Ok(g) => g,
                        Err(_) => return Ok(Acquired::Busy),
                    }
                };
                Some(self.slot(&req.name, guard))
            }
            _ => None,
        };
        let key = self.new_key(&req.name, kind);
        let mut pending =
            Pending { shared: self.shared.clone(), lease: self.lease, key, rev: None, sent: false, slot }.guard();
        match self.acquire_inner(&req, kind, pending.state_mut()).await? {
            Some(token) => {
                let p = pending.disarm();
                let held = Arc::new(Held { key: p.key, _slot: p.slot });
                self.holds.insert(req.name.clone(), req.owner.clone(), token, held);
                Ok(Acquired::Granted { token })
            }
            None => Ok(Acquired::Busy),
        }
    }

    /// Deletes our key if its create revision is still `token`.
    ///
    /// # Cancel safety
    /// Cancel safe; a key left behind is deleted by a retried release, replaced by the next
    /// acquisition (a mutex key) or expires with the lease.
    async fn release(&self, name: &LockName, owner: &str, token: u64) -> Result<bool> {
        // A mutex key's slot stays taken until the delete is done.
        let hold = self.holds.take_token(name, owner, token);
        let rev = i64::try_from(token).map_err(|_| Error::InvalidArgument(format!("token {token} out of range")))?;
        let deleted = match &hold {
            Some(h) => self.delete_own(&h.key, Some(rev)).await,
            None => self.delete_by_revision(name, rev).await,
        };
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
