//! Fencing tokens never repeat, whatever happens to the native server's log: a damaged data
//! directory the server can recognise as damaged (a log emptied, cut inside its header, cut
//! below what was synced, a flipped byte, the token floor file gone) makes `locksmith serve`
//! exit 65 and change nothing; a cut it cannot recognise (a lost tail) only loses records that
//! the separately kept token floor covers, so every lock continues above every token issued.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use locksmith::LockOptions;
use locksmith_testkit::NativeServer;

const BIN: &str = env!("CARGO_BIN_EXE_locksmith");

/// A server whose log holds grants of `x`, `y` and, last, `z`; returns it (stopped, kill -9)
/// and the highest token seen on each lock.
async fn server_with_history() -> (NativeServer, [u64; 3]) {
    let mut s = NativeServer::start(BIN.as_ref());
    let c = locksmith::connect(&s.url()).await.unwrap();
    let mut seen = [0; 3];
    for round in 0..40 {
        for (i, name) in ["x", "y", "z"].into_iter().enumerate() {
            // `z` only in the last rounds: its grants sit at the end of the log.
            if name == "z" && round < 30 {
                continue;
            }
            let g = c.lock(name).await.unwrap();
            seen[i] = seen[i].max(g.token());
            g.unlock().await.unwrap();
        }
    }
    c.close().await;
    s.kill9();
    (s, seen)
}

fn wal(s: &NativeServer) -> std::path::PathBuf {
    s.data_dir().join("data").join("wal")
}

/// The log's length up to its last non-zero byte (the file is preallocated with zeros).
fn used_len(path: &Path) -> usize {
    let bytes = std::fs::read(path).unwrap();
    bytes.iter().rposition(|b| *b != 0).map_or(0, |i| i + 1)
}

/// Every file of the data directory, by name.
fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut all: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap()))
        .collect();
    all.sort();
    all
}

/// `locksmith serve` on the damaged directory exits 65, says the data directory is corrupt and
/// why, and leaves every file as it was.
fn refused_and_untouched(s: &NativeServer, why: &str) {
    let data = s.data_dir().join("data");
    let before = files(&data);
    let mut cmd = Command::new(BIN);
    cmd.arg("serve")
        .arg("--listen")
        .arg(format!("127.0.0.1:{}", s.port()))
        .arg("--data-dir")
        .arg(&data)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut p = locksmith_testkit::spawn("locksmith serve", &mut cmd);
    let status = p.wait_timeout(Duration::from_secs(20));
    let mut stderr = String::new();
    if let Some(mut e) = p.take_stderr() {
        let _ = std::io::Read::read_to_string(&mut e, &mut stderr);
    }
    assert_eq!(status.and_then(|s| s.code()), Some(65), "{stderr}");
    assert!(stderr.contains("corrupt") && stderr.contains(why), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(files(&data), before, "the damaged directory was changed");
}

/// A server started on the damaged directory grants every lock with a token above every token
/// issued before the damage.
async fn continues_above(s: &mut NativeServer, seen: [u64; 3]) {
    s.restart();
    let c = locksmith::connect(&s.url()).await.unwrap();
    for (i, name) in ["x", "y", "z"].into_iter().enumerate() {
        let g = c.lock_with(name, LockOptions::new().timeout(Duration::from_secs(10))).await.unwrap();
        assert!(g.token() > seen[i], "{name}: token {} after {} before the damage", g.token(), seen[i]);
        g.unlock().await.unwrap();
    }
    let fresh = c.lock("never-used").await.unwrap();
    assert!(fresh.token() > seen.into_iter().max().unwrap_or(0), "a new lock starts above the floor too");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_truncated_to_nothing_is_refused() {
    let (s, _) = server_with_history().await;
    std::fs::OpenOptions::new().write(true).open(wal(&s)).unwrap().set_len(0).unwrap();
    refused_and_untouched(&s, "no generation");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_truncated_to_its_first_16_bytes_is_refused() {
    let (s, _) = server_with_history().await;
    std::fs::OpenOptions::new().write(true).open(wal(&s)).unwrap().set_len(16).unwrap();
    refused_and_untouched(&s, "no generation");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_with_a_flipped_byte_is_refused() {
    let (s, _) = server_with_history().await;
    let mut bytes = std::fs::read(wal(&s)).unwrap();
    let mid = used_len(&wal(&s)) / 2;
    bytes[mid] ^= 0x40;
    std::fs::write(wal(&s), bytes).unwrap();
    refused_and_untouched(&s, "checksum mismatch");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_token_floor_file_is_refused() {
    let (s, _) = server_with_history().await;
    std::fs::remove_file(s.data_dir().join("data").join("tokens")).unwrap();
    refused_and_untouched(&s, "`tokens` is missing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_log_is_refused() {
    let (s, _) = server_with_history().await;
    std::fs::remove_file(wal(&s)).unwrap();
    refused_and_untouched(&s, "the log is missing");
}

/// A log cut short right after its first grants (below what was synced when the token floor was
/// first written) is recognised as truncated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_cut_below_what_was_synced_is_refused() {
    let (s, _) = server_with_history().await;
    std::fs::OpenOptions::new().write(true).open(wal(&s)).unwrap().set_len(40).unwrap();
    refused_and_untouched(&s, "truncated");
}

/// A log that lost its tail (cut in the middle of its later records, beyond anything the
/// server can check) still never repeats a token: grants of every lock, including one whose
/// every grant was lost, continue above the floor.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_cut_in_the_middle_of_its_tail_never_repeats_a_token() {
    let (mut s, seen) = server_with_history().await;
    let cut = used_len(&wal(&s)) * 3 / 4;
    std::fs::OpenOptions::new().write(true).open(wal(&s)).unwrap().set_len(cut as u64).unwrap();
    continues_above(&mut s, seen).await;
}
