//! Hashing for maps keyed by ids the map's owner made itself: a server's session ids, a
//! client's request ids. Such maps are looked up several times per request, and std's SipHash
//! costs ~100 instructions a lookup.
//!
//! SipHash is keyed so that nobody can fill a table with keys that collide. Ids that only
//! their owner makes (a counter, `epoch << 32 | n`) cannot be chosen by anyone else, so a
//! multiplicative hash is enough for them. Maps whose keys come from outside (a client's
//! request ids on a server, lock names, owners) keep std's keyed SipHash.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A map keyed by self-made `u64` ids (see the [module](self) for when that is safe).
///
/// ```
/// use locksmith_core::driver::IdMap;
///
/// let mut pending: IdMap<&str> = IdMap::default();
/// pending.insert(7, "acquire");
/// assert_eq!(pending.remove(&7), Some("acquire"));
/// ```
pub type IdMap<V> = HashMap<u64, V, BuildHasherDefault<IdHasher>>;

/// Fibonacci hashing of one `u64`: the multiplication spreads the id over the high bits (the
/// table's tags); folding them back into the low bits (its buckets) keeps ids that differ only
/// in their high half (an epoch) apart too.
///
/// ```
/// use std::hash::Hasher;
/// use locksmith_core::driver::IdHasher;
///
/// let hash = |id: u64| {
///     let mut h = IdHasher::default();
///     h.write_u64(id);
///     h.finish()
/// };
/// assert_ne!(hash(1), hash(2));
/// ```
#[derive(Debug, Default, Clone, Copy)]
pub struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only `u64` keys are hashed with it; anything else still gets a usable hash.
        for b in bytes {
            self.write_u64(u64::from(*b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        let p = (self.0 ^ n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.0 = p ^ (p >> 32);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Consecutive ids (a counter), and the same counter under consecutive epochs (a server's
    /// session ids), land apart.
    #[test]
    fn consecutive_ids_spread_over_the_table() {
        let hash = |id: u64| {
            let mut h = IdHasher::default();
            h.write_u64(id);
            h.finish()
        };
        let ids: Vec<u64> = (1..=4096).map(|n| (3 << 32) | n).chain((1..=64).map(|e| (e << 32) | 1)).collect();
        let low: std::collections::HashSet<u64> = ids.iter().map(|id| hash(*id) & 0xfff).collect();
        let tags: std::collections::HashSet<u64> = ids.iter().map(|id| hash(*id) >> 57).collect();
        assert!(low.len() > ids.len() / 2, "{} distinct buckets of {}", low.len(), ids.len());
        assert_eq!(tags.len(), 128, "every 7-bit tag in use");
        let mut m: IdMap<u64> = IdMap::default();
        for id in &ids {
            m.insert(*id, *id);
        }
        assert!(ids.iter().all(|id| m.get(id) == Some(id)));
    }
}
