//! The contract suite (DESIGN.md §2), one function per property, run by every driver against a
//! real server. A driver's test file implements [`Target`] (usually with [`UrlTarget`]) and
//! expands [`conformance_suite!`](crate::conformance_suite).
//!
//! The suite is in-process: it knows the library, not the `locksmith` binary. The properties that
//! need real processes (a `locksmith run` holder killed with `kill -9`, paused past its TTL,
//! interrupted while waiting; exit codes and signal forwarding) are in `locksmith-testkit`
//! (`process_conformance_suite!`), built on the same [`Target`] and on the helpers at the end of
//! this module ([`unique`], [`waiters`], [`until_waiters`]).
//!
//! Functions panic with a message naming the broken property; they are test code.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use crate::{Client, Error, LockOptions, LockStatus, Result};

mod holding;
pub mod primitives;
mod unfenced;
pub use primitives::{
    lock_all_never_deadlocks_and_gives_a_token_per_name, lock_all_that_times_out_holds_nothing,
    primitives_are_offered_or_refused_clearly,
};
pub use unfenced::UnfencedTarget;

/// What a backend under test can do, so the suite asks only what the backend promises.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Caps {
    /// Waiters are served in arrival order.
    pub fifo: bool,
    /// `status` reports queued waiters.
    pub reports_waiters: bool,
    /// `status` reports who holds (not PostgreSQL's advisory locks, held by database sessions
    /// that `pg_locks` does not tie to a lock name's holder).
    pub reports_holders: bool,
}

impl Default for Caps {
    fn default() -> Self {
        Self { fifo: true, reports_waiters: true, reports_holders: true }
    }
}

/// A backend under test.
#[async_trait]
pub trait Target: Send + Sync {
    /// The backend URL (also for other processes that reach the backend, such as `locksmith`).
    fn url(&self) -> String;
    /// A new client (its own session) with lease `ttl`.
    async fn client(&self, ttl: Duration) -> Result<Client>;
    /// What the backend promises.
    fn caps(&self) -> Caps {
        Caps::default()
    }
}

/// Makes a backend from a URL (`locksmith::backend` in the facade).
pub type BackendFactory = fn(&str) -> Result<Arc<dyn crate::Backend>>;

/// The usual [`Target`]: a backend reached by URL, built by `factory` (pass
/// `locksmith::backend`), with optional caps and a resource (a test server) kept alive as long as
/// the target.
///
/// ```no_run
/// # fn backend(_: &str) -> locksmith_core::Result<std::sync::Arc<dyn locksmith_core::Backend>> { unimplemented!() }
/// use locksmith_core::conformance::UrlTarget;
/// let target = UrlTarget::new("redis://127.0.0.1:6379", backend).fifo(false).reports_waiters(false);
/// ```
pub struct UrlTarget {
    url: String,
    factory: BackendFactory,
    caps: Caps,
    _keep: Option<Box<dyn std::any::Any + Send + Sync>>,
}

impl std::fmt::Debug for UrlTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UrlTarget").field("url", &self.url).field("caps", &self.caps).finish()
    }
}

impl UrlTarget {
    /// A target for `url` with default caps (FIFO, reports waiters).
    pub fn new(url: impl Into<String>, factory: BackendFactory) -> Self {
        Self { url: url.into(), factory, caps: Caps::default(), _keep: None }
    }

    /// Whether the backend serves waiters in arrival order.
    pub fn fifo(mut self, fifo: bool) -> Self {
        self.caps.fifo = fifo;
        self
    }

    /// Whether `status` reports queued waiters.
    pub fn reports_waiters(mut self, reports: bool) -> Self {
        self.caps.reports_waiters = reports;
        self
    }

    /// Whether `status` reports who holds.
    pub fn reports_holders(mut self, reports: bool) -> Self {
        self.caps.reports_holders = reports;
        self
    }

    /// Keeps `resource` (typically the test server) alive as long as the target.
    pub fn keeping<T: Send + Sync + 'static>(mut self, resource: T) -> Self {
        self._keep = Some(Box::new(resource));
        self
    }
}

#[async_trait]
impl Target for UrlTarget {
    fn url(&self) -> String {
        self.url.clone()
    }
    async fn client(&self, ttl: Duration) -> Result<Client> {
        Client::new((self.factory)(&self.url)?, ttl)
    }
    fn caps(&self) -> Caps {
        self.caps
    }
}

const TTL: Duration = Duration::from_secs(5);
const SHORT_TTL: Duration = Duration::from_secs(1);

async fn client(t: &dyn Target, ttl: Duration) -> Client {
    match t.client(ttl).await {
        Ok(c) => c,
        Err(e) => panic!("cannot create a client for {}: {e}", t.url()),
    }
}

/// §2.1 + §2.4: 32 clients hammering one lock never overlap, and every token is greater than
/// every token before it.
pub async fn thirty_two_clients_never_overlap_and_tokens_increase(t: &dyn Target) {
    let name = unique("exclusion");
    let inside = Arc::new(AtomicBool::new(false));
    let last = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..32 {
        let c = client(t, TTL).await;
        let (name, inside, last) = (name.clone(), inside.clone(), last.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..8 {
                let g = c.lock(&name).await.unwrap_or_else(|e| panic!("lock: {e}"));
                assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                let prev = last.swap(g.token(), Ordering::SeqCst);
                assert!(g.token() > prev, "token {} not above the previous {prev}", g.token());
                tokio::task::yield_now().await;
                inside.store(false, Ordering::SeqCst);
                assert!(g.unlock().await.unwrap_or_else(|e| panic!("unlock: {e}")), "unlock of a live hold");
            }
            c.close().await;
        }));
    }
    for task in tasks {
        if let Err(e) = task.await {
            std::panic::resume_unwind(e.into_panic());
        }
    }
    assert!(last.load(Ordering::SeqCst) >= 256, "256 grants must issue at least 256 tokens");
}

/// §2.7: waiters are served in the order they started waiting.
pub async fn waiters_are_served_in_fifo_order(t: &dyn Target) {
    if !t.caps().fifo {
        return;
    }
    let name = unique("fifo");
    let holder = client(t, TTL).await;
    let g = holder.lock(&name).await.unwrap_or_else(|e| panic!("lock: {e}"));
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..5u32 {
        let c = client(t, TTL).await;
        let (n, order) = (name.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let g = c.lock(&n).await.unwrap_or_else(|e| panic!("lock: {e}"));
            order.lock().unwrap_or_else(|p| p.into_inner()).push(i);
            let _ = g.unlock().await;
            c.close().await;
        }));
        until_waiters(t, &holder, &name, u64::from(i) + 1).await;
    }
    let _ = g.unlock().await;
    for task in tasks {
        if let Err(e) = task.await {
            std::panic::resume_unwind(e.into_panic());
        }
    }
    assert_eq!(*order.lock().unwrap_or_else(|p| p.into_inner()), vec![0, 1, 2, 3, 4], "not FIFO");
    holder.close().await;
}

/// §2.7: `try_lock` on a held lock answers at once, and queues nothing.
pub async fn try_lock_never_waits(t: &dyn Target) {
    let name = unique("try");
    let a = client(t, TTL).await;
    let b = client(t, TTL).await;
    let g = a.try_lock(&name).await.unwrap_or_else(|e| panic!("try_lock: {e}"));
    let g = g.unwrap_or_else(|| panic!("a free lock must be granted to try_lock"));
    let started = tokio::time::Instant::now();
    let got = b.try_lock(&name).await.unwrap_or_else(|e| panic!("try_lock: {e}"));
    assert!(got.is_none(), "try_lock on a held lock must answer None");
    assert!(started.elapsed() < TTL / 2, "try_lock waited {:?}", started.elapsed());
    if t.caps().reports_waiters {
        assert_eq!(waiters(&a, &name).await, 0, "try_lock left a waiter");
    }
    let _ = g.unlock().await;
    a.close().await;
    b.close().await;
}

/// §2.7: a `lock()` that times out or is dropped leaves no waiter and no hold.
pub async fn cancelled_waiter_leaves_no_entry(t: &dyn Target) {
    let name = unique("cancel");
    let a = client(t, TTL).await;
    let b = client(t, TTL).await;
    let c = client(t, TTL).await;
    let g = a.lock(&name).await.unwrap_or_else(|e| panic!("lock: {e}"));
    let timed_out = b.lock_with(&name, LockOptions::new().timeout(Duration::from_millis(200))).await;
    assert!(matches!(timed_out, Err(Error::Timeout)), "expected Timeout, got {timed_out:?}");
    // A waiter dropped by select!, not by timeout.
    tokio::select! {
        r = b.lock(&name) => panic!("lock of a held lock returned {r:?}"),
        _ = tokio::time::sleep(Duration::from_millis(100)) => {}
    }
    if t.caps().reports_waiters {
        let mut left = u64::MAX;
        for _ in 0..100 {
            left = waiters(&a, &name).await;
            if left == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(left, 0, "cancelled waiters left entries");
    }
    let _ = g.unlock().await;
    let got = c.try_lock(&name).await.unwrap_or_else(|e| panic!("try_lock: {e}"));
    assert!(got.is_some(), "a cancelled waiter kept a hold");
    for x in [a, b, c] {
        x.close().await;
    }
}

/// §2.8: an explicit owner re-acquires without waiting, shares the token, and the lock is
/// freed only by the last release.
pub async fn reentrant_acquisitions_are_counted(t: &dyn Target) {
    let name = unique("reentrant");
    let a = client(t, TTL).await;
    let b = client(t, TTL).await;
    let opts = || LockOptions::new().owner("worker-1").timeout(Duration::from_secs(2));
    let g1 = a.lock_with(&name, opts()).await.unwrap_or_else(|e| panic!("lock: {e}"));
    let g2 = a.lock_with(&name, opts()).await.unwrap_or_else(|e| panic!("reentrant lock: {e}"));
    assert_eq!(g1.token(), g2.token(), "reentrant guards share the token");
    assert!(g1.unlock().await.unwrap_or(false), "first release of a reentrant hold");
    assert!(g2.is_held(), "one count is still held");
    let busy = b.try_lock(&name).await.unwrap_or_else(|e| panic!("try_lock: {e}"));
    assert!(busy.is_none(), "lock freed while a reentrant count remained");
    assert!(g2.unlock().await.unwrap_or(false), "last release");
    let free = b.try_lock(&name).await.unwrap_or_else(|e| panic!("try_lock: {e}"));
    assert!(free.is_some(), "lock not freed by the last release");
    a.close().await;
    b.close().await;
}

/// §2.8: without an owner id, two acquisitions on one client are exclusive (reentrancy is
/// never implicit, never tied to a task or thread).
pub async fn anonymous_acquisitions_on_one_client_are_exclusive(t: &dyn Target) {
    let name = unique("anon");
    let a = client(t, TTL).await;
    let g = a.lock(&name).await.unwrap_or_else(|e| panic!("lock: {e}"));
    let second = a.try_lock(&name).await.unwrap_or_else(|e| panic!("try_lock: {e}"));
    assert!(second.is_none(), "a second anonymous acquisition on the same client was granted");
    let _ = g.unlock().await;
    a.close().await;
}

/// §2.3: `unlock` tells whether the hold was still ours; dropping a guard releases it.
pub async fn unlock_and_drop_release_the_lock(t: &dyn Target) {
    let name = unique("release");
    let a = client(t, TTL).await;
    let b = client(t, TTL).await;
    let g = a.lock(&name).await.unwrap_or_else(|e| panic!("lock: {e}"));
    assert!(g.unlock().await.unwrap_or(false), "unlock of a live hold returns true");
    let g = a.lock(&name).await.unwrap_or_else(|e| panic!("lock: {e}"));
    let token = g.token();
    drop(g);
    let g = b
        .lock_with(&name, LockOptions::new().timeout(TTL / 2))
        .await
        .unwrap_or_else(|e| panic!("a dropped guard was not released before the TTL: {e}"));
    assert!(g.token() > token);
    a.close().await;
    b.close().await;
}

/// §2.5: when the session ends, every guard knows (`lost()` resolves, `is_held()` is false),
/// `with_lock` cancels its critical section, and someone else can take the lock.
pub async fn closing_the_session_signals_loss(t: &dyn Target) {
    let name = unique("loss");
    let a = client(t, TTL).await;
    let b = client(t, TTL).await;
    let g = a.lock(&name).await.unwrap_or_else(|e| panic!("lock: {e}"));
    assert!(g.is_held() && g.remaining() > Duration::ZERO);
    a.close().await;
    tokio::time::timeout(Duration::from_secs(1), g.lost()).await.unwrap_or_else(|_| panic!("lost() did not fire"));
    assert!(!g.is_held());
    assert_eq!(g.remaining(), Duration::ZERO);
    let g2 = b.lock_with(&name, LockOptions::new().timeout(TTL / 2)).await.unwrap_or_else(|e| panic!("lock: {e}"));
    assert!(g2.token() > g.token());
    assert!(!g.unlock().await.unwrap_or(true), "unlock after loss must say the hold was not ours");
    assert!(g2.is_held(), "a stale unlock must not free the new holder");

    // The scoped form: the critical section is cancelled when the lock is lost.
    let name = unique("scoped");
    let c = client(t, TTL).await;
    let closer = c.clone();
    let run = c.with_lock(&name, LockOptions::new(), |_token| async move {
        closer.close().await;
        std::future::pending::<()>().await;
    });
    let r = tokio::time::timeout(Duration::from_secs(2), run).await.unwrap_or_else(|_| panic!("with_lock hung"));
    assert!(matches!(r, Err(Error::Lost(_))), "expected Lost, got {r:?}");
    b.close().await;
}

/// §2.6: a holder that keeps running keeps its lock across many TTLs (automatic renewal).
pub async fn a_live_holder_keeps_its_lock_past_the_ttl(t: &dyn Target) {
    let name = unique("renew");
    let a = client(t, SHORT_TTL).await;
    let b = client(t, SHORT_TTL).await;
    let g = a.lock(&name).await.unwrap_or_else(|e| panic!("lock: {e}"));
    tokio::time::sleep(SHORT_TTL * 3).await;
    assert!(g.is_held(), "renewal did not keep the hold");
    let busy = b.try_lock(&name).await.unwrap_or_else(|e| panic!("try_lock: {e}"));
    assert!(busy.is_none(), "the lock was handed out while its holder renewed");
    let _ = g.unlock().await;
    a.close().await;
    b.close().await;
}

/// §2.9: bad names and options are refused with typed errors and change nothing.
pub async fn bad_input_is_refused_with_typed_errors(t: &dyn Target) {
    let a = client(t, TTL).await;
    for bad in [String::new(), "x".repeat(257), "a\nb".into(), "nul\0".into()] {
        let r = a.try_lock(&bad).await;
        assert!(matches!(r, Err(Error::InvalidName(_))), "name {bad:?} gave {r:?}");
    }
    let r = a.lock_with("ok-name", LockOptions::new().owner("")).await;
    assert!(matches!(r, Err(Error::InvalidArgument(_))), "empty owner gave {r:?}");
    let r = t.client(Duration::ZERO).await;
    assert!(matches!(r, Err(Error::InvalidTtl { .. })), "zero TTL gave {r:?}");
    let r = t.client(Duration::from_secs(3601)).await;
    assert!(matches!(r, Err(Error::InvalidTtl { .. })), "TTL above the maximum gave {r:?}");
    a.close().await;
}

// ---- helpers for suites built on this one -------------------------------------------------

/// A lock name no other test uses: `conformance/<prefix>/<random>`.
pub fn unique(prefix: &str) -> String {
    format!("conformance/{prefix}/{:08x}", rand::random::<u32>())
}

/// The waiters `status` reports for `name` (0 when the lock is not listed).
///
/// # Panics
/// When `status` fails.
pub async fn waiters(c: &Client, name: &str) -> u64 {
    match c.status(Some(name)).await {
        Ok(s) => s.first().map(|l| l.waiters_or_zero()).unwrap_or(0),
        Err(e) => panic!("status failed: {e}"),
    }
}

/// Waits until `name` has `n` waiters (on backends that report them; on the others it waits a
/// moment, 200 ms).
///
/// # Panics
/// When the waiters do not show within about 2.5 s.
pub async fn until_waiters(t: &dyn Target, c: &Client, name: &str, n: u64) {
    if !t.caps().reports_waiters {
        tokio::time::sleep(Duration::from_millis(200)).await;
        return;
    }
    for _ in 0..500 {
        if waiters(c, name).await >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("{name}: {n} waiters never showed in status");
}

/// How long [`eventually`] and [`until_status`] wait: generous, for what a backend does in the
/// background (a dropped acquisition's cleanup, a waiter's queue entry) on a busy 2-core CI
/// machine. A fixed sleep there made tests flaky; a poll costs only as long as it takes.
pub const EVENTUALLY: Duration = Duration::from_secs(10);

/// Polls `check` every 10 ms until it holds.
///
/// # Panics
/// When it does not within [`EVENTUALLY`]; the message says `what` never happened.
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let until = std::time::Instant::now() + EVENTUALLY;
    while !check().await {
        assert!(std::time::Instant::now() < until, "{what}: not within {EVENTUALLY:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Polls `name`'s status until it is listed and `check` holds.
///
/// # Panics
/// When it does not within [`EVENTUALLY`] (the message shows the last status), or `status`
/// fails.
pub async fn until_status(c: &Client, name: &str, check: impl Fn(&LockStatus) -> bool) {
    let until = std::time::Instant::now() + EVENTUALLY;
    loop {
        let st = c.status(Some(name)).await.unwrap_or_else(|e| panic!("status of {name} failed: {e}"));
        if st.first().is_some_and(&check) {
            return;
        }
        assert!(
            std::time::Instant::now() < until,
            "{name}: never reached the expected status within {EVENTUALLY:?}: {st:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Expands one `#[tokio::test]` per in-process contract property for the [`Target`] built by
/// `$make` (an expression, evaluated once per test).
#[macro_export]
macro_rules! conformance_suite {
    ($make:expr) => {
        $crate::conformance_suite!(@each $make;
            thirty_two_clients_never_overlap_and_tokens_increase,
            waiters_are_served_in_fifo_order,
            try_lock_never_waits,
            cancelled_waiter_leaves_no_entry,
            reentrant_acquisitions_are_counted,
            anonymous_acquisitions_on_one_client_are_exclusive,
            unlock_and_drop_release_the_lock,
            closing_the_session_signals_loss,
            a_live_holder_keeps_its_lock_past_the_ttl,
            bad_input_is_refused_with_typed_errors,
            lock_all_never_deadlocks_and_gives_a_token_per_name,
            lock_all_that_times_out_holds_nothing,
            primitives_are_offered_or_refused_clearly
        );
    };
    (@each $make:expr; $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let target = $make;
                $crate::conformance::$name(&target).await;
            }
        )*
    };
}
