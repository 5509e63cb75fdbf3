//! A lock's holders, by token. Most locks have one (the mutex) or a few (readers, permits): a
//! short vector then, so a grant allocates one small block instead of a map node and an owner
//! index (measured: the map made every mutex hand-off cost ~4,000 more instructions). Past
//! [`FEW`] holders the vector becomes a map by token with an index by owner, so a lock with
//! thousands of readers still answers "is this ours?" and "release this token" in O(log n).

use std::collections::{BTreeMap, HashMap};

use super::lock::Holder;
use super::SessionId;

/// Holders kept in a vector; one more makes it a map.
const FEW: usize = 16;

#[derive(Debug)]
pub(super) enum Holders {
    /// Sorted by token.
    Few(Vec<Holder>),
    Many {
        by_token: BTreeMap<u64, Holder>,
        /// The token of each session's and owner's hold.
        owners: HashMap<SessionId, HashMap<String, u64>>,
    },
}

impl Default for Holders {
    fn default() -> Self {
        Holders::Few(Vec::new())
    }
}

impl Holders {
    pub(super) fn len(&self) -> usize {
        match self {
            Holders::Few(v) => v.len(),
            Holders::Many { by_token, .. } => by_token.len(),
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// In token order.
    pub(super) fn iter(&self) -> Box<dyn Iterator<Item = &Holder> + '_> {
        match self {
            Holders::Few(v) => Box::new(v.iter()),
            Holders::Many { by_token, .. } => Box::new(by_token.values()),
        }
    }

    /// The holder with the lowest token.
    pub(super) fn first(&self) -> Option<&Holder> {
        match self {
            Holders::Few(v) => v.first(),
            Holders::Many { by_token, .. } => by_token.values().next(),
        }
    }

    pub(super) fn get(&self, token: u64) -> Option<&Holder> {
        match self {
            Holders::Few(v) => v.binary_search_by_key(&token, |h| h.token).ok().and_then(|i| v.get(i)),
            Holders::Many { by_token, .. } => by_token.get(&token),
        }
    }

    /// The hold of `(session, owner)`.
    pub(super) fn of(&self, session: SessionId, owner: &str) -> Option<&Holder> {
        match self {
            Holders::Few(v) => v.iter().find(|h| h.session == session && h.owner == owner),
            Holders::Many { by_token, owners } => by_token.get(owners.get(&session)?.get(owner)?),
        }
    }

    /// Adds `holder`; returns the hold of the same `(session, owner)` it supersedes (only a
    /// replayed log gets there).
    pub(super) fn insert(&mut self, holder: Holder) -> Option<Holder> {
        let old = self.of(holder.session, &holder.owner).map(|h| h.token);
        let old = old.and_then(|t| self.remove(t));
        match self {
            Holders::Few(v) => {
                let at = v.partition_point(|h| h.token < holder.token);
                v.insert(at, holder);
                if v.len() > FEW {
                    let all = std::mem::take(v);
                    *self = Self::many(all);
                }
            }
            Holders::Many { by_token, owners } => {
                owners.entry(holder.session).or_default().insert(holder.owner.clone(), holder.token);
                by_token.insert(holder.token, holder);
            }
        }
        old
    }

    pub(super) fn remove(&mut self, token: u64) -> Option<Holder> {
        match self {
            Holders::Few(v) => {
                let i = v.binary_search_by_key(&token, |h| h.token).ok()?;
                Some(v.remove(i))
            }
            Holders::Many { by_token, owners } => {
                let h = by_token.remove(&token)?;
                if let Some(mine) = owners.get_mut(&h.session) {
                    if mine.get(&h.owner) == Some(&token) {
                        mine.remove(&h.owner);
                    }
                    if mine.is_empty() {
                        owners.remove(&h.session);
                    }
                }
                if by_token.len() < FEW / 2 {
                    let all = std::mem::take(by_token).into_values().collect();
                    *self = Holders::Few(all);
                }
                Some(h)
            }
        }
    }

    /// Every holder, in token order; leaves none.
    pub(super) fn take_all(&mut self) -> Vec<Holder> {
        match std::mem::take(self) {
            Holders::Few(v) => v,
            Holders::Many { by_token, .. } => by_token.into_values().collect(),
        }
    }

    fn many(all: Vec<Holder>) -> Self {
        let mut owners: HashMap<SessionId, HashMap<String, u64>> = HashMap::new();
        for h in &all {
            owners.entry(h.session).or_default().insert(h.owner.clone(), h.token);
        }
        Holders::Many { by_token: all.into_iter().map(|h| (h.token, h)).collect(), owners }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::machine::HoldMode;

    fn holder(session: SessionId, owner: &str, token: u64) -> Holder {
        Holder { session, owner: owner.into(), token, lock_delay: Duration::ZERO, mode: HoldMode::Shared, value: None }
    }

    /// Lookups by token and by owner agree whatever the number of holders, across the switch to
    /// the map and back.
    #[test]
    fn lookups_agree_across_the_switch_between_vector_and_map() {
        let mut h = Holders::default();
        for t in 1..=40u64 {
            assert!(h.insert(holder(t % 7, &format!("o{t}"), t)).is_none());
            assert_eq!(h.len(), t as usize);
            assert_eq!(h.of(t % 7, &format!("o{t}")).map(|x| x.token), Some(t));
            assert_eq!(h.get(t).map(|x| x.token), Some(t));
        }
        assert!(matches!(h, Holders::Many { .. }));
        assert_eq!(h.iter().map(|x| x.token).collect::<Vec<_>>(), (1..=40).collect::<Vec<_>>());
        for t in 1..=36u64 {
            assert_eq!(h.remove(t).map(|x| x.token), Some(t));
            assert!(h.get(t).is_none() && h.of(t % 7, &format!("o{t}")).is_none());
        }
        assert!(matches!(h, Holders::Few(_)));
        assert_eq!(h.first().map(|x| x.token), Some(37));
        // The same owner again supersedes its older hold (a replayed log).
        assert_eq!(h.insert(holder(37 % 7, "o37", 50)).map(|x| x.token), Some(37));
        assert_eq!(h.take_all().iter().map(|x| x.token).collect::<Vec<_>>(), vec![38, 39, 40, 50]);
        assert!(h.is_empty());
    }
}
