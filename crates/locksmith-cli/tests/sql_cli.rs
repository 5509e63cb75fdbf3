//! `locksmith run` on SQL backends: several OS processes sharing one SQLite file never overlap
//! and see strictly increasing tokens, and the process properties of the contract (kill -9,
//! SIGSTOP past the TTL, Ctrl-C while waiting, exit codes) on `sqlite://`.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use locksmith_core::conformance::{Caps, Target};

const BIN: &str = env!("CARGO_BIN_EXE_locksmith");

struct Lite {
    _dir: tempfile::TempDir,
    url: String,
}

impl Lite {
    fn start() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("locks.db").display());
        Self { _dir: dir, url }
    }
}

#[async_trait::async_trait]
impl Target for Lite {
    fn url(&self) -> String {
        self.url.clone()
    }
    async fn client(&self, ttl: Duration) -> locksmith::Result<locksmith::Client> {
        locksmith::connect_with_ttl(&self.url, ttl).await
    }
    fn caps(&self) -> Caps {
        let mut c = Caps::default();
        c.fifo = false;
        c.reports_waiters = false;
        c
    }
    fn cli(&self) -> Option<PathBuf> {
        Some(BIN.into())
    }
}

locksmith_core::process_conformance_suite!(Lite::start());

/// Eight `locksmith run` processes on one SQLite file, started together: the critical sections
/// strictly alternate (enter, exit, enter, exit…) and the tokens strictly increase.
#[test]
fn sqlite_processes_on_one_file_never_overlap() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("locks.db").display());
    let log = dir.path().join("log");
    let script = format!("echo \"enter $LOCKSMITH_TOKEN\" >> '{0}'; sleep 0.05; echo exit >> '{0}'", log.display());
    let children: Vec<_> = (0..8)
        .map(|_| {
            Command::new(BIN)
                .args(["run", "alternation", "--backend", &url, "--ttl", "5s", "--timeout", "30s", "--"])
                .args(["sh", "-c", &script])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "locksmith run failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 16, "{text}");
    let mut last = 0u64;
    for pair in lines.chunks(2) {
        let token: u64 = pair[0].strip_prefix("enter ").and_then(|t| t.parse().ok()).unwrap_or_else(|| {
            panic!("expected `enter TOKEN`, got {:?} in\n{text}", pair[0]);
        });
        assert_eq!(pair[1], "exit", "critical sections overlapped:\n{text}");
        assert!(token > last, "token {token} not above {last}:\n{text}");
        last = token;
    }
}
