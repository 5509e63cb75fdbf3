//! [`Record`] ⇄ `locksmith.wal.v1.Record`. Durations are whole milliseconds on disk.

use std::time::Duration;

use locksmith_proto::wal::{self, record::Body};

use super::impl_server_message::ms;
use crate::machine::Record;

/// Encodes a grant or a release, the records of every acquisition, straight from `r` into `buf`
/// without building its log message (which would copy its strings): the bytes
/// `to_wal(r).encode_raw(buf)` writes, field by field in tag order, zero values left out as
/// proto3 does. Other records return `false` and write nothing.
pub(crate) fn encode_hot(r: &Record, buf: &mut Vec<u8>) -> bool {
    use prost::encoding::{bool as pbool, encode_key, encode_varint, string, uint32, uint64, WireType};
    match r {
        Record::Grant { name, session, owner, token, lock_delay, mode, value } => {
            let (shared, permits) = mode.to_wire();
            let delay = ms(*lock_delay);
            let value = value.as_ref().filter(|v| !v.is_empty());
            let len = nonempty(name, |n| string::encoded_len(1, n))
                + nonzero(*session, |v| uint64::encoded_len(2, v))
                + nonempty(owner, |o| string::encoded_len(3, o))
                + nonzero(*token, |v| uint64::encoded_len(4, v))
                + nonzero(delay, |v| uint64::encoded_len(5, v))
                + if shared { pbool::encoded_len(6, &shared) } else { 0 }
                + if permits != 0 { uint32::encoded_len(7, &permits) } else { 0 }
                + value.map_or(0, |v| string::encoded_len(8, v));
            encode_key(3, WireType::LengthDelimited, buf);
            encode_varint(len as u64, buf);
            if !name.is_empty() {
                string::encode(1, name, buf);
            }
            if *session != 0 {
                uint64::encode(2, session, buf);
            }
            if !owner.is_empty() {
                string::encode(3, owner, buf);
            }
            if *token != 0 {
                uint64::encode(4, token, buf);
            }
            if delay != 0 {
                uint64::encode(5, &delay, buf);
            }
            if shared {
                pbool::encode(6, &shared, buf);
            }
            if permits != 0 {
                uint32::encode(7, &permits, buf);
            }
            if let Some(v) = value {
                string::encode(8, v, buf);
            }
            true
        }
        Record::Release { name, token, delay } => {
            let delay = ms(*delay);
            let len = nonempty(name, |n| string::encoded_len(1, n))
                + nonzero(*token, |v| uint64::encoded_len(2, v))
                + nonzero(delay, |v| uint64::encoded_len(3, v));
            encode_key(4, WireType::LengthDelimited, buf);
            encode_varint(len as u64, buf);
            if !name.is_empty() {
                string::encode(1, name, buf);
            }
            if *token != 0 {
                uint64::encode(2, token, buf);
            }
            if delay != 0 {
                uint64::encode(3, &delay, buf);
            }
            true
        }
        _ => false,
    }
}

fn nonempty(s: &String, len: impl Fn(&String) -> usize) -> usize {
    if s.is_empty() {
        0
    } else {
        len(s)
    }
}

fn nonzero(v: u64, len: impl Fn(&u64) -> usize) -> usize {
    if v == 0 {
        0
    } else {
        len(&v)
    }
}

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
