//! The native part of the Python package `locksmith` (imported as `locksmith._native`): a thin
//! PyO3 layer over the `locksmith` crate — the same engine, backends and contract as the Rust
//! client and the CLI, never a second implementation. The Python side (`python/locksmith`)
//! adds the exception classes, the asyncio wrappers (`locksmith.aio`) and the type stubs.
//!
//! - `runtime`: the process's tokio runtime; blocking waits (GIL released, Ctrl-C checked) and
//!   asyncio futures (cancelling one drops the Rust future);
//! - `fork`: objects refuse to work in a forked child (`ForkError`);
//! - `client`, `guard`, `hold`, `status`: the API; `options`, `errors`: arguments and exceptions.

mod client;
mod errors;
mod fork;
mod guard;
mod hold;
mod options;
mod runtime;
mod status;

use pyo3::prelude::*;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(client::connect, m)?)?;
    m.add_function(wrap_pyfunction!(runtime::_deliver, m)?)?;
    m.add_class::<client::Client>()?;
    m.add_class::<guard::Guard>()?;
    m.add_class::<guard::MultiGuard>()?;
    m.add_class::<hold::LostEvent>()?;
    m.add_class::<status::LockStatus>()?;
    m.add_class::<status::HolderStatus>()?;
    m.add_class::<status::Leader>()?;
    m.add_class::<status::Observer>()?;
    m.add("DEFAULT_TTL", locksmith::DEFAULT_TTL.as_secs_f64())?;
    Ok(())
}
