//! ZooKeeper servers (Debian's `zookeeper` 3.8, run as `ZooKeeperServerMain`) as real processes.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::port::free_port;
use crate::process::{spawn, watchdog, ChildProcess};

/// How to get ZooKeeper when it is missing.
pub const ZK_SETUP: &str = "bash scripts/setup.sh (installs Debian's zookeeper and a JDK)";

const JARS: &[&str] = &[
    "/usr/share/java/zookeeper.jar",
    "/usr/share/java/zookeeper-jute.jar",
    "/usr/share/java/slf4j-api.jar",
    "/usr/share/java/slf4j-nop.jar",
];

/// A standalone ZooKeeper on 127.0.0.1 with its own port and temp data dir; killed by PID on drop.
///
/// Its `zoo.cfg` sets `tickTime=100`, `minSessionTimeout=200` and `maxSessionTimeout=120000`,
/// so sessions (lock TTLs) from 200 ms to 2 min are accepted as asked.
#[derive(Debug)]
pub struct ZkServer {
    port: u16,
    dir: tempfile::TempDir,
    process: Option<ChildProcess>,
    watchdog: Option<ChildProcess>,
}

impl ZkServer {
    /// Starts a server and waits until it answers `ruok` with `imok` and then grants a session.
    ///
    /// # Panics
    /// When Java or the ZooKeeper jars are missing (the message names the setup command) or the
    /// server does not become ready within 30 s.
    pub fn start() -> Self {
        let dir = tempfile::Builder::new().prefix("locksmith-zk-").tempdir().expect("create a temp dir");
        let mut s = Self { port: free_port(), dir, process: None, watchdog: None };
        s.restart();
        s
    }

    /// `zk://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("zk://127.0.0.1:{}", self.port)
    }

    /// `127.0.0.1:PORT`
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's PID (0 when stopped).
    pub fn pid(&self) -> i32 {
        self.process.as_ref().map(ChildProcess::pid).unwrap_or(0)
    }

    /// `kill -9`; the data dir (snapshots and transaction log, sessions included) stays.
    pub fn kill9(&mut self) {
        if let Some(mut p) = self.process.take() {
            p.kill9();
        }
        if let Some(mut w) = self.watchdog.take() {
            w.kill9();
        }
    }

    /// SIGSTOP: the server stops answering but keeps its connections.
    pub fn pause(&self) {
        if let Some(p) = &self.process {
            p.signal(Signal::SIGSTOP);
        }
    }

    /// SIGCONT after [`ZkServer::pause`].
    pub fn resume(&self) {
        if let Some(p) = &self.process {
            p.signal(Signal::SIGCONT);
        }
    }

    /// (Re)starts on the same port and data dir.
    ///
    /// # Panics
    /// As [`ZkServer::start`].
    pub fn restart(&mut self) {
        self.kill9();
        for jar in JARS {
            assert!(Path::new(jar).exists(), "{jar} is missing; run: {ZK_SETUP}");
        }
        let java = ["/usr/bin/java", "/usr/local/bin/java"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .unwrap_or_else(|| panic!("java is not installed; run: {ZK_SETUP}"));
        let data = self.dir.path().join("data");
        std::fs::create_dir_all(&data).expect("create the data dir");
        let cfg = self.dir.path().join("zoo.cfg");
        std::fs::write(
            &cfg,
            format!(
                "dataDir={}\nclientPort={}\nclientPortAddress=127.0.0.1\nadmin.enableServer=false\n\
                 4lw.commands.whitelist=ruok,srvr,stat,mntr\ntickTime=100\nminSessionTimeout=200\n\
                 maxSessionTimeout=120000\n",
                data.display(),
                self.port
            ),
        )
        .expect("write zoo.cfg");
        let mut cmd = Command::new(java);
        cmd.args(["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xmx256m", "-cp", &JARS.join(":")])
            .arg("org.apache.zookeeper.server.ZooKeeperServerMain")
            .arg(&cfg)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let p = spawn("zookeeper", &mut cmd);
        // A server shared by a whole test binary (a static) is never dropped: this watchdog kills
        // it and removes its data dir when the test process is gone.
        self.watchdog = Some(watchdog("zookeeper", p.pid(), self.dir.path()));
        let until = Instant::now() + Duration::from_secs(30);
        while !ruok(self.port) {
            assert!(Instant::now() < until, "zookeeper did not answer ruok on 127.0.0.1:{} within 30 s", self.port);
            std::thread::sleep(Duration::from_millis(25));
        }
        // `imok` comes before the server can create sessions: a fresh JVM then still loads and
        // compiles the session path, and a client's first session took over 3 s under load.
        // Ready means a session was established (and closed again).
        while let Err(e) = session_round_trip(self.port) {
            assert!(
                Instant::now() < until,
                "zookeeper on 127.0.0.1:{} established no session within 30 s: {e}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(25));
        }
        self.process = Some(p);
    }
}

/// Opens a session with ZooKeeper's handshake (a jute `ConnectRequest`, length-prefixed) and
/// closes it (`closeSession`); an error unless the server granted a session id.
fn session_round_trip(port: u16) -> std::io::Result<()> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    // protocolVersion, lastZxidSeen, timeOut (ms; the server clamps it to its minimum),
    // sessionId 0 (a new one), a 16-byte zero password, readOnly false.
    let mut req = Vec::with_capacity(45);
    req.extend_from_slice(&0i32.to_be_bytes());
    req.extend_from_slice(&0i64.to_be_bytes());
    req.extend_from_slice(&2_000i32.to_be_bytes());
    req.extend_from_slice(&0i64.to_be_bytes());
    req.extend_from_slice(&16i32.to_be_bytes());
    req.extend_from_slice(&[0; 16]);
    req.push(0);
    let len = i32::try_from(req.len()).unwrap_or(i32::MAX);
    s.write_all(&len.to_be_bytes())?;
    s.write_all(&req)?;
    // ConnectResponse: its length, protocolVersion, timeOut, then the session id.
    let mut head = [0u8; 20];
    s.read_exact(&mut head)?;
    let session = i64::from_be_bytes(head[12..20].try_into().unwrap_or_default());
    if session == 0 {
        return Err(std::io::Error::other("the server answered the handshake without a session"));
    }
    // closeSession: a request header (xid 1, type -11) and no body. Best effort: a session not
    // closed expires after the server's minimum session timeout.
    let mut close = Vec::with_capacity(12);
    close.extend_from_slice(&8i32.to_be_bytes());
    close.extend_from_slice(&1i32.to_be_bytes());
    close.extend_from_slice(&(-11i32).to_be_bytes());
    let _ = s.write_all(&close);
    Ok(())
}

fn ruok(port: u16) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else { return false };
    let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
    if s.write_all(b"ruok").is_err() {
        return false;
    }
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    buf == b"imok"
}
