//! `locksmith run` against a real etcd: the process properties of the contract, and
//! interoperability with `etcdctl lock` (Go's `concurrency.Mutex` layout).

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use locksmith_core::conformance::{until_status, UrlTarget};
use locksmith_testkit::{stdout_lines, CliTarget, EtcdServer};

const BIN: &str = env!("CARGO_BIN_EXE_locksmith");

fn etcd() -> CliTarget {
    let server = EtcdServer::start();
    CliTarget::new(BIN, UrlTarget::new(server.url(), locksmith::backend).keeping(server))
}

locksmith_testkit::process_conformance_suite!(etcd());

fn critical_section(file: &Path) -> String {
    let f = file.display();
    format!("echo enter >> {f}; sleep 0.05; echo exit >> {f}")
}

/// `etcdctl lock` and `locksmith run` contending for one lock (8 rounds each, concurrently)
/// never overlap: the shared file strictly alternates enter/exit, and both sides ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_lock_and_locksmith_run_exclude_each_other() {
    exclude_each_other(&EtcdServer::start());
}

/// The same over mutual TLS with authentication on: `etcdctl` with the certificates and the
/// user, `locksmith run` with `etcds://user:password@…?ca=&cert=&key=`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_lock_and_locksmith_run_exclude_each_other_over_mutual_tls_as_a_user() {
    let certs = locksmith_testkit::TestCerts::generate();
    let server = EtcdServer::builder().tls(&certs, true).auth("root", "r00t-pw").start();
    assert!(server.url().starts_with("etcds://root:"), "{}", locksmith_core::driver::redact(&server.url()));
    exclude_each_other(&server);
}

/// A wrong password: `locksmith run` exits 77 at once, without running the command or printing
/// the password.
#[test]
fn run_with_a_wrong_etcd_password_exits_77() {
    let certs = locksmith_testkit::TestCerts::generate();
    let server = EtcdServer::builder().tls(&certs, false).auth("root", "r00t-pw").start();
    let url = server.url_with(Some(("root", "not-the-pw-8e1")), None, false);
    let out = Command::new(BIN)
        .args(["run", "job", "--backend", &url, "--timeout", "30s", "--", "echo", "ran"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(77), "{stderr}");
    assert!(out.stdout.is_empty(), "the command ran");
    assert!(!stderr.contains("not-the-pw-8e1") && !stderr.contains("r00t-pw"), "{stderr}");
}

fn exclude_each_other(server: &EtcdServer) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cs.log");
    let script = critical_section(&file);
    let etcdctl = {
        let mut cmds = Vec::new();
        for _ in 0..8 {
            let mut c = server.etcdctl();
            c.args(["lock", "interop", "--", "sh", "-c", &format!("{script}; echo etcdctl >> {}.who", file.display())]);
            cmds.push(c);
        }
        std::thread::spawn(move || {
            for mut c in cmds {
                let out = c.stdin(Stdio::null()).output().unwrap();
                assert!(out.status.success(), "etcdctl lock failed: {}", String::from_utf8_lossy(&out.stderr));
            }
        })
    };
    let url = server.url();
    let ours = {
        let script = format!("{script}; echo locksmith >> {}.who", file.display());
        std::thread::spawn(move || {
            for _ in 0..8 {
                let out = Command::new(BIN)
                    .args(["run", "interop", "--backend", &url, "--", "sh", "-c", &script])
                    .stdin(Stdio::null())
                    .output()
                    .unwrap();
                assert_eq!(out.status.code(), Some(0), "locksmith run: {}", String::from_utf8_lossy(&out.stderr));
            }
        })
    };
    etcdctl.join().unwrap();
    ours.join().unwrap();
    let log = std::fs::read_to_string(&file).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines.len(), 32, "16 critical sections, 2 lines each:\n{log}");
    for (i, l) in lines.iter().enumerate() {
        let want = if i % 2 == 0 { "enter" } else { "exit" };
        assert_eq!(*l, want, "overlap at line {i}:\n{log}");
    }
    let who = std::fs::read_to_string(format!("{}.who", file.display())).unwrap();
    assert_eq!(who.matches("etcdctl").count(), 8, "{who}");
    assert_eq!(who.matches("locksmith").count(), 8, "{who}");
}

/// While `locksmith run` holds NAME, etcd shows exactly Go's layout: `NAME/<lease-hex>` with
/// the lease listed by `etcdctl lease list`; `etcdctl lock` then cannot take it, and while
/// `etcdctl lock` holds it `locksmith run --no-wait` exits 75.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locksmith_holds_are_go_mutex_keys_seen_by_etcdctl() {
    let server = EtcdServer::start();
    let mut holder = Command::new(BIN)
        .args(["run", "layout", "--backend", &server.url(), "--", "sh", "-c", "echo ready; exec sleep 30"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(holder.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "ready");
    let out = server.etcdctl().args(["get", "--prefix", "layout/", "--keys-only"]).output().unwrap();
    let keys: Vec<String> =
        String::from_utf8_lossy(&out.stdout).lines().filter(|l| !l.is_empty()).map(str::to_string).collect();
    assert_eq!(keys.len(), 1, "{keys:?}");
    let hex = keys[0].strip_prefix("layout/").unwrap_or_else(|| panic!("not under layout/: {keys:?}"));
    assert!(!hex.is_empty() && hex.chars().all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()), "{hex}");
    let leases = server.etcdctl().args(["lease", "list"]).output().unwrap();
    // `etcdctl lease list` zero-pads to 16 digits while Go's key uses plain `%x`: compare values.
    let id = u64::from_str_radix(hex, 16).unwrap();
    let listed = String::from_utf8_lossy(&leases.stdout).into_owned();
    assert!(listed.lines().any(|l| u64::from_str_radix(l.trim(), 16).ok() == Some(id)), "lease {hex} not in {listed}");
    // etcdctl's own lock must wait for ours: its command has not run 1.5 s later.
    let mut blocked = server
        .etcdctl()
        .args(["lock", "--ttl", "2", "layout", "--", "echo", "got"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    assert!(blocked.try_wait().unwrap().is_none(), "etcdctl lock finished while locksmith held the lock");
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(blocked.id() as i32), nix::sys::signal::Signal::SIGINT);
    let blocked = blocked.wait_with_output().unwrap();
    assert!(!String::from_utf8_lossy(&blocked.stdout).contains("got"), "etcdctl ran its command under our lock");
    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(holder.id() as i32), nix::sys::signal::Signal::SIGTERM);
    let _ = holder.wait();

    let mut etcd_holder = server.etcdctl();
    let mut etcd_holder = etcd_holder
        .args(["lock", "layout", "--", "sh", "-c", "echo ready; exec sleep 30"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(etcd_holder.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let busy = Command::new(BIN)
        .args(["run", "layout", "--no-wait", "--backend", &server.url(), "--", "echo", "ran"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(busy.status.code(), Some(75), "{}", String::from_utf8_lossy(&busy.stderr));
    assert!(busy.stdout.is_empty(), "the command ran while etcdctl held the lock");
    let _ = etcd_holder.kill();
    let _ = etcd_holder.wait();
}

/// etcd#11456 at the process level: a waiting `locksmith run` SIGSTOPped past its TTL (its
/// lease expires while it waits), the holder releases and a new holder takes the lock, then
/// SIGCONT: the stale waiter never runs its command while the new holder holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_paused_past_its_ttl_never_runs_under_another_holder() {
    let server = EtcdServer::start();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("cs.log");
    let a = locksmith::connect_with_ttl(&server.url(), Duration::from_secs(5)).await.unwrap();
    let c = locksmith::connect_with_ttl(&server.url(), Duration::from_secs(5)).await.unwrap();
    let g = a.lock("paused-waiter").await.unwrap();
    let mut waiter = Command::new(BIN)
        .args(["run", "paused-waiter", "--ttl", "1s", "--backend", &server.url(), "--", "sh", "-c"])
        .arg(critical_section(&file))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    for _ in 0..500 {
        if a.status(Some("paused-waiter")).await.unwrap()[0].waiters == Some(1) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(a.status(Some("paused-waiter")).await.unwrap()[0].waiters, Some(1), "the waiter never queued");
    let pid = nix::unistd::Pid::from_raw(waiter.id() as i32);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    // Hand the lock to a new holder while the waiter is frozen with an expired lease.
    let c_wait = {
        let c = c.clone();
        tokio::spawn(async move { c.lock("paused-waiter").await })
    };
    // c queued (and the frozen waiter's expired key gone) before the holder lets go.
    until_status(&a, "paused-waiter", |s| s.waiters == Some(1)).await;
    assert!(g.unlock().await.unwrap());
    let gc = tokio::time::timeout(Duration::from_secs(5), c_wait).await.unwrap().unwrap().unwrap();
    std::fs::write(&file, "enter\n").unwrap();
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "enter\n", "the stale waiter ran under another holder");
    std::fs::OpenOptions::new()
        .append(true)
        .open(&file)
        .and_then(|mut f| std::io::Write::write_all(&mut f, b"exit\n"))
        .unwrap();
    assert!(gc.unlock().await.unwrap());
    // It may now queue again and run, or have given up: either way no overlap.
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while waiter.try_wait().unwrap().is_none() && std::time::Instant::now() < until {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = waiter.kill();
    let _ = waiter.wait();
    let log = std::fs::read_to_string(&file).unwrap();
    for (i, l) in log.lines().enumerate() {
        assert_eq!(l, if i % 2 == 0 { "enter" } else { "exit" }, "overlap at line {i}:\n{log}");
    }
}

/// Waits for a line that `matches`, within `secs` seconds.
fn wait_line(rx: &std::sync::mpsc::Receiver<String>, secs: u64, matches: impl Fn(&str) -> bool) -> String {
    let until = std::time::Instant::now() + Duration::from_secs(secs);
    loop {
        let left = until.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if matches(&line) => return line,
            Ok(_) => {}
            Err(e) => panic!("no matching line within {secs} s: {e}"),
        }
    }
}

/// `etcdctl elect` and `locksmith elect` campaign in one election (Go's `concurrency.Election`
/// layout: `NAME/<lease>` keys whose value is the proposal, the oldest leads): etcdctl waits
/// while locksmith leads and takes over when it resigns; `etcdctl elect -l` observes locksmith's
/// proposal and `locksmith elect --observe` etcdctl's, with a higher term.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcdctl_elect_and_locksmith_elect_share_one_election() {
    use locksmith_testkit::spawn;
    let server = EtcdServer::start();
    let url = server.url();
    let mut rust = {
        let mut c = Command::new(BIN);
        c.args(["elect", "interop-election", "--backend", &url, "--value", "rust-candidate", "--"])
            .args(["sh", "-c", "echo term $LOCKSMITH_TOKEN; exec sleep 60"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped());
        spawn("locksmith elect", &mut c)
    };
    let rust_out = stdout_lines(&mut rust);
    let first: u64 = wait_line(&rust_out, 10, |l| l.starts_with("term ")).trim_start_matches("term ").parse().unwrap();

    let mut listen = {
        let mut c = server.etcdctl();
        c.args(["elect", "-l", "interop-election"]).stdin(Stdio::null()).stdout(Stdio::piped());
        spawn("etcdctl elect -l", &mut c)
    };
    let heard = stdout_lines(&mut listen);
    wait_line(&heard, 10, |l| l == "rust-candidate");

    let mut go = {
        let mut c = server.etcdctl();
        c.args(["elect", "interop-election", "go-candidate"]).stdin(Stdio::null()).stdout(Stdio::piped());
        spawn("etcdctl elect", &mut c)
    };
    let go_out = stdout_lines(&mut go);
    assert!(go_out.recv_timeout(Duration::from_millis(800)).is_err(), "etcdctl was elected while locksmith led");

    let mut observer = {
        let mut c = Command::new(BIN);
        c.args(["elect", "interop-election", "--backend", &url, "--observe", "--json"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped());
        spawn("locksmith elect --observe", &mut c)
    };
    let observed = stdout_lines(&mut observer);
    let now: serde_json::Value = serde_json::from_str(&wait_line(&observed, 10, |_| true)).unwrap();
    assert_eq!((now["term"].as_u64(), now["value"].as_str()), (Some(first), Some("rust-candidate")));

    // locksmith resigns: its command ends, it releases, and etcdctl is elected.
    rust.signal(nix::sys::signal::Signal::SIGTERM);
    wait_line(&go_out, 10, |l| l == "go-candidate");
    wait_line(&heard, 10, |l| l == "go-candidate");
    let after: serde_json::Value =
        serde_json::from_str(&wait_line(&observed, 10, |l| l.contains("go-candidate"))).unwrap();
    assert!(after["term"].as_u64().unwrap_or(0) > first, "etcdctl's term {after} is not above {first}");
    for p in [&mut go, &mut listen, &mut observer] {
        p.kill9();
    }
}
