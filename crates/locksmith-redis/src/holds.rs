//! The holds of one session: what keep-alive renews, release frees and close gives back.
//!
//! An entry is added *before* its first acquire script is sent (as pending, token 0) and stays
//! until its release is sent. Renewing pending entries too closes a gap: a grant whose reply
//! arrives after a keep-alive was sent is still covered by that keep-alive (both go over one
//! connection, in order), so the engine's deadline (last keep-alive sent + TTL) never outlives
//! the key.

use std::sync::{Arc, OnceLock};

use locksmith_core::driver::HoldTable;
use locksmith_core::LockName;

use crate::layout::{Kind, Layout};

/// The session's table: `(lock, owner)` → entry, with each entry's grant state and token.
pub(crate) type Holds = HoldTable<Arc<Entry>>;

/// One hold, granted or being acquired.
#[derive(Debug)]
pub(crate) struct Entry {
    pub(crate) name: LockName,
    /// What the hold is in Redis (which layout and scripts).
    pub(crate) kind: Kind,
    /// The Redis key.
    pub(crate) key: String,
    /// The holder's identity stored in Redis (plain: the value; reentrant and read/write locks:
    /// the hash field; permits: the id, in hex).
    pub(crate) ident: String,
    /// `ident` as the scripts store it (a permit id's raw bytes).
    pub(crate) member: Vec<u8>,
    /// Read/write locks and semaphores: `<session>:<owner>`, recorded with the token for
    /// `status`.
    pub(crate) record: String,
    /// Queued kinds (all but reentrant): the waiter id, once the acquisition may have joined the
    /// lock's waiter queue.
    pub(crate) waiter: OnceLock<String>,
    /// Held by whoever acquires or cleans up this entry, so a cleanup still running for an
    /// abandoned attempt finishes before the same `(lock, owner)` is acquired again (in
    /// reentrant mode both would use the same hash field).
    pub(crate) op: Arc<tokio::sync::Mutex<()>>,
}

impl Entry {
    pub(crate) fn new(name: LockName, kind: Kind, key: String, ident: String, record: String) -> Self {
        let member = Layout::member(kind, &ident);
        Self {
            name,
            kind,
            key,
            ident,
            member,
            record,
            waiter: OnceLock::new(),
            op: Arc::new(tokio::sync::Mutex::new(())),
        }
    }
}
