//! The native server with an auth policy (`locksmith serve --auth FILE`): no token is
//! refused; a token allowed only `jobs/` can lock there but not `db/x`, nor see `db/x` in
//! status; a token taken out of the file stops working without a restart; `locksmith run` finds
//! its token through `?token_file=` or `LOCKSMITH_TOKEN_FILE`. Refusals exit 77.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use locksmith_testkit::{new_token, NativeServer};

const BIN: &str = env!("CARGO_BIN_EXE_locksmith");

struct Setup {
    dir: tempfile::TempDir,
    jobs: (String, String),
    admin: (String, String),
    server: NativeServer,
}

impl Setup {
    fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let (jobs, admin) = (new_token(BIN.as_ref()), new_token(BIN.as_ref()));
        for (name, (token, _)) in [("jobs.token", &jobs), ("admin.token", &admin)] {
            std::fs::write(dir.path().join(name), format!("{token}\n")).unwrap();
        }
        let policy = dir.path().join("policy.toml");
        write_policy(&policy, Some(&jobs.1), &admin.1);
        let server = NativeServer::start_with(BIN.as_ref(), &["--auth", policy.to_str().unwrap()]);
        Self { dir, jobs, admin, server }
    }

    fn token_file(&self, who: &str) -> PathBuf {
        self.dir.path().join(format!("{who}.token"))
    }

    fn url(&self, who: &str) -> String {
        format!("{}?token_file={}", self.server.url(), self.token_file(who).display())
    }
}

fn write_policy(path: &Path, jobs: Option<&str>, admin: &str) {
    write_policy_under(path, jobs, admin, "jobs/");
}

/// The policy with `jobs` allowed to lock and observe only under `prefix` (a right to lock
/// includes the right to observe).
fn write_policy_under(path: &Path, jobs: Option<&str>, admin: &str, prefix: &str) {
    let jobs_tokens = jobs.map(|d| format!("\"{d}\"")).unwrap_or_default();
    let text = format!(
        "[principals.jobs]\ntokens = [{jobs_tokens}]\nlock = [\"{prefix}\"]\nobserve = [\"{prefix}\"]\n\n\
         [principals.admin]\ntokens = [\"{admin}\"]\nadmin = true\n"
    );
    // Written aside and renamed: the server never reads half a file.
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn run(url: &str, name: &str, env: Option<&Path>) -> Output {
    let mut cmd = Command::new(BIN);
    cmd.args(["run", name, "--backend", url, "--timeout", "5s", "--", "echo", "ran"]).stdin(Stdio::null());
    cmd.env_remove("LOCKSMITH_TOKEN_FILE");
    if let Some(file) = env {
        cmd.env("LOCKSMITH_TOKEN_FILE", file);
    }
    cmd.output().unwrap()
}

fn code_and_stderr(o: &Output) -> (Option<i32>, String) {
    (o.status.code(), String::from_utf8_lossy(&o.stderr).into_owned())
}

#[test]
fn without_a_token_nothing_is_allowed() {
    let s = Setup::start();
    let (code, stderr) = code_and_stderr(&run(&s.server.url(), "jobs/nightly", None));
    assert_eq!(code, Some(77), "{stderr}");
    assert!(stderr.contains("token"), "{stderr}");
    // Nobody known: that is authentication.
    assert!(stderr.contains("authentication failed"), "{stderr}");
    let unknown = s.dir.path().join("unknown.token");
    std::fs::write(&unknown, "not-a-token-anyone-issued").unwrap();
    let (code, stderr) = code_and_stderr(&run(&s.server.url(), "jobs/nightly", Some(&unknown)));
    assert_eq!(code, Some(77), "{stderr}");
    assert!(!stderr.contains("not-a-token-anyone-issued"), "the token was printed: {stderr}");
    let status = Command::new(BIN).args(["status", "--backend", &s.server.url()]).output().unwrap();
    assert_eq!(status.status.code(), Some(77), "{}", String::from_utf8_lossy(&status.stderr));
}

#[test]
fn a_token_locks_only_under_its_prefixes_from_the_url_or_the_environment() {
    let s = Setup::start();
    let ok = run(&s.url("jobs"), "jobs/nightly", None);
    assert_eq!(ok.status.code(), Some(0), "{}", String::from_utf8_lossy(&ok.stderr));
    assert_eq!(String::from_utf8_lossy(&ok.stdout).trim(), "ran");
    let env = run(&s.server.url(), "jobs/env", Some(&s.token_file("jobs")));
    assert_eq!(env.status.code(), Some(0), "{}", String::from_utf8_lossy(&env.stderr));
    let (code, stderr) = code_and_stderr(&run(&s.url("jobs"), "db/x", None));
    assert_eq!(code, Some(77), "{stderr}");
    assert!(stderr.contains("may not lock"), "{stderr}");
    // A known principal refused: that is authorization, said once.
    assert!(stderr.contains("permission denied: "), "{stderr}");
    assert!(!stderr.contains("authentication failed"), "{stderr}");
    assert_eq!(stderr.matches("permission denied").count(), 1, "{stderr}");
    assert!(!stderr.contains(&s.jobs.0), "the token was printed: {stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_a_principal_only_what_it_may_observe() {
    let s = Setup::start();
    let admin = locksmith::connect_with_ttl(&s.url("admin"), Duration::from_secs(5)).await.unwrap();
    let db = admin.lock("db/x").await.unwrap();
    let job = admin.lock("jobs/a").await.unwrap();
    let jobs = locksmith::connect_with_ttl(&s.url("jobs"), Duration::from_secs(5)).await.unwrap();
    let seen: Vec<String> = jobs.status(None).await.unwrap().into_iter().map(|l| l.name).collect();
    assert_eq!(seen, vec!["jobs/a".to_string()]);
    let e = jobs.status(Some("db/x")).await.map(|_| ()).unwrap_err();
    assert!(matches!(&e, locksmith::Error::Auth { message, .. } if message.contains("may not observe")), "{e}");
    let all: Vec<String> = admin.status(None).await.unwrap().into_iter().map(|l| l.name).collect();
    assert_eq!(all.len(), 2, "{all:?}");
    assert!(db.unlock().await.unwrap() && job.unlock().await.unwrap());
}

#[test]
fn a_token_removed_from_the_policy_stops_working_without_a_restart() {
    let s = Setup::start();
    let pid = s.server.pid();
    assert_eq!(run(&s.url("jobs"), "jobs/a", None).status.code(), Some(0));
    let policy = s.dir.path().join("policy.toml");
    // A different modification time for certain, on file systems with coarse timestamps too.
    std::thread::sleep(Duration::from_millis(1_100));
    write_policy(&policy, None, &s.admin.1);
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let (code, stderr) = code_and_stderr(&run(&s.url("jobs"), "jobs/a", None));
        if code == Some(77) {
            assert!(stderr.contains("not known"), "{stderr}");
            break;
        }
        assert_eq!(code, Some(0), "{stderr}");
        assert!(Instant::now() < until, "the removed token still works after 10 s");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(run(&s.url("admin"), "jobs/a", None).status.code(), Some(0), "the other token stopped too");
    assert_eq!(s.server.pid(), pid, "the server was restarted");
    assert!(s
        .server
        .process()
        .is_some_and(|p| nix::sys::signal::kill(nix::unistd::Pid::from_raw(p.pid()), None).is_ok()));
}

/// Mutual TLS identifies a principal too: the client certificate listed in the policy (by its
/// SHA-256) locks under its prefixes without any token, and only there.
#[test]
fn a_client_certificate_listed_in_the_policy_is_a_principal() {
    let certs = locksmith_testkit::TestCerts::generate();
    let dir = tempfile::tempdir().unwrap();
    let policy = dir.path().join("policy.toml");
    let text = format!("[principals.robot]\ncertificates = [\"{}\"]\nlock = [\"jobs/\"]\n", certs.client_cert_sha256());
    std::fs::write(&policy, text).unwrap();
    let server = NativeServer::start_tls_with(BIN.as_ref(), &certs, true, &["--auth", policy.to_str().unwrap()]);
    let ok = run(&server.url(), "jobs/by-certificate", None);
    assert_eq!(ok.status.code(), Some(0), "{}", String::from_utf8_lossy(&ok.stderr));
    let (code, stderr) = code_and_stderr(&run(&server.url(), "db/x", None));
    assert_eq!(code, Some(77), "{stderr}");
    assert!(stderr.contains("robot may not lock"), "{stderr}");
}

/// `locksmith admin release`: a principal that is not an admin is refused (77, permission
/// denied); an admin releases a stuck lock: the holder's `run` sees the loss and exits 76, the
/// waiter is granted with a greater token, and a second release finds nothing to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_releases_a_stuck_lock_and_the_next_waiter_gets_a_greater_token() {
    let s = Setup::start();
    let mut cmd = Command::new(BIN);
    cmd.args(["run", "jobs/stuck", "--ttl", "1s", "--backend", &s.url("jobs"), "--", "sleep", "30"])
        .env_remove("LOCKSMITH_TOKEN_FILE")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut holder = locksmith_testkit::spawn("locksmith run (holder)", &mut cmd);
    let jobs = locksmith::connect_with_ttl(&s.url("jobs"), Duration::from_secs(5)).await.unwrap();
    let until = std::time::Instant::now() + Duration::from_secs(10);
    let held = loop {
        let st = jobs.status(Some("jobs/stuck")).await.unwrap();
        if let Some(h) = st.first().and_then(|l| l.holders.first()).cloned() {
            break h;
        }
        assert!(std::time::Instant::now() < until, "the holder never got the lock");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let waiter = tokio::spawn(async move {
        let g = jobs.lock_with("jobs/stuck", locksmith::LockOptions::new().timeout(Duration::from_secs(20))).await;
        g.map(|g| g.token()).map_err(|e| e.to_string())
    });
    let release = |who: &str| {
        Command::new(BIN)
            .args(["admin", "release", "jobs/stuck", "--session", &held.session, "--backend", &s.url(who)])
            .env_remove("LOCKSMITH_TOKEN_FILE")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let (code, stderr) = code_and_stderr(&release("jobs"));
    assert_eq!(code, Some(77), "{stderr}");
    assert!(stderr.contains("permission denied") && stderr.contains("only an admin"), "{stderr}");

    let out = release("admin");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains(&format!("released token {}", held.token)), "{stdout}");

    let status = holder.wait_timeout(Duration::from_secs(5));
    let mut stderr = String::new();
    if let Some(mut e) = holder.take_stderr() {
        let _ = std::io::Read::read_to_string(&mut e, &mut stderr);
    }
    assert_eq!(status.and_then(|s| s.code()), Some(76), "{stderr}");
    assert!(stderr.contains("lost lock"), "{stderr}");
    let token = waiter.await.unwrap().unwrap_or_else(|e| panic!("the waiter was not granted: {e}"));
    assert!(token > held.token, "token {token} after {}", held.token);

    let out = release("admin");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("nothing changed"));
}

/// Revoking a token ends what it holds, not only new calls: the holder's open session is closed
/// (its guard reports the loss) and another principal gets the lock at once — also when the
/// edit keeps the file's modification time (the policy is reloaded by content).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_token_loses_its_open_sessions_and_their_holds() {
    let s = Setup::start();
    // A TTL well above the waits below: only the revocation can end this hold that soon.
    let jobs = locksmith::connect_with_ttl(&s.url("jobs"), Duration::from_secs(12)).await.unwrap();
    let guard = jobs.lock("jobs/held").await.unwrap();
    let policy = s.dir.path().join("policy.toml");
    let mtime = std::fs::metadata(&policy).unwrap().modified().unwrap();
    write_policy(&policy, None, &s.admin.1);
    std::fs::File::options().write(true).open(&policy).unwrap().set_modified(mtime).unwrap();
    let admin = locksmith::connect_with_ttl(&s.url("admin"), Duration::from_secs(5)).await.unwrap();
    // The holder learns at its next renewal (a third of its TTL).
    let lost = tokio::time::timeout(Duration::from_secs(7), guard.lost()).await;
    assert!(lost.is_ok(), "the revoked holder still holds after 7 s");
    let opts = locksmith::LockOptions::new().timeout(Duration::from_millis(500));
    let next = admin.lock_with("jobs/held", opts).await.expect("the revoked session's hold was not released");
    assert!(next.token() > guard.token());
    assert!(next.unlock().await.unwrap());
}

/// A `locksmith elect NAME --observe` process of `jobs` following `jobs/sched`, once its stream
/// is open (it printed the current leader).
fn observer(s: &Setup) -> (locksmith_testkit::ChildProcess, std::sync::mpsc::Receiver<String>) {
    let mut cmd = Command::new(BIN);
    cmd.args(["elect", "jobs/sched", "--observe", "--backend", &s.url("jobs")])
        .env_remove("LOCKSMITH_TOKEN_FILE")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut p = locksmith_testkit::spawn("elect --observe", &mut cmd);
    let lines = locksmith_testkit::stdout_lines(&mut p);
    let first = lines.recv_timeout(Duration::from_secs(10));
    assert!(first.as_deref().is_ok_and(|l| l.contains("no leader")), "the observer did not start: {first:?}");
    (p, lines)
}

/// How the observer ended (≤ 6 s: the policy file is compared every second), with its stderr.
fn ended(mut p: locksmith_testkit::ChildProcess) -> (Option<i32>, String) {
    let status = p.wait_timeout(Duration::from_secs(6));
    let mut stderr = String::new();
    if status.is_some() {
        use std::io::Read;
        if let Some(mut e) = p.take_stderr() {
            let _ = e.read_to_string(&mut stderr);
        }
    }
    (status.and_then(|s| s.code()), stderr)
}

/// Revocation reaches observe streams too, not only sessions: an open `elect --observe` (an
/// observe stream, as the dashboard's and `status --watch`'s feeds use) ends with a permission
/// error (exit 77) when the reloaded policy narrows its principal's prefixes away from the
/// lock, and when it removes the principal's token.
#[test]
fn a_reloaded_policy_ends_the_observe_streams_it_no_longer_allows() {
    let s = Setup::start();
    let policy = s.dir.path().join("policy.toml");

    let (p, _lines) = observer(&s);
    write_policy_under(&policy, Some(&s.jobs.1), &s.admin.1, "jobs/other/");
    let (code, stderr) = ended(p);
    assert_eq!(code, Some(77), "narrowed prefixes: {stderr}");
    assert!(stderr.contains("may no longer observe"), "{stderr}");

    write_policy(&policy, Some(&s.jobs.1), &s.admin.1);
    std::thread::sleep(Duration::from_millis(1_500));
    let (p, _lines) = observer(&s);
    write_policy(&policy, None, &s.admin.1);
    let (code, stderr) = ended(p);
    assert_eq!(code, Some(77), "removed token: {stderr}");
    assert!(stderr.contains("revoked"), "{stderr}");
}
