//! Node names, ordering, who holds, and error mapping.
//!
//! Every node kind this driver creates or respects is a Curator (or kazoo) layout: a protected
//! name `_c_<uuid>-<recipe name><10-digit sequence>` that ZooKeeper completes with the parent's
//! sequence counter. One lock directory may hold several kinds at once (a read/write lock has
//! readers and writers); sequences come from one counter per directory, so they order every
//! kind in arrival order.

use std::future::Future;
use std::time::Duration;

use locksmith_core::{holders_of, Error, HoldMode};
use zookeeper_client as zk;

/// The kind of a contender node in a lock directory, by the recipe that names it so.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Curator `InterProcessMutex`: `_c_<uuid>-lock-<seq>` (also the internal lock of Curator's
    /// semaphore).
    Mutex,
    /// kazoo `Lock`: `<uuid>__lock__<seq>` (never created by us, respected as a contender).
    Kazoo,
    /// Curator `InterProcessReadWriteLock` writer: `_c_<uuid>-__WRIT__<seq>`.
    Writer,
    /// Curator `InterProcessReadWriteLock` reader: `_c_<uuid>-__READ__<seq>`.
    Reader,
    /// Curator `LeaderLatch` participant: `_c_<uuid>-latch-<seq>`.
    Latch,
}

/// The marker before the sequence of each kind (the protected prefix's `-` included where
/// Curator's recipe name does not start with `_`, as in the existing mutex layout).
const MARKERS: [(&str, Kind); 5] = [
    ("-lock-", Kind::Mutex),
    ("__lock__", Kind::Kazoo),
    ("__WRIT__", Kind::Writer),
    ("__READ__", Kind::Reader),
    ("-latch-", Kind::Latch),
];

impl Kind {
    /// The kind of hold a node of this kind is: a reader's is shared, every other node
    /// excludes every other holder.
    pub(crate) fn mode(self) -> HoldMode {
        match self {
            Kind::Reader => HoldMode::Shared,
            Kind::Mutex | Kind::Kazoo | Kind::Writer | Kind::Latch => HoldMode::Exclusive,
        }
    }

    pub(crate) fn is_exclusive(self) -> bool {
        self.mode() == HoldMode::Exclusive
    }

    /// The recipe name Curator puts after the protected prefix `_c_<uuid>-`.
    pub(crate) fn curator_name(self) -> &'static str {
        match self {
            Kind::Mutex | Kind::Kazoo => "lock-",
            Kind::Writer => "__WRIT__",
            Kind::Reader => "__READ__",
            Kind::Latch => "latch-",
        }
    }
}

/// One contender node in a lock directory.
#[derive(Debug, Clone)]
pub(crate) struct Contender {
    pub(crate) node: String,
    pub(crate) seq: u64,
    pub(crate) kind: Kind,
}

/// The digits after `marker`'s last occurrence, when that is all that follows it.
fn sequence_after(node: &str, marker: &str) -> Option<(usize, u64)> {
    let at = node.rfind(marker)? + marker.len();
    let tail = &node[at..];
    if tail.is_empty() || !tail.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    tail.parse().ok().map(|seq| (at, seq))
}

/// The sequence and kind of a contender node: the marker that ends last decides (a uuid or
/// an owner part could contain another marker); `None` for other children.
pub(crate) fn parse(node: &str) -> Option<(u64, Kind)> {
    MARKERS
        .iter()
        .filter_map(|(marker, kind)| sequence_after(node, marker).map(|(at, seq)| (at, seq, *kind)))
        .max_by_key(|(at, _, _)| *at)
        .map(|(_, seq, kind)| (seq, kind))
}

pub(crate) fn is_contender(node: &str) -> bool {
    parse(node).is_some()
}

/// Contenders sorted by sequence (arrival order).
pub(crate) fn contenders(children: Vec<String>) -> Vec<Contender> {
    let mut v: Vec<Contender> =
        children.into_iter().filter_map(|node| parse(&node).map(|(seq, kind)| Contender { node, seq, kind })).collect();
    v.sort_by_key(|c| c.seq);
    v
}

/// Where one contender stands in its lock directory.
#[derive(Debug)]
pub(crate) enum Verdict<'a> {
    /// It holds the lock.
    Holds,
    /// It waits; this node's deletion can change that.
    WaitsFor(&'a Contender),
    /// It is not among the contenders (deleted by a third party, or its session ended).
    Gone,
}

/// Where our node `me` stands among the sorted `cs`: it holds when it is among their holders
/// ([`holders`]: Curator's `ourIndex < 1` for the mutex and write lock, its
/// `readLockPredicate` for readers). A waiting exclusive node waits for its immediate
/// predecessor; a waiting reader for the nearest exclusive node before it — when that one goes,
/// either the reader holds or another exclusive node before it is next. Herd free: one watch
/// per waiter, on a node whose deletion can change its verdict.
pub(crate) fn verdict<'a>(cs: &'a [Contender], me: &str) -> Verdict<'a> {
    let Some(pos) = cs.iter().position(|c| c.node == me) else { return Verdict::Gone };
    if pos < holders(cs) {
        return Verdict::Holds;
    }
    let before = &cs[..pos];
    let ahead =
        if cs[pos].kind.is_exclusive() { before.last() } else { before.iter().rev().find(|c| c.kind.is_exclusive()) };
    ahead.map_or(Verdict::Holds, Verdict::WaitsFor)
}

/// How many of the sorted `cs`, from the first, hold the lock, by the rules every backend
/// shares ([`holders_of`]): the first exclusive node alone, or every reader before the first
/// exclusive node.
pub(crate) fn holders(cs: &[Contender]) -> usize {
    holders_of(cs.iter().map(|c| c.kind.mode()))
}

/// The children of a semaphore's directory (Curator `InterProcessSemaphoreV2`): its internal
/// lock and its leases.
pub(crate) const SEMAPHORE_LOCKS: &str = "locks";
/// See [`SEMAPHORE_LOCKS`].
pub(crate) const SEMAPHORE_LEASES: &str = "leases";
/// The recipe name of a lease node: `_c_<uuid>-lease-<seq>`.
pub(crate) const LEASE_NAME: &str = "lease-";

/// The sequence of a lease node, `None` for other children.
pub(crate) fn lease_sequence(node: &str) -> Option<u64> {
    sequence_after(node, "-lease-").map(|(_, seq)| seq)
}

/// What our lease nodes carry: the semaphore's number of permits and the owner. Curator stores
/// the permits nowhere (every client passes its own `maxLeases`) and never reads a lease's data,
/// so locksmith keeps it here to refuse a different number while the semaphore is in use.
pub(crate) fn lease_data(permits: u32, owner: &str) -> String {
    format!("permits={permits};owner={owner}")
}

/// The permits and owner in a lease node's data, when it is ours (Curator's nodes carry the
/// client's address or whatever `setNodeData` gave).
pub(crate) fn parse_lease_data(data: &[u8]) -> Option<(u32, String)> {
    let text = std::str::from_utf8(data).ok()?;
    let (permits, owner) = text.strip_prefix("permits=")?.split_once(';')?;
    let owner = owner.strip_prefix("owner=")?;
    Some((permits.parse().ok()?, owner.to_string()))
}

/// Maps a client error: expiry is definite, connection trouble transient.
pub(crate) fn map_err(url: &str, e: zk::Error) -> Error {
    match e {
        zk::Error::SessionExpired => Error::SessionExpired,
        zk::Error::ConnectionLoss | zk::Error::Timeout | zk::Error::NoHosts | zk::Error::ClientClosed => {
            Error::Unavailable { backend: url.to_string(), message: e.to_string() }
        }
        zk::Error::AuthFailed => Error::Auth {
            backend: url.to_string(),
            message: "ZooKeeper refused the digest credentials (user:password@)".into(),
        },
        zk::Error::NoAuth => Error::Auth {
            backend: url.to_string(),
            message: "ZooKeeper denied the operation: the node's ACL does not grant it to these credentials".into(),
        },
        zk::Error::InvalidAcl => {
            Error::Config { backend: url.to_string(), message: "ZooKeeper refused the ACL".into() }
        }
        other => Error::Backend(format!("zookeeper {url}: {other}")),
    }
}

/// Retries `op` on connection loss (the client reconnects by itself) for up to about 5 s.
pub(crate) async fn retry<T, F, Fut>(mut op: F) -> Result<T, zk::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, zk::Error>>,
{
    let mut attempt = 0u32;
    loop {
        match op().await {
            Err(zk::Error::ConnectionLoss) if attempt < 100 => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            r => return r,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seqs(cs: &[Contender]) -> Vec<u64> {
        cs.iter().map(|c| c.seq).collect()
    }

    #[test]
    fn every_recipe_name_is_parsed_with_its_kind() {
        assert_eq!(parse("_c_0f1e-aa-lock-0000000012"), Some((12, Kind::Mutex)));
        assert_eq!(parse("abcdef__lock__0000000003"), Some((3, Kind::Kazoo)));
        assert_eq!(parse("_c_x__lock__y-lock-0000000007"), Some((7, Kind::Mutex)));
        assert_eq!(parse("_c_1-__WRIT__0000000004"), Some((4, Kind::Writer)));
        assert_eq!(parse("_c_1-__READ__0000000005"), Some((5, Kind::Reader)));
        assert_eq!(parse("_c_1-latch-0000000006"), Some((6, Kind::Latch)));
        // A marker inside the uuid part does not decide.
        assert_eq!(parse("_c_-latch-x-__READ__0000000009"), Some((9, Kind::Reader)));
        assert_eq!(parse("child"), None);
        assert_eq!(parse("x-lock-"), None);
        assert_eq!(parse("leases"), None);
        assert_eq!(parse("_c_1-lease-0000000001"), None);
        assert_eq!(lease_sequence("_c_1-lease-0000000001"), Some(1));
        let c = contenders(vec!["a-lock-0000000005".into(), "b__lock__0000000002".into(), "sub".into()]);
        assert_eq!(seqs(&c), vec![2, 5]);
    }

    fn dir(nodes: &[(&str, u64)]) -> Vec<Contender> {
        contenders(nodes.iter().map(|(k, s)| format!("_c_u-{k}{s:010}")).collect())
    }

    /// The sequence a contender waits for, `None` when it holds; panics when it is gone.
    fn waits_for(cs: &[Contender], pos: usize) -> Option<u64> {
        match verdict(cs, &cs[pos].node) {
            Verdict::Holds => None,
            Verdict::WaitsFor(c) => Some(c.seq),
            Verdict::Gone => panic!("{pos} is gone"),
        }
    }

    #[test]
    fn readers_hold_together_until_the_first_writer_and_wait_for_the_nearest_one() {
        let cs = dir(&[("__READ__", 1), ("__READ__", 2), ("__WRIT__", 3), ("__READ__", 4), ("__WRIT__", 5)]);
        assert_eq!(holders(&cs), 2);
        assert_eq!((waits_for(&cs, 0), waits_for(&cs, 1)), (None, None));
        assert_eq!(waits_for(&cs, 2), Some(2), "a writer waits for its predecessor");
        assert_eq!(waits_for(&cs, 3), Some(3), "a reader waits for the nearest writer");
        assert_eq!(waits_for(&cs, 4), Some(4));
        assert!(matches!(verdict(&cs, "_c_u-__READ__0000000009"), Verdict::Gone));
        // A mutex node, a latch or a kazoo node is a writer to readers.
        for k in ["lock-", "latch-"] {
            let cs = dir(&[(k, 1), ("__READ__", 2)]);
            assert_eq!((holders(&cs), waits_for(&cs, 1)), (1, Some(1)), "{k}");
        }
        let cs = contenders(vec!["k__lock__0000000001".into(), "_c_u-__READ__0000000002".into()]);
        assert_eq!((holders(&cs), waits_for(&cs, 1)), (1, Some(1)), "kazoo");
        assert_eq!(holders(&[]), 0);
    }

    #[test]
    fn lease_data_round_trips_and_foreign_data_is_unknown() {
        assert_eq!(parse_lease_data(lease_data(3, "h/1/a;b").as_bytes()), Some((3, "h/1/a;b".to_string())));
        assert_eq!(parse_lease_data(b"127.0.1.1"), None);
        assert_eq!(parse_lease_data(b"permits=x;owner=o"), None);
        assert_eq!(parse_lease_data(&[0xff, 0xfe]), None);
    }
}
