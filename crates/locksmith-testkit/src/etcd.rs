//! etcd servers (Debian's `etcd-server`) as real processes: plain, or serving TLS (optionally
//! demanding client certificates) with authentication on.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::certs::TestCerts;
use crate::port::free_port;
use crate::process::{run_ok, spawn, watchdog, ChildProcess};

/// A single-node `etcd` on 127.0.0.1 with its own client and peer ports and temp data dir;
/// killed by PID on drop. Heartbeat 50 ms and election timeout 500 ms, so the server's minimum
/// lease TTL is 1 s (the default settings would raise 1 s leases to 2 s).
///
/// Secured variants ([`EtcdServer::start_tls`], [`EtcdServer::builder`]) serve `https://` on the
/// client port with the [`TestCerts`] server certificate (peer traffic stays plain on loopback);
/// the certificates are copied into the server's own temp dir, so the server does not depend on
/// the `TestCerts` value living on. [`EtcdServer::enable_auth`] turns authentication on.
pub struct EtcdServer {
    port: u16,
    peer_port: u16,
    dir: tempfile::TempDir,
    tls: Option<ServerTls>,
    args: Vec<String>,
    /// `(user, password)` once authentication is on.
    auth: Option<(String, String)>,
    process: Option<ChildProcess>,
    /// Kills the server when the test process is gone: a server kept in a `static` is never
    /// dropped.
    watchdog: Option<ChildProcess>,
}

impl std::fmt::Debug for EtcdServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The password stays out, even in tests.
        f.debug_struct("EtcdServer")
            .field("port", &self.port)
            .field("tls", &self.tls.is_some())
            .field("user", &self.auth.as_ref().map(|(u, _)| u))
            .field("dir", &self.dir.path())
            .finish()
    }
}

/// The server's copies of the test PKI.
#[derive(Debug, Clone)]
struct ServerTls {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    client_cert: PathBuf,
    client_key: PathBuf,
    /// `--client-cert-auth`: every client must present a certificate signed by `ca`.
    client_certs: bool,
}

/// How to start an [`EtcdServer`]: TLS, extra etcd flags (e.g. `--auth-token-ttl`), and a
/// user to enable authentication for once it runs.
#[derive(Debug, Default)]
pub struct EtcdServerBuilder<'a> {
    tls: Option<(&'a TestCerts, bool)>,
    args: Vec<String>,
    auth: Option<(String, String)>,
}

impl<'a> EtcdServerBuilder<'a> {
    /// Serve TLS with `certs`' server certificate; `client_certs`: demand client certificates
    /// signed by `certs`' CA (`--client-cert-auth --trusted-ca-file`).
    pub fn tls(mut self, certs: &'a TestCerts, client_certs: bool) -> Self {
        self.tls = Some((certs, client_certs));
        self
    }

    /// Extra `etcd` flags, e.g. `["--auth-token", "simple", "--auth-token-ttl", "1"]`.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Once started, add `user` with `password` and the root role, and enable authentication
    /// ([`EtcdServer::enable_auth`]).
    pub fn auth(mut self, user: &str, password: &str) -> Self {
        self.auth = Some((user.to_string(), password.to_string()));
        self
    }

    /// Starts the server.
    ///
    /// # Panics
    /// As [`EtcdServer::start`], or when the certificates cannot be copied.
    pub fn start(self) -> EtcdServer {
        let dir = tempfile::Builder::new().prefix("locksmith-etcd-").tempdir().expect("create a temp dir");
        let tls = self.tls.map(|(certs, client_certs)| {
            let copy = |from: PathBuf, name: &str| {
                let to = dir.path().join(name);
                std::fs::copy(&from, &to).unwrap_or_else(|e| panic!("copying {}: {e}", from.display()));
                to
            };
            ServerTls {
                ca: copy(certs.ca(), "ca.pem"),
                cert: copy(certs.server_cert(), "server.pem"),
                key: copy(certs.server_key(), "server.key"),
                client_cert: copy(certs.client_cert(), "client.pem"),
                client_key: copy(certs.client_key(), "client.key"),
                client_certs,
            }
        });
        let mut s = EtcdServer {
            port: free_port(),
            peer_port: free_port(),
            dir,
            tls,
            args: self.args,
            auth: None,
            process: None,
            watchdog: None,
        };
        s.restart();
        if let Some((user, password)) = self.auth {
            s.enable_auth(&user, &password);
        }
        s
    }
}

impl EtcdServer {
    /// Starts a fresh plain server (no TLS, no authentication).
    ///
    /// # Panics
    /// When `/usr/bin/etcd` is missing (the message names the setup command) or the server does
    /// not become healthy within 30 s.
    pub fn start() -> Self {
        Self::builder().start()
    }

    /// Starts a server that serves TLS with `certs`' server certificate; with `client_certs` it
    /// also demands client certificates signed by `certs`' CA (mutual TLS).
    ///
    /// # Panics
    /// As [`EtcdServer::start`].
    pub fn start_tls(certs: &TestCerts, client_certs: bool) -> Self {
        Self::builder().tls(certs, client_certs).start()
    }

    /// A server to configure before starting.
    pub fn builder<'a>() -> EtcdServerBuilder<'a> {
        EtcdServerBuilder::default()
    }

    /// The URL a client that does everything right uses: `etcd://127.0.0.1:PORT`, or for a TLS
    /// server `etcds://[user:password@]127.0.0.1:PORT?ca=…[&cert=…&key=…]` (credentials once
    /// authentication is on; the client certificate when the server demands one).
    pub fn url(&self) -> String {
        let creds = self.auth.as_ref().map(|(u, p)| (u.as_str(), p.as_str()));
        let client_cert = self.tls.as_ref().is_some_and(|t| t.client_certs);
        self.url_with(creds, None, client_cert)
    }

    /// A URL of this server with other `credentials` (`None`: no `user:password@`), another
    /// `ca` file (`None`: the server's CA), and with or without the client certificate. For a
    /// plain server `ca` and `client_cert` are ignored.
    pub fn url_with(&self, credentials: Option<(&str, &str)>, ca: Option<&Path>, client_cert: bool) -> String {
        let userinfo = credentials.map(|(u, p)| format!("{}:{}@", encode(u), encode(p))).unwrap_or_default();
        let Some(tls) = &self.tls else {
            return format!("etcd://{userinfo}{}", self.endpoint());
        };
        let ca = ca.unwrap_or(&tls.ca);
        let mut url = format!("etcds://{userinfo}{}?ca={}", self.endpoint(), ca.display());
        if client_cert {
            url.push_str(&format!("&cert={}&key={}", tls.client_cert.display(), tls.client_key.display()));
        }
        url
    }

    /// `127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `http://127.0.0.1:PORT`, or `https://…` for a TLS server: what `etcdctl --endpoints=`
    /// and the raw client take.
    pub fn client_url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://{}", self.endpoint())
    }

    /// The server's PID (0 when stopped).
    pub fn pid(&self) -> i32 {
        self.process.as_ref().map(ChildProcess::pid).unwrap_or(0)
    }

    /// `kill -9`; the data dir stays.
    pub fn kill9(&mut self) {
        if let Some(mut p) = self.process.take() {
            p.kill9();
        }
        // Its watchdog goes with it: it must never kill a later process that got the same PID.
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

    /// SIGCONT after [`EtcdServer::pause`].
    pub fn resume(&self) {
        if let Some(p) = &self.process {
            p.signal(Signal::SIGCONT);
        }
    }

    /// An `etcdctl` command for this server that knows how to reach it: `ETCDCTL_API=3`,
    /// `--endpoints=`, and, through etcdctl's environment variables (so no password shows in
    /// `ps`), the CA, the client certificate and the user once authentication is on.
    pub fn etcdctl(&self) -> Command {
        let mut cmd = Command::new("etcdctl");
        cmd.env("ETCDCTL_API", "3").arg(format!("--endpoints={}", self.client_url()));
        if let Some(tls) = &self.tls {
            cmd.env("ETCDCTL_CACERT", &tls.ca)
                .env("ETCDCTL_CERT", &tls.client_cert)
                .env("ETCDCTL_KEY", &tls.client_key);
        }
        if let Some((user, password)) = &self.auth {
            cmd.env("ETCDCTL_USER", format!("{user}:{password}"));
        }
        cmd
    }

    /// Adds `user` with `password`, grants it the `root` role (creating it), and enables
    /// authentication (etcd needs a `root` user for that: pass `"root"` or call this for root
    /// first). From now on [`EtcdServer::url`] and [`EtcdServer::etcdctl`] carry the credentials.
    ///
    /// # Panics
    /// When an `etcdctl` step fails; the message has its output.
    pub fn enable_auth(&mut self, user: &str, password: &str) {
        let step = |args: &[&str]| {
            let mut cmd = self.etcdctl();
            cmd.args(args);
            run_ok(&format!("etcdctl {}", args.first().copied().unwrap_or_default()), &mut cmd);
        };
        // `--new-user-password` keeps etcdctl from prompting.
        step(&["user", "add", user, &format!("--new-user-password={password}")]);
        if user != "root" {
            let mut cmd = self.etcdctl();
            // The role may exist already; only the grant below must succeed.
            let _ = cmd.args(["role", "add", "root"]).output();
        }
        step(&["user", "grant-role", user, "root"]);
        step(&["auth", "enable"]);
        self.auth = Some((user.to_string(), password.to_string()));
    }

    /// (Re)starts on the same ports and data dir and waits until `etcdctl endpoint health`
    /// succeeds.
    ///
    /// # Panics
    /// As [`EtcdServer::start`].
    pub fn restart(&mut self) {
        self.kill9();
        let client = self.client_url();
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let mut cmd = member_command("n1", self.dir.path(), &client, &peer, &format!("n1={peer}"), "new");
        if let Some(tls) = &self.tls {
            cmd.arg("--cert-file").arg(&tls.cert).arg("--key-file").arg(&tls.key);
            if tls.client_certs {
                cmd.arg("--client-cert-auth").arg("--trusted-ca-file").arg(&tls.ca);
            }
        }
        cmd.args(&self.args);
        let p = spawn("etcd", &mut cmd);
        self.watchdog = Some(watchdog("etcd", p.pid(), self.dir.path()));
        self.process = Some(p);
        wait_healthy(|| self.etcdctl(), Duration::from_secs(30), &format!("etcd on {}", self.endpoint()));
    }

    /// The server's log (stderr), for a failing test's message.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("etcd.log")).unwrap_or_default()
    }
}

/// `etcd` as one member named `name` of the cluster `initial` (`name=PEER_URL,…`), joining it
/// as `state` (`new` or `existing`): data in `dir/data`, stderr appended to `dir/etcd.log`,
/// heartbeat 50 ms and election timeout 500 ms; for [`EtcdServer`] and
/// [`EtcdCluster`](crate::EtcdCluster), which add flags of their own.
///
/// # Panics
/// When `/usr/bin/etcd` is missing (the message names the setup command) or the log cannot be
/// opened.
pub(crate) fn member_command(name: &str, dir: &Path, client: &str, peer: &str, initial: &str, state: &str) -> Command {
    let bin = PathBuf::from("/usr/bin/etcd");
    assert!(bin.exists(), "etcd is not installed; run: bash scripts/setup.sh (installs Debian's etcd-server)");
    let log =
        std::fs::OpenOptions::new().create(true).append(true).open(dir.join("etcd.log")).expect("open the etcd log");
    let mut cmd = Command::new(bin);
    cmd.arg("--name")
        .arg(name)
        .arg("--data-dir")
        .arg(dir.join("data"))
        .args(["--listen-client-urls", client, "--advertise-client-urls", client])
        .args(["--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer])
        .args(["--initial-cluster", initial, "--initial-cluster-state", state])
        .args(["--heartbeat-interval", "50", "--election-timeout", "500"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log);
    cmd
}

/// Polls `etcdctl() endpoint health` until it succeeds.
///
/// # Panics
/// When it does not within `limit`; the message names `what`.
pub(crate) fn wait_healthy(etcdctl: impl Fn() -> Command, limit: Duration, what: &str) {
    let until = Instant::now() + limit;
    loop {
        let ok = etcdctl()
            .args(["endpoint", "health", "--command-timeout=1s"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if ok {
            return;
        }
        assert!(Instant::now() < until, "{what} was not healthy within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Percent-encodes everything but unreserved characters (for credentials in a URL).
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        self.kill9();
    }
}
