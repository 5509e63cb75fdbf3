//! The page's view of a [`Snapshot`]: the status JSON of `locksmith status --json` per lock,
//! with its kind, and the recent changes.

use std::time::{Duration, SystemTime};

use locksmith::{HoldMode, LockStatus};
use serde_json::{json, Value};

use crate::feed::{Event, Snapshot};

/// How many recent changes go to the page with each state.
const EVENTS: usize = 300;
/// How many locks go to the page with each state: the held and waited-for ones first. A
/// server with 10,000 locks would otherwise send megabytes to every page twice a second.
pub(super) const SHOWN: usize = 500;

/// The state the page draws.
pub(super) fn snapshot(s: &Snapshot, backend: &str, prefix: &str, interval: Duration, native: bool) -> Value {
    let skip = s.events.len().saturating_sub(EVENTS);
    let mut shown: Vec<&LockStatus> = s.locks.iter().collect();
    // Stable: by name within the busy ones and within the rest.
    shown.sort_by_key(|l| l.holders.is_empty() && l.waiters_or_zero() == 0);
    shown.truncate(SHOWN);
    shown.sort_by(|a, b| a.name.cmp(&b.name));
    json!({
        "backend": backend,
        "prefix": prefix,
        "native": native,
        "source": s.source.as_str(),
        "source_text": s.source.describe(interval),
        "at_ms": unix_ms(s.at),
        "error": s.error,
        "total": s.locks.len(),
        "locks": shown.into_iter().map(lock).collect::<Vec<_>>(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::feed::Source;
    use locksmith::HolderStatus;
    use std::sync::Arc;

    /// On a server with many locks the page gets the busy ones, and how many there are.
    #[test]
    fn the_page_gets_at_most_shown_locks_the_held_ones_first() {
        let mut locks: Vec<LockStatus> =
            (0..SHOWN + 100).map(|i| LockStatus::new(format!("a{i:05}"), None, 0, 1)).collect();
        let h = HolderStatus::new("s".into(), "o".into(), 2, Duration::from_secs(5));
        locks.push(LockStatus::new("z-held".into(), Some(h), 0, 2));
        let s = Snapshot {
            locks,
            at: SystemTime::now(),
            taken: tokio::time::Instant::now(),
            source: Source::Observe,
            error: None,
            events: Arc::new(Vec::new()),
        };
        let v = snapshot(&s, "memory://", "", Duration::from_millis(500), false);
        let names: Vec<&str> = v["locks"].as_array().into_iter().flatten().filter_map(|l| l["name"].as_str()).collect();
        assert_eq!(names.len(), SHOWN);
        assert_eq!(names.last(), Some(&"z-held"));
        assert_eq!(v["total"], SHOWN + 101);
        assert_eq!(v["source"], "observe");
    }
}
