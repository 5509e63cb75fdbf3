//! Authentication and authorization of the native server's clients (`locksmith serve --auth
//! FILE`): a [`Policy`] file maps bearer tokens (gRPC metadata `authorization: Bearer …`) and
//! client certificates (mutual TLS) to principals with per-prefix rights. The file is re-read
//! when its content changes (compared every second, whatever its modification time says) or on
//! [`Auth::reload`] (SIGHUP in `locksmith serve`); a file that does not parse keeps the previous
//! policy and is logged. Every reload is announced on [`Auth::changes`]: open session streams
//! check their credential again, and one that no longer authenticates is ended and its session
//! closed (its holds released); an observe stream whose credential no longer authenticates, or
//! whose principal may no longer observe its lock, is ended.
//!
//! Without the `cluster` feature (no network server, as `memory://` runs the service) only
//! [`Principal`] is here: nothing authenticates in-process callers, and no policy is parsed.

#[cfg(feature = "cluster")]
mod policy;
mod principal;

#[cfg(feature = "cluster")]
use std::path::{Path, PathBuf};
#[cfg(feature = "cluster")]
use std::sync::{Arc, RwLock};

#[cfg(feature = "cluster")]
use tokio::sync::watch;

#[cfg(feature = "cluster")]
pub use policy::{hex, Fingerprint, Policy};
pub use principal::Principal;

#[cfg(feature = "cluster")]
use crate::error::ServerError;

/// The policy in force, shared by every connection. Cheap to clone.
#[cfg(feature = "cluster")]
#[derive(Debug, Clone)]
pub struct Auth {
    path: PathBuf,
    /// The policy in force and the SHA-256 of the file content it was read from.
    current: Arc<RwLock<(Arc<Policy>, [u8; 32])>>,
    /// Bumped on every reload.
    changes: Arc<watch::Sender<u64>>,
}

#[cfg(feature = "cluster")]
impl Auth {
    /// Loads the policy file at `path`.
    ///
    /// # Errors
    /// [`ServerError::Config`] when it cannot be read or parsed (nothing is served then).
    pub fn load(path: impl Into<PathBuf>) -> Result<Self, ServerError> {
        let path = path.into();
        let (policy, digest) = read(&path).map_err(ServerError::Config)?;
        Ok(Self {
            path,
            current: Arc::new(RwLock::new((Arc::new(policy), digest))),
            changes: Arc::new(watch::channel(0).0),
        })
    }

    /// The policy in force.
    pub fn policy(&self) -> Arc<Policy> {
        self.current.read().unwrap_or_else(std::sync::PoisonError::into_inner).0.clone()
    }

    /// Re-reads the file; on an error the previous policy stays (and the error is returned).
    ///
    /// # Errors
    /// Why the file could not be used.
    pub fn reload(&self) -> Result<(), String> {
        let (policy, digest) = read(&self.path)?;
        *self.current.write().unwrap_or_else(std::sync::PoisonError::into_inner) = (Arc::new(policy), digest);
        tracing::info!(path = %self.path.display(), "auth policy reloaded");
        self.changes.send_modify(|n| *n += 1);
        Ok(())
    }

    /// A watch that changes on every reload: open streams check their credential again.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Reloads if the file's content changed since the last load (an edit that keeps the
    /// modification time included).
    pub(crate) fn reload_if_changed(&self) {
        let seen = self.current.read().unwrap_or_else(std::sync::PoisonError::into_inner).1;
        let Ok(bytes) = std::fs::read(&self.path) else { return };
        let now = crate::secret::digest(&bytes);
        if now != seen {
            if let Err(e) = self.reload() {
                tracing::error!(path = %self.path.display(), error = %e, "auth policy not reloaded; the previous one stays");
                // Do not retry the same broken version every second.
                self.current.write().unwrap_or_else(std::sync::PoisonError::into_inner).1 = now;
            }
        }
    }

    /// The principal for a request's bearer token (`authorization: Bearer …`) or, failing
    /// that, its client certificate (DER).
    pub fn authenticate(&self, bearer: Option<&str>, certificate: Option<&[u8]>) -> Option<Principal> {
        let policy = self.policy();
        if let Some(token) = bearer {
            if let Some(p) = policy.by_token(&crate::secret::digest(token.as_bytes())) {
                return Some(p.clone());
            }
        }
        certificate.and_then(|der| policy.by_certificate(&crate::secret::digest(der)).cloned())
    }
}

#[cfg(feature = "cluster")]
fn read(path: &Path) -> Result<(Policy, [u8; 32]), String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let digest = crate::secret::digest(&bytes);
    let text = String::from_utf8(bytes).map_err(|_| format!("{}: not UTF-8", path.display()))?;
    let policy = Policy::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok((policy, digest))
}

/// A new bearer token (32 random bytes, hex) and the SHA-256 (hex) the policy file lists.
/// `None` if the OS has no randomness to give.
#[cfg(feature = "cluster")]
pub fn new_token() -> Option<(String, String)> {
    let (bytes, _) = crate::secret::fresh()?;
    let token = hex(&bytes);
    let digest = hex(&crate::secret::digest(token.as_bytes()));
    Some((token, digest))
}
