//! The seam this crate's own tests plug a transport double into (feature `test-transport`,
//! enabled only by the crate's dev-dependency on itself): the [`Connector`] a session opens
//! its streams with, and a session over any connector. Not a stable API.

use std::sync::Arc;
use std::time::Duration;

use locksmith_core::{Result, Session};

pub use crate::mux::{Connector, Transport};

/// Opens a session of `ttl` whose streams `connector` opens: the session the `locksmith://`
/// and `memory://` backends hand out, over a transport of the caller's choosing.
///
/// # Errors
/// As the backends' `open_session`: the connector's error, or the server's answer to `open`.
///
/// # Cancel safety
/// Cancel safe: a session opened by a dropped call expires on the server after `ttl`.
pub async fn open_session(connector: Arc<dyn Connector>, ttl: Duration) -> Result<Box<dyn Session>> {
    Ok(Box::new(crate::mux::StreamSession::open(connector, ttl).await?))
}
