//! (being written)
#![warn(missing_docs, missing_debug_implementations, unreachable_pub, rust_2018_idioms)]

use locksmith_core::{Error, Result};

/// The backend (being written).
#[derive(Debug)]
pub struct RedisBackend {}

impl RedisBackend {
    /// Parses the URL; connects lazily.
    ///
    /// # Errors
    /// Not written yet.
    pub fn from_url(url: &str) -> Result<Self> {
        Err(Error::InvalidUrl { url: url.to_string(), reason: "driver not written yet".into() })
    }
}

#[async_trait::async_trait]
impl locksmith_core::Backend for RedisBackend {
    fn describe(&self) -> String {
        "redis (being written)".into()
    }
    async fn open_session(&self, _ttl: std::time::Duration) -> Result<Box<dyn locksmith_core::Session>> {
        Err(Error::Backend("driver not written yet".into()))
    }
    async fn status(&self, _name: Option<&locksmith_core::LockName>) -> Result<Vec<locksmith_core::LockStatus>> {
        Err(Error::Backend("driver not written yet".into()))
    }
}
