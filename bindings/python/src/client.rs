//! `Client`: one backend, one session; every acquisition blocking (`lock`) or asyncio
//! (`lock_async`, used by `locksmith.aio`).

use pyo3::prelude::*;

use crate::errors::to_py;
use crate::fork::ProcessBound;
use crate::guard::{Guard, MultiGuard};
use crate::hold::Watched;
use crate::options::{seconds, Acquire};
use crate::runtime::{awaitable, block_on, runtime};
use crate::status::{free, leader_of, lock_status, Leader, LockStatus, Observer};

/// A connection to one backend, chosen by URL (see `locksmith.connect`), with one session
/// (lease) that keeps every hold taken through it alive.
#[pyclass(frozen, module = "locksmith")]
pub(crate) struct Client {
    inner: ProcessBound<locksmith::Client>,
    describe: String,
}

/// Connects to the backend at `url` (no I/O yet: the session opens with the first
/// acquisition). `ttl` is the session lease in seconds: a crashed holder blocks others at most
/// this long.
///
/// ```python
/// import locksmith
/// client = locksmith.connect("redis://127.0.0.1:6379", ttl=10.0)
/// with client.lock("jobs/nightly", timeout=30) as guard:
///     run_nightly(fencing_token=guard.token)
/// ```
#[pyfunction]
#[pyo3(signature = (url, ttl=10.0))]
pub(crate) fn connect(py: Python<'_>, url: &str, ttl: f64) -> PyResult<Client> {
    let ttl = seconds(py, "ttl", ttl)?;
    let rt = runtime()?;
    let backend = locksmith::backend(url).map_err(|e| to_py(py, e))?;
    let describe = backend.describe();
    let client = {
        let _enter = rt.enter();
        locksmith::Client::new(backend, ttl).map_err(|e| to_py(py, e))?
    };
    Ok(Client { inner: ProcessBound::new(client), describe })
}

impl Client {
    fn client(&self, py: Python<'_>) -> PyResult<locksmith::Client> {
        self.inner.get(py, "Client").cloned()
    }
}

/// The keyword arguments of an acquisition, declared once for the sync and asyncio methods.
macro_rules! acquire_kw {
    ($timeout:expr, $shared:expr, $permits:expr, $owner:expr, $lock_delay:expr, $value:expr, $unfenced:expr) => {
        Acquire {
            timeout: $timeout,
            shared: $shared,
            permits: $permits,
            owner: $owner,
            lock_delay: $lock_delay,
            value: $value,
            unfenced: $unfenced,
        }
    };
}

#[pymethods]
impl Client {
    /// Waits until `name` is ours and returns its `Guard` (a context manager). `timeout`
    /// (seconds) raises `LockTimeout` and leaves no waiter; so does Ctrl-C (`KeyboardInterrupt`).
    /// `shared=True` takes a read lock, `permits=N` one of N permits of a semaphore; `owner`
    /// makes the hold reentrant for that owner id; `lock_delay` keeps the lock unavailable that
    /// long after this holder's session expires; `value` is stored with the hold (status,
    /// elections); `unfenced=True` accepts a backend without fencing tokens (Redlock).
    #[pyo3(signature = (name, *, timeout=None, shared=false, permits=None, owner=None, lock_delay=None, value=None, unfenced=false))]
    #[allow(clippy::too_many_arguments)]
    fn lock(
        &self,
        py: Python<'_>,
        name: String,
        timeout: Option<f64>,
        shared: bool,
        permits: Option<u32>,
        owner: Option<String>,
        lock_delay: Option<f64>,
        value: Option<String>,
        unfenced: bool,
    ) -> PyResult<Guard> {
        let opts = acquire_kw!(timeout, shared, permits, owner, lock_delay, value, unfenced).options(py)?;
        let client = self.client(py)?;
        let g = block_on(py, async move { client.lock_with(&name, opts).await.and_then(Watched::new) })?;
        Guard::new(py, g)
    }

    /// `lock()` for asyncio: an awaitable of the `Guard`; cancelling it leaves no waiter.
    #[pyo3(signature = (name, *, timeout=None, shared=false, permits=None, owner=None, lock_delay=None, value=None, unfenced=false))]
    #[allow(clippy::too_many_arguments)]
    fn lock_async<'py>(
        &self,
        py: Python<'py>,
        name: String,
        timeout: Option<f64>,
        shared: bool,
        permits: Option<u32>,
        owner: Option<String>,
        lock_delay: Option<f64>,
        value: Option<String>,
        unfenced: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let opts = acquire_kw!(timeout, shared, permits, owner, lock_delay, value, unfenced).options(py)?;
        let client = self.client(py)?;
        awaitable(py, async move { client.lock_with(&name, opts).await.and_then(Watched::new).map(NewGuard) })
    }

    /// Takes `name` if it is free right now: its `Guard`, or None when someone else holds it.
    #[pyo3(signature = (name, *, shared=false, permits=None, owner=None, lock_delay=None, value=None, unfenced=false))]
    #[allow(clippy::too_many_arguments)]
    fn try_lock(
        &self,
        py: Python<'_>,
        name: String,
        shared: bool,
        permits: Option<u32>,
        owner: Option<String>,
        lock_delay: Option<f64>,
        value: Option<String>,
        unfenced: bool,
    ) -> PyResult<Option<Guard>> {
        let opts = acquire_kw!(None, shared, permits, owner, lock_delay, value, unfenced).options(py)?;
        let client = self.client(py)?;
        block_on(py, async move { client.try_lock_with(&name, opts).await?.map(Watched::new).transpose() })?
            .map(|g| Guard::new(py, g))
            .transpose()
    }

    /// `try_lock()` for asyncio.
    #[pyo3(signature = (name, *, shared=false, permits=None, owner=None, lock_delay=None, value=None, unfenced=false))]
    #[allow(clippy::too_many_arguments)]
    fn try_lock_async<'py>(
        &self,
        py: Python<'py>,
        name: String,
        shared: bool,
        permits: Option<u32>,
        owner: Option<String>,
        lock_delay: Option<f64>,
        value: Option<String>,
        unfenced: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let opts = acquire_kw!(None, shared, permits, owner, lock_delay, value, unfenced).options(py)?;
        let client = self.client(py)?;
        awaitable(py, async move {
            Ok(client.try_lock_with(&name, opts).await?.map(Watched::new).transpose()?.map(NewGuard))
        })
    }

    /// Takes every lock of `names` or none, in one canonical order (no deadlock between
    /// overlapping sets); `timeout` bounds the whole acquisition. Returns a `MultiGuard`.
    #[pyo3(signature = (names, *, timeout=None, shared=false, owner=None, unfenced=false))]
    fn lock_all(
        &self,
        py: Python<'_>,
        names: Vec<String>,
        timeout: Option<f64>,
        shared: bool,
        owner: Option<String>,
        unfenced: bool,
    ) -> PyResult<MultiGuard> {
        let opts = acquire_kw!(timeout, shared, None, owner, None, None, unfenced).options(py)?;
        let client = self.client(py)?;
        let g = block_on(py, async move {
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            client.lock_all(&names, opts).await.and_then(Watched::new)
        })?;
        MultiGuard::new(py, g)
    }

    /// `lock_all()` for asyncio.
    #[pyo3(signature = (names, *, timeout=None, shared=false, owner=None, unfenced=false))]
    fn lock_all_async<'py>(
        &self,
        py: Python<'py>,
        names: Vec<String>,
        timeout: Option<f64>,
        shared: bool,
        owner: Option<String>,
        unfenced: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let opts = acquire_kw!(timeout, shared, None, owner, None, None, unfenced).options(py)?;
        let client = self.client(py)?;
        awaitable(py, async move {
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            client.lock_all(&names, opts).await.and_then(Watched::new).map(NewMultiGuard)
        })
    }

    /// Campaigns in election `name` with the proposal `value`: waits until this client leads
    /// and returns the leadership as a `Guard` whose `token` is the term. Resign with
    /// `unlock()`; `lost` tells a leader it may no longer lead.
    #[pyo3(signature = (name, value, *, timeout=None))]
    fn campaign(&self, py: Python<'_>, name: String, value: String, timeout: Option<f64>) -> PyResult<Guard> {
        let opts = acquire_kw!(timeout, false, None, None, None, None, false).options(py)?;
        let client = self.client(py)?;
        let g = block_on(py, async move { client.campaign(&name, &value, opts).await.and_then(Watched::new) })?;
        Guard::new(py, g)
    }

    /// `campaign()` for asyncio.
    #[pyo3(signature = (name, value, *, timeout=None))]
    fn campaign_async<'py>(
        &self,
        py: Python<'py>,
        name: String,
        value: String,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let opts = acquire_kw!(timeout, false, None, None, None, None, false).options(py)?;
        let client = self.client(py)?;
        awaitable(py, async move { client.campaign(&name, &value, opts).await.and_then(Watched::new).map(NewGuard) })
    }

    /// Follows election `name`: an `Observer` of who leads now and every change of leader.
    fn observe(&self, py: Python<'_>, name: String) -> PyResult<Observer> {
        let client = self.client(py)?;
        Ok(Observer::new(block_on(py, async move { client.observe(&name).await })?))
    }

    /// `observe()` for asyncio: an awaitable of the `Observer`.
    fn observe_async<'py>(&self, py: Python<'py>, name: String) -> PyResult<Bound<'py, PyAny>> {
        let client = self.client(py)?;
        awaitable(py, async move { client.observe(&name).await.map(Observer::new) })
    }

    /// The leader of election `name` now, or None.
    fn leader(&self, py: Python<'_>, name: String) -> PyResult<Option<Leader>> {
        let client = self.client(py)?;
        let all = block_on(py, async move { client.status(Some(&name)).await })?;
        Ok(all.first().and_then(leader_of))
    }

    /// The status of lock `name` (a `LockStatus`), or of every lock the backend can list (a
    /// list) when no name is given.
    #[pyo3(signature = (name=None))]
    fn status(&self, py: Python<'_>, name: Option<String>) -> PyResult<Py<PyAny>> {
        let client = self.client(py)?;
        let asked = name.clone();
        let all = block_on(py, async move { client.status(asked.as_deref()).await })?;
        match name {
            Some(n) => {
                let one = match all.iter().find(|s| s.name == n) {
                    Some(s) => lock_status(py, s)?,
                    None => free(&n),
                };
                Ok(Py::new(py, one)?.into_any())
            }
            None => {
                let list: Vec<LockStatus> = all.iter().map(|s| lock_status(py, s)).collect::<PyResult<_>>()?;
                Ok(list.into_pyobject(py)?.into_any().unbind())
            }
        }
    }

    /// `status()` for asyncio (one name).
    fn status_async<'py>(&self, py: Python<'py>, name: String) -> PyResult<Bound<'py, PyAny>> {
        let client = self.client(py)?;
        awaitable(py, async move { client.status(Some(&name)).await.map(|all| NewStatus(name, all)) })
    }

    /// The id of this client's session, opening one if there is none.
    fn session_id(&self, py: Python<'_>) -> PyResult<String> {
        let client = self.client(py)?;
        block_on(py, async move { client.session_id().await })
    }

    /// Ends the session now: every guard is lost, every hold freed on the backend.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let client = self.client(py)?;
        block_on(py, async move {
            client.close().await;
            Ok(())
        })
    }

    /// `close()` for asyncio.
    fn close_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let client = self.client(py)?;
        awaitable(py, async move {
            client.close().await;
            Ok(())
        })
    }

    /// The session lease in seconds.
    #[getter]
    fn ttl(&self, py: Python<'_>) -> PyResult<f64> {
        Ok(self.client(py)?.ttl().as_secs_f64())
    }

    /// Whether the backend gives safe fencing tokens (all but Redlock).
    #[getter]
    fn provides_fencing(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.client(py)?.backend().provides_fencing())
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_exc))]
    fn __exit__(&self, py: Python<'_>, _exc: Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        format!("<locksmith.Client {}>", self.describe)
    }
}

/// A guard made into its Python object when an asyncio future delivers it (under the GIL).
struct NewGuard(Watched<locksmith::Guard>);
struct NewMultiGuard(Watched<locksmith::MultiGuard>);
struct NewStatus(String, Vec<locksmith::LockStatus>);

impl<'py> IntoPyObject<'py> for NewGuard {
    type Target = Guard;
    type Output = Bound<'py, Guard>;
    type Error = PyErr;
    fn into_pyobject(self, py: Python<'py>) -> PyResult<Self::Output> {
        Bound::new(py, Guard::new(py, self.0)?)
    }
}

impl<'py> IntoPyObject<'py> for NewMultiGuard {
    type Target = MultiGuard;
    type Output = Bound<'py, MultiGuard>;
    type Error = PyErr;
    fn into_pyobject(self, py: Python<'py>) -> PyResult<Self::Output> {
        Bound::new(py, MultiGuard::new(py, self.0)?)
    }
}

impl<'py> IntoPyObject<'py> for NewStatus {
    type Target = LockStatus;
    type Output = Bound<'py, LockStatus>;
    type Error = PyErr;
    fn into_pyobject(self, py: Python<'py>) -> PyResult<Self::Output> {
        let one = match self.1.iter().find(|s| s.name == self.0) {
            Some(s) => lock_status(py, s)?,
            None => free(&self.0),
        };
        Bound::new(py, one)
    }
}
