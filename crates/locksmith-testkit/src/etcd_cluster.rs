//! A 3- (or 5-) member etcd cluster on loopback, for comparing the native cluster with the
//! replicated store people run: every member its own ports and temp data dir, with the same
//! heartbeat and election settings as [`EtcdServer`](crate::EtcdServer); every process killed
//! by PID on drop.

use std::process::{Command, Stdio};
use std::time::Duration;

use crate::etcd::{member_command, wait_healthy};
use crate::port::free_port;
use crate::process::{spawn, watchdog, ChildProcess};

/// An etcd cluster of real `etcd` processes.
#[derive(Debug)]
pub struct EtcdCluster {
    members: Vec<Member>,
    initial: String,
}

#[derive(Debug)]
struct Member {
    name: String,
    port: u16,
    peer_port: u16,
    dir: tempfile::TempDir,
    process: Option<ChildProcess>,
    watchdog: Option<ChildProcess>,
}

impl EtcdCluster {
    /// Starts `size` members and waits until the cluster is healthy.
    ///
    /// # Panics
    /// When `/usr/bin/etcd` is missing (the message names the setup command) or the cluster is
    /// not healthy within 30 s.
    pub fn start(size: usize) -> Self {
        let members: Vec<Member> = (1..=size)
            .map(|i| Member {
                name: format!("n{i}"),
                port: free_port(),
                peer_port: free_port(),
                dir: tempfile::Builder::new().prefix("locksmith-etcd-").tempdir().expect("create a temp dir"),
                process: None,
                watchdog: None,
            })
            .collect();
        let initial = members
            .iter()
            .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
            .collect::<Vec<_>>()
            .join(",");
        let mut c = Self { members, initial };
        for i in 0..size {
            c.spawn_member(i, "new");
        }
        c.wait_healthy(Duration::from_secs(30));
        c
    }

    /// `etcd://127.0.0.1:P1,127.0.0.1:P2,…`: every member.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self.members.iter().map(|m| format!("127.0.0.1:{}", m.port)).collect();
        format!("etcd://{}", hosts.join(","))
    }

    /// Member indexes, `0..size`.
    pub fn members(&self) -> std::ops::Range<usize> {
        0..self.members.len()
    }

    /// The member that leads now, by `etcdctl endpoint status`.
    pub fn leader(&self) -> Option<usize> {
        self.members.iter().position(|m| {
            m.process.is_some()
                && Command::new("etcdctl")
                    .env("ETCDCTL_API", "3")
                    .arg(format!("--endpoints=http://127.0.0.1:{}", m.port))
                    .args(["endpoint", "status", "--command-timeout=1s", "-w", "json"])
                    .stderr(Stdio::null())
                    .output()
                    .ok()
                    .and_then(|o| serde_json::from_slice::<serde_json::Value>(&o.stdout).ok())
                    .and_then(|v| {
                        let s = v.get(0)?.get("Status")?;
                        let id = s.get("header")?.get("member_id")?.as_u64()?;
                        Some(s.get("leader")?.as_u64()? == id)
                    })
                    .unwrap_or(false)
        })
    }

    /// `kill -9` of member `i`; its data dir stays.
    pub fn kill9(&mut self, i: usize) {
        let m = &mut self.members[i];
        if let Some(mut p) = m.process.take() {
            p.kill9();
        }
        if let Some(mut w) = m.watchdog.take() {
            w.kill9();
        }
    }

    /// Restarts member `i` on its ports and data dir (it rejoins the cluster).
    pub fn restart(&mut self, i: usize) {
        self.kill9(i);
        self.spawn_member(i, "existing");
    }

    fn spawn_member(&mut self, i: usize, state: &str) {
        let initial = self.initial.clone();
        let m = &mut self.members[i];
        let client = format!("http://127.0.0.1:{}", m.port);
        let peer = format!("http://127.0.0.1:{}", m.peer_port);
        let mut cmd = member_command(&m.name, m.dir.path(), &client, &peer, &initial, state);
        cmd.args(["--initial-cluster-token", "locksmith-test"]);
        let p = spawn("etcd member", &mut cmd);
        m.watchdog = Some(watchdog("etcd member", p.pid(), m.dir.path()));
        m.process = Some(p);
    }

    /// Waits until every running member reports healthy.
    ///
    /// # Panics
    /// When they do not within `limit`.
    pub fn wait_healthy(&self, limit: Duration) {
        let endpoints: Vec<String> = self
            .members
            .iter()
            .filter(|m| m.process.is_some())
            .map(|m| format!("http://127.0.0.1:{}", m.port))
            .collect();
        let etcdctl = || {
            let mut cmd = Command::new("etcdctl");
            cmd.env("ETCDCTL_API", "3").arg(format!("--endpoints={}", endpoints.join(",")));
            cmd
        };
        wait_healthy(etcdctl, limit, "the etcd cluster");
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for i in self.members() {
            self.kill9(i);
        }
    }
}
