//! What a guard and a multi-guard share: the hold kept in Rust, the `lost` event, `on_lost`
//! callbacks and the release.

use std::future::Future;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use pyo3::prelude::*;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::fork::ProcessBound;
use crate::runtime::{awaitable, awaitable_with, block_on, block_on_with, OnCancel};

/// A hold of the crate: [`locksmith::Guard`] or [`locksmith::MultiGuard`].
pub(crate) trait Hold: Send + Sync + 'static {
    fn lost(&self) -> impl Future<Output = ()> + Send + '_;
    fn is_held(&self) -> bool;
    fn remaining(&self) -> Duration;
    fn unlock(self) -> impl Future<Output = locksmith::Result<bool>> + Send;
}

impl Hold for locksmith::Guard {
    fn lost(&self) -> impl Future<Output = ()> + Send + '_ {
        locksmith::Guard::lost(self)
    }
    fn is_held(&self) -> bool {
        locksmith::Guard::is_held(self)
    }
    fn remaining(&self) -> Duration {
        locksmith::Guard::remaining(self)
    }
    fn unlock(self) -> impl Future<Output = locksmith::Result<bool>> + Send {
        locksmith::Guard::unlock(self)
    }
}

impl Hold for locksmith::MultiGuard {
    fn lost(&self) -> impl Future<Output = ()> + Send + '_ {
        locksmith::MultiGuard::lost(self)
    }
    fn is_held(&self) -> bool {
        locksmith::MultiGuard::is_held(self)
    }
    fn remaining(&self) -> Duration {
        locksmith::MultiGuard::remaining(self)
    }
    fn unlock(self) -> impl Future<Output = locksmith::Result<bool>> + Send {
        locksmith::MultiGuard::unlock(self)
    }
}

fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The hold and the task that watches it for loss.
struct Live<H> {
    hold: Mutex<Option<Arc<H>>>,
    watcher: Mutex<Option<JoinHandle<()>>>,
}

/// Callbacks waiting for the loss, until it happened (`lost`) or the hold was released.
#[derive(Default)]
struct Callbacks {
    waiting: Vec<Py<PyAny>>,
    lost: bool,
    released: bool,
}

/// A hold as Python sees it.
pub(crate) struct Holding<H: Hold> {
    live: ProcessBound<Live<H>>,
    lost: Py<LostEvent>,
    callbacks: Arc<Mutex<Callbacks>>,
}

/// A hold whose loss watcher runs already. Made on the runtime, in the task that acquired the
/// hold: a task spawned there goes to that worker's own queue, while one spawned from the
/// Python thread wakes a parked worker — a thread hand-off per acquisition that the binding's
/// cycle paid (see docs/benchmarks.md). Dropped without becoming a [`Holding`] (an answer
/// nobody received), it stops the watcher, so the hold is dropped and released.
pub(crate) struct Watched<H: Hold> {
    hold: Arc<H>,
    flag: Arc<watch::Sender<bool>>,
    callbacks: Arc<Mutex<Callbacks>>,
    watcher: Option<JoinHandle<()>>,
}

impl<H: Hold> Watched<H> {
    /// Starts the watcher on the current runtime (this module's: called in its tasks).
    pub(crate) fn new(hold: H) -> locksmith::Result<Self> {
        let rt = tokio::runtime::Handle::try_current()
            .map_err(|_| locksmith::Error::Internal("a hold was watched outside the runtime".into()))?;
        let hold = Arc::new(hold);
        let flag = Arc::new(watch::channel(false).0);
        let callbacks = Arc::new(Mutex::new(Callbacks::default()));
        let (watched, set, pending) = (hold.clone(), flag.clone(), callbacks.clone());
        let watcher = rt.spawn(async move {
            watched.lost().await;
            drop(watched);
            set.send_replace(true);
            let waiting = {
                let mut c = locked(&pending);
                c.lost = true;
                std::mem::take(&mut c.waiting)
            };
            if !waiting.is_empty() {
                // Not on a runtime thread: a callback may call blocking methods (unlock).
                std::thread::spawn(move || Python::attach(|py| waiting.iter().for_each(|cb| call(py, cb))));
            }
        });
        Ok(Self { hold, flag, callbacks, watcher: Some(watcher) })
    }

    /// The hold, to read its name, token…
    pub(crate) fn hold(&self) -> &H {
        &self.hold
    }
}

impl<H: Hold> Drop for Watched<H> {
    fn drop(&mut self) {
        if let Some(w) = self.watcher.take() {
            w.abort();
        }
    }
}

impl<H: Hold> Holding<H> {
    pub(crate) fn new(py: Python<'_>, mut watched: Watched<H>) -> PyResult<Self> {
        let watcher = watched.watcher.take();
        Ok(Self {
            live: ProcessBound::new(Live {
                hold: Mutex::new(Some(watched.hold.clone())),
                watcher: Mutex::new(watcher),
            }),
            lost: Py::new(py, LostEvent { flag: watched.flag.clone(), pid: std::process::id() })?,
            callbacks: watched.callbacks.clone(),
        })
    }

    pub(crate) fn hold(&self, py: Python<'_>, what: &str) -> PyResult<Option<Arc<H>>> {
        Ok(locked(&self.live.get(py, what)?.hold).clone())
    }

    pub(crate) fn is_held(&self, py: Python<'_>, what: &str) -> PyResult<bool> {
        Ok(self.hold(py, what)?.is_some_and(|h| h.is_held()))
    }

    pub(crate) fn remaining(&self, py: Python<'_>, what: &str) -> PyResult<f64> {
        Ok(self.hold(py, what)?.map_or(0.0, |h| h.remaining().as_secs_f64()))
    }

    pub(crate) fn lost(&self, py: Python<'_>) -> Py<LostEvent> {
        self.lost.clone_ref(py)
    }

    pub(crate) fn on_lost(&self, py: Python<'_>, what: &str, callback: Py<PyAny>) -> PyResult<()> {
        self.live.get(py, what)?;
        let lost_already = {
            let mut c = locked(&self.callbacks);
            if !c.lost && !c.released {
                c.waiting.push(callback.clone_ref(py));
            }
            c.lost
        };
        if lost_already {
            call(py, &callback);
        }
        Ok(())
    }

    /// The release as a future, to run with [`OnCancel::Finish`]: it runs to its end even if its
    /// caller gives up (a cancelled asyncio task, Ctrl-C), like `Guard::unlock` in Rust — only
    /// the answer is lost. `None` when it was released already.
    ///
    /// It must run (hence `Finish`, never an abort): it stops the watcher, whose clone of the
    /// hold must go for the hold to be unwrapped and unlocked (and a clean release is no loss).
    /// A release future aborted before it ran used to leave the watcher running, and its clone
    /// kept the hold alive — held on the backend for as long as the session lived (the stray
    /// holder of the asyncio test). Stopped here, on the runtime, the watcher's abort is no
    /// hand-off to another thread.
    fn release(&self, py: Python<'_>, what: &str) -> PyResult<Option<impl Future<Output = locksmith::Result<bool>>>> {
        let live = self.live.get(py, what)?;
        let Some(hold) = locked(&live.hold).take() else { return Ok(None) };
        let watcher = locked(&live.watcher).take();
        locked(&self.callbacks).released = true;
        let flag = self.lost.get().flag.clone();
        Ok(Some(async move {
            if let Some(w) = watcher {
                w.abort();
                // Its future (and clone of the hold) is dropped before this resolves.
                let _ = w.await;
            }
            let result = match Arc::try_unwrap(hold) {
                Ok(h) => h.unlock().await,
                Err(_) => Err(locksmith::Error::Internal("a released hold is still shared".into())),
            };
            flag.send_replace(true);
            result
        }))
    }

    pub(crate) fn unlock(&self, py: Python<'_>, what: &str) -> PyResult<bool> {
        match self.release(py, what)? {
            Some(release) => block_on_with(py, release, OnCancel::Finish),
            None => Ok(false),
        }
    }

    pub(crate) fn unlock_async<'py>(&self, py: Python<'py>, what: &str) -> PyResult<Bound<'py, PyAny>> {
        let release = self.release(py, what)?;
        let release = async move {
            match release {
                Some(r) => r.await,
                None => Ok(false),
            }
        };
        awaitable_with(py, release, OnCancel::Finish)
    }

    /// Context-manager exit: release; a hold lost while the block ran raises `LockLost` (unless
    /// the block raised already, or released the hold itself).
    pub(crate) fn exit(&self, py: Python<'_>, what: &str, name: &str, raised: bool) -> PyResult<bool> {
        match self.release(py, what)? {
            Some(release) => block_on_with(py, checked(release, name.to_string(), raised), OnCancel::Finish),
            None => Ok(false),
        }
    }

    /// `exit` for `async with`: an awaitable of False (or `LockLost`).
    pub(crate) fn exit_async<'py>(
        &self,
        py: Python<'py>,
        what: &str,
        name: &str,
        raised: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let release = self.release(py, what)?;
        let name = name.to_string();
        let release = async move {
            match release {
                Some(r) => checked(r, name, raised).await,
                None => Ok(false),
            }
        };
        awaitable_with(py, release, OnCancel::Finish)
    }
}

/// A block's release: `Lost` when the hold was no longer ours and the block raised nothing.
async fn checked(
    release: impl Future<Output = locksmith::Result<bool>>,
    name: String,
    raised: bool,
) -> locksmith::Result<bool> {
    match release.await? {
        // "lock NAME was lost": another holder may have overlapped the block.
        false if !raised => Err(locksmith::Error::Lost(name)),
        _ => Ok(false),
    }
}

impl<H: Hold> Drop for Holding<H> {
    fn drop(&mut self) {
        // The watcher holds a clone: stop it so that the hold drops (and is released).
        if let Some(w) = self.live.local().and_then(|live| locked(&live.watcher).take()) {
            w.abort();
        }
    }
}

fn call(py: Python<'_>, callback: &Py<PyAny>) {
    if let Err(e) = callback.call0(py) {
        e.write_unraisable(py, Some(callback.bind(py)));
    }
}

/// Set when the hold may have been lost (or was released): like `threading.Event`, wait on it
/// or poll it.
///
/// ```python
/// with client.lock("jobs/nightly") as guard:
///     for chunk in work:
///         if guard.lost.is_set():
///             break
///         process(chunk, token=guard.token)
/// ```
#[pyclass(frozen, module = "locksmith")]
pub(crate) struct LostEvent {
    flag: Arc<watch::Sender<bool>>,
    /// Set by a task of the process that made it: a forked child would wait forever.
    pid: u32,
}

impl LostEvent {
    fn subscribe(&self, py: Python<'_>) -> PyResult<watch::Receiver<bool>> {
        if self.pid != std::process::id() {
            return Err(crate::errors::raise(
                py,
                "ForkError",
                format!(
                    "this lost event belongs to a hold of process {}; it cannot be waited on after fork()",
                    self.pid
                ),
            ));
        }
        Ok(self.flag.subscribe())
    }
}

#[pymethods]
impl LostEvent {
    /// True once the hold may have been lost (or was released).
    fn is_set(&self) -> bool {
        *self.flag.borrow()
    }

    /// Waits until the event is set or `timeout` seconds passed (forever without one); returns
    /// whether it is set. The GIL is released while waiting; Ctrl-C interrupts.
    #[pyo3(signature = (timeout=None))]
    fn wait(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<bool> {
        let limit = timeout.map(|t| crate::options::seconds(py, "timeout", t)).transpose()?;
        let mut rx = self.subscribe(py)?;
        block_on(py, async move {
            let set = rx.wait_for(|lost| *lost);
            Ok(match limit {
                Some(l) => tokio::time::timeout(l, set).await.is_ok_and(|r| r.is_ok()),
                None => set.await.is_ok(),
            })
        })
    }

    /// Awaitable: resolves when the event is set (asyncio).
    fn wait_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let mut rx = self.subscribe(py)?;
        awaitable(py, async move {
            let _ = rx.wait_for(|lost| *lost).await;
            Ok(true)
        })
    }

    fn __bool__(&self) -> bool {
        self.is_set()
    }

    fn __repr__(&self) -> String {
        format!("<locksmith.LostEvent set={}>", if self.is_set() { "True" } else { "False" })
    }
}
