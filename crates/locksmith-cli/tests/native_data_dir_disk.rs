//! What `locksmith serve` does with the bytes of its data directory (`locksmith-disk`):
//! directories written by the previous release open and continue every lock's tokens (single
//! node and cluster node); a cut Raft log exits 65 naming the file and offset while a torn tail
//! is dropped; a full disk stops the server with exit 74 without losing an acknowledged grant,
//! and the server restarts in place once a little space is back.
//!
//! The full disk is simulated with `RLIMIT_FSIZE` set in the server's process (writes and
//! `fallocate` past the limit fail with `EFBIG`, which the server treats like `ENOSPC`): no
//! root, no loop mount. It does not cover a file system that is full for every file at once
//! (a new directory entry or the `LOCK` file failing), nor `ENOSPC` reported late by `fsync`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use locksmith_testkit::{free_port, spawn, wait_listening, write_cluster_secret, ChildProcess};

const BIN: &str = env!("CARGO_BIN_EXE_locksmith");

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/data-dirs").join(name)
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else if e.file_name() != "README.md" {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// `locksmith serve` on `dir` and a free port, with `extra` arguments and, with `fsize`, a
/// file size limit (its SIGXFSZ ignored, so writes past it fail with EFBIG instead).
fn start(dir: &Path, extra: &[&str], fsize: Option<u64>) -> (ChildProcess, u16) {
    let port = free_port();
    let mut cmd = Command::new(BIN);
    cmd.arg("serve")
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .arg("--data-dir")
        .arg(dir)
        .args(extra)
        .env("LOCKSMITH_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if let Some(limit) = fsize {
        use std::os::unix::process::CommandExt;
        // SAFETY: only async-signal-safe calls (setrlimit, sigaction) between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                use nix::sys::resource::{setrlimit, Resource};
                use nix::sys::signal::{signal, SigHandler, Signal};
                setrlimit(Resource::RLIMIT_FSIZE, limit, limit)?;
                signal(Signal::SIGXFSZ, SigHandler::SigIgn)?;
                Ok(())
            });
        }
    }
    (spawn("locksmith serve", &mut cmd), port)
}

/// Like [`start`], and waits until it listens.
fn start_listening(dir: &Path, extra: &[&str], fsize: Option<u64>) -> (ChildProcess, u16) {
    let (mut p, port) = start(dir, extra, fsize);
    if !wait_listening(port, Duration::from_secs(20)) {
        let (code, stderr) = exit_of(&mut p);
        panic!("serve did not listen (exit {code:?}): {stderr}");
    }
    (p, port)
}

/// The exit code and stderr of a server that stops by itself (within 20 s).
fn exit_of(p: &mut ChildProcess) -> (Option<i32>, String) {
    let status = p.wait_timeout(Duration::from_secs(20));
    let mut stderr = String::new();
    if let Some(mut e) = p.take_stderr() {
        let _ = std::io::Read::read_to_string(&mut e, &mut stderr);
    }
    (status.and_then(|s| s.code()), stderr)
}

/// Locks each of `names` once on the server at `port` and returns the tokens.
async fn tokens(port: u16, names: &[&str]) -> Vec<u64> {
    let c = locksmith::connect(&format!("locksmith://127.0.0.1:{port}")).await.unwrap();
    let mut out = Vec::new();
    for name in names {
        let g = c.lock(name).await.unwrap();
        out.push(g.token());
        g.unlock().await.unwrap();
    }
    c.close().await;
    out
}

/// The locks of the fixtures and the highest token each issued (fixtures' README).
const FIXTURE_LOCKS: [(&str, u64); 3] = [("jobs/nightly", 2), ("fence", 3), ("ünï/☃", 1)];

async fn assert_continues_above_the_fixture(port: u16) {
    let names: Vec<&str> = FIXTURE_LOCKS.iter().map(|(n, _)| *n).collect();
    let got = tokens(port, &names).await;
    for ((name, highest), token) in FIXTURE_LOCKS.iter().zip(got) {
        assert!(token > *highest, "{name}: token {token} does not continue above {highest}");
    }
}

/// A single node's data directory written by the previous release opens and continues every
/// lock above every token it issued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_node_data_dir_of_the_previous_release_continues_its_tokens() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    copy_dir(&fixture("single"), &data);
    let (_server, port) = start_listening(&data, &[], None);
    assert_continues_above_the_fixture(port).await;
}

fn cluster_args(tmp: &Path) -> Vec<String> {
    let secret = write_cluster_secret(tmp);
    ["--node-id", "1", "--join", "--cluster-secret-file"]
        .map(String::from)
        .into_iter()
        .chain([secret.display().to_string()])
        .collect()
}

/// A cluster node's data directory (its Raft log and vote) written by the previous release
/// opens as that member, leads (a one-node cluster) and continues every lock's tokens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_node_data_dir_of_the_previous_release_continues_its_tokens() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    copy_dir(&fixture("cluster-node"), &data);
    let args = cluster_args(tmp.path());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (_server, port) = start_listening(&data, &args, None);
    assert_continues_above_the_fixture(port).await;
}

/// A Raft log cut below what was committed has lost acknowledged entries: `serve` exits 65
/// naming the file and the offset where it ends, and changes nothing; never an openraft error
/// with exit 1.
#[test]
fn a_cut_raft_log_exits_65_naming_the_file_and_offset() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    copy_dir(&fixture("cluster-node"), &data);
    let log = data.join("raft").join("log");
    let bytes = std::fs::read(&log).unwrap();
    let cut = &bytes[..bytes.len() / 2];
    std::fs::write(&log, cut).unwrap();
    let args = cluster_args(tmp.path());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (mut p, _) = start(&data, &args, None);
    let (code, stderr) = exit_of(&mut p);
    assert_eq!(code, Some(65), "{stderr}");
    assert!(stderr.contains("data directory is corrupt"), "{stderr}");
    assert!(stderr.contains(&log.display().to_string()) && stderr.contains("ends at offset"), "{stderr}");
    assert!(!stderr.contains("Failed to get log entries"), "an openraft message: {stderr}");
    assert_eq!(std::fs::read(&log).unwrap(), cut, "nothing changed");
}

/// A torn last frame of the Raft log (a crash mid-append) is not damage: it is dropped and the
/// node goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_torn_raft_log_tail_is_dropped_and_the_node_continues_its_tokens() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    copy_dir(&fixture("cluster-node"), &data);
    let log = data.join("raft").join("log");
    let mut bytes = std::fs::read(&log).unwrap();
    // Half of a frame: a header claiming 64 bytes, then 10 of them.
    bytes.extend(64u32.to_le_bytes());
    bytes.extend([0xAB; 14]);
    std::fs::write(&log, &bytes).unwrap();
    let args = cluster_args(tmp.path());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (_server, port) = start_listening(&data, &args, None);
    assert_continues_above_the_fixture(port).await;
}

/// Bytes any one file of the data directory may grow to while the disk is "full": room for the
/// token floor file (two 4 KiB slots) and a small log, not for the 16 MiB preallocation.
const SMALL: u64 = 16 * 1024;

/// A full disk stops the server (exit 74, naming the data directory and "no space left")
/// before it acknowledges a grant it could not sync; the restart in place works with little
/// space (no 16 MiB preallocation demanded) and, with space back, continues every lock above
/// every token acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_data_dir_stops_the_server_with_74_and_it_restarts_in_place() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let names = ["a", "b", "c"];
    // History with plenty of space: the log is preallocated to 16 MiB.
    let (mut first, port) = start_listening(&data, &[], None);
    let mut highest: HashMap<&str, u64> = names.iter().copied().zip(tokens(port, &names).await).collect();
    first.kill9();

    // Little space left: the start must not need the preallocation.
    let (mut small, port) = start_listening(&data, &[], Some(SMALL));
    let c = locksmith::connect(&format!("locksmith://127.0.0.1:{port}")).await.unwrap();
    let mut stopped = false;
    for i in 0..10_000 {
        let name = names[i % names.len()];
        match tokio::time::timeout(Duration::from_secs(15), c.lock(name)).await {
            Ok(Ok(g)) => {
                let t = highest.entry(name).or_default();
                *t = (*t).max(g.token());
                let _ = tokio::time::timeout(Duration::from_secs(15), g.unlock()).await;
            }
            _ => {
                stopped = true;
                break;
            }
        }
    }
    c.close().await;
    assert!(stopped, "the log never filled {SMALL} bytes");
    let (code, stderr) = exit_of(&mut small);
    assert_eq!(code, Some(74), "{stderr}");
    assert!(stderr.contains("no space left") && stderr.contains(&data.display().to_string()), "{stderr}");

    // Space is back: the same directory starts and no acknowledged token repeats.
    let (_again, port) = start_listening(&data, &[], None);
    let got = tokens(port, &names).await;
    for (name, token) in names.iter().zip(got) {
        assert!(token > highest[name], "{name}: {token} after {} was acknowledged", highest[name]);
    }
}

/// Without room even for the compacted log a start exits 74 naming the data directory, and the
/// directory still opens once there is space.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_dir_without_room_to_start_exits_74_and_opens_once_space_is_back() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    copy_dir(&fixture("single"), &data);
    let (mut p, _) = start(&data, &[], Some(16));
    let (code, stderr) = exit_of(&mut p);
    assert_eq!(code, Some(74), "{stderr}");
    assert!(stderr.contains("no space left for the data directory"), "{stderr}");
    assert!(stderr.contains(&data.display().to_string()), "{stderr}");
    let (_server, port) = start_listening(&data, &[], None);
    assert_continues_above_the_fixture(port).await;
}

/// A cluster node without room to create its Raft files exits 74 as well, naming the data
/// directory.
#[test]
fn a_cluster_node_data_dir_without_room_to_start_exits_74() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let args = cluster_args(tmp.path());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (mut p, _) = start(&data, &args, Some(16));
    let (code, stderr) = exit_of(&mut p);
    assert_eq!(code, Some(74), "{stderr}");
    assert!(stderr.contains("no space left for the data directory"), "{stderr}");
    assert!(stderr.contains(&data.display().to_string()), "{stderr}");
}
