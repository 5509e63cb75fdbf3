//! The native server as an operator sees it: restarts after `kill -9`, bad input, damaged data
//! directories, clean stops.

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use locksmith::LockOptions;
use locksmith_testkit::{free_port, spawn, NativeServer};
use nix::sys::signal::Signal;

const BIN: &str = env!("CARGO_BIN_EXE_locksmith");

fn server() -> NativeServer {
    NativeServer::start(BIN.as_ref())
}

fn locksmith(args: &[&str]) -> Output {
    Command::new(BIN).args(args).stdin(Stdio::null()).output().unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// After `kill -9` and a restart on the same data dir, a holder that reconnects keeps its lock,
/// nobody else is granted it meanwhile, and the next token is above every token issued before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holder_keeps_its_lock_across_a_server_crash_and_tokens_continue() {
    let mut s = server();
    let holder = locksmith::connect_with_ttl(&s.url(), Duration::from_secs(2)).await.unwrap();
    let other = locksmith::connect_with_ttl(&s.url(), Duration::from_secs(2)).await.unwrap();
    let mut last = 0;
    for _ in 0..5 {
        let g = holder.lock("crash").await.unwrap();
        assert!(g.token() > last);
        last = g.token();
        g.unlock().await.unwrap();
    }
    let g = holder.lock("crash").await.unwrap();
    let held_token = g.token();

    s.kill9();
    s.restart();

    // Until the holder's session resumes or expires, nobody else may have the lock.
    for _ in 0..10 {
        if let Some(stolen) = other.try_lock("crash").await.unwrap_or(None) {
            assert!(!g.is_held(), "two holders after a restart: token {} while {held_token} is held", stolen.token());
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(g.is_held(), "the holder's session should have resumed on the restarted server");
    assert!(g.unlock().await.unwrap(), "the resumed hold is still ours");
    let next = other.lock_with("crash", LockOptions::new().timeout(Duration::from_secs(5))).await.unwrap();
    assert!(next.token() > held_token, "token {} after restart is not above {held_token}", next.token());
    next.unlock().await.unwrap();
}

/// A holder that dies together with the server keeps the lock reserved for one TTL after the
/// restart (its grace period), then the lock is granted with a higher token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restored_hold_whose_client_is_gone_expires_one_ttl_after_restart() {
    let mut s = server();
    let mut cmd = Command::new(BIN);
    cmd.args([
        "run",
        "orphan",
        "--backend",
        &s.url(),
        "--ttl",
        "1s",
        "--",
        "sh",
        "-c",
        "echo $LOCKSMITH_TOKEN; exec sleep 60",
    ])
    .stdin(Stdio::null())
    .stdout(Stdio::piped());
    let mut holder = spawn("locksmith run", &mut cmd);
    let mut line = String::new();
    let out = holder.take_stdout().unwrap();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut line).unwrap();
    let token: u64 = line.trim().parse().unwrap();
    // Holder and server die together: no release, no keep-alive, no resume.
    let sleeper =
        std::fs::read_to_string(format!("/proc/{}/task/{}/children", holder.pid(), holder.pid())).unwrap_or_default();
    holder.kill9();
    for pid in sleeper.split_whitespace().filter_map(|p| p.parse::<i32>().ok()) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), Signal::SIGKILL);
    }
    s.kill9();
    s.restart();
    let restarted = std::time::Instant::now();
    let other = locksmith::connect_with_ttl(&s.url(), Duration::from_secs(2)).await.unwrap();
    assert!(other.try_lock("orphan").await.unwrap().is_none(), "the restored hold was granted away at once");
    let g = other.lock_with("orphan", LockOptions::new().timeout(Duration::from_secs(5))).await.unwrap();
    let waited = restarted.elapsed();
    assert!(waited >= Duration::from_millis(900), "granted after {waited:?}, before the restored TTL ran out");
    assert!(g.token() > token);
}

/// Tokens seen by a client hammering a lock never repeat or go backwards across repeated
/// `kill -9` + restart of the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_never_go_backwards_across_repeated_crashes() {
    let mut s = server();
    let url = s.url();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let worker = {
        let (stop, seen) = (stop.clone(), seen.clone());
        tokio::spawn(async move {
            let c = locksmith::connect_with_ttl(&url, Duration::from_millis(500)).await.unwrap();
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let got = c.lock_with("hammer", LockOptions::new().timeout(Duration::from_millis(300))).await;
                if let Ok(g) = got {
                    seen.lock().unwrap().push(g.token());
                    let _ = g.unlock().await;
                } else {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        })
    };
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_millis(400)).await;
        s.kill9();
        s.restart();
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    worker.await.unwrap();
    let seen = seen.lock().unwrap();
    assert!(seen.len() > 20, "too few acquisitions to mean anything: {}", seen.len());
    for w in seen.windows(2) {
        assert!(w[1] > w[0], "token {} came after {}", w[1], w[0]);
    }
}

/// Bad arguments exit 2 with a message; nothing runs.
#[test]
fn bad_arguments_exit_2_with_a_clear_message() {
    let port = free_port().to_string();
    let url = format!("locksmith://127.0.0.1:{port}");
    for (args, needle) in [
        (vec!["run", "", "--backend", &url, "--", "true"], "lock name is empty"),
        (vec!["run", "x\u{1}y", "--backend", &url, "--", "true"], "control character"),
        (
            vec!["run", "x", "--backend", &url, "--ttl", "0s", "--", "true"],
            "\"0s\" is outside the TTL range 100ms to 1h",
        ),
        (vec!["run", "x", "--backend", &url, "--ttl", "2h", "--", "true"], "\"2h\" is outside the TTL range"),
        (vec!["run", "x", "--backend", &url, "--ttl", "10", "--", "true"], "\"10\" is not a duration"),
        (vec!["run", "x", "--backend", &url, "--timeout", "1m30", "--", "true"], "\"1m30\" is not a duration"),
        (vec!["run", "x", "--backend", "gopher://h:1", "--", "true"], "unknown scheme"),
        (vec!["run", "x", "--backend", &url], "put `--` before the command"),
        (vec!["run", "x", "--backend", &url, "echo", "hi"], "put `--` before the command"),
        (vec!["status", "--backend", "nonsense"], "expected scheme"),
        (vec!["serve", "--listen", "127.0.0.1:99999"], "\"99999\" is not a port number"),
        (vec!["serve", "--node-id", "1", "--peers", "1=127.0.0.1:0"], "\"127.0.0.1:0\" is not HOST:PORT"),
        (vec!["serve", "--node-id", "1", "--peers", "1=:7531"], "\":7531\" is not HOST:PORT"),
        (
            vec!["serve", "--node-id", "1", "--peers", "1=127.0.0.1:7531", "--routes", "1=a b:1"],
            "\"a b:1\" is not HOST:PORT",
        ),
    ] {
        let o = locksmith(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(needle), "{args:?}: {:?} not in {}", needle, stderr(&o));
    }
    let long = "x".repeat(257);
    let o = locksmith(&["run", &long, "--backend", &url, "--", "true"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

/// `status` reads as a person would write it: the holder's owner carries its host and pid,
/// time left is `9.9s`, and `--json` of a lock never used is an object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_owner_host_and_pid_and_human_durations() {
    let server = server();
    let url = server.url();
    let c = locksmith::connect(&url).await.unwrap();
    let g = c.lock("report").await.unwrap();
    let o = locksmith(&["status", "--backend", &url]);
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let row = out.lines().find(|l| l.starts_with("report")).unwrap_or_else(|| panic!("{out}"));
    assert!(row.contains(&format!("/{}/", std::process::id())), "owner without this pid: {out}");
    let left = row.split_whitespace().last().unwrap_or_default();
    assert!(left.ends_with('s') && !left.ends_with("ms") && left.len() <= 4, "time left {left:?}: {out}");
    let o = locksmith(&["status", "never-used", "--json", "--backend", &url]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v.is_object(), "{v}");
    assert_eq!((v["name"].as_str(), v["held"].as_bool()), (Some("never-used"), Some(false)), "{v}");
    assert!(g.unlock().await.unwrap());
}

/// An unreachable server is reported as such (exit 69) and quickly; nothing runs.
#[test]
fn an_unreachable_server_exits_69() {
    let url = format!("locksmith://127.0.0.1:{}", free_port());
    let started = std::time::Instant::now();
    let o = locksmith(&["run", "x", "--backend", &url, "--", "sh", "-c", "echo ran"]);
    assert_eq!(o.status.code(), Some(69), "{}", stderr(&o));
    assert!(stderr(&o).contains("unavailable"), "{}", stderr(&o));
    assert!(o.stdout.is_empty(), "the command ran");
    assert!(started.elapsed() < Duration::from_secs(10));
    let o = locksmith(&["status", "--backend", &url]);
    assert_eq!(o.status.code(), Some(69), "{}", stderr(&o));
}

/// A damaged log makes `serve` refuse to start (exit 65) and leaves the file untouched.
#[test]
fn a_corrupt_data_dir_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(&data).unwrap();
    let garbage = b"this is not a locksmith log, but somebody's notes\n".repeat(10);
    std::fs::write(data.join("wal"), &garbage).unwrap();
    let port = free_port().to_string();
    let listen = format!("127.0.0.1:{port}");
    let o = locksmith(&["serve", "--listen", &listen, "--data-dir", data.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(65), "{}", stderr(&o));
    assert!(stderr(&o).contains("corrupt"), "{}", stderr(&o));
    assert_eq!(std::fs::read(data.join("wal")).unwrap(), garbage, "the damaged log was modified");
}

/// Nothing listens beyond loopback unless asked: `--listen 0.0.0.0:…` without client
/// authentication is refused (exit 2, naming the ways out) before anything is bound or created.
#[test]
fn listening_beyond_loopback_without_authentication_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    for listen in [format!("0.0.0.0:{}", free_port()), format!("[::]:{}", free_port())] {
        let o = locksmith(&["serve", "--listen", &listen, "--data-dir", data.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(
            stderr(&o).contains("--insecure-listen-anywhere") && stderr(&o).contains("--client-ca"),
            "{}",
            stderr(&o)
        );
        assert!(!data.exists(), "the data directory was created");
    }
}

/// Two servers cannot share one data directory.
#[test]
fn a_data_dir_in_use_is_refused() {
    let s = server();
    let listen = format!("127.0.0.1:{}", free_port());
    let dir = s.data_dir().join("data");
    let o = locksmith(&["serve", "--listen", &listen, "--data-dir", dir.to_str().unwrap()]);
    assert_ne!(o.status.code(), Some(0));
    assert!(stderr(&o).contains("in use"), "{}", stderr(&o));
}

/// `serve` stops cleanly (exit 0) and promptly on SIGTERM and on SIGINT.
#[test]
fn serve_stops_cleanly_on_sigterm_and_sigint() {
    for sig in [Signal::SIGTERM, Signal::SIGINT] {
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let mut cmd = Command::new(BIN);
        cmd.args(["serve", "--listen", &format!("127.0.0.1:{port}"), "--data-dir"])
            .arg(dir.path())
            .stdin(Stdio::null())
            .stderr(Stdio::null());
        let mut p = spawn("locksmith serve", &mut cmd);
        let until = std::time::Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(std::time::Instant::now() < until, "serve did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
        p.signal(sig);
        let status = p.wait_timeout(Duration::from_secs(5)).expect("serve did not stop within 5 s");
        assert_eq!(status.code(), Some(0), "{sig}");
    }
}

/// A paused server (SIGSTOP) never hangs its clients: the holder's `lost()` fires after the
/// TTL, `try_lock` and `unlock` give up, and after SIGCONT the same client works again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_server_never_hangs_its_clients() {
    let s = server();
    let ttl = Duration::from_secs(1);
    let holder = locksmith::connect_with_ttl(&s.url(), ttl).await.unwrap();
    let other = locksmith::connect_with_ttl(&s.url(), ttl).await.unwrap();
    other.session_id().await.unwrap();
    let g = holder.lock("paused").await.unwrap();
    s.process().unwrap().signal(Signal::SIGSTOP);
    let bound = ttl + Duration::from_secs(2);
    tokio::time::timeout(bound, g.lost()).await.expect("lost() did not fire while the server was paused");
    let r = tokio::time::timeout(bound, other.try_lock("paused")).await.expect("try_lock hung on a paused server");
    assert!(matches!(r, Err(locksmith::Error::Unavailable { .. }) | Err(locksmith::Error::SessionExpired)), "{r:?}");
    let r = tokio::time::timeout(bound, g.unlock()).await.expect("unlock hung on a paused server");
    assert!(!r.unwrap_or(false), "a hold lost during the pause is not reported as ours");
    s.process().unwrap().signal(Signal::SIGCONT);
    let g = holder.lock_with("paused", LockOptions::new().timeout(Duration::from_secs(5))).await.unwrap();
    assert!(g.is_held());
}
