//! `Guard` (one lock) and `MultiGuard` (`lock_all`): context managers over the crate's guards.

use std::collections::BTreeMap;

use pyo3::prelude::*;
use pyo3::types::PyType;

use crate::hold::{Holding, LostEvent, Watched};

/// Proof of holding a lock, with its fencing token. Released by `unlock()`, at the end of a
/// `with` block, or (in the background) when garbage-collected; the lease frees it if the
/// process dies.
///
/// ```python
/// with client.lock("jobs/nightly", timeout=30) as guard:
///     db.execute("UPDATE jobs SET ran_by = %s WHERE fence < %s", (me, guard.token))
/// ```
///
/// Leaving the block raises `LockLost` when the hold was lost while the block ran.
#[pyclass(frozen, module = "locksmith")]
pub(crate) struct Guard {
    name: String,
    owner: String,
    token: u64,
    fenced: bool,
    session_id: String,
    holding: Holding<locksmith::Guard>,
}

impl Guard {
    pub(crate) fn new(py: Python<'_>, watched: Watched<locksmith::Guard>) -> PyResult<Self> {
        let g = watched.hold();
        Ok(Self {
            name: g.name().to_string(),
            owner: g.owner().to_string(),
            token: g.token(),
            fenced: g.fencing_token().is_some(),
            session_id: g.session_id(),
            holding: Holding::new(py, watched)?,
        })
    }
}

#[pymethods]
impl Guard {
    /// The lock's name.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }

    /// The fencing token: greater than every token issued before for this lock. Pass it to the
    /// resource so that it can refuse a stale holder. 0 on a backend without fencing (Redlock,
    /// only with `unfenced=True`).
    #[getter]
    fn token(&self) -> u64 {
        self.token
    }

    /// The fencing token, or None on a backend that cannot give a safe one.
    #[getter]
    fn fencing_token(&self) -> Option<u64> {
        self.fenced.then_some(self.token)
    }

    /// The owner id the hold was taken as.
    #[getter]
    fn owner(&self) -> &str {
        &self.owner
    }

    /// The id of the session (lease) that keeps the hold alive.
    #[getter]
    fn session_id(&self) -> &str {
        &self.session_id
    }

    /// Set when the hold may have been lost — before anyone else can be granted the lock — or
    /// was released.
    #[getter]
    fn lost(&self, py: Python<'_>) -> Py<LostEvent> {
        self.holding.lost(py)
    }

    /// True while the hold is certainly ours: not released, not reported lost, and the local
    /// deadline (last renewal + TTL − drift) not passed.
    fn is_held(&self, py: Python<'_>) -> PyResult<bool> {
        self.holding.is_held(py, "Guard")
    }

    /// Seconds the hold is certainly still ours if no further renewal succeeds (0.0 once lost
    /// or released).
    fn remaining(&self, py: Python<'_>) -> PyResult<f64> {
        self.holding.remaining(py, "Guard")
    }

    /// The wall-clock time (seconds since the epoch, like `time.time()`) until which the hold
    /// is certainly ours unless renewed; after a loss, when it stopped being safe. None once
    /// released.
    fn valid_until(&self, py: Python<'_>) -> PyResult<Option<f64>> {
        Ok(self
            .holding
            .hold(py, "Guard")?
            .map(|g| g.valid_until().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())))
    }

    /// Calls `callback()` once, from another thread, if the hold may have been lost (at once if
    /// it was already). Not called after a release.
    fn on_lost(&self, py: Python<'_>, callback: Py<PyAny>) -> PyResult<()> {
        self.holding.on_lost(py, "Guard", callback)
    }

    /// Releases the hold; returns whether it was still ours until now (False when it had been
    /// lost or released already — nobody else's hold is touched either way).
    fn unlock(&self, py: Python<'_>) -> PyResult<bool> {
        self.holding.unlock(py, "Guard")
    }

    /// `unlock()` for asyncio: an awaitable of the same answer. The release starts at the call
    /// and runs to its end even if the awaiting task is cancelled (only the answer is lost).
    fn unlock_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.holding.unlock_async(py, "Guard")
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (exc_type=None, _exc=None, _tb=None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<Bound<'_, PyType>>,
        _exc: Option<Bound<'_, PyAny>>,
        _tb: Option<Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        self.holding.exit(py, "Guard", &self.name, exc_type.is_some())
    }

    /// `__exit__` for `async with` (used by `locksmith.aio`): an awaitable.
    fn _aexit<'py>(&self, py: Python<'py>, raised: bool) -> PyResult<Bound<'py, PyAny>> {
        self.holding.exit_async(py, "Guard", &self.name, raised)
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        let held = self.holding.is_held(py, "Guard").unwrap_or(false);
        format!(
            "<locksmith.Guard name={:?} token={} held={}>",
            self.name,
            self.token,
            if held { "True" } else { "False" }
        )
    }
}

/// Proof of holding every lock of a `lock_all`, each with its own fencing token.
///
/// ```python
/// with client.lock_all(["account/17", "account/4"], timeout=5) as both:
///     transfer(both.tokens["account/17"], both.tokens["account/4"])
/// ```
#[pyclass(frozen, module = "locksmith")]
pub(crate) struct MultiGuard {
    tokens: BTreeMap<String, u64>,
    holding: Holding<locksmith::MultiGuard>,
}

impl MultiGuard {
    fn joined_names(&self) -> String {
        self.tokens.keys().cloned().collect::<Vec<_>>().join(", ")
    }

    pub(crate) fn new(py: Python<'_>, watched: Watched<locksmith::MultiGuard>) -> PyResult<Self> {
        let tokens = watched.hold().tokens().into_iter().map(|(n, t)| (n.to_string(), t)).collect();
        Ok(Self { tokens, holding: Holding::new(py, watched)? })
    }
}

#[pymethods]
impl MultiGuard {
    /// `{name: fencing token}` of every lock.
    #[getter]
    fn tokens(&self) -> BTreeMap<String, u64> {
        self.tokens.clone()
    }

    /// The lock names, in the order they were taken.
    #[getter]
    fn names(&self) -> Vec<String> {
        self.tokens.keys().cloned().collect()
    }

    /// Set as soon as any of the holds may have been lost (or they were released).
    #[getter]
    fn lost(&self, py: Python<'_>) -> Py<LostEvent> {
        self.holding.lost(py)
    }

    /// True while every hold is certainly ours.
    fn is_held(&self, py: Python<'_>) -> PyResult<bool> {
        self.holding.is_held(py, "MultiGuard")
    }

    /// The least safe time left of the holds, in seconds.
    fn remaining(&self, py: Python<'_>) -> PyResult<f64> {
        self.holding.remaining(py, "MultiGuard")
    }

    /// Calls `callback()` once, from another thread, if any hold may have been lost.
    fn on_lost(&self, py: Python<'_>, callback: Py<PyAny>) -> PyResult<()> {
        self.holding.on_lost(py, "MultiGuard", callback)
    }

    /// Releases every hold; True when each was still ours until now.
    fn unlock(&self, py: Python<'_>) -> PyResult<bool> {
        self.holding.unlock(py, "MultiGuard")
    }

    /// `unlock()` for asyncio; a cancelled awaiting task loses only the answer.
    fn unlock_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.holding.unlock_async(py, "MultiGuard")
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (exc_type=None, _exc=None, _tb=None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<Bound<'_, PyType>>,
        _exc: Option<Bound<'_, PyAny>>,
        _tb: Option<Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        self.holding.exit(py, "MultiGuard", &self.joined_names(), exc_type.is_some())
    }

    /// `__exit__` for `async with` (used by `locksmith.aio`): an awaitable.
    fn _aexit<'py>(&self, py: Python<'py>, raised: bool) -> PyResult<Bound<'py, PyAny>> {
        self.holding.exit_async(py, "MultiGuard", &self.joined_names(), raised)
    }

    fn __repr__(&self) -> String {
        format!("<locksmith.MultiGuard tokens={:?}>", self.tokens)
    }
}
