//! The holds of one session, as a driver keeps them: what keep-alive renews, release frees and
//! close gives back — and the one loop every keep-alive ends with: "renewed these; report the
//! ones that vanished as lost, unless they were released meanwhile".

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use crate::backend::{KeepAlive, LostHold};
use crate::LockName;

/// Which hold: the engine gives each hold of a session a distinct `(lock, owner)` pair.
pub type HoldKey = (LockName, String);

/// The identity of one registration: a hold released and taken again under the same key is a
/// different hold, so a verdict on the old one never removes the new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HoldId(u64);

/// One hold as a snapshot saw it.
#[derive(Debug, Clone)]
pub struct HoldRef<V> {
    /// Its registration.
    pub id: HoldId,
    /// The lock.
    pub name: LockName,
    /// The owner id the engine gave it.
    pub owner: String,
    /// Its fencing token (0 where the backend has none, or while pending).
    pub token: u64,
    /// Granted when the snapshot was taken (a pending acquisition is never reported lost).
    pub granted: bool,
    /// Reported lost by [`HoldTable::report_kept`]: no longer renewed, still registered until
    /// released.
    pub lost: bool,
    /// The driver's data: a key, a node path, a connection…
    pub value: V,
}

#[derive(Debug)]
struct Entry<V> {
    id: HoldId,
    token: u64,
    granted: bool,
    lost: bool,
    value: V,
}

/// The holds of one session, keyed by `(lock, owner)`. A plain mutex inside, never held across
/// an `.await`.
///
/// ```
/// use locksmith_core::driver::HoldTable;
/// use locksmith_core::LockName;
///
/// let holds: HoldTable<String> = HoldTable::default();
/// let name = LockName::new("jobs/nightly")?;
/// holds.insert(name.clone(), "owner-1".into(), 7, "key-7".into());
/// // A keep-alive renewed nothing: the hold vanished on the backend.
/// let verdicts = holds.snapshot().into_iter().map(|h| (h, false));
/// let out = holds.report(verdicts, "hold found gone on renewal");
/// assert_eq!(out.lost.len(), 1);
/// assert!(holds.is_empty());
/// # Ok::<(), locksmith_core::Error>(())
/// ```
#[derive(Debug)]
pub struct HoldTable<V> {
    map: Mutex<HashMap<HoldKey, Entry<V>>>,
    next: AtomicU64,
}

impl<V> Default for HoldTable<V> {
    fn default() -> Self {
        Self { map: Mutex::new(HashMap::new()), next: AtomicU64::new(1) }
    }
}

impl<V: Clone> HoldTable<V> {
    fn map(&self) -> MutexGuard<'_, HashMap<HoldKey, Entry<V>>> {
        // Every change is one insert or remove: a panic elsewhere cannot leave it half-updated.
        self.map.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn next_id(&self) -> HoldId {
        HoldId(self.next.fetch_add(1, Ordering::Relaxed))
    }

    fn hold_ref(key: &HoldKey, e: &Entry<V>) -> HoldRef<V> {
        HoldRef {
            id: e.id,
            name: key.0.clone(),
            owner: key.1.clone(),
            token: e.token,
            granted: e.granted,
            lost: e.lost,
            value: e.value.clone(),
        }
    }

    /// Registers a granted hold, replacing an earlier one of the same `(lock, owner)`, which is
    /// returned for the caller to free.
    pub fn insert(&self, name: LockName, owner: String, token: u64, value: V) -> Option<HoldRef<V>> {
        let key = (name, owner);
        let entry = Entry { id: self.next_id(), token, granted: true, lost: false, value };
        let mut map = self.map();
        let old = map.remove(&key).map(|e| Self::hold_ref(&key, &e));
        map.insert(key, entry);
        old
    }

    /// Registers an acquisition before its request leaves (so a renewal sent meanwhile covers a
    /// grant whose answer comes after it), unless the key is taken: then the hold that is there
    /// is returned.
    ///
    /// # Errors
    /// The existing hold of that key.
    pub fn insert_pending(&self, name: LockName, owner: String, value: V) -> Result<HoldId, HoldRef<V>> {
        let key = (name, owner);
        let mut map = self.map();
        if let Some(e) = map.get(&key) {
            return Err(Self::hold_ref(&key, e));
        }
        let id = self.next_id();
        map.insert(key, Entry { id, token: 0, granted: false, lost: false, value });
        Ok(id)
    }

    /// Marks the pending registration `id` of `(name, owner)` granted with `token`; `false` if
    /// it is no longer registered.
    pub fn grant(&self, name: &LockName, owner: &str, id: HoldId, token: u64) -> bool {
        let mut map = self.map();
        match map.get_mut(&(name.clone(), owner.to_string())) {
            Some(e) if e.id == id => {
                e.token = token;
                e.granted = true;
                true
            }
            _ => false,
        }
    }

    /// The hold of `(name, owner)`, if any.
    pub fn get(&self, name: &LockName, owner: &str) -> Option<HoldRef<V>> {
        let key = (name.clone(), owner.to_string());
        self.map().get(&key).map(|e| Self::hold_ref(&key, e))
    }

    /// Removes the hold of `(name, owner)` whatever it is (a stale hold before a new attempt).
    pub fn take(&self, name: &LockName, owner: &str) -> Option<HoldRef<V>> {
        let key = (name.clone(), owner.to_string());
        self.map().remove(&key).map(|e| Self::hold_ref(&key, &e))
    }

    /// Removes the hold of `(name, owner)` if its token is `token` (a release: owner and token
    /// checked, so a stale release never frees a newer hold).
    pub fn take_token(&self, name: &LockName, owner: &str, token: u64) -> Option<V> {
        let key = (name.clone(), owner.to_string());
        let mut map = self.map();
        match map.get(&key) {
            Some(e) if e.token == token => map.remove(&key).map(|e| e.value),
            _ => None,
        }
    }

    /// Removes the registration `id` of `(name, owner)` if it is still there; says whether it was.
    pub fn remove(&self, name: &LockName, owner: &str, id: HoldId) -> bool {
        let key = (name.clone(), owner.to_string());
        let mut map = self.map();
        if map.get(&key).is_some_and(|e| e.id == id) {
            map.remove(&key);
            true
        } else {
            false
        }
    }

    /// Every registration, granted or pending, as of now.
    pub fn snapshot(&self) -> Vec<HoldRef<V>> {
        self.map().iter().map(|(k, e)| Self::hold_ref(k, e)).collect()
    }

    /// Takes every registration out (close).
    pub fn drain(&self) -> Vec<HoldRef<V>> {
        self.map().drain().map(|(k, e)| Self::hold_ref(&k, &e)).collect()
    }

    /// Whether nothing is registered.
    pub fn is_empty(&self) -> bool {
        self.map().is_empty()
    }

    /// The lost-holds helper. `verdicts` pairs each hold of a snapshot with whether the
    /// backend still has it ours. A hold found gone that was granted at snapshot time and is
    /// still the same registration (not released, not replaced meanwhile) is removed, logged with
    /// `why`, and reported lost; everything else is left as it is.
    pub fn report(&self, verdicts: impl IntoIterator<Item = (HoldRef<V>, bool)>, why: &str) -> KeepAlive {
        let mut out = KeepAlive::default();
        for (h, ours) in verdicts {
            if ours || !h.granted {
                continue;
            }
            if self.remove(&h.name, &h.owner, h.id) {
                tracing::warn!(lock = %h.name, token = h.token, "{why}");
                out.lost.push(LostHold::new(h.name, h.owner, h.token));
            }
        }
        out
    }

    /// The lost-holds helper of a backend whose tokens cannot tell holds apart (all 0): as
    /// [`HoldTable::report`], but a hold found gone stays registered, marked
    /// [`lost`](HoldRef::lost) — no longer renewed, still released (owner-checked) on unlock —
    /// and every hold so marked is reported again on every call until it is released: a report
    /// the engine could not deliver (the guard's slot was busy) would otherwise leave a guard
    /// believing in a hold nobody renews. Reports name the owner, so they never hit another hold
    /// of the same lock.
    pub fn report_kept(&self, verdicts: impl IntoIterator<Item = (HoldRef<V>, bool)>, why: &str) -> KeepAlive {
        let mut map = self.map();
        for (h, ours) in verdicts {
            if ours || !h.granted {
                continue;
            }
            match map.get_mut(&(h.name.clone(), h.owner.clone())) {
                Some(e) if e.id == h.id && !e.lost => {
                    e.lost = true;
                    tracing::warn!(lock = %h.name, token = h.token, "{why}");
                }
                _ => {}
            }
        }
        let lost = map.iter().filter(|(_, e)| e.lost).map(|(k, e)| LostHold::new(k.0.clone(), k.1.clone(), e.token));
        KeepAlive { lost: lost.collect(), ..KeepAlive::default() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> LockName {
        LockName::new(s).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_hold_released_or_replaced_meanwhile_is_not_reported_lost() {
        let t: HoldTable<&str> = HoldTable::default();
        t.insert(name("a"), "o".into(), 1, "v1");
        t.insert(name("b"), "o".into(), 2, "v2");
        let snap = t.snapshot();
        // Meanwhile: a is released, b is released and taken again.
        assert_eq!(t.take_token(&name("a"), "o", 1), Some("v1"));
        assert!(t.take(&name("b"), "o").is_some());
        t.insert(name("b"), "o".into(), 3, "v3");
        let out = t.report(snap.into_iter().map(|h| (h, false)), "test");
        assert!(out.lost.is_empty(), "{:?}", out.lost);
        assert_eq!(t.get(&name("b"), "o").map(|h| h.token), Some(3));
    }

    #[test]
    fn pending_acquisitions_are_renewed_but_never_reported_lost() {
        let t: HoldTable<()> = HoldTable::default();
        let id = t.insert_pending(name("a"), "o".into(), ()).unwrap_or_else(|h| panic!("taken: {h:?}"));
        assert!(t.insert_pending(name("a"), "o".into(), ()).is_err(), "a second pending entry");
        let out = t.report(t.snapshot().into_iter().map(|h| (h, false)), "test");
        assert!(out.lost.is_empty());
        assert!(t.grant(&name("a"), "o", id, 9));
        let out = t.report(t.snapshot().into_iter().map(|h| (h, false)), "test");
        assert_eq!(out.lost.len(), 1);
        assert_eq!(out.lost[0].token, 9);
        assert!(!t.grant(&name("a"), "o", id, 10), "granting a removed registration");
    }

    #[test]
    fn a_kept_lost_hold_is_reported_until_released_and_not_renewed() {
        let t: HoldTable<&str> = HoldTable::default();
        t.insert(name("a"), "o".into(), 0, "v1");
        t.insert(name("b"), "o".into(), 0, "v2");
        let verdicts = t.snapshot().into_iter().map(|h| (h.name.as_str() == "b", h.name.clone()));
        let verdicts: Vec<_> =
            verdicts.map(|(ours, n)| (t.get(&n, "o").unwrap_or_else(|| panic!("{n}")), ours)).collect();
        assert_eq!(t.report_kept(verdicts, "test").lost.len(), 1);
        // Reported again while registered; the snapshot says it is not to be renewed.
        assert_eq!(t.report_kept([], "test").lost.len(), 1);
        let lost: Vec<_> = t.snapshot().into_iter().filter(|h| h.lost).map(|h| h.value).collect();
        assert_eq!(lost, ["v1"]);
        assert_eq!(t.take(&name("a"), "o").map(|h| h.value), Some("v1"));
        assert!(t.report_kept([], "test").lost.is_empty());
    }
}
