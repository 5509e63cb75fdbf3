//! The contract's hardest clause, written once: a dropped `lock()` leaves no waiter and no hold.
//!
//! An acquisition creates a [`CancelGuard`] before it sends anything that could leave state on
//! the backend (a queued request, a key, a node, a row), keeps what a cleanup needs in the
//! guard's state (values learned later — a revision, a node path — go in through
//! [`CancelGuard::state_mut`]), and [`disarm`](CancelGuard::disarm)s it once the outcome is
//! settled. If the future is dropped first (a timeout, a cancelled `select!`) or returns early
//! with an error, the guard's cleanup runs: its synchronous part at once, its asynchronous part
//! spawned on the current tokio runtime, on the driver's own handles (never on the dropped
//! future's context, which is gone).

use std::future::Future;
use std::pin::Pin;

/// The asynchronous part of a cleanup.
pub type CleanupFuture = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

type Cleanup<S> = Box<dyn FnOnce(S) -> Option<CleanupFuture> + Send + Sync>;

/// Armed at creation; on drop while armed, runs its cleanup with its state.
///
/// The cleanup is a closure that receives the state, does what must happen synchronously, and
/// may return a future for the rest. That future is spawned on the current tokio runtime; with
/// no runtime (a dropped runtime, a synchronous test) it is dropped unrun — every value it
/// captured is released at once — and the backend's lease is the backstop (one debug line says
/// so). Resources the state holds (a per-name slot, an operation lock, a session handle) are
/// released when the cleanup future ends, so the next acquisition waits for the cleanup.
///
/// `S: Sync` and a `Sync` closure keep the acquisition future `Send` while it holds a
/// reference to the guard across an `.await`.
///
/// ```
/// use std::sync::atomic::{AtomicBool, Ordering};
/// use std::sync::Arc;
/// use locksmith_core::driver::CancelGuard;
///
/// let cleaned = Arc::new(AtomicBool::new(false));
/// let flag = cleaned.clone();
/// // A synchronous cleanup runs even without a runtime.
/// let guard = CancelGuard::sync("demo", 7u32, move |n| {
///     assert_eq!(n, 7);
///     flag.store(true, Ordering::SeqCst);
/// });
/// drop(guard); // the acquisition was abandoned
/// assert!(cleaned.load(Ordering::SeqCst));
///
/// let guard = CancelGuard::sync("demo", 8u32, |_| unreachable!("disarmed guards do nothing"));
/// assert_eq!(guard.disarm(), 8); // the outcome is settled: the state comes back
/// ```
#[must_use = "a guard dropped at once cleans up at once"]
pub struct CancelGuard<S: Send + Sync + 'static> {
    label: &'static str,
    armed: Option<(S, Cleanup<S>)>,
}

impl<S: Send + Sync + 'static> CancelGuard<S> {
    /// A guard whose cleanup may return a future to spawn (`None`: nothing left to do).
    pub fn new<F, Fut>(label: &'static str, state: S, cleanup: F) -> Self
    where
        F: FnOnce(S) -> Option<Fut> + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let cleanup: Cleanup<S> = Box::new(move |s| cleanup(s).map(|f| Box::pin(f) as CleanupFuture));
        Self { label, armed: Some((state, cleanup)) }
    }

    /// A guard whose cleanup is synchronous: it never spawns and works without a runtime.
    pub fn sync(label: &'static str, state: S, cleanup: impl FnOnce(S) + Send + Sync + 'static) -> Self {
        Self::new(label, state, move |s| {
            cleanup(s);
            None::<std::future::Ready<()>>
        })
    }

    /// The state, e.g. a slot the acquisition works in.
    pub fn state(&self) -> &S {
        match &self.armed {
            Some((s, _)) => s,
            // Only `disarm` and `drop` take the state, and both consume the guard.
            None => unreachable!("a CancelGuard's state is present until it is consumed"),
        }
    }

    /// The state, to record what the cleanup must know once it is known (a revision, a path,
    /// whether a request may have reached the backend).
    pub fn state_mut(&mut self) -> &mut S {
        match &mut self.armed {
            Some((s, _)) => s,
            None => unreachable!("a CancelGuard's state is present until it is consumed"),
        }
    }

    /// The outcome is settled: no cleanup; the state comes back (e.g. to move a slot into the
    /// hold).
    pub fn disarm(mut self) -> S {
        match self.armed.take() {
            Some((s, _)) => s,
            None => unreachable!("a CancelGuard's state is present until it is consumed"),
        }
    }

    /// Runs the cleanup now (the same as dropping the guard): for flows where giving up is part
    /// of the normal path, e.g. a round that did not win.
    pub fn fire(self) {}
}

impl<S: Send + Sync + 'static> Drop for CancelGuard<S> {
    fn drop(&mut self) {
        let Some((state, cleanup)) = self.armed.take() else { return };
        if let Some(fut) = cleanup(state) {
            spawn_detached(self.label, fut);
        }
    }
}

impl<S: Send + Sync + std::fmt::Debug + 'static> std::fmt::Debug for CancelGuard<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CancelGuard")
            .field("label", &self.label)
            .field("state", &self.armed.as_ref().map(|(s, _)| s))
            .finish()
    }
}

/// Spawns `fut` on the current tokio runtime, detached; `false` (and one debug line naming
/// `label`) when there is no runtime, in which case `fut` is dropped unrun.
pub fn spawn_detached(label: &'static str, fut: impl Future<Output = ()> + Send + 'static) -> bool {
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => {
            drop(handle.spawn(fut));
            true
        }
        Err(_) => {
            tracing::debug!(what = label, "no runtime to clean up on; the backend's lease is the backstop");
            false
        }
    }
}

/// Runs `fut` on a spawned task and waits for its result: the work runs to its end even if the
/// caller's future is dropped meanwhile (a release must not stop between instances or between
/// its read and its delete). `label` names the task in the error of a task that panicked.
///
/// # Cancel safety
/// Cancel safe: dropping this future detaches the task, which runs on.
///
/// # Errors
/// [`Error::Backend`](crate::Error::Backend) when the task panicked or was aborted.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let n = locksmith_core::driver::run_to_end("demo release", async { 2 + 2 }).await?;
/// assert_eq!(n, 4);
/// # Ok::<(), locksmith_core::Error>(())
/// # }).unwrap();
/// ```
pub async fn run_to_end<T: Send + 'static>(
    label: &'static str,
    fut: impl Future<Output = T> + Send + 'static,
) -> crate::Result<T> {
    tokio::spawn(fut).await.map_err(|e| crate::Error::Backend(format!("{label} task failed: {e}")))
}

/// Runs a closure when dropped, unless cancelled: a synchronous part of a cleanup that must
/// happen whether its future runs to the end or is dropped unrun.
///
/// ```
/// let mut ran = false;
/// {
///     let _f = locksmith_core::driver::OnDrop::new(|| ran = true);
/// }
/// assert!(ran);
/// ```
#[must_use = "dropped at once, it runs at once"]
pub struct OnDrop<F: FnOnce()>(Option<F>);

impl<F: FnOnce()> OnDrop<F> {
    /// Runs `f` on drop.
    pub fn new(f: F) -> Self {
        Self(Some(f))
    }

    /// Does not run it.
    pub fn cancel(mut self) {
        self.0 = None;
    }
}

impl<F: FnOnce()> Drop for OnDrop<F> {
    fn drop(&mut self) {
        if let Some(f) = self.0.take() {
            f();
        }
    }
}

impl<F: FnOnce()> std::fmt::Debug for OnDrop<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OnDrop").field("armed", &self.0.is_some()).finish()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use super::*;

    #[tokio::test]
    async fn a_dropped_guard_spawns_its_cleanup_and_a_disarmed_one_does_not() {
        let runs = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = tokio::sync::oneshot::channel();
        let r = runs.clone();
        let mut g = CancelGuard::new("test", (0u64, Some(tx)), move |(rev, tx)| {
            Some(async move {
                r.fetch_add(1, Ordering::SeqCst);
                if let Some(tx) = tx {
                    let _ = tx.send(rev);
                }
            })
        });
        g.state_mut().0 = 42; // learned mid-acquisition
        drop(g);
        assert_eq!(rx.await.ok(), Some(42));
        let r = runs.clone();
        let g = CancelGuard::new("test", (), move |()| {
            r.fetch_add(1, Ordering::SeqCst);
            None::<std::future::Ready<()>>
        });
        g.disarm();
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn without_a_runtime_the_future_is_dropped_and_its_captures_released() {
        let held = Arc::new(());
        let inside = held.clone();
        let g = CancelGuard::new("test", inside, |inside| Some(async move { drop(inside) }));
        drop(g);
        assert_eq!(Arc::strong_count(&held), 1, "the state outlived a cleanup that could not run");
    }

    fn assert_send_sync<T: Send + Sync>(_: &T) {}

    #[test]
    fn guards_are_send_and_sync() {
        let g = CancelGuard::sync("test", String::new(), drop);
        assert_send_sync(&g);
        g.disarm();
    }
}
