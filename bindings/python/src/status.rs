//! What backends report: lock status, holders, election leaders, and the leader observer.

use std::sync::Arc;

use pyo3::prelude::*;

use crate::fork::ProcessBound;
use crate::runtime::{awaitable, block_on};

/// One holder of a lock.
#[pyclass(frozen, get_all, module = "locksmith")]
pub(crate) struct HolderStatus {
    /// The holder's session id.
    session: String,
    /// The holder's owner id.
    owner: String,
    /// The holder's fencing token.
    token: u64,
    /// Seconds until the holder's session expires unless renewed; None where the backend
    /// cannot tell (ZooKeeper).
    ttl_left: Option<f64>,
    /// "exclusive", "shared" or "permit".
    mode: &'static str,
    /// The value held with it (an election's proposal), if any.
    value: Option<String>,
}

#[pymethods]
impl HolderStatus {
    fn __repr__(&self) -> String {
        format!("<locksmith.HolderStatus owner={:?} token={} mode={}>", self.owner, self.token, self.mode)
    }
}

fn holder(h: &locksmith::HolderStatus) -> HolderStatus {
    HolderStatus {
        session: h.session.clone(),
        owner: h.owner.clone(),
        token: h.token,
        ttl_left: h.ttl_left.map(|d| d.as_secs_f64()),
        mode: match h.mode {
            locksmith::HoldMode::Shared => "shared",
            locksmith::HoldMode::Permit(_) => "permit",
            _ => "exclusive",
        },
        value: h.value.clone(),
    }
}

/// The state of one lock as the backend reports it.
#[pyclass(frozen, module = "locksmith")]
pub(crate) struct LockStatus {
    name: String,
    holders: Vec<Py<HolderStatus>>,
    permits: Option<u32>,
    waiters: Option<u64>,
    last_token: u64,
    lock_delay_left: Option<f64>,
}

#[pymethods]
impl LockStatus {
    /// The lock's name.
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }
    /// The holder (the first of several readers or permit holders), or None when free.
    #[getter]
    fn holder(&self, py: Python<'_>) -> Option<Py<HolderStatus>> {
        self.holders.first().map(|h| h.clone_ref(py))
    }
    /// Every holder.
    #[getter]
    fn holders(&self, py: Python<'_>) -> Vec<Py<HolderStatus>> {
        self.holders.iter().map(|h| h.clone_ref(py)).collect()
    }
    /// A semaphore's number of permits while it is in use.
    #[getter]
    fn permits(&self) -> Option<u32> {
        self.permits
    }
    /// Queued waiters; None where the backend cannot see them (SQLite: its waiters poll).
    #[getter]
    fn waiters(&self) -> Option<u64> {
        self.waiters
    }
    /// The last fencing token issued for the lock (0 if none).
    #[getter]
    fn last_token(&self) -> u64 {
        self.last_token
    }
    /// Seconds left of a running lock-delay.
    #[getter]
    fn lock_delay_left(&self) -> Option<f64> {
        self.lock_delay_left
    }
    fn __repr__(&self) -> String {
        format!(
            "<locksmith.LockStatus name={:?} holders={} waiters={} last_token={}>",
            self.name,
            self.holders.len(),
            self.waiters.map_or("None".to_string(), |w| w.to_string()),
            self.last_token
        )
    }
}

pub(crate) fn lock_status(py: Python<'_>, s: &locksmith::LockStatus) -> PyResult<LockStatus> {
    Ok(LockStatus {
        name: s.name.clone(),
        holders: s.holders.iter().map(|h| Py::new(py, holder(h))).collect::<PyResult<_>>()?,
        permits: s.permits,
        waiters: s.waiters,
        last_token: s.last_token,
        lock_delay_left: s.lock_delay_left.map(|d| d.as_secs_f64()),
    })
}

/// A lock nobody holds or waits for, for backends that report nothing about such a lock.
pub(crate) fn free(name: &str) -> LockStatus {
    LockStatus {
        name: name.to_string(),
        holders: Vec::new(),
        permits: None,
        waiters: Some(0),
        last_token: 0,
        lock_delay_left: None,
    }
}

/// Who leads an election.
#[pyclass(frozen, get_all, module = "locksmith")]
pub(crate) struct Leader {
    /// The leader's proposal.
    value: Option<String>,
    /// The term: the leader's fencing token, greater than every earlier leader's.
    term: u64,
    /// The leader's session id.
    session: String,
    /// The leader's owner id.
    owner: String,
}

#[pymethods]
impl Leader {
    fn __repr__(&self) -> String {
        format!("<locksmith.Leader value={:?} term={}>", self.value, self.term)
    }
}

pub(crate) fn leader(l: locksmith::Leader) -> Leader {
    Leader { value: l.value, term: l.term, session: l.session, owner: l.owner }
}

/// The leader of a held lock status, as `observe` reports it.
pub(crate) fn leader_of(s: &locksmith::LockStatus) -> Option<Leader> {
    s.holder.as_ref().map(|h| Leader {
        value: h.value.clone(),
        term: h.token,
        session: h.session.clone(),
        owner: h.owner.clone(),
    })
}

type Shared = Arc<tokio::sync::Mutex<locksmith::Observer>>;

/// The changes of leader of one election: iterate (`for leader in observer`), or call
/// `next(timeout)`. Each item is the `Leader`, or None while nobody leads.
#[pyclass(frozen, module = "locksmith")]
pub(crate) struct Observer {
    inner: ProcessBound<Shared>,
}

impl Observer {
    pub(crate) fn new(o: locksmith::Observer) -> Self {
        Self { inner: ProcessBound::new(Arc::new(tokio::sync::Mutex::new(o))) }
    }
}

/// `Some(leader or None)`, or `None` when the observation ended.
async fn next(inner: Shared, limit: Option<std::time::Duration>) -> locksmith::Result<Option<Option<Leader>>> {
    let step = async move {
        match inner.lock().await.next().await {
            None => Ok(None),
            Some(Err(e)) => Err(e),
            Some(Ok(l)) => Ok(Some(l.map(leader))),
        }
    };
    match limit {
        Some(l) => tokio::time::timeout(l, step).await.unwrap_or(Err(locksmith::Error::Timeout)),
        None => step.await,
    }
}

#[pymethods]
impl Observer {
    /// The leader now (first call) or after the next change; None while nobody leads. Raises
    /// `LockTimeout` after `timeout` seconds without a change, `StopIteration` when the
    /// observation ended (observe again).
    #[pyo3(signature = (timeout=None))]
    fn next(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<Leader>> {
        let inner = self.inner.get(py, "Observer")?.clone();
        let limit = timeout.map(|t| crate::options::seconds(py, "timeout", t)).transpose()?;
        match block_on(py, next(inner, limit))? {
            Some(l) => Ok(l),
            None => Err(pyo3::exceptions::PyStopIteration::new_err(())),
        }
    }

    /// `next()` for asyncio: an awaitable of `(ended, leader)` (`locksmith.aio` turns an end
    /// into `StopAsyncIteration`).
    fn next_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let inner = self.inner.get(py, "Observer")?.clone();
        awaitable(py, async move {
            Ok(match next(inner, None).await? {
                Some(l) => (false, l),
                None => (true, None),
            })
        })
    }

    fn __iter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Leader>> {
        self.next(py, None)
    }
}
