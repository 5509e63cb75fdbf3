//! The one tokio runtime of this process, and the two ways Python waits for Rust futures:
//! blocking in slices (the GIL released, signals checked between slices) and asyncio futures.

use std::future::Future;
use std::sync::mpsc::{sync_channel, RecvTimeoutError};
use std::sync::Mutex;
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::IntoPyObjectExt;
use tokio::runtime::Runtime;
use tokio::task::AbortHandle;

use crate::errors::to_py;

/// How long a blocking call waits before it looks for a pending signal (Ctrl-C).
const SLICE: Duration = Duration::from_millis(50);

/// The runtime and the process it was built in. After `fork()` the child has the parent's
/// runtime in memory but none of its worker threads: it is left alone (leaked, never dropped,
/// never entered) and the child builds its own.
static RUNTIME: Mutex<Option<(u32, &'static Runtime)>> = Mutex::new(None);

/// This process's runtime, built on first use.
pub(crate) fn runtime() -> PyResult<&'static Runtime> {
    let pid = std::process::id();
    let mut slot = RUNTIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((owner, rt)) = *slot {
        if owner == pid {
            return Ok(rt);
        }
    }
    // One worker: the Rust work of a Python process is I/O (requests, renewals), and every
    // blocking call already crosses from the Python thread to a worker and back; a second
    // worker only added wake-ups between the two (11.2 -> 6.7 context switches and 176 -> 127
    // µs p50 per Redis lock/unlock cycle, docs/benchmarks.md). Multi-thread all the same, so
    // that the worker runs while no Python thread waits (renewals, loss watchers).
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .thread_name("locksmith")
        .build()
        .map_err(|e| pyo3::exceptions::PyOSError::new_err(format!("cannot start the locksmith runtime: {e}")))?;
    let rt: &'static Runtime = Box::leak(Box::new(rt));
    *slot = Some((pid, rt));
    Ok(rt)
}

/// What the caller's giving up (Ctrl-C, a cancelled asyncio task) does to the Rust future.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnCancel {
    /// Drop it, as a Rust caller dropping it would: a waiting acquisition leaves no waiter.
    Drop,
    /// Let it run to its end and lose only its answer: a release, which must not stop half-way.
    Finish,
}

/// Runs `fut` on the runtime and waits for it with the GIL released. Between slices of
/// [`SLICE`] it checks for signals: on Ctrl-C (or any handler that raises) the future is
/// dropped — a waiting acquisition leaves no waiter — before the exception propagates.
pub(crate) fn block_on<T: Send + 'static>(
    py: Python<'_>,
    fut: impl Future<Output = locksmith::Result<T>> + Send + 'static,
) -> PyResult<T> {
    block_on_with(py, fut, OnCancel::Drop)
}

/// [`block_on`], with what Ctrl-C does to the future: with [`OnCancel::Finish`] it runs on and
/// the exception propagates at once.
pub(crate) fn block_on_with<T: Send + 'static>(
    py: Python<'_>,
    fut: impl Future<Output = locksmith::Result<T>> + Send + 'static,
    on_cancel: OnCancel,
) -> PyResult<T> {
    let rt = runtime()?;
    let (tx, rx) = sync_channel(1);
    let task = rt.spawn(async move {
        let _ = tx.send(fut.await);
    });
    let mut rx = rx;
    loop {
        // The receiver is not `Sync`: it moves into the GIL-free closure and back.
        let (back, got) = py.detach(move || {
            let got = rx.recv_timeout(SLICE);
            (rx, got)
        });
        rx = back;
        match got {
            Ok(out) => return out.map_err(|e| to_py(py, e)),
            Err(RecvTimeoutError::Timeout) => {
                if let Err(interrupted) = py.check_signals() {
                    if on_cancel == OnCancel::Finish {
                        return Err(interrupted);
                    }
                    task.abort();
                    // The sender goes when the future is dropped: wait for that, so the
                    // cancellation is done when the caller sees the exception. A result that
                    // came in meanwhile (a guard) is dropped on the runtime, which releases it.
                    if let Ok(late) = py.detach(move || rx.recv()) {
                        let _enter = rt.enter();
                        drop(late);
                    }
                    return Err(interrupted);
                }
            }
            Err(RecvTimeoutError::Disconnected) => {
                return Err(pyo3::exceptions::PyRuntimeError::new_err("the locksmith task ended without an answer"))
            }
        }
    }
}

/// An asyncio future (of the running loop) for `fut`, run on this module's runtime. Cancelling
/// the asyncio future (the awaiting task was cancelled) aborts the Rust task: the future is
/// dropped, exactly as when a Rust caller drops it, so a waiting acquisition leaves no waiter.
/// A result that arrives after the cancellation (a guard) is dropped, which releases it.
pub(crate) fn awaitable<'py, T>(
    py: Python<'py>,
    fut: impl Future<Output = locksmith::Result<T>> + Send + 'static,
) -> PyResult<Bound<'py, PyAny>>
where
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    awaitable_with(py, fut, OnCancel::Drop)
}

/// [`awaitable`], with what cancelling the asyncio future does to the Rust one: with
/// [`OnCancel::Finish`] it runs to its end and its answer is dropped.
pub(crate) fn awaitable_with<'py, T>(
    py: Python<'py>,
    fut: impl Future<Output = locksmith::Result<T>> + Send + 'static,
    on_cancel: OnCancel,
) -> PyResult<Bound<'py, PyAny>>
where
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    let event_loop = py.import("asyncio")?.call_method0("get_running_loop")?;
    let future = event_loop.call_method0("create_future")?;
    let (target, loop_ref) = (future.clone().unbind(), event_loop.unbind());
    let task = runtime()?.spawn(async move {
        let out = fut.await;
        // Waiting for the GIL is blocking: never on a runtime worker, whose other tasks (the
        // sessions' renewals) must go on while the event loop's thread runs Python code.
        let deliver = move || {
            Python::attach(|py| {
                let (ok, value) = match out.map_err(|e| to_py(py, e)).and_then(|v| v.into_py_any(py)) {
                    Ok(v) => (true, v),
                    Err(e) => (false, e.into_value(py).into_any()),
                };
                let deliver = match py.import("locksmith._native").and_then(|m| m.getattr("_deliver")) {
                    Ok(f) => f,
                    Err(e) => return e.write_unraisable(py, None),
                };
                // A closed loop cannot take the answer; dropping the value releases a guard.
                let _ = loop_ref.bind(py).call_method1("call_soon_threadsafe", (deliver, target, ok, value));
            })
        };
        let _ = tokio::task::spawn_blocking(deliver).await;
    });
    if on_cancel == OnCancel::Drop {
        future.call_method1("add_done_callback", (AbortOnCancel { task: task.abort_handle() },))?;
    }
    Ok(future)
}

/// Sets an asyncio future's outcome unless it was cancelled meanwhile (called on its loop).
#[pyfunction]
pub(crate) fn _deliver(future: &Bound<'_, PyAny>, ok: bool, value: Bound<'_, PyAny>) -> PyResult<()> {
    if future.call_method0("done")?.is_truthy()? {
        return Ok(());
    }
    match ok {
        true => future.call_method1("set_result", (value,))?,
        false => future.call_method1("set_exception", (value,))?,
    };
    Ok(())
}

/// The done-callback that drops the Rust future when its asyncio future is cancelled.
#[pyclass(frozen)]
struct AbortOnCancel {
    task: AbortHandle,
}

#[pymethods]
impl AbortOnCancel {
    fn __call__(&self, future: &Bound<'_, PyAny>) -> PyResult<()> {
        if future.call_method0("cancelled")?.is_truthy()? {
            self.task.abort();
        }
        Ok(())
    }
}
