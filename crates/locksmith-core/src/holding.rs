//! Which holds go together on one name — the rules every backend follows, written once:
//!
//! - exclusive: alone (the mutex, or a read/write lock's writer);
//! - shared: only with other shared holds (a read/write lock's readers);
//! - permit of N: with at most N − 1 other permits of N (a semaphore);
//! - a name is either a lock (exclusive and shared holds) or a semaphore of one number of
//!   permits while it is in use, never both: anything else is refused with [`ModeConflict`].
//!
//! Waiters are served first come, first served whatever their kind: the holders of a name are
//! the longest run from the head of its queue whose holds all go together ([`holders_of`]), so
//! readers arriving behind a queued writer wait behind it.
//!
//! The native server's machine, the SQL drivers' verdicts and the etcd and ZooKeeper layouts
//! decide with these functions. Redis decides inside its Lua scripts (the grant must be atomic
//! on the server), so those scripts restate the rules; the shared conformance suite pins them.

use std::fmt;

use crate::HoldMode;

impl HoldMode {
    /// Whether a hold of `self` and one of `other` can never be held at the same time on one
    /// name: only shared holds go with shared holds, and permits with permits of the same
    /// semaphore (the count aside: see [`HoldMode::joins`]).
    ///
    /// ```
    /// use locksmith_core::HoldMode;
    /// assert!(HoldMode::Exclusive.conflicts_with(HoldMode::Exclusive));
    /// assert!(HoldMode::Shared.conflicts_with(HoldMode::Exclusive));
    /// assert!(!HoldMode::Shared.conflicts_with(HoldMode::Shared));
    /// assert!(!HoldMode::Permit(3).conflicts_with(HoldMode::Permit(3)));
    /// assert!(HoldMode::Permit(3).conflicts_with(HoldMode::Permit(2)));
    /// assert!(HoldMode::Permit(3).conflicts_with(HoldMode::Shared));
    /// ```
    pub fn conflicts_with(self, other: HoldMode) -> bool {
        match (self, other) {
            (HoldMode::Shared, HoldMode::Shared) => false,
            (HoldMode::Permit(n), HoldMode::Permit(m)) => n != m,
            _ => true,
        }
    }

    /// Whether a hold of `self` can join `held` current holds, all of kind `current` (the
    /// queue aside): anything joins nobody, a shared hold joins shared holds, a permit of N
    /// joins fewer than N permits of N.
    ///
    /// ```
    /// use locksmith_core::HoldMode;
    /// assert!(HoldMode::Exclusive.joins(0, None));
    /// assert!(!HoldMode::Exclusive.joins(1, Some(HoldMode::Shared)));
    /// assert!(HoldMode::Shared.joins(4, Some(HoldMode::Shared)));
    /// assert!(HoldMode::Permit(2).joins(1, Some(HoldMode::Permit(2))));
    /// assert!(!HoldMode::Permit(2).joins(2, Some(HoldMode::Permit(2))));
    /// ```
    pub fn joins(self, held: usize, current: Option<HoldMode>) -> bool {
        let room = match self {
            HoldMode::Permit(n) => held < usize::try_from(n).unwrap_or(usize::MAX),
            HoldMode::Exclusive | HoldMode::Shared => true,
        };
        room && (held == 0 || current.is_none_or(|c| !self.conflicts_with(c)))
    }
}

/// How many entries of a name's queue, from its head (oldest first), hold: the longest run
/// whose holds all go together. The first exclusive entry alone; else the readers before the
/// first exclusive entry; a semaphore's first N permits.
///
/// ```
/// use locksmith_core::{holders_of, HoldMode::*};
/// assert_eq!(holders_of([Shared, Shared, Exclusive, Shared]), 2);
/// assert_eq!(holders_of([Exclusive, Shared]), 1);
/// assert_eq!(holders_of([Permit(2), Permit(2), Permit(2)]), 2);
/// assert_eq!(holders_of([]), 0);
/// ```
pub fn holders_of(queue: impl IntoIterator<Item = HoldMode>) -> usize {
    let mut held = 0;
    let mut current = None;
    for mode in queue {
        if !mode.joins(held, current) {
            break;
        }
        current.get_or_insert(mode);
        held += 1;
    }
    held
}

/// Why a name in use one way cannot be asked for another way — see [`ModeConflict`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConflictKind {
    /// A lock (exclusive or shared) was asked for on a semaphore in use, of `permits` permits
    /// (`None`: a semaphore whose number the backend's layout does not record).
    SemaphoreAsLock {
        /// The semaphore's number of permits, when known.
        permits: Option<u32>,
    },
    /// A permit of `asked` was asked for on a semaphore in use with `permits` permits.
    OtherPermits {
        /// The semaphore's number of permits, when known.
        permits: Option<u32>,
        /// The number asked for.
        asked: u32,
    },
    /// A permit of an `asked`-permit semaphore was asked for on a name in use as a lock.
    LockAsSemaphore {
        /// The number asked for.
        asked: u32,
    },
}

impl ConflictKind {
    /// Why a hold of `asked` is refused on a name in use as `in_use`, if it is.
    ///
    /// ```
    /// use locksmith_core::{ConflictKind, HoldMode};
    /// assert_eq!(ConflictKind::between(HoldMode::Shared, HoldMode::Exclusive), None);
    /// assert_eq!(
    ///     ConflictKind::between(HoldMode::Permit(3), HoldMode::Permit(5)),
    ///     Some(ConflictKind::OtherPermits { permits: Some(3), asked: 5 })
    /// );
    /// ```
    pub fn between(in_use: HoldMode, asked: HoldMode) -> Option<ConflictKind> {
        match (in_use, asked) {
            (HoldMode::Permit(n), HoldMode::Permit(m)) if n != m => {
                Some(ConflictKind::OtherPermits { permits: Some(n), asked: m })
            }
            (HoldMode::Permit(n), HoldMode::Exclusive | HoldMode::Shared) => {
                Some(ConflictKind::SemaphoreAsLock { permits: Some(n) })
            }
            (HoldMode::Exclusive | HoldMode::Shared, HoldMode::Permit(m)) => {
                Some(ConflictKind::LockAsSemaphore { asked: m })
            }
            _ => None,
        }
    }
}

impl fmt::Display for ConflictKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConflictKind::SemaphoreAsLock { permits: Some(n) } => {
                write!(f, "is a semaphore of {n} permits now, not a lock")
            }
            ConflictKind::SemaphoreAsLock { permits: None } => f.write_str("is a semaphore in use now, not a lock"),
            ConflictKind::OtherPermits { permits: Some(n), asked } => {
                write!(f, "is a semaphore of {n} permits now; asked for one of {asked}")
            }
            ConflictKind::OtherPermits { permits: None, asked } => {
                write!(f, "is a semaphore of another number of permits now; asked for one of {asked}")
            }
            ConflictKind::LockAsSemaphore { asked } => {
                write!(f, "is in use as a lock now; asked for a permit of a {asked}-permit semaphore")
            }
        }
    }
}

/// A hold refused because its name is in use another way: a name is either a lock or a
/// semaphore of one number of permits while anyone holds or waits for it. Every backend says
/// it with this text, as [`Error::InvalidArgument`](crate::Error::InvalidArgument) (the
/// native server sends the same text on the wire).
///
/// ```
/// use locksmith_core::{ConflictKind, Error, ModeConflict};
/// let e = ModeConflict::new("jobs", ConflictKind::SemaphoreAsLock { permits: Some(3) });
/// assert_eq!(e.to_string(), r#"lock "jobs" is a semaphore of 3 permits now, not a lock"#);
/// let seen = e.seen_at("key jobs/permit/17");
/// assert_eq!(seen.to_string(), r#"lock "jobs" is a semaphore of 3 permits now, not a lock (seen at key jobs/permit/17)"#);
/// assert!(matches!(Error::from(seen), Error::InvalidArgument(_)));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("lock {name:?} {kind}{}", .seen.as_ref().map(|s| format!(" (seen at {s})")).unwrap_or_default())]
pub struct ModeConflict {
    name: String,
    kind: ConflictKind,
    seen: Option<String>,
}

impl ModeConflict {
    /// The refusal of a hold on `name` for `kind`.
    pub fn new(name: impl Into<String>, kind: ConflictKind) -> Self {
        Self { name: name.into(), kind, seen: None }
    }

    /// With where the backend saw the name's other use (a key, a node), for the operator.
    pub fn seen_at(mut self, place: impl Into<String>) -> Self {
        self.seen = Some(place.into());
        self
    }

    /// Why.
    pub fn kind(&self) -> ConflictKind {
        self.kind
    }
}

impl From<ModeConflict> for crate::Error {
    fn from(e: ModeConflict) -> Self {
        crate::Error::InvalidArgument(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use HoldMode::*;

    /// The naive model: entry `i` holds when every entry before it holds and it goes with each
    /// of them pairwise, counting permits.
    fn model(queue: &[HoldMode]) -> usize {
        let mut n = 0;
        for (i, m) in queue.iter().enumerate() {
            let together = queue[..i].iter().all(|o| !m.conflicts_with(*o));
            let room = match m {
                Permit(k) => i < *k as usize,
                _ => true,
            };
            if !(together && room) {
                break;
            }
            n = i + 1;
        }
        n
    }

    fn mode() -> impl Strategy<Value = HoldMode> {
        prop_oneof![Just(Exclusive), Just(Shared), (0u32..4).prop_map(Permit)]
    }

    proptest! {
        #[test]
        fn the_holders_of_any_queue_are_those_of_the_naive_model(queue in proptest::collection::vec(mode(), 0..10)) {
            prop_assert_eq!(holders_of(queue.iter().copied()), model(&queue));
        }
    }

    #[test]
    fn conflicts_are_symmetric_and_exclusive_goes_with_nothing() {
        let modes = [Exclusive, Shared, Permit(1), Permit(2), Permit(3)];
        for a in modes {
            assert!(Exclusive.conflicts_with(a));
            for b in modes {
                assert_eq!(a.conflicts_with(b), b.conflicts_with(a), "{a} / {b}");
            }
        }
    }

    #[test]
    fn a_name_is_a_lock_or_a_semaphore_of_one_number_never_both() {
        for lock in [Exclusive, Shared] {
            for other in [Exclusive, Shared] {
                assert_eq!(ConflictKind::between(lock, other), None);
            }
            assert_eq!(ConflictKind::between(lock, Permit(2)), Some(ConflictKind::LockAsSemaphore { asked: 2 }));
            assert_eq!(
                ConflictKind::between(Permit(4), lock),
                Some(ConflictKind::SemaphoreAsLock { permits: Some(4) })
            );
        }
        assert_eq!(ConflictKind::between(Permit(2), Permit(2)), None);
        let texts = [
            (ConflictKind::SemaphoreAsLock { permits: Some(3) }, "is a semaphore of 3 permits now, not a lock"),
            (ConflictKind::SemaphoreAsLock { permits: None }, "is a semaphore in use now, not a lock"),
            (
                ConflictKind::OtherPermits { permits: Some(2), asked: 5 },
                "is a semaphore of 2 permits now; asked for one of 5",
            ),
            (
                ConflictKind::OtherPermits { permits: None, asked: 5 },
                "is a semaphore of another number of permits now; asked for one of 5",
            ),
            (
                ConflictKind::LockAsSemaphore { asked: 2 },
                "is in use as a lock now; asked for a permit of a 2-permit semaphore",
            ),
        ];
        for (kind, text) in texts {
            assert_eq!(ModeConflict::new("n", kind).to_string(), format!("lock \"n\" {text}"));
        }
    }
}
