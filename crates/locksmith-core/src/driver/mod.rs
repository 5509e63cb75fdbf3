//! The toolkit a driver is built from: what every backend needs besides its own queries and
//! scripts, written once.
//!
//! - [`cancel`]: [`CancelGuard`], the cleanup of an abandoned acquisition (a dropped `lock()`
//!   leaves no waiter and no hold), [`spawn_detached`] for every other spawn-on-drop, and
//!   [`run_to_end`] for work that must finish although its caller may be dropped.
//! - [`holds`]: [`HoldTable`], a session's holds and the lost-holds helper every keep-alive
//!   ends with.
//! - [`hold_value`]: the unique value that identifies a hold on a backend without tokens
//!   (Redlock, memcached), and the session id beside it.
//! - [`url`]: [`BackendUrl`] and the scheme table [`SCHEMES`]; [`redact`] for text that may
//!   hold a password.
//! - [`tls`]: [`TlsFiles`], the `?ca=&cert=&key=` options every non-SQL driver reads.
//! - [`ids`]: [`IdMap`], a map keyed by ids its owner made (session and request ids), hashed
//!   without SipHash's cost.
//! - [`identity`]: session ids, lock values and owner ids from the OS (safe across `fork()`).
//! - [`timing`]: the waiters' [`Backoff`], the clock-drift margin [`drift`], [`millis`].
//! - [`wait`]: [`WaitLoop`], the wait loop of an acquisition: a driver says how to try once
//!   and what wakes it ([`Attempt`]).
//!
//! A new driver is its protocol (scripts, queries, node layouts) plus these parts; the engine
//! ([`Client`](crate::Client), [`Guard`](crate::Guard), the session keeper) does the rest.

pub mod cancel;
pub mod hold_value;
pub mod holds;
pub mod identity;
pub mod ids;
pub mod timing;
pub mod tls;
#[cfg(feature = "rustls")]
pub mod tls_failure;
#[cfg(feature = "rustls")]
pub mod tls_probe;
pub mod url;
pub mod wait;

pub use cancel::{run_to_end, spawn_detached, CancelGuard, CleanupFuture, OnDrop};
pub use hold_value::{new_hold_value, new_session_id, parse_hold_value};
pub use holds::{HoldId, HoldKey, HoldRef, HoldTable};
pub use ids::{IdHasher, IdMap};
pub use timing::{drift, jittered, millis, Backoff, Jitter};
pub use tls::TlsFiles;
#[cfg(feature = "rustls")]
pub use tls_failure::{connection_dropped, tls_failure, TlsFailure};
#[cfg(feature = "rustls")]
pub use tls_probe::tls_probe;
pub use url::{known_schemes, redact, scheme_info, BackendUrl, HostPort, Scheme, SCHEMES};
pub use wait::{Attempt, Busy, Try, WaitLoop, MAX_WAIT_FAILURES};

/// The refusal of a kind of hold a driver does not offer, said one way by every driver:
/// `<describe> offers no <mode> holds`. The engine asks [`Backend::supports`](crate::Backend)
/// before a driver sees a request, so drivers use this as the backstop for callers of
/// [`Session::acquire`](crate::Session) that bypass the engine.
///
/// ```
/// use locksmith_core::{driver::unsupported, Error, HoldMode};
/// let e = unsupported("etcd://127.0.0.1:2379", HoldMode::Shared);
/// assert!(matches!(&e, Error::Unsupported(m) if m == "etcd://127.0.0.1:2379 offers no shared holds"));
/// ```
pub fn unsupported(describe: &str, mode: crate::HoldMode) -> crate::Error {
    crate::Error::Unsupported(format!("{describe} offers no {mode} holds"))
}
