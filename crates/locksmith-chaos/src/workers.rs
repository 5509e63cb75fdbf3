//! The worker processes: `<this exe> chaos-worker …`, one history file per incarnation (a
//! restarted worker appends to a new file, so every incarnation's events are kept).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use locksmith_process::ChildProcess;
use nix::sys::signal::Signal;

use super::procs;

/// What every worker is started with.
#[derive(Debug, Clone)]
pub struct Spec {
    /// This binary.
    pub exe: PathBuf,
    /// Backend URL as the workers use it (through the proxies when there are any).
    pub url: String,
    /// The lock.
    pub lock: String,
    /// The register.
    pub register: SocketAddr,
    /// Session lease.
    pub ttl: Duration,
    /// Longest sleep between read and write.
    pub hold: Duration,
    /// Lock without fencing (token 0 to the register).
    pub unfenced: bool,
    /// Base seed.
    pub seed: u64,
    /// Where histories and the workers' stderr go.
    pub dir: PathBuf,
}

/// One worker slot: its current process and how many times it was started.
#[derive(Debug)]
struct Slot {
    proc: Option<ChildProcess>,
    incarnation: u32,
}

/// Every worker the harness runs.
#[derive(Debug)]
pub struct Workers {
    spec: Spec,
    slots: Vec<Slot>,
    histories: Vec<PathBuf>,
}

impl Workers {
    /// Starts `n` workers (ids 1..=n).
    ///
    /// # Errors
    /// A worker could not be started (the ones already started are killed on drop).
    pub fn start(spec: Spec, n: u32) -> std::io::Result<Self> {
        let mut w = Self { spec, slots: Vec::new(), histories: Vec::new() };
        for _ in 0..n {
            w.slots.push(Slot { proc: None, incarnation: 0 });
        }
        for id in 1..=n {
            w.spawn(id)?;
        }
        Ok(w)
    }

    /// How many workers.
    pub fn len(&self) -> u32 {
        u32::try_from(self.slots.len()).unwrap_or(u32::MAX)
    }

    /// Every history file written so far (one per incarnation).
    pub fn histories(&self) -> &[PathBuf] {
        &self.histories
    }

    fn slot(&mut self, id: u32) -> std::io::Result<&mut Slot> {
        let i = usize::try_from(id).ok().and_then(|i| i.checked_sub(1));
        i.and_then(|i| self.slots.get_mut(i)).ok_or_else(|| std::io::Error::other(format!("no worker {id}")))
    }

    fn spawn(&mut self, id: u32) -> std::io::Result<()> {
        let spec = self.spec.clone();
        let slot = self.slot(id)?;
        slot.incarnation += 1;
        let incarnation = slot.incarnation;
        let history = spec.dir.join(format!("worker-{id}-{incarnation}.jsonl"));
        let stderr = std::fs::OpenOptions::new().create(true).append(true).open(spec.dir.join("workers.log"))?;
        let mut cmd = Command::new(&spec.exe);
        cmd.arg("chaos-worker")
            .env("LOCKSMITH_BACKEND", &spec.url)
            .arg("--lock")
            .arg(&spec.lock)
            .arg("--register")
            .arg(spec.register.to_string())
            .arg("--ttl")
            .arg(format!("{}ms", spec.ttl.as_millis()))
            .arg("--hold")
            .arg(format!("{}ms", spec.hold.as_millis()))
            .arg("--id")
            .arg(id.to_string())
            .arg("--incarnation")
            .arg(incarnation.to_string())
            .arg("--history")
            .arg(&history)
            .arg("--seed")
            .arg(spec.seed.to_string())
            .env("LOCKSMITH_LOG", "error")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr);
        if spec.unfenced {
            cmd.arg("--unfenced");
        }
        let proc = procs::spawn("locksmith chaos-worker", &mut cmd)?;
        self.slot(id)?.proc = Some(proc);
        self.histories.push(history);
        Ok(())
    }

    /// `kill -9` worker `id` and start its next incarnation.
    ///
    /// # Errors
    /// The new incarnation could not be started.
    pub fn kill_and_restart(&mut self, id: u32) -> std::io::Result<()> {
        if let Some(mut p) = self.slot(id)?.proc.take() {
            p.kill9();
        }
        self.spawn(id)
    }

    /// Sends `sig` to worker `id`.
    pub fn signal(&self, id: u32, sig: Signal) {
        let i = usize::try_from(id).ok().and_then(|i| i.checked_sub(1));
        if let Some(Some(p)) = i.and_then(|i| self.slots.get(i)).map(|s| s.proc.as_ref()) {
            p.signal(sig);
        }
    }

    /// Workers whose current incarnation ended on its own (not killed by the nemesis), e.g.
    /// `worker 3 (incarnation 2): exit status: 70`; see `workers.log` in the history dir.
    pub fn early_exits(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        for (i, s) in self.slots.iter_mut().enumerate() {
            if let Some(status) = s.proc.as_mut().and_then(ChildProcess::try_wait) {
                out.push(format!("worker {} (incarnation {}): {status}", i + 1, s.incarnation));
            }
        }
        out
    }

    /// SIGTERM every worker (each finishes its cycle), then `kill -9` whoever is left after
    /// `grace`.
    ///
    /// # Cancel safety
    /// Cancel safe: workers not yet stopped are killed when `self` is dropped.
    pub async fn stop_all(&mut self, grace: Duration) {
        for s in &self.slots {
            if let Some(p) = &s.proc {
                p.signal(Signal::SIGCONT);
                p.signal(Signal::SIGTERM);
            }
        }
        for s in &mut self.slots {
            if let Some(mut p) = s.proc.take() {
                procs::stop(&mut p, grace).await;
            }
        }
    }
}
