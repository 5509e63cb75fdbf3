//! The holds one session keeps renewed: `(name, owner)` → the random value on the instances.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use locksmith_core::{LockName, LostHold};

#[derive(Debug)]
struct Hold {
    value: String,
    /// Reported lost: no longer renewed, but still released (owner-checked) on unlock.
    lost: bool,
}

/// One hold as a keep-alive sees it.
#[derive(Debug, Clone)]
pub(crate) struct LiveHold {
    pub(crate) name: LockName,
    pub(crate) owner: String,
    pub(crate) value: String,
}

/// The registry; a plain mutex, never held across an await.
#[derive(Debug, Default)]
pub(crate) struct Holds {
    map: Mutex<HashMap<(LockName, String), Hold>>,
}

impl Holds {
    fn map(&self) -> MutexGuard<'_, HashMap<(LockName, String), Hold>> {
        // A panic elsewhere cannot leave the map half-updated: every change is one insert/remove.
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a new hold; returns the value of an older hold it replaces (lost earlier and
    /// never released), which the caller must release.
    pub(crate) fn insert(&self, name: LockName, owner: String, value: String) -> Option<String> {
        self.map().insert((name, owner), Hold { value, lost: false }).map(|old| old.value)
    }

    /// Forgets a hold (stops renewing it) and returns its value.
    pub(crate) fn remove(&self, name: &LockName, owner: &str) -> Option<String> {
        self.map().remove(&(name.clone(), owner.to_string())).map(|h| h.value)
    }

    /// The holds to renew.
    pub(crate) fn live(&self) -> Vec<LiveHold> {
        self.map()
            .iter()
            .filter(|(_, h)| !h.lost)
            .map(|((name, owner), h)| LiveHold { name: name.clone(), owner: owner.clone(), value: h.value.clone() })
            .collect()
    }

    /// Marks `hold` lost if it is still registered with the same value, and says whether it was
    /// (a hold released while its renewal was in flight is not reported lost).
    pub(crate) fn mark_lost(&self, hold: &LiveHold) -> bool {
        let mut map = self.map();
        match map.get_mut(&(hold.name.clone(), hold.owner.clone())) {
            Some(h) if h.value == hold.value && !h.lost => {
                h.lost = true;
                true
            }
            _ => false,
        }
    }

    /// Holds marked lost that are still registered (not yet released), to report again on every
    /// keep-alive: a report the engine could not deliver (the guard's slot was busy) would
    /// otherwise leave a guard believing in a hold nobody renews. Reports name the owner, so
    /// they never hit another hold of the same lock although every Redlock token is 0.
    pub(crate) fn lost(&self) -> Vec<LostHold> {
        self.map()
            .iter()
            .filter(|(_, h)| h.lost)
            .map(|((name, owner), _)| LostHold::new(name.clone(), owner.clone(), 0))
            .collect()
    }

    /// Forgets every hold and returns `(name, value)` of each.
    pub(crate) fn drain(&self) -> Vec<(LockName, String)> {
        self.map().drain().map(|((name, _), h)| (name, h.value)).collect()
    }
}
