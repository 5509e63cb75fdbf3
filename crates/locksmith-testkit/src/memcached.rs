//! memcached servers (Debian's `memcached`) as real processes.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use nix::sys::signal::Signal;

use crate::port::free_port;
use crate::process::{spawn_listening, ChildProcess};

/// How to get `memcached` when it is missing.
pub const MEMCACHED_SETUP: &str = "bash scripts/setup.sh (installs Debian's memcached)";

/// A `memcached` on 127.0.0.1 with its own port (TCP only); killed by PID on drop. It keeps
/// nothing on disk: a restart comes back empty.
#[derive(Debug)]
pub struct MemcachedServer {
    port: u16,
    memory_mb: u32,
    process: Option<ChildProcess>,
}

impl MemcachedServer {
    /// A server with 64 MiB of item memory.
    ///
    /// # Panics
    /// When `memcached` is missing (the message names the setup command) or does not listen.
    pub fn start() -> Self {
        Self::start_with_memory(64)
    }

    /// A server with `mb` MiB of item memory (`-m`): a small one (2 MiB, the least memcached
    /// 1.6 starts with) evicts held keys once filled (the eviction tests).
    ///
    /// # Panics
    /// As [`MemcachedServer::start`].
    pub fn start_with_memory(mb: u32) -> Self {
        let mut s = Self { port: free_port(), memory_mb: mb, process: None };
        s.restart();
        s
    }

    /// `memcached://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("memcached://127.0.0.1:{}", self.port)
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

    /// `kill -9`: every item is gone.
    pub fn kill9(&mut self) {
        if let Some(mut p) = self.process.take() {
            p.kill9();
        }
    }

    /// SIGSTOP: the server stops answering but keeps its connections.
    pub fn pause(&self) {
        if let Some(p) = &self.process {
            p.signal(Signal::SIGSTOP);
        }
    }

    /// SIGCONT after [`MemcachedServer::pause`].
    pub fn resume(&self) {
        if let Some(p) = &self.process {
            p.signal(Signal::SIGCONT);
        }
    }

    /// (Re)starts on the same port, empty.
    ///
    /// # Panics
    /// As [`MemcachedServer::start`].
    pub fn restart(&mut self) {
        self.kill9();
        let bin = find_memcached().unwrap_or_else(|| panic!("memcached is not installed; run: {MEMCACHED_SETUP}"));
        let mut cmd = Command::new(bin);
        // `-u root`: memcached refuses to run as root without it; `-U 0`: no UDP port.
        cmd.args(["-l", "127.0.0.1", "-p", &self.port.to_string(), "-U", "0", "-u", "root"])
            .args(["-m", &self.memory_mb.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        self.process = Some(spawn_listening("memcached", &mut cmd, self.port));
    }
}

fn find_memcached() -> Option<PathBuf> {
    ["/usr/bin/memcached", "/usr/local/bin/memcached"].into_iter().map(PathBuf::from).find(|p| p.exists())
}
