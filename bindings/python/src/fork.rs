//! What a forked child may not use: objects made in another process.
//!
//! A client's session, connections and renewal task belong to the process that opened them. A
//! forked child (multiprocessing, gunicorn's pre-fork workers) that used them would present
//! its parent's session to the backend — both processes would be one owner, and either could
//! release the other's hold. So an inherited object refuses every use with `ForkError`, and is
//! leaked rather than dropped in the child: dropping would release the parent's holds through
//! the parent's connections. A child makes its own client with `locksmith.connect`.

use pyo3::prelude::*;

use crate::errors::raise;

/// A value usable only in the process that made it.
pub(crate) struct ProcessBound<T> {
    pid: u32,
    value: Option<T>,
}

impl<T> ProcessBound<T> {
    pub(crate) fn new(value: T) -> Self {
        Self { pid: std::process::id(), value: Some(value) }
    }

    /// The value, or `ForkError` in a forked child; `what` names the object for the message.
    pub(crate) fn get(&self, py: Python<'_>, what: &str) -> PyResult<&T> {
        let here = std::process::id();
        match &self.value {
            Some(v) if self.pid == here => Ok(v),
            _ => Err(raise(
                py,
                "ForkError",
                format!(
                    "this {what} was made in process {} and cannot be used in process {here} (a fork() \
                     child): its session belongs to the parent; call locksmith.connect() in the child",
                    self.pid
                ),
            )),
        }
    }

    /// The value if this is the process that made it.
    pub(crate) fn local(&self) -> Option<&T> {
        self.value.as_ref().filter(|_| self.is_local())
    }

    fn is_local(&self) -> bool {
        self.pid == std::process::id()
    }
}

impl<T> Drop for ProcessBound<T> {
    fn drop(&mut self) {
        let Some(value) = self.value.take() else { return };
        if !self.is_local() {
            // The parent's session: never release, close or touch it from here.
            std::mem::forget(value);
            return;
        }
        // Dropping a guard releases it on the runtime (in the background).
        match crate::runtime::runtime() {
            Ok(rt) => {
                let _enter = rt.enter();
                drop(value);
            }
            Err(_) => drop(value),
        }
    }
}
