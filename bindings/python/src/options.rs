//! Python arguments as the crate's options: seconds as `Duration`, keywords as `LockOptions`.

use std::time::Duration;

use locksmith::LockOptions;
use pyo3::prelude::*;

use crate::errors::invalid;

/// `seconds` (an int or a float) as a duration; `what` names the argument in the error.
pub(crate) fn seconds(py: Python<'_>, what: &str, seconds: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(seconds)
        .map_err(|_| invalid(py, format!("{what} must be a finite, non-negative number of seconds, not {seconds}")))
}

/// The keywords every acquisition takes.
#[derive(Default)]
pub(crate) struct Acquire {
    pub(crate) timeout: Option<f64>,
    pub(crate) shared: bool,
    pub(crate) permits: Option<u32>,
    pub(crate) owner: Option<String>,
    pub(crate) lock_delay: Option<f64>,
    pub(crate) value: Option<String>,
    pub(crate) unfenced: bool,
}

impl Acquire {
    pub(crate) fn options(self, py: Python<'_>) -> PyResult<LockOptions> {
        let mut o = LockOptions::new();
        if let Some(t) = self.timeout {
            o = o.timeout(seconds(py, "timeout", t)?);
        }
        match (self.shared, self.permits) {
            (true, Some(_)) => return Err(invalid(py, "a hold is either shared or one of N permits, not both".into())),
            (true, None) => o = o.shared(),
            (false, Some(n)) => o = o.permits(n),
            (false, None) => {}
        }
        if let Some(owner) = self.owner {
            o = o.owner(owner);
        }
        if let Some(d) = self.lock_delay {
            o = o.lock_delay(seconds(py, "lock_delay", d)?);
        }
        if let Some(v) = self.value {
            o = o.value(v);
        }
        if self.unfenced {
            o = o.allow_unfenced();
        }
        Ok(o)
    }
}
