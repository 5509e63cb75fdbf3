//! Where each kind of hold lives under a lock's prefix `NAME/`, and who holds, as pure functions
//! (the acquisitions ask etcd the same questions with range reads; `status` answers them from
//! the keys it read).
//!
//! | hold | key | value | recipe |
//! |---|---|---|---|
//! | exclusive (default), campaign | `NAME/<lease-hex>` | "" or the proposal | Go `concurrency.Mutex` / `Election` |
//! | exclusive with `?exclusive=write-lock` | `NAME/write/<unix-nanos>` | "" | `recipe.RWMutex.Lock` |
//! | shared | `NAME/read/<unix-nanos>` | "" | `recipe.RWMutex.RLock` |
//! | permit of N | `NAME/permit/<unix-nanos>` | N in decimal | locksmith's own |
//!
//! Every key is attached to the session's lease and ordered by its create revision.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use locksmith_core::{holders_of, HoldMode, LockName};

use crate::raw::pb::KeyValue;
use crate::raw::prefix_end;

/// Which key an exclusive hold without a value writes (`?exclusive=` in a URL, or
/// [`EtcdOptions::exclusive`](crate::EtcdOptions::exclusive)). A campaign (an exclusive hold
/// with a value) always writes Go's `concurrency.Election` key, `NAME/<lease-hex>`.
///
/// locksmith clients see both kinds as exclusive, whatever their own setting; the choice is
/// about which Go peers see ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ExclusiveLayout {
    /// Go's `concurrency.Mutex` key `NAME/<lease-hex>`, as `etcdctl lock NAME` writes it: Go
    /// mutexes, elections and `recipe.RWMutex` writers wait for it, **`recipe.RWMutex` readers
    /// do not** (they look only under `NAME/write`).
    #[default]
    Mutex,
    /// The `recipe.RWMutex` writer key `NAME/write/<unix-nanos>`: Go's readers and writers wait
    /// for it, and so do Go mutexes and `etcdctl lock NAME` (their prefix `NAME/` covers it).
    WriteLock,
}

/// What a key under a lock's prefix is, for the hold rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyKind {
    /// Under `NAME/read/`: a reader.
    Read,
    /// Under `NAME/permit/`: a semaphore's permit.
    Permit,
    /// Anything else under `NAME/`: a mutex, a writer, a candidate, or a lock below `NAME`
    /// (Go's prefix rule: lock `NAME` waits for the holder of `NAME/sub`).
    Exclusive,
}

/// The part of a reader's key below the lock's prefix (the Go recipe's `pfx + "read"`).
pub(crate) const READ: &str = "read";
/// The part of a writer's key below the lock's prefix (the Go recipe's `pfx + "write"`).
pub(crate) const WRITE: &str = "write";
/// The part of a permit's key below the lock's prefix.
pub(crate) const PERMIT: &str = "permit";

/// A key range `[start, end)`.
pub(crate) type KeyRange = (Vec<u8>, Vec<u8>);

/// The key prefix of lock `name` (Go's `pfx + "/"`).
pub(crate) fn prefix(name: &LockName) -> String {
    format!("{}/", name.as_str())
}

/// Every key under `name`'s prefix.
pub(crate) fn prefix_range(name: &LockName) -> KeyRange {
    let start = prefix(name).into_bytes();
    let end = prefix_end(&start);
    (start, end)
}

/// The keys under `NAME/<part>/`.
pub(crate) fn part_range(name: &LockName, part: &str) -> KeyRange {
    let start = format!("{}{part}/", prefix(name)).into_bytes();
    let end = prefix_end(&start);
    (start, end)
}

/// Every key under `NAME/` except those under `NAME/<part>/`: two ranges.
pub(crate) fn outside_part(name: &LockName, part: &str) -> [KeyRange; 2] {
    let (all_start, all_end) = prefix_range(name);
    let (part_start, part_end) = part_range(name, part);
    [(all_start, part_start), (part_end, all_end)]
}

/// Go's `concurrency.Mutex` key of `name` for `lease`.
pub(crate) fn mutex_key(name: &LockName, lease: i64) -> String {
    format!("{}{lease:x}", prefix(name))
}

/// A fresh `NAME/<part>/<unix-nanos>` key, as the Go recipes' `newUniqueEphemeralKey` names
/// them (`fmt.Sprintf("%s/%v", prefix, time.Now().UnixNano())`). Within this process the
/// suffixes strictly increase, so two acquisitions never pick the same key; a key another
/// process took is caught by the create's `create_revision == 0` compare.
pub(crate) fn unique_key(name: &LockName, part: &str) -> String {
    format!("{}{part}/{}", prefix(name), unique_nanos())
}

fn unique_nanos() -> u64 {
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0);
    let mut last = LAST.load(Ordering::Relaxed);
    loop {
        let next = now.max(last.saturating_add(1));
        match LAST.compare_exchange_weak(last, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return next,
            Err(seen) => last = seen,
        }
    }
}

/// What `key` is under the prefix `pfx` (`NAME/`).
pub(crate) fn kind_of(pfx: &str, key: &[u8]) -> KeyKind {
    let rest = key.strip_prefix(pfx.as_bytes()).unwrap_or(key);
    let under = |part: &str| rest.strip_prefix(part.as_bytes()).is_some_and(|r| r.first() == Some(&b'/'));
    if under(READ) {
        KeyKind::Read
    } else if under(PERMIT) {
        KeyKind::Permit
    } else {
        KeyKind::Exclusive
    }
}

/// The number of permits a permit key's value says (locksmith writes N in decimal).
pub(crate) fn permits_of(kv: &KeyValue) -> Option<u32> {
    std::str::from_utf8(&kv.value).ok()?.parse().ok().filter(|n| *n > 0)
}

/// Who holds, from the keys under a lock's prefix `pfx` in create order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Holding {
    /// Indexes (into the keys given) of the holders, with their kind of hold.
    pub(crate) holders: Vec<(usize, HoldMode)>,
    /// The keys that wait.
    pub(crate) waiters: usize,
    /// A semaphore's permits, when its keys say.
    pub(crate) permits: Option<u32>,
}

/// Who holds, by the rules every backend shares ([`holders_of`]: FIFO whatever the kind). With
/// permit keys the name is a semaphore: its queue is the permit keys alone, each a permit of N
/// (N from the oldest key's value; the number of permit keys if it says none, so every one is
/// shown holding). Otherwise the queue is every key, a reader under `NAME/read/` and anything
/// else exclusive. `kvs` must be sorted by create revision, oldest first.
pub(crate) fn holding(pfx: &str, kvs: &[&KeyValue]) -> Holding {
    let permits: Vec<usize> = (0..kvs.len()).filter(|&i| kind_of(pfx, &kvs[i].key) == KeyKind::Permit).collect();
    let (queue, said): (Vec<(usize, HoldMode)>, _) = match permits.first() {
        Some(&first) => {
            let n = permits_of(kvs[first]);
            let mode = HoldMode::Permit(n.unwrap_or_else(|| u32::try_from(permits.len()).unwrap_or(u32::MAX)));
            (permits.iter().map(|&i| (i, mode)).collect(), n)
        }
        None => {
            let mode = |kv: &KeyValue| match kind_of(pfx, &kv.key) {
                KeyKind::Read => HoldMode::Shared,
                _ => HoldMode::Exclusive,
            };
            (kvs.iter().enumerate().map(|(i, kv)| (i, mode(kv))).collect(), None)
        }
    };
    let held = holders_of(queue.iter().map(|(_, m)| *m));
    Holding { waiters: queue.len() - held, holders: queue.into_iter().take(held).collect(), permits: said }
}

/// The lock a key belongs to, if it has one of the layouts' shapes and a lease: Go's
/// `<name>/<lease in hex>` written under that very lease, or `<name>/read|write|permit/<digits>`.
pub(crate) fn lock_of_key(kv: &KeyValue) -> Option<String> {
    let key = std::str::from_utf8(&kv.key).ok()?;
    if kv.lease == 0 {
        return None;
    }
    let (rest, last) = key.rsplit_once('/')?;
    if !rest.is_empty() && last == format!("{:x}", kv.lease) {
        return Some(rest.to_string());
    }
    let (name, part) = rest.rsplit_once('/')?;
    let digits = !last.is_empty() && last.bytes().all(|b| b.is_ascii_digit());
    (!name.is_empty() && digits && [READ, WRITE, PERMIT].contains(&part)).then(|| name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(s: &str) -> LockName {
        LockName::new(s).unwrap()
    }

    fn kv(key: &str, rev: i64, lease: i64, value: &str) -> KeyValue {
        KeyValue { key: key.into(), create_revision: rev, lease, value: value.into(), ..Default::default() }
    }

    #[test]
    fn keys_have_the_go_recipes_shapes() {
        let n = name("jobs/nightly");
        assert_eq!(mutex_key(&n, 0x694d_7a1b), "jobs/nightly/694d7a1b");
        let read = unique_key(&n, READ);
        let digits = read.strip_prefix("jobs/nightly/read/").unwrap();
        assert!(!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()), "{read}");
        assert_ne!(unique_key(&n, READ), unique_key(&n, READ), "two acquisitions, one key");
        assert_eq!(part_range(&n, PERMIT), (b"jobs/nightly/permit/".to_vec(), b"jobs/nightly/permit0".to_vec()));
        let [below, above] = outside_part(&n, READ);
        assert_eq!(below, (b"jobs/nightly/".to_vec(), b"jobs/nightly/read/".to_vec()));
        assert_eq!(above, (b"jobs/nightly/read0".to_vec(), b"jobs/nightly0".to_vec()));
    }

    #[test]
    fn kinds_are_told_by_the_part_below_the_prefix() {
        assert_eq!(kind_of("a/", b"a/read/17"), KeyKind::Read);
        assert_eq!(kind_of("a/", b"a/permit/17"), KeyKind::Permit);
        for key in ["a/write/17", "a/694d", "a/readers/694d", "a/sub/read/1", "a/read"] {
            assert_eq!(kind_of("a/", key.as_bytes()), KeyKind::Exclusive, "{key}");
        }
    }

    /// FIFO whatever the kind: readers before the first exclusive key hold together; a writer
    /// holds alone when it is the oldest; readers behind a waiting writer wait.
    #[test]
    fn readers_hold_until_the_first_exclusive_key_and_an_exclusive_key_holds_alone() {
        let keys =
            [kv("a/read/1", 1, 7, ""), kv("a/read/2", 2, 8, ""), kv("a/write/3", 3, 9, ""), kv("a/read/4", 4, 7, "")];
        let refs: Vec<&KeyValue> = keys.iter().collect();
        let h = holding("a/", &refs);
        assert_eq!(h.holders, vec![(0, HoldMode::Shared), (1, HoldMode::Shared)]);
        assert_eq!((h.waiters, h.permits), (2, None));
        let h = holding("a/", &refs[2..]);
        assert_eq!((h.holders, h.waiters), (vec![(0, HoldMode::Exclusive)], 1));
        let mutex = [kv("a/694d", 5, 0x694d, "proposal"), kv("a/read/6", 6, 7, "")];
        let refs: Vec<&KeyValue> = mutex.iter().collect();
        assert_eq!(holding("a/", &refs).holders, vec![(0, HoldMode::Exclusive)]);
    }

    #[test]
    fn the_oldest_n_permit_keys_hold() {
        let keys: Vec<KeyValue> = (1..=4).map(|r| kv(&format!("s/permit/{r}"), r, 7, "3")).collect();
        let refs: Vec<&KeyValue> = keys.iter().collect();
        let h = holding("s/", &refs);
        assert_eq!(h.holders, vec![(0, HoldMode::Permit(3)), (1, HoldMode::Permit(3)), (2, HoldMode::Permit(3))]);
        assert_eq!((h.waiters, h.permits), (1, Some(3)));
        let odd = [kv("s/permit/1", 1, 7, "many"), kv("s/permit/2", 2, 7, "")];
        let refs: Vec<&KeyValue> = odd.iter().collect();
        let h = holding("s/", &refs);
        assert_eq!((h.holders.len(), h.waiters, h.permits), (2, 0, None), "no N said: every key is shown holding");
    }

    #[test]
    fn listed_locks_are_keys_of_a_layouts_shape_under_a_lease() {
        assert_eq!(lock_of_key(&kv("jobs/nightly/694d", 1, 0x694d, "")).as_deref(), Some("jobs/nightly"));
        assert_eq!(lock_of_key(&kv("catalog/read/1700000000000000001", 1, 5, "")).as_deref(), Some("catalog"));
        assert_eq!(lock_of_key(&kv("catalog/write/17", 1, 5, "")).as_deref(), Some("catalog"));
        assert_eq!(lock_of_key(&kv("exports/permit/17", 1, 5, "3")).as_deref(), Some("exports"));
        for (key, lease) in [("config/abc", 0), ("leased/ffff", 5), ("x/read/17", 0), ("x/other/17", 5), ("/read/1", 5)]
        {
            assert_eq!(lock_of_key(&kv(key, 1, lease, "")), None, "{key}");
        }
    }
}
