//! The page's view of a [`Snapshot`]: the status JSON of `locksmith status --json` per lock,
//! with its kind, and the recent changes.

use std::time::{Duration, SystemTime};

use locksmith::{HoldMode, LockStatus};
use serde_json::{json, Value};

use crate::feed::{Event, Snapshot};

/// How many recent changes go to the page with each state.
const EVENTS: usize = 500;

/// The state the page draws.
pub(super) fn snapshot(s: &Snapshot, backend: &str, prefix: &str, interval: Duration, native: bool) -> Value {
    let skip = s.events.len().saturating_sub(EVENTS);
    json!({
        "backend": backend,
        "prefix": prefix,
        "native": native,
        "source": s.source.as_str(),
        "source_text": s.source.describe(interval),
        "at_ms": unix_ms(s.at),
        "error": s.error,
        "locks": s.locks.iter().map(lock).collect::<Vec<_>>(),
        "events": s.events.iter().skip(skip).map(event).collect::<Vec<_>>(),
    })
}

fn lock(l: &LockStatus) -> Value {
    let mut v = crate::status::json_row(l);
    if let Value::Object(m) = &mut v {
        m.insert("kind".into(), kind(l).into());
    }
    v
}

/// What kind of lock the holders show; a free lock's kind cannot be told.
fn kind(l: &LockStatus) -> String {
    match l.holders.first() {
        None => "free".into(),
        Some(h) if h.value.is_some() => "election".into(),
        Some(h) => match h.mode {
            HoldMode::Shared => "read/write".into(),
            HoldMode::Permit(n) => format!("semaphore {}/{n}", l.holders.len()),
            _ => "mutex".into(),
        },
    }
}

fn event(e: &Event) -> Value {
    json!({
        "at_ms": unix_ms(e.at),
        "lock": e.lock,
        "kind": e.kind,
        "owner": e.owner,
        "token": e.token,
        "from": e.from,
        "waiters": e.waiters,
    })
}

fn unix_ms(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}
