//! The metrics port (`locksmith serve --metrics-listen`) is bounded on its own: idle
//! connections piled onto it cannot take the lock port's file descriptors, spin a core or flood
//! the log, and each is closed after a short deadline. A real `locksmith serve` process with a
//! small open-file limit (256), as a host whose descriptors run out.

#[path = "support/scrape.rs"]
mod scrape;

use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use locksmith::LockOptions;
use locksmith_testkit::{free_port, spawn, ChildProcess};

const BIN: &str = env!("CARGO_BIN_EXE_locksmith");

/// More idle connections than the server has file descriptors.
const IDLE_CONNECTIONS: usize = 400;

struct Server {
    process: ChildProcess,
    port: u16,
    metrics: u16,
    log: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

/// `locksmith serve` with `--metrics-listen`, its open-file limit (soft and hard) set to 256 by
/// the shell that execs it, its log (warn) in a file.
fn start() -> Server {
    let dir = tempfile::tempdir().expect("temp dir");
    let (port, metrics) = (free_port(), free_port());
    let log = dir.path().join("serve.log");
    let script = format!(
        "ulimit -n 256 && exec \"$0\" serve --listen 127.0.0.1:{port} --metrics-listen 127.0.0.1:{metrics} --data-dir \"$1\""
    );
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(script)
        .arg(BIN)
        .arg(dir.path().join("data"))
        .env("LOCKSMITH_LOG", "warn")
        .stdin(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log file"));
    let process = spawn("locksmith serve", &mut cmd);
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "locksmith serve did not listen within 20 s: {}", read(&log));
        std::thread::sleep(Duration::from_millis(50));
    }
    Server { process, port, metrics, log, _dir: dir }
}

fn read(path: &std::path::Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

fn open_fds(pid: i32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map(|d| d.count()).unwrap_or(0)
}

/// Up to `n` connections that send nothing, until one does not connect within 200 ms (the
/// listen backlog is full).
fn idle_connections(port: u16, n: usize) -> Vec<TcpStream> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    (0..n).map_while(|_| TcpStream::connect_timeout(&addr, Duration::from_millis(200)).ok()).collect()
}

async fn a_client_locks(port: u16) {
    let url = format!("locksmith://127.0.0.1:{port}");
    let work = async {
        let c = locksmith::connect_with_ttl(&url, Duration::from_secs(5)).await?;
        let g = c.lock_with("beside-the-metrics", LockOptions::new().timeout(Duration::from_secs(5))).await?;
        g.unlock().await?;
        c.close().await;
        Ok::<_, locksmith::Error>(())
    };
    match tokio::time::timeout(Duration::from_secs(10), work).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => panic!("a lock client failed beside the idle metrics connections: {e}"),
        Err(_) => panic!("a lock client got no lock within 10 s beside the idle metrics connections"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_metrics_connections_never_starve_the_lock_port_and_are_closed_after_their_deadline() {
    let server = start();
    let pid = server.process.pid();
    let fds_before = open_fds(pid);

    let mut idle = idle_connections(server.metrics, IDLE_CONNECTIONS);
    eprintln!("{} idle connections open", idle.len());
    assert!(idle.len() >= 50, "only {} idle connections got through", idle.len());
    let cpu_before = scrape::cpu_ticks(pid);
    let held_since = Instant::now();

    // The server holds at most 16 of them; the rest wait in the kernel's backlog.
    let fds_during = open_fds(pid);
    assert!(
        fds_during <= fds_before + 20,
        "the metrics port took {} descriptors ({fds_before} before)",
        fds_during - fds_before
    );
    a_client_locks(server.port).await;
    // Nothing spins while they wait: under half a second of CPU for the ~2 s.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let cpu = scrape::cpu_ticks(pid) - cpu_before;
    assert!(cpu < 50, "the server used {cpu} ticks of CPU beside idle metrics connections");

    // The first accepted is closed by the server within its 5 s deadline.
    let first = &mut idle[0];
    first.set_read_timeout(Some(Duration::from_secs(10))).expect("read timeout");
    let mut buf = [0u8; 64];
    match first.read(&mut buf) {
        Ok(0) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        other => panic!("an idle metrics connection was not closed by the server: {other:?}"),
    }
    let closed_after = held_since.elapsed();
    assert!(closed_after < Duration::from_secs(9), "closed after {closed_after:?}");
    eprintln!("the first idle connection was closed after {closed_after:?}");

    // Once they go, /metrics answers again (the server drains what they left in its backlog).
    drop(idle);
    let gone = Instant::now();
    let deadline = gone + Duration::from_secs(15);
    let body = loop {
        let port = server.metrics;
        let scraped = tokio::task::spawn_blocking(move || std::panic::catch_unwind(|| scrape::metrics(port)))
            .await
            .expect("scrape task");
        match scraped {
            Ok(body) => break body,
            Err(_) if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(200)).await,
            Err(_) => panic!("/metrics did not answer within 15 s after the idle connections went"),
        }
    };
    assert!(body.contains("locksmith_server_"), "{body}");
    eprintln!("/metrics answered {:?} after the idle connections went", gone.elapsed());
    a_client_locks(server.port).await;

    // The log did not flood.
    let log = read(&server.log);
    assert!(log.len() < 4096, "the server logged {} bytes: {}", log.len(), &log[..log.len().min(2000)]);
}
