//! [`Record`] ⇄ `locksmith.wal.v1.Record`. Durations are whole milliseconds on disk.

use std::time::Duration;

use locksmith_proto::wal::{self, record::Body};

use super::impl_server_message::ms;
use crate::machine::Record;

/// The log message for `r`.
pub(crate) fn to_wal(r: &Record) -> wal::Record {
    let body = match r {
        Record::Boot { epoch } => Body::BootEpoch(*epoch),
        Record::Session { id, ttl, secret } => Body::Session(wal::Session {
            id: *id,
            ttl_ms: ms(*ttl),
            secret_digest: secret.map(|d| d.to_vec()).unwrap_or_default(),
        }),
        Record::Grant { name, session, owner, token, lock_delay, mode, value } => {
            let (shared, permits) = mode.to_wire();
            Body::Grant(wal::Grant {
                name: name.clone(),
                session: *session,
                owner: owner.clone(),
                token: *token,
                lock_delay_ms: ms(*lock_delay),
                shared,
                permits,
                value: value.clone().unwrap_or_default(),
            })
        }
        Record::Release { name, token, delay } => {
            Body::Release(wal::Release { name: name.clone(), token: *token, delay_ms: ms(*delay) })
        }
        Record::SessionEnd { id } => Body::SessionEnd(*id),
        Record::Counter { name, token, delay } => {
            Body::Counter(wal::Counter { name: name.clone(), token: *token, delay_ms: ms(*delay) })
        }
        Record::Reserve { name, upto } => Body::Reserve(wal::Reserve { name: name.clone(), upto: *upto }),
        Record::Floor { upto } => Body::Floor(*upto),
        Record::Horizon { ttl, lock_delay } => {
            Body::Horizon(wal::Horizon { ttl_ms: ms(*ttl), lock_delay_ms: ms(*lock_delay) })
        }
    };
    wal::Record { body: Some(body) }
}

/// The record a log message holds; `None` for a message without a body.
pub(crate) fn from_wal(r: wal::Record) -> Option<Record> {
    let d = Duration::from_millis;
    Some(match r.body? {
        Body::BootEpoch(epoch) => Record::Boot { epoch },
        // A digest of another length (none, in logs from before resume secrets) leaves the
        // session unresumable rather than resumable by anyone.
        Body::Session(s) => Record::Session { id: s.id, ttl: d(s.ttl_ms), secret: s.secret_digest.try_into().ok() },
        Body::Grant(g) => Record::Grant {
            name: g.name,
            session: g.session,
            owner: g.owner,
            token: g.token,
            lock_delay: d(g.lock_delay_ms),
            // A log this server wrote has no record with both; a shared grant wins, as it
            // excludes the fewest other holds on replay.
            mode: super::mode_from_wire(g.shared, g.permits).unwrap_or(crate::machine::HoldMode::Shared),
            value: (!g.value.is_empty()).then_some(g.value),
        },
        Body::Release(x) => Record::Release { name: x.name, token: x.token, delay: d(x.delay_ms) },
        Body::SessionEnd(id) => Record::SessionEnd { id },
        Body::Counter(c) => Record::Counter { name: c.name, token: c.token, delay: d(c.delay_ms) },
        Body::Reserve(r) => Record::Reserve { name: r.name, upto: r.upto },
        Body::Floor(upto) => Record::Floor { upto },
        Body::Horizon(h) => Record::Horizon { ttl: d(h.ttl_ms), lock_delay: d(h.lock_delay_ms) },
    })
}
