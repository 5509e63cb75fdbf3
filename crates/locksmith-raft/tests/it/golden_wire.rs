//! The exact bytes of what nodes send each other, pinned: the postcard payloads of the
//! `locksmith.raft.v1.Raft` calls (`proto/raft.proto`), each openraft 0.9's own request, and
//! the `Result<response, RaftError>` a node answers with.
//!
//! Nodes of two versions talk during a rolling upgrade, so a change of these bytes (an
//! openraft, postcard or serde upgrade) breaks a cluster mid-upgrade. Both halves are pinned:
//! today's values encode to the golden bytes (what the client and the server write), and a node
//! served over loopback gRPC answers the golden requests with the golden replies (what the
//! server reads and writes, through its real decode path and gate).
//!
//! How the golden bytes were produced: by running these tests on this version (openraft 0.9.25,
//! postcard 1.2.0) and pasting what was written, one field per line. Changing them is a wire
//! break: it needs a compatibility shim or a cluster-wide stop for the upgrade, and an upgrade
//! note, never just new hex. See docs/raft-format.md.

// The replies are openraft's own `Result<_, RaftError>` (224-byte errors): the very values pinned.
#![allow(clippy::result_large_err)]

use std::fmt::Debug;
use std::time::Duration;

use locksmith_raft::network::pb::raft_client::RaftClient;
use locksmith_raft::network::pb::RaftRequest;
use locksmith_raft::types::Entry;
use locksmith_raft::types::LogId;
use locksmith_raft::types::SnapshotMeta;
use locksmith_raft::types::StoredMembership;
use locksmith_raft::types::TypeConfig;
use locksmith_raft::types::Vote;
use locksmith_raft::Command;
use locksmith_raft::NodeId;
use locksmith_raft::Replicated;
use locksmith_raft::Timings;
use openraft::error::Fatal;
use openraft::error::InstallSnapshotError;
use openraft::error::RaftError;
use openraft::error::SnapshotMismatch;
use openraft::raft::AppendEntriesRequest;
use openraft::raft::AppendEntriesResponse;
use openraft::raft::InstallSnapshotRequest;
use openraft::raft::InstallSnapshotResponse;
use openraft::raft::VoteRequest;
use openraft::raft::VoteResponse;
use openraft::EntryPayload;
use openraft::SnapshotSegmentId;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde::Serialize;

use crate::common::assert_golden;
use crate::common::config;
use crate::common::from_hex;
use crate::common::listeners;
use crate::common::Recorder;
use crate::common::TestNode;
use crate::golden_disk::log_id;
use crate::golden_disk::membership;

type VoteReply = Result<VoteResponse<NodeId>, RaftError<NodeId>>;
type AppendReply = Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>;
type SnapshotReply = Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>;

// Postcard: integers are varints, an `Option` is `00` or `01` and the value, an enum its
// variant's index then its fields (`Result`: `00` Ok, `01` Err), a string or byte string its
// length then its bytes; a `LogId` is `term node index`, a `Vote` `term node committed`.

/// `VoteRequest { vote: 5-2 (not committed), last_log_id: Some(4-2-9) }`.
const VOTE_REQUEST: &[&str] = &[
    "050200",    // vote: 5-2, not committed
    "01 040209", // last_log_id: Some(4-2-9)
];
/// `Ok(VoteResponse { vote: 5-2, vote_granted: true, last_log_id: <node 1's> })`.
const VOTE_GRANTED: &[&str] = &["00", "050200", "01", "01 000000"];
/// `AppendEntriesRequest` of leader 5-2 (committed) after node 1's first entry, with a blank,
/// a normal and a membership entry, committing the first.
const APPEND_ENTRIES: &[&str] = &[
    "050201",                                    // vote: 5-2, committed
    "01 000000",                                 // prev_log_id: Some(0-0-0)
    "03",                                        // 3 entries:
    "050201 00",                                 // 5-2-1 Blank
    "050202 01 0e 676f6c64656e20636f6d6d616e64", // 5-2-2 Normal("golden command")
    // 5-2-3 Membership { configs: [{1, 2, 3}], nodes: {N: "10.0.0.N:7531"} }
    "050203 02 01 03 010203 03 \
     01 0d 31302e302e302e313a37353331 02 0d 31302e302e302e323a37353331 03 0d 31302e302e302e333a37353331",
    "01 050201", // leader_commit: Some(5-2-1)
];
/// `Ok(AppendEntriesResponse::Success)`.
const APPEND_SUCCESS: &[&str] = &["00", "00"];
/// An `AppendEntriesRequest` of leader 5-2 after an entry node 1 does not have (9).
const APPEND_PAST_THE_LOG: &[&str] = &["050201", "01 050209", "00", "01 050201"];
/// `Ok(AppendEntriesResponse::Conflict)`.
const APPEND_CONFLICT: &[&str] = &["00", "02"];
/// A heartbeat of a stale leader 3-3.
const APPEND_STALE: &[&str] = &["030301", "00", "00", "00"];
/// `Ok(AppendEntriesResponse::HigherVote(5-2 committed))`.
const APPEND_HIGHER_VOTE: &[&str] = &["00", "03 050201"];
/// `InstallSnapshotRequest`: the whole snapshot up to 5-2-3 in one chunk.
const INSTALL_SNAPSHOT: &[&str] = &[
    "050201",    // vote: 5-2, committed
    "01 050203", // meta.last_log_id: Some(5-2-3)
    "01 050203 01 03 010203 03 \
     01 0d 31302e302e302e313a37353331 02 0d 31302e302e302e323a37353331 03 0d 31302e302e302e333a37353331", // meta.last_membership
    "0c 352d322d332d676f6c64656e", // meta.snapshot_id: "5-2-3-golden"
    "00",                          // offset
    "1a 0200000000000000 0e000000 676f6c64656e20636f6d6d616e64", // data: Recorder's (2, "golden command")
    "01",                          // done
];
/// `Ok(InstallSnapshotResponse { vote: 5-2 committed })`.
const SNAPSHOT_INSTALLED: &[&str] = &["00", "050201"];
/// An `InstallSnapshotRequest` chunk at offset 8 of a transfer node 1 never saw begin.
const SNAPSHOT_CHUNK: &[&str] = &[
    "050201",
    "01 050203",
    "01 050203 01 03 010203 03 \
     01 0d 31302e302e302e313a37353331 02 0d 31302e302e302e323a37353331 03 0d 31302e302e302e333a37353331",
    "0b 352d322d332d6f74686572", // meta.snapshot_id: "5-2-3-other"
    "08",                        // offset
    "07 61206368756e6b",         // data: "a chunk"
    "00",                        // done: false
];
/// `Err(RaftError::APIError(InstallSnapshotError::SnapshotMismatch { expect: (id, 0), got: (id, 8) }))`.
const SNAPSHOT_MISMATCH: &[&str] = &["01", "00", "00", "0b 352d322d332d6f74686572 00", "0b 352d322d332d6f74686572 08"];
/// `Err(RaftError::Fatal(Fatal::Stopped))`: a stopped node's answer to any call.
const STOPPED: &[&str] = &["01", "01", "02"];

fn leader() -> Vote {
    Vote::new_committed(5, 2)
}

fn vote_request() -> VoteRequest<NodeId> {
    VoteRequest { vote: Vote::new(5, 2), last_log_id: Some(log_id(4, 2, 9)) }
}

fn vote_granted() -> VoteReply {
    Ok(VoteResponse { vote: Vote::new(5, 2), vote_granted: true, last_log_id: Some(log_id(0, 0, 0)) })
}

fn append_entries() -> AppendEntriesRequest<TypeConfig> {
    AppendEntriesRequest {
        vote: leader(),
        prev_log_id: Some(log_id(0, 0, 0)),
        entries: vec![
            Entry { log_id: log_id(5, 2, 1), payload: EntryPayload::Blank },
            Entry { log_id: log_id(5, 2, 2), payload: EntryPayload::Normal(Command(b"golden command".to_vec())) },
            Entry { log_id: log_id(5, 2, 3), payload: EntryPayload::Membership(membership()) },
        ],
        leader_commit: Some(log_id(5, 2, 1)),
    }
}

fn append_past_the_log() -> AppendEntriesRequest<TypeConfig> {
    AppendEntriesRequest {
        vote: leader(),
        prev_log_id: Some(log_id(5, 2, 9)),
        entries: vec![],
        leader_commit: Some(log_id(5, 2, 1)),
    }
}

fn append_stale() -> AppendEntriesRequest<TypeConfig> {
    AppendEntriesRequest { vote: Vote::new_committed(3, 3), prev_log_id: None, entries: vec![], leader_commit: None }
}

fn snapshot_meta(id: &str) -> SnapshotMeta {
    SnapshotMeta {
        last_log_id: Some(log_id(5, 2, 3)),
        last_membership: StoredMembership::new(Some(log_id(5, 2, 3)), membership()),
        snapshot_id: id.to_string(),
    }
}

/// The state machine's bytes in the snapshot: [`Recorder`]'s, having applied entry 2.
fn snapshot_data() -> Vec<u8> {
    Recorder { applied: vec![(2, b"golden command".to_vec())] }.snapshot()
}

fn install_snapshot() -> InstallSnapshotRequest<TypeConfig> {
    InstallSnapshotRequest {
        vote: leader(),
        meta: snapshot_meta("5-2-3-golden"),
        offset: 0,
        data: snapshot_data(),
        done: true,
    }
}

fn snapshot_chunk() -> InstallSnapshotRequest<TypeConfig> {
    InstallSnapshotRequest {
        vote: leader(),
        meta: snapshot_meta("5-2-3-other"),
        offset: 8,
        data: b"a chunk".to_vec(),
        done: false,
    }
}

fn snapshot_mismatch() -> SnapshotReply {
    let segment = |offset| SnapshotSegmentId { id: "5-2-3-other".to_string(), offset };
    Err(RaftError::APIError(InstallSnapshotError::SnapshotMismatch(SnapshotMismatch {
        expect: segment(0),
        got: segment(8),
    })))
}

/// `value` encodes to `golden`, and `golden` decodes to `value`.
fn assert_pinned<T: Serialize + DeserializeOwned + PartialEq + Debug>(what: &str, value: &T, golden: &[&str]) {
    assert_golden(what, &postcard::to_stdvec(value).unwrap(), golden);
    let back: T = postcard::from_bytes(&from_hex(golden)).unwrap_or_else(|e| panic!("{what}: undecodable: {e}"));
    assert_eq!(&back, value, "{what}: read back");
}

/// [`assert_pinned`] for `AppendEntriesRequest`, which has no `PartialEq`.
fn assert_append_pinned(what: &str, value: &AppendEntriesRequest<TypeConfig>, golden: &[&str]) {
    assert_golden(what, &postcard::to_stdvec(value).unwrap(), golden);
    let back: AppendEntriesRequest<TypeConfig> =
        postcard::from_bytes(&from_hex(golden)).unwrap_or_else(|e| panic!("{what}: undecodable: {e}"));
    let fields = |r: &AppendEntriesRequest<TypeConfig>| (r.vote, r.prev_log_id, r.entries.clone(), r.leader_commit);
    assert_eq!(fields(&back), fields(value), "{what}: read back");
}

#[test]
fn every_raft_message_encodes_to_its_pinned_bytes_and_decodes_back() {
    assert_pinned("VoteRequest", &vote_request(), VOTE_REQUEST);
    assert_pinned("VoteResponse (granted)", &vote_granted(), VOTE_GRANTED);
    assert_append_pinned("AppendEntriesRequest (entries)", &append_entries(), APPEND_ENTRIES);
    assert_pinned("AppendEntriesResponse (success)", &AppendReply::Ok(AppendEntriesResponse::Success), APPEND_SUCCESS);
    assert_append_pinned("AppendEntriesRequest (past the log)", &append_past_the_log(), APPEND_PAST_THE_LOG);
    assert_pinned(
        "AppendEntriesResponse (conflict)",
        &AppendReply::Ok(AppendEntriesResponse::Conflict),
        APPEND_CONFLICT,
    );
    assert_append_pinned("AppendEntriesRequest (stale leader)", &append_stale(), APPEND_STALE);
    let higher = AppendReply::Ok(AppendEntriesResponse::HigherVote(leader()));
    assert_pinned("AppendEntriesResponse (higher vote)", &higher, APPEND_HIGHER_VOTE);
    assert_pinned("InstallSnapshotRequest (whole)", &install_snapshot(), INSTALL_SNAPSHOT);
    let installed = SnapshotReply::Ok(InstallSnapshotResponse { vote: leader() });
    assert_pinned("InstallSnapshotResponse", &installed, SNAPSHOT_INSTALLED);
    assert_pinned("InstallSnapshotRequest (chunk)", &snapshot_chunk(), SNAPSHOT_CHUNK);
    assert_pinned("RaftError (snapshot mismatch)", &snapshot_mismatch(), SNAPSHOT_MISMATCH);
    assert_pinned("RaftError (stopped)", &VoteReply::Err(RaftError::Fatal(Fatal::Stopped)), STOPPED);
    // The stopped answer is the same whatever the call's API error type.
    assert_pinned("RaftError (stopped, snapshot)", &SnapshotReply::Err(RaftError::Fatal(Fatal::Stopped)), STOPPED);
}

/// Node 1 of a cluster of three whose peers never answer: it initialized the cluster (its log
/// holds the membership at 0-0-0) and waits out a long election timeout, so nothing but the
/// golden requests changes its state while the test runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_answers_the_pinned_requests_with_the_pinned_replies() {
    crate::common::init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let (mut ls, peers) = listeners(3).await;
    ls.truncate(1);
    let mut c = config();
    c.timings = Timings::new(Duration::from_secs(1), Duration::from_secs(30), Duration::from_secs(40)).unwrap();
    let mut node = TestNode::start_with(1, dir.path(), ls.remove(0), peers.clone(), c, None).await;
    let mut client = RaftClient::connect(format!("http://{}", node.addr)).await.unwrap();
    let request = |golden: &[&str]| RaftRequest { target: 1, payload: from_hex(golden) };

    let reply = client.vote(request(VOTE_REQUEST)).await.unwrap().into_inner().payload;
    assert_golden("reply to the pinned VoteRequest", &reply, VOTE_GRANTED);
    let reply = client.append_entries(request(APPEND_ENTRIES)).await.unwrap().into_inner().payload;
    assert_golden("reply to the pinned AppendEntriesRequest", &reply, APPEND_SUCCESS);
    let reply = client.append_entries(request(APPEND_PAST_THE_LOG)).await.unwrap().into_inner().payload;
    assert_golden("reply to an AppendEntriesRequest past the log", &reply, APPEND_CONFLICT);
    let reply = client.append_entries(request(APPEND_STALE)).await.unwrap().into_inner().payload;
    assert_golden("reply to a stale leader's AppendEntriesRequest", &reply, APPEND_HIGHER_VOTE);
    let reply = client.install_snapshot(request(INSTALL_SNAPSHOT)).await.unwrap().into_inner().payload;
    assert_golden("reply to the pinned InstallSnapshotRequest", &reply, SNAPSHOT_INSTALLED);
    assert_eq!(node.applied().applied, vec![(2, b"golden command".to_vec())], "the snapshot was not installed");
    let reply = client.install_snapshot(request(SNAPSHOT_CHUNK)).await.unwrap().into_inner().payload;
    assert_golden("reply to a snapshot chunk out of order", &reply, SNAPSHOT_MISMATCH);

    node.node.shutdown().await.unwrap();
    let reply = client.vote(request(VOTE_REQUEST)).await.unwrap().into_inner().payload;
    assert_golden("a stopped node's reply", &reply, STOPPED);
    node.stop().await;
}

/// openraft 0.9's `VoteRequest` with the trailing field openraft 0.10 added to it
/// (`leadership_transfer`, `#[serde(default)]`).
#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct VoteRequestWithTransfer {
    vote: Vote,
    last_log_id: Option<LogId>,
    #[serde(default)]
    leadership_transfer: bool,
}

/// What postcard does when the two sides' types differ by a trailing field, which every
/// openraft upgrade must be checked against:
/// - a payload with one more trailing field than the reader's type decodes, the field ignored
///   (`postcard::from_bytes`, which the server and the client use, ignores bytes left over):
///   an old node reads a newer node's longer message;
/// - a payload with one field fewer fails, `#[serde(default)]` or not (postcard is not
///   self-describing: it cannot tell a missing field from the end of the input): a new node
///   cannot read an old node's message.
///
/// So a field added at the end of a request or response type (as openraft 0.10 adds
/// `leadership_transfer` to `VoteRequest`) is a wire break for a rolling upgrade, unless the
/// new side decodes the old shape (pad the payload, or decode a struct of the old shape).
#[test]
fn postcard_ignores_an_extra_trailing_field_but_fails_on_a_missing_one() {
    let old = vote_request();
    let new = VoteRequestWithTransfer { vote: old.vote, last_log_id: old.last_log_id, leadership_transfer: true };
    let old_bytes = postcard::to_stdvec(&old).unwrap();
    let new_bytes = postcard::to_stdvec(&new).unwrap();
    assert_eq!(new_bytes, [old_bytes.as_slice(), &[1]].concat(), "the new field is appended");

    assert_eq!(postcard::from_bytes::<VoteRequest<NodeId>>(&new_bytes).unwrap(), old, "an extra field is ignored");
    let err = postcard::from_bytes::<VoteRequestWithTransfer>(&old_bytes).unwrap_err();
    assert_eq!(err, postcard::Error::DeserializeUnexpectedEnd, "a missing field fails despite serde(default)");
    // The shim a new node would need: the old payload padded with the field's default.
    let padded = [old_bytes.as_slice(), &[0]].concat();
    let read = postcard::from_bytes::<VoteRequestWithTransfer>(&padded).unwrap();
    assert_eq!((read.vote, read.last_log_id, read.leadership_transfer), (old.vote, old.last_log_id, false));
}
