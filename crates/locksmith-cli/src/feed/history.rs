//! The changes a feed saw, for the dashboard's timeline: told apart by comparing each lock's
//! holders before and after a read, so only what the backend showed is reported.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use locksmith::{HolderStatus, LockStatus};

/// How many changes are kept.
pub(crate) const KEEP: usize = 2000;
/// How old a change may be and still be kept.
const AGE: Duration = Duration::from_secs(10 * 60);

/// One change of a lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Event {
    /// When the feed saw it.
    pub at: SystemTime,
    /// The lock.
    pub lock: String,
    /// `grant`, `handoff` (a grant to a waiter as the holder left), `release` (gone before its
    /// time ran out), `expiry` (gone after its time left had run out), or `waiters`.
    pub kind: &'static str,
    /// The holder granted, or the one that left.
    pub owner: Option<String>,
    /// Its fencing token.
    pub token: Option<u64>,
    /// The holder a hand-off came from.
    pub from: Option<String>,
    /// The number of waiters after the change (`waiters` events).
    pub waiters: Option<u64>,
}

/// The last changes, and when each lock was last read.
#[derive(Debug, Default)]
pub(crate) struct History {
    events: VecDeque<Event>,
    /// When each lock's holders were last read, to tell an expiry from a release.
    seen: std::collections::HashMap<String, SystemTime>,
}

impl History {
    /// Records what changed between `before` and `after` (`None`: not listed) of lock `name`.
    pub(crate) fn changed(
        &mut self,
        name: &str,
        before: Option<&LockStatus>,
        after: Option<&LockStatus>,
        now: SystemTime,
    ) {
        let since = self.seen.get(name).and_then(|t| now.duration_since(*t).ok()).unwrap_or_default();
        match after {
            Some(_) => self.seen.insert(name.to_string(), now),
            None => self.seen.remove(name),
        };
        let none = Vec::new();
        let old = before.map_or(&none, |b| &b.holders);
        let new = after.map_or(&none, |a| &a.holders);
        let same =
            |a: &HolderStatus, b: &HolderStatus| a.session == b.session && a.owner == b.owner && a.token == b.token;
        let left: Vec<&HolderStatus> = old.iter().filter(|o| !new.iter().any(|n| same(o, n))).collect();
        let came: Vec<&HolderStatus> = new.iter().filter(|n| !old.iter().any(|o| same(o, n))).collect();
        let event = |kind, holder: Option<&HolderStatus>| Event {
            at: now,
            lock: name.to_string(),
            kind,
            owner: holder.map(|h| h.owner.clone()),
            token: holder.map(|h| h.token),
            from: None,
            waiters: None,
        };
        // A hold that followed another at once was handed to a waiter.
        let handoff = before.is_some_and(|b| b.waiters_or_zero() > 0) && !left.is_empty() && !came.is_empty();
        for h in &left {
            if handoff && old.len() == 1 {
                continue;
            }
            // Gone after its time left had run out: the lease expired (nothing renewed it).
            let expired = h.ttl_left.is_some_and(|t| t <= since);
            self.push(event(if expired { "expiry" } else { "release" }, Some(h)));
        }
        for h in &came {
            let mut e = event(if handoff { "handoff" } else { "grant" }, Some(h));
            if handoff {
                e.from = left.first().map(|l| l.owner.clone());
            }
            self.push(e);
        }
        let waiters = |l: Option<&LockStatus>| l.and_then(|l| l.waiters).unwrap_or(0);
        if waiters(before) != waiters(after) {
            let mut e = event("waiters", None);
            e.waiters = Some(waiters(after));
            self.push(e);
        }
        while self.events.front().is_some_and(|e| now.duration_since(e.at).unwrap_or_default() > AGE) {
            self.events.pop_front();
        }
    }

    fn push(&mut self, e: Event) {
        if self.events.len() == KEEP {
            self.events.pop_front();
        }
        self.events.push_back(e);
    }

    /// The kept changes, oldest first.
    pub(crate) fn events(&self) -> Arc<Vec<Event>> {
        Arc::new(self.events.iter().cloned().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(owner: &str, token: u64, waiters: u64, ttl_ms: u64) -> LockStatus {
        let h = HolderStatus::new(format!("s-{owner}"), owner.into(), token, Duration::from_millis(ttl_ms));
        LockStatus::new("job".into(), Some(h), waiters, token)
    }

    fn kinds(h: &History) -> Vec<(&'static str, Option<String>)> {
        h.events().iter().map(|e| (e.kind, e.owner.clone())).collect()
    }

    #[test]
    fn a_grant_then_a_release_before_the_time_ran_out() {
        let mut h = History::default();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let a = held("a", 1, 0, 5000);
        h.changed("job", None, Some(&a), t0);
        h.changed("job", Some(&a), None, t0 + Duration::from_secs(1));
        assert_eq!(kinds(&h), vec![("grant", Some("a".into())), ("release", Some("a".into()))]);
    }

    #[test]
    fn a_holder_gone_after_its_time_left_ran_out_expired() {
        let mut h = History::default();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let a = held("a", 1, 0, 500);
        h.changed("job", None, Some(&a), t0);
        h.changed("job", Some(&a), None, t0 + Duration::from_secs(1));
        assert_eq!(kinds(&h)[1], ("expiry", Some("a".into())));
    }

    #[test]
    fn a_waiter_granted_as_the_holder_leaves_is_a_handoff_and_the_waiter_count_follows() {
        let mut h = History::default();
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let (a, b) = (held("a", 1, 1, 5000), held("b", 2, 0, 5000));
        h.changed("job", None, Some(&a), t0);
        h.changed("job", Some(&a), Some(&b), t0 + Duration::from_millis(200));
        let e = h.events();
        assert_eq!(
            kinds(&h),
            vec![("grant", Some("a".into())), ("waiters", None), ("handoff", Some("b".into())), ("waiters", None)]
        );
        assert_eq!(e[2].from.as_deref(), Some("a"));
        assert_eq!(e[3].waiters, Some(0));
    }
}
