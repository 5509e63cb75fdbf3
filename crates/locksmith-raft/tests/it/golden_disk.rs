//! The exact bytes of a node's data directory (`log`, `meta`, `snapshot`), pinned.
//!
//! The files hold openraft 0.9's own types (log ids, votes, entries, memberships, snapshot
//! metadata) encoded with postcard, inside this crate's framing (see `src/store/`). A change of
//! openraft, postcard or serde's derives could change those bytes without any other test
//! noticing, and a node would then fail to read, or misread, a data directory written before.
//! So these tests pin both directions:
//! - a directory written today through the store (`open_storage`, openraft's storage traits)
//!   holds exactly the golden bytes;
//! - the golden bytes, put in a directory, read back through the same store as the same values,
//!   and opening them changes nothing. This half is what protects existing data directories.
//!
//! How the golden bytes were produced: by running this test against the store of this version
//! (openraft 0.9.25, postcard 1.2.0) and pasting what it wrote, one frame or field per line.
//! Changing them is a data-format break: it needs a migration of existing directories (or a
//! reader of both formats) and an upgrade note, never just new hex. See docs/raft-format.md.

use std::collections::BTreeMap;
use std::collections::BTreeSet;
use std::io::Cursor;
use std::path::Path;

use locksmith_disk::SLOT;
use locksmith_raft::store::open_storage;
use locksmith_raft::types::Entry;
use locksmith_raft::types::LogId;
use locksmith_raft::types::SnapshotMeta;
use locksmith_raft::types::StoredMembership;
use locksmith_raft::types::Vote;
use locksmith_raft::Command;
use locksmith_raft::Node;
use locksmith_raft::Replicated;
use openraft::storage::RaftLogStorage;
use openraft::storage::RaftLogStorageExt;
use openraft::storage::RaftStateMachine;
use openraft::CommittedLeaderId;
use openraft::EntryPayload;
use openraft::Membership;
use openraft::RaftLogReader;

use crate::common::assert_golden;
use crate::common::from_hex;
use crate::common::Recorder;

/// `log`: the magic, then one frame (`len: u32 LE | crc32: u32 LE | postcard record`) per line.
/// Postcard: integers are varints, an `Option` is `00` or `01` and the value, an enum its
/// variant's index then its fields, a string or byte string its length then its bytes; a
/// `LogId` is `term node index`, a `Vote` `term node committed`.
const LOG: &[&str] = &[
    "4c4f434b534d4954482d52414654310a", // "LOCKSMITH-RAFT1\n"
    "04000000 f888f994 02 010104",      // Purge { upto: 1-1-4 }
    "05000000 e4a19e10 00 020105 00",   // Entry { 2-1-5, Blank }
    "14000000 3e396534 00 020106 01 0e 676f6c64656e20636f6d6d616e64", // Entry { 2-1-6, Normal("golden command") }
    // Entry { 2-1-7, Membership { configs: [{1, 2, 3}], nodes: {N: "10.0.0.N:7531"} } }
    "38000000 d3a63ce5 00 020107 02 01 03010203 03 \
     01 0d 31302e302e302e313a37353331 02 0d 31302e302e302e323a37353331 03 0d 31302e302e302e333a37353331",
    "0c000000 79abc121 00 020108 01 06 646f6f6d6564", // Entry { 2-1-8, Normal("doomed") }
    "02000000 8cab1956 01 08",                        // Truncate { since: 8 }
];

/// `meta`: the used head of each 4 KiB slot (`magic | seq: u64 LE | len: u32 LE | postcard
/// Meta { vote, committed } | crc32`); the rest of the file is zeros.
const META_SLOTS: [&[&str]; 2] = [
    // "LSRAFTM1", seq 3 (the unsynced committed id never goes to the slot of the synced vote),
    // Meta { vote: Some(2-1, committed), committed: Some(2-1-6) }
    &["4c53524146544d31 0300000000000000 08000000", "01 020101 01 020106", "3b5acb6a"],
    // seq 2: Meta { vote: Some(2-1, committed), committed: None } (seq 1, the empty Meta of a
    // new directory, was here)
    &["4c53524146544d31 0200000000000000 05000000", "01 020101 00", "4e8235de"],
];

/// `snapshot`: the magic, `meta len: u32 LE | data len: u64 LE | crc32`, the postcard
/// `SnapshotMeta`, the state machine's bytes.
const SNAPSHOT: &[&str] = &[
    "4c4f434b534d4954482d534e4150310a",   // "LOCKSMITH-SNAP1\n"
    "48000000 1800000000000000 57a4145f", // meta 72 bytes, data 24 bytes, crc32
    "01 010104",                          // last_log_id: Some(1-1-4)
    // last_membership: StoredMembership { Some(1-1-1), the membership of entry 7 above }
    "01 010101 01 03010203 03 \
     01 0d 31302e302e302e313a37353331 02 0d 31302e302e302e323a37353331 03 0d 31302e302e302e333a37353331",
    "0c 312d312d342d676f6c64656e",                        // snapshot_id: "1-1-4-golden"
    "0300000000000000 0c000000 676f6c64656e207374617465", // Recorder's state: (3, "golden state")
];

pub(crate) fn log_id(term: u64, node: u64, index: u64) -> LogId {
    LogId::new(CommittedLeaderId::new(term, node), index)
}

/// Voters 1, 2 and 3 at `10.0.0.N:7531`.
pub(crate) fn membership() -> Membership<u64, Node> {
    let nodes: BTreeMap<u64, Node> = (1..=3).map(|id| (id, Node::new(format!("10.0.0.{id}:7531")))).collect();
    Membership::new(vec![BTreeSet::from([1, 2, 3])], nodes)
}

/// The live entries: one of each payload.
fn entries() -> Vec<Entry> {
    vec![
        Entry { log_id: log_id(2, 1, 5), payload: EntryPayload::Blank },
        Entry { log_id: log_id(2, 1, 6), payload: EntryPayload::Normal(Command(b"golden command".to_vec())) },
        Entry { log_id: log_id(2, 1, 7), payload: EntryPayload::Membership(membership()) },
    ]
}

fn vote() -> Vote {
    Vote::new_committed(2, 1)
}

fn committed() -> LogId {
    log_id(2, 1, 6)
}

/// The snapshot's state: what [`Recorder`] applied up to entry 4.
fn machine_state() -> Recorder {
    Recorder { applied: vec![(3, b"golden state".to_vec())] }
}

fn snapshot_meta() -> SnapshotMeta {
    SnapshotMeta {
        last_log_id: Some(log_id(1, 1, 4)),
        last_membership: StoredMembership::new(Some(log_id(1, 1, 1)), membership()),
        snapshot_id: "1-1-4-golden".to_string(),
    }
}

/// Writes a directory through the store as a follower would: it installs a snapshot up to
/// entry 4 and purges the log up to it, votes, appends entries 5 to 8, has entry 8 truncated
/// (a conflicting suffix) and learns that entry 6 is committed. Every record kind of `log`
/// (entry, purge, truncate) and every field of `meta` is written.
async fn write_directory(dir: &Path) {
    let (mut log, mut sm) = open_storage(dir, Recorder::default()).unwrap();
    sm.install_snapshot(&snapshot_meta(), Box::new(Cursor::new(Recorder::snapshot(&machine_state())))).await.unwrap();
    log.purge(log_id(1, 1, 4)).await.unwrap();
    log.save_vote(&vote()).await.unwrap();
    let doomed = Entry { log_id: log_id(2, 1, 8), payload: EntryPayload::Normal(Command(b"doomed".to_vec())) };
    log.blocking_append(entries().into_iter().chain([doomed])).await.unwrap();
    log.truncate(log_id(2, 1, 8)).await.unwrap();
    log.save_committed(Some(committed())).await.unwrap();
}

/// Asserts that `bytes` are `golden` followed by zeros only (preallocated or unused space).
fn assert_golden_then_zeros(what: &str, bytes: &[u8], golden: &[&str]) {
    let len = from_hex(golden).len().min(bytes.len());
    assert_golden(what, &bytes[..len], golden);
    assert!(bytes[len..].iter().all(|b| *b == 0), "{what}: non-zero bytes after the pinned ones");
}

#[tokio::test]
async fn a_data_directory_written_by_this_version_holds_exactly_the_pinned_bytes() {
    let dir = tempfile::tempdir().unwrap();
    write_directory(dir.path()).await;

    let log = std::fs::read(dir.path().join("log")).unwrap();
    let used = log.iter().rposition(|b| *b != 0).map_or(0, |i| i + 1);
    assert_golden("log", &log[..used], LOG);
    assert_golden_then_zeros("log", &log, LOG);

    let meta = std::fs::read(dir.path().join("meta")).unwrap();
    for (i, golden) in META_SLOTS.iter().enumerate() {
        let slot = &meta[(i * SLOT as usize).min(meta.len())..((i + 1) * SLOT as usize).min(meta.len())];
        let used = slot.iter().rposition(|b| *b != 0).map_or(0, |i| i + 1);
        assert_golden(&format!("meta slot {i}"), &slot[..used], golden);
    }

    assert_golden("snapshot", &std::fs::read(dir.path().join("snapshot")).unwrap(), SNAPSHOT);
}

/// A directory holding only the golden bytes (as an earlier version left it, without its
/// preallocated zeros) opens through the store, which reads every value back and rewrites
/// nothing.
#[tokio::test]
async fn a_data_directory_of_the_pinned_bytes_reads_back_every_value() {
    let dir = tempfile::tempdir().unwrap();
    let mut meta = vec![0u8; 2 * SLOT as usize];
    for (i, golden) in META_SLOTS.iter().enumerate() {
        let bytes = from_hex(golden);
        meta[i * SLOT as usize..][..bytes.len()].copy_from_slice(&bytes);
    }
    let files = [("log", from_hex(LOG)), ("meta", meta), ("snapshot", from_hex(SNAPSHOT))];
    for (name, bytes) in &files {
        std::fs::write(dir.path().join(name), bytes).unwrap();
    }

    let (mut log, mut sm) = open_storage(dir.path(), Recorder::default()).unwrap();
    let state = log.get_log_state().await.unwrap();
    assert_eq!((state.last_purged_log_id, state.last_log_id), (Some(log_id(1, 1, 4)), Some(log_id(2, 1, 7))));
    assert_eq!(log.try_get_log_entries(0..100).await.unwrap(), entries());
    assert_eq!(log.read_vote().await.unwrap(), Some(vote()));
    assert_eq!(log.read_committed().await.unwrap(), Some(committed()));

    let snapshot = sm.get_current_snapshot().await.unwrap().expect("the pinned snapshot");
    assert_eq!(snapshot.meta, snapshot_meta());
    assert_eq!(snapshot.snapshot.into_inner(), Recorder::snapshot(&machine_state()));
    let (applied, membership) = sm.applied_state().await.unwrap();
    assert_eq!((applied, membership), (snapshot_meta().last_log_id, snapshot_meta().last_membership));
    assert_eq!(*sm.replica().lock().unwrap().machine(), machine_state());
    drop((log, sm));

    for (name, bytes) in &files {
        assert_eq!(&std::fs::read(dir.path().join(name)).unwrap(), bytes, "{name} was rewritten on open");
    }
}
