//! The fenced register: the shared resource the workers protect with the lock. It holds one
//! integer and the highest fencing token it has seen, and logs every request.
//!
//! Line protocol over TCP (one request, one answer):
//!
//! | request | answer |
//! |---|---|
//! | `READ <token> <worker> <hold>` | `VALUE <v>` (and the token counts as seen) |
//! | `WRITE <token> <expected> <new> <worker> <hold>` | `OK <new>` or `REJECTED <max-seen>` |
//! | anything else | `ERR <why>` |
//!
//! A write is accepted iff its token is ≥ the highest token seen (every write when unfenced).
//! The register does **not** compare `expected` with its value — it is a plain fenced register,
//! not a compare-and-set — so a write based on a stale read goes through when fencing fails to
//! stop it, and the checker finds it in the log.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

use super::history::now_ns;

/// Which request an entry records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Op {
    /// `READ`
    Read,
    /// `WRITE`
    Write,
}

/// One request as the register saw it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// When it was applied (`CLOCK_MONOTONIC` ns).
    pub t: u64,
    /// Read or write.
    pub op: Op,
    /// The worker that sent it.
    pub worker: u32,
    /// The hold it was sent under.
    pub hold: String,
    /// The token it carried.
    pub token: u64,
    /// Writes: the value the write was based on.
    pub expected: Option<u64>,
    /// Writes: the value to store.
    pub new: Option<u64>,
    /// The register's value at that moment (before a write).
    pub value: u64,
    /// The highest token seen before this request.
    pub max_seen: u64,
    /// Writes: taken or refused. Reads: always true.
    pub accepted: bool,
}

/// The register's state, without I/O (time is passed in).
#[derive(Debug, Default)]
pub struct Register {
    fenced: bool,
    value: u64,
    max_seen: u64,
    log: Vec<Entry>,
    /// Per worker, the op and hold of its latest request: a worker whose latest request is a
    /// READ is inside its critical section (between read and write).
    latest: HashMap<u32, (Op, u64)>,
}

impl Register {
    /// An empty register (value 0). `fenced`: refuse writes with a token below the highest seen.
    pub fn new(fenced: bool) -> Self {
        Self { fenced, ..Self::default() }
    }

    /// The current value.
    pub fn value(&self) -> u64 {
        self.value
    }

    /// Every request so far, in the order applied.
    pub fn log(&self) -> &[Entry] {
        &self.log
    }

    /// The worker that most recently read and has not written since: the one most likely to be
    /// inside its critical section right now.
    pub fn in_critical_section(&self) -> Option<u32> {
        self.latest.iter().filter(|(_, (op, _))| *op == Op::Read).max_by_key(|(_, (_, t))| *t).map(|(w, _)| *w)
    }

    /// Applies one request line at time `t` and returns the answer line (without newline).
    pub fn apply(&mut self, line: &str, t: u64) -> String {
        match self.parse_and_apply(line, t) {
            Ok(answer) => answer,
            Err(why) => format!("ERR {why}"),
        }
    }

    fn parse_and_apply(&mut self, line: &str, t: u64) -> Result<String, String> {
        let words: Vec<&str> = line.split_whitespace().collect();
        let num = |i: usize, what: &str| -> Result<u64, String> {
            words
                .get(i)
                .ok_or_else(|| format!("missing {what}"))?
                .parse::<u64>()
                .map_err(|_| format!("{what} is not a number"))
        };
        let worker = |i: usize| -> Result<u32, String> {
            words.get(i).ok_or("missing worker")?.parse::<u32>().map_err(|_| "worker is not a number".to_string())
        };
        let hold = |i: usize| -> Result<String, String> { Ok(words.get(i).ok_or("missing hold")?.to_string()) };
        match words.first().copied() {
            Some("READ") if words.len() == 4 => {
                let (token, worker, hold) = (num(1, "token")?, worker(2)?, hold(3)?);
                let entry = Entry {
                    t,
                    op: Op::Read,
                    worker,
                    hold,
                    token,
                    expected: None,
                    new: None,
                    value: self.value,
                    max_seen: self.max_seen,
                    accepted: true,
                };
                self.max_seen = self.max_seen.max(token);
                self.record(entry);
                Ok(format!("VALUE {}", self.value))
            }
            Some("WRITE") if words.len() == 6 => {
                let (token, expected, new) = (num(1, "token")?, num(2, "expected")?, num(3, "new")?);
                let (worker, hold) = (worker(4)?, hold(5)?);
                let accepted = !self.fenced || token >= self.max_seen;
                let entry = Entry {
                    t,
                    op: Op::Write,
                    worker,
                    hold,
                    token,
                    expected: Some(expected),
                    new: Some(new),
                    value: self.value,
                    max_seen: self.max_seen,
                    accepted,
                };
                self.record(entry);
                if accepted {
                    self.value = new;
                    self.max_seen = self.max_seen.max(token);
                    Ok(format!("OK {new}"))
                } else {
                    Ok(format!("REJECTED {}", self.max_seen))
                }
            }
            Some(other) => Err(format!("unknown request {other:?} or wrong number of fields")),
            None => Err("empty request".into()),
        }
    }

    fn record(&mut self, entry: Entry) {
        self.latest.insert(entry.worker, (entry.op, entry.t));
        self.log.push(entry);
    }
}

/// The register shared between its TCP service and the harness.
pub type Shared = Arc<Mutex<Register>>;

/// Locks the shared register; a panic elsewhere cannot leave it half-updated (every update is a
/// push plus two assignments), so a poisoned lock is still usable.
pub fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, Register> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The register's TCP service on `127.0.0.1:0`; stops when dropped.
#[derive(Debug)]
pub struct RegisterServer {
    addr: SocketAddr,
    shared: Shared,
    task: tokio::task::JoinHandle<()>,
}

impl RegisterServer {
    /// Binds `127.0.0.1:0` and serves until dropped.
    ///
    /// # Cancel safety
    /// Cancel safe: nothing is started until the bind returned.
    ///
    /// # Errors
    /// The listener cannot be bound.
    pub async fn start(fenced: bool) -> std::io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shared: Shared = Arc::new(Mutex::new(Register::new(fenced)));
        let task = tokio::spawn(accept_loop(listener, shared.clone()));
        Ok(Self { addr, shared, task })
    }

    /// Where workers connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The state, for the nemesis (who is in a critical section) and the checker (the log).
    pub fn shared(&self) -> &Shared {
        &self.shared
    }
}

impl Drop for RegisterServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn accept_loop(listener: TcpListener, shared: Shared) {
    loop {
        let Ok((stream, _)) = listener.accept().await else { continue };
        tokio::spawn(serve_conn(stream, shared.clone()));
    }
}

async fn serve_conn(stream: TcpStream, shared: Shared) {
    let (read, mut write) = stream.into_split();
    let mut lines = BufReader::new(read).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        // Stamp and apply under one lock, so log order is time order.
        let answer = {
            let mut reg = lock(&shared);
            reg.apply(&line, now_ns())
        };
        if write.write_all(format!("{answer}\n").as_bytes()).await.is_err() {
            return;
        }
    }
}

/// A worker's connection to the register.
#[derive(Debug)]
pub struct RegisterClient {
    lines: tokio::io::Lines<BufReader<tokio::net::tcp::OwnedReadHalf>>,
    write: tokio::net::tcp::OwnedWriteHalf,
}

/// What a write came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOutcome {
    /// Stored.
    Accepted,
    /// Refused: a higher token was seen before.
    Rejected,
}

impl RegisterClient {
    /// Connects to the register at `addr`.
    ///
    /// # Cancel safety
    /// Cancel safe.
    ///
    /// # Errors
    /// The connection failed.
    pub async fn connect(addr: SocketAddr) -> std::io::Result<Self> {
        let (read, write) = TcpStream::connect(addr).await?.into_split();
        Ok(Self { lines: BufReader::new(read).lines(), write })
    }

    async fn call(&mut self, request: String) -> std::io::Result<String> {
        self.write.write_all(format!("{request}\n").as_bytes()).await?;
        self.lines.next_line().await?.ok_or_else(|| std::io::Error::other("register closed the connection"))
    }

    /// Reads the value with `token`.
    ///
    /// # Cancel safety
    /// Not cancel safe: a dropped call leaves its answer unread; reconnect after one.
    ///
    /// # Errors
    /// I/O, or an answer that is not `VALUE n`.
    pub async fn read(&mut self, token: u64, worker: u32, hold: &str) -> std::io::Result<u64> {
        let answer = self.call(format!("READ {token} {worker} {hold}")).await?;
        answer
            .strip_prefix("VALUE ")
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| std::io::Error::other(format!("register answered {answer:?}")))
    }

    /// Writes `new` (based on `expected`) with `token`.
    ///
    /// # Cancel safety
    /// Not cancel safe: as [`RegisterClient::read`].
    ///
    /// # Errors
    /// I/O, or an answer that is neither `OK` nor `REJECTED`.
    pub async fn write(
        &mut self,
        token: u64,
        expected: u64,
        new: u64,
        worker: u32,
        hold: &str,
    ) -> std::io::Result<WriteOutcome> {
        let answer = self.call(format!("WRITE {token} {expected} {new} {worker} {hold}")).await?;
        if answer.starts_with("OK ") {
            Ok(WriteOutcome::Accepted)
        } else if answer.starts_with("REJECTED ") {
            Ok(WriteOutcome::Rejected)
        } else {
            Err(std::io::Error::other(format!("register answered {answer:?}")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fenced_register_refuses_a_write_whose_token_is_below_the_highest_read() {
        let mut r = Register::new(true);
        assert_eq!(r.apply("READ 5 1 1.1.1", 1), "VALUE 0");
        assert_eq!(r.apply("READ 6 2 2.1.1", 2), "VALUE 0");
        assert_eq!(r.apply("WRITE 5 0 1 1 1.1.1", 3), "REJECTED 6");
        assert_eq!(r.apply("WRITE 6 0 1 2 2.1.1", 4), "OK 1");
        assert_eq!(r.value(), 1);
        let w = &r.log()[2];
        assert_eq!((w.op, w.accepted, w.value, w.max_seen, w.expected), (Op::Write, false, 0, 6, Some(0)));
    }

    #[test]
    fn an_unfenced_register_takes_every_write_without_comparing_expected() {
        let mut r = Register::new(false);
        assert_eq!(r.apply("READ 0 1 a", 1), "VALUE 0");
        assert_eq!(r.apply("WRITE 0 0 1 2 b", 2), "OK 1");
        assert_eq!(r.apply("WRITE 0 0 1 1 a", 3), "OK 1");
        assert_eq!(r.log()[2].value, 1, "the log keeps the value the stale write overwrote");
    }

    #[test]
    fn malformed_requests_get_an_error_and_change_nothing() {
        let mut r = Register::new(true);
        for bad in ["", "READ", "READ x 1 h", "WRITE 1 2 3", "WRITE 1 2 3 w h", "DELETE 1", "READ 1 -1 h"] {
            assert!(r.apply(bad, 1).starts_with("ERR "), "{bad:?}");
        }
        assert!(r.log().is_empty());
        assert_eq!(r.value(), 0);
    }

    #[test]
    fn the_worker_between_read_and_write_is_in_its_critical_section() {
        let mut r = Register::new(true);
        assert_eq!(r.in_critical_section(), None);
        r.apply("READ 1 1 a", 1);
        r.apply("WRITE 1 0 1 1 a", 2);
        r.apply("READ 2 2 b", 3);
        assert_eq!(r.in_critical_section(), Some(2));
        r.apply("WRITE 2 1 2 2 b", 4);
        assert_eq!(r.in_critical_section(), None);
    }

    #[tokio::test]
    async fn workers_talk_to_the_register_over_tcp() {
        let server = RegisterServer::start(true).await.unwrap();
        let mut c = RegisterClient::connect(server.addr()).await.unwrap();
        assert_eq!(c.read(3, 1, "1.1.1").await.unwrap(), 0);
        assert_eq!(c.write(3, 0, 1, 1, "1.1.1").await.unwrap(), WriteOutcome::Accepted);
        assert_eq!(c.write(2, 1, 2, 1, "1.1.2").await.unwrap(), WriteOutcome::Rejected);
        assert_eq!(lock(server.shared()).value(), 1);
    }
}
