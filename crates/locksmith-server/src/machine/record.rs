//! [`Record`]: the machine's state changes that a log keeps. The live path emits them and
//! applies them ([`Machine::apply`](super::Machine::apply)); a restart replays them through the
//! same `apply`.

use std::time::Duration;

use super::{Durability, HoldMode, SecretDigest, SessionId};

/// A state change of the machine, in the order it happened: what the write-ahead log stores
/// (in [`Durability::Grants`]; [`Durability::Leases`] keeps only [`Record::Boot`],
/// [`Record::Reserve`], [`Record::Horizon`] and [`Record::Floor`], see [`Record::is_kept_in`]).
///
/// `Grant` must be durable before the grantee hears of it; the rest may be written lazily
/// (losing them on a crash only delays a release until the restored session expires, it never
/// creates a second holder).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Record {
    /// A new boot; session ids carry this epoch.
    Boot {
        /// The epoch.
        epoch: u64,
    },
    /// A session was opened.
    Session {
        /// Its id.
        id: SessionId,
        /// Its TTL.
        ttl: Duration,
        /// SHA-256 of its resume secret (`None`: logged before resume secrets existed; such a
        /// session cannot be resumed).
        secret: Option<SecretDigest>,
    },
    /// A lock was granted.
    Grant {
        /// Lock name.
        name: String,
        /// Holder session.
        session: SessionId,
        /// Holder owner id.
        owner: String,
        /// Fencing token.
        token: u64,
        /// Lock-delay to apply if the session expires while holding.
        lock_delay: Duration,
        /// The kind of hold.
        mode: HoldMode,
        /// The value held with it (an election's proposal).
        value: Option<String>,
    },
    /// The hold with this token was released (`delay` > 0 when freed by expiry with lock-delay).
    Release {
        /// Lock name.
        name: String,
        /// The hold's token.
        token: u64,
        /// Lock-delay that started.
        delay: Duration,
    },
    /// A session ended (closed or expired).
    SessionEnd {
        /// Its id.
        id: SessionId,
    },
    /// [`Durability::Leases`]: tokens up to `upto` may have been issued on `name`; after a
    /// restart its counter continues above.
    Reserve {
        /// Lock name.
        name: String,
        /// Highest token that may have been issued.
        upto: u64,
    },
    /// [`Durability::Leases`]: the longest session TTL and lock-delay granted so far, i.e. how
    /// long after a restart a lease of the previous run may still be trusted by its client.
    Horizon {
        /// Longest session TTL.
        ttl: Duration,
        /// Longest lock-delay.
        lock_delay: Duration,
    },
    /// The server-wide token floor: no lock issues a token above `upto` before a higher floor
    /// is durable. The data directory keeps it in a file of its own besides the log, so a
    /// restart whose log lost records (truncated, emptied, replaced by an old copy) still
    /// starts every lock above every token ever issued.
    Floor {
        /// Highest token any lock may have issued.
        upto: u64,
    },
    /// Snapshot only: the fencing counter of a lock that has no holder, and the lock-delay
    /// still to run on it.
    Counter {
        /// Lock name.
        name: String,
        /// Last token issued.
        token: u64,
        /// Lock-delay left.
        delay: Duration,
    },
}

impl Record {
    /// Whether the record must be on disk before the effects that follow it are delivered.
    pub fn needs_sync(&self) -> bool {
        matches!(
            self,
            Record::Grant { .. }
                | Record::Boot { .. }
                | Record::Reserve { .. }
                | Record::Horizon { .. }
                | Record::Floor { .. }
        )
    }

    /// Whether a log kept in `durability` stores this record. `Leases` keeps no sessions,
    /// holders or releases (a restart in that mode never restores them), only what keeps
    /// tokens from repeating and tells how long old leases may still be trusted.
    pub fn is_kept_in(&self, durability: Durability) -> bool {
        match durability {
            Durability::Grants => true,
            Durability::Leases => {
                matches!(
                    self,
                    Record::Boot { .. } | Record::Reserve { .. } | Record::Horizon { .. } | Record::Floor { .. }
                )
            }
        }
    }
}
