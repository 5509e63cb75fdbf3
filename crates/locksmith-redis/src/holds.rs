//! The holds of one session: what keep-alive renews, release frees and close gives back.
//!
//! An entry is added *before* its first acquire script is sent (as pending, token 0) and stays
//! until its release is sent. Renewing pending entries too closes a gap: a grant whose reply
//! arrives after a keep-alive was sent is still covered by that keep-alive (both go over one
//! connection, in order), so the engine's deadline (last keep-alive sent + TTL) never outlives
//! the key.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use locksmith_core::LockName;

/// `(lock, owner)`: the engine gives each hold of a session a distinct pair.
pub(crate) type HoldKey = (LockName, String);

/// One hold, granted or being acquired.
#[derive(Debug)]
pub(crate) struct Entry {
    pub(crate) name: LockName,
    /// The Redis key.
    pub(crate) key: String,
    /// The holder's identity stored in Redis (plain: the value; reentrant: the hash field).
    pub(crate) ident: String,
    /// The fencing token once granted; 0 while pending.
    token: AtomicU64,
    /// Plain mode: the waiter id, once the acquisition may have joined the lock's waiter queue.
    pub(crate) waiter: OnceLock<String>,
    /// Held by whoever acquires or cleans up this entry, so a cleanup still running for an
    /// abandoned attempt finishes before the same `(lock, owner)` is acquired again (in
    /// reentrant mode both would use the same hash field).
    pub(crate) op: Arc<tokio::sync::Mutex<()>>,
}

impl Entry {
    pub(crate) fn new(name: LockName, key: String, ident: String) -> Self {
        let (token, waiter, op) = (AtomicU64::new(0), OnceLock::new(), Arc::new(tokio::sync::Mutex::new(())));
        Self { name, key, ident, token, waiter, op }
    }

    /// The token, 0 while pending.
    pub(crate) fn token(&self) -> u64 {
        self.token.load(Ordering::SeqCst)
    }

    pub(crate) fn grant(&self, token: u64) {
        self.token.store(token, Ordering::SeqCst);
    }
}

/// The entries of one session.
#[derive(Debug, Default)]
pub(crate) struct Holds {
    map: Mutex<HashMap<HoldKey, Arc<Entry>>>,
}

impl Holds {
    fn map(&self) -> MutexGuard<'_, HashMap<HoldKey, Arc<Entry>>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn get(&self, key: &HoldKey) -> Option<Arc<Entry>> {
        self.map().get(key).cloned()
    }

    /// Inserts `entry` unless an entry for `key` exists; returns the one that is there.
    pub(crate) fn insert_new(&self, key: HoldKey, entry: Arc<Entry>) -> Result<(), Arc<Entry>> {
        let mut map = self.map();
        match map.get(&key) {
            Some(existing) => Err(existing.clone()),
            None => {
                map.insert(key, entry);
                Ok(())
            }
        }
    }

    /// Removes `key` if it still maps to `entry`; returns whether it did.
    pub(crate) fn remove_if(&self, key: &HoldKey, entry: &Arc<Entry>) -> bool {
        let mut map = self.map();
        if map.get(key).is_some_and(|e| Arc::ptr_eq(e, entry)) {
            map.remove(key);
            true
        } else {
            false
        }
    }

    /// Every entry, with its token as of now (0 = pending).
    pub(crate) fn snapshot(&self) -> Vec<(HoldKey, Arc<Entry>, u64)> {
        self.map().iter().map(|(k, e)| (k.clone(), e.clone(), e.token())).collect()
    }

    /// Takes every entry out (close).
    pub(crate) fn drain(&self) -> Vec<Arc<Entry>> {
        self.map().drain().map(|(_, e)| e).collect()
    }
}
