//! One TCP connection to the server, (re)connected on demand. Commands go one at a time: the
//! connection is taken out for the exchange and put back only once the answer is read whole, so
//! a command that timed out, failed or was cancelled (its future dropped) closes the connection
//! instead of leaving a late answer for the next command to read.

use std::time::Duration;

use locksmith_core::{Error, Result};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufStream};
use tokio::net::TcpStream;

use crate::meta::{parse_head, Head, Refusal, Reply};

/// Longest first line of an answer read before giving up on the server.
const MAX_LINE: u64 = 1024;

/// Time limits of one call.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    /// A TCP connection.
    pub(crate) connect: Duration,
    /// One command's answer.
    pub(crate) command: Duration,
}

impl Timeouts {
    /// For a session of `ttl`: a third of it each, within [50 ms, 1 s]. The session says it
    /// bounds its calls ([`Session::bounds_its_calls`](locksmith_core::Session)), so the engine
    /// lets a renewal (two round trips) run until the hold's deadline: a hung command ends
    /// here and the next renewal connects afresh, while slow answers on a loaded machine still
    /// keep the hold. (With a quarter of the TTL per command and the engine cutting every
    /// renewal at a third, a 1 s holder lost its lock under a test suite's load.)
    pub(crate) fn for_ttl(ttl: Duration) -> Self {
        let each = (ttl / 3).clamp(Duration::from_millis(50), Duration::from_secs(1));
        Self { connect: each, command: each }
    }
}

/// The connection of one backend.
#[derive(Debug)]
pub(crate) struct Conn {
    /// `host:port` as given (brackets kept on an IPv6 address), for messages.
    addr: String,
    host: String,
    port: u16,
    /// `memcached://host:port`, for errors.
    describe: String,
    stream: tokio::sync::Mutex<Option<BufStream<TcpStream>>>,
}

impl Conn {
    /// No I/O.
    pub(crate) fn new(host: &str, port: u16, describe: String) -> Self {
        let addr = format!("{host}:{port}");
        let host = host.trim_start_matches('[').trim_end_matches(']').to_string();
        Self { addr, host, port, describe, stream: tokio::sync::Mutex::new(None) }
    }

    fn unavailable(&self, message: String) -> Error {
        Error::Unavailable { backend: self.describe.clone(), message }
    }

    /// Sends `request` and reads its answer, connecting first if needed.
    ///
    /// # Errors
    /// [`Error::Unavailable`] when the server cannot be reached or does not answer in time;
    /// [`Error::Backend`] when it refuses the command.
    ///
    /// # Cancel safety
    /// Cancel safe as to the connection (it is closed); the command may or may not have been
    /// carried out.
    pub(crate) async fn call(&self, request: &[u8], t: Timeouts) -> Result<Reply> {
        let mut slot = self.stream.lock().await;
        let mut stream = match slot.take() {
            Some(s) => s,
            None => self.connect(t.connect).await?,
        };
        match tokio::time::timeout(t.command, exchange(&mut stream, request)).await {
            Ok(Ok(Ok(reply))) => {
                *slot = Some(stream);
                Ok(reply)
            }
            // The answer was read whole: the connection stays usable.
            Ok(Ok(Err(Refusal::Server(m)))) => {
                *slot = Some(stream);
                Err(Error::Backend(format!("memcached at {}: {m}", self.addr)))
            }
            // Not memcached's meta protocol (another server on that port?): not retried as an
            // outage, and the connection is closed.
            Ok(Ok(Err(Refusal::Garbled(m)))) => {
                Err(Error::Protocol(format!("{} at {}: {m}", self.describe, self.addr)))
            }
            Ok(Err(e)) => Err(self.unavailable(format!("connection lost: {e}"))),
            Err(_) => Err(self.unavailable(format!("no answer within {:?}", t.command))),
        }
    }

    async fn connect(&self, timeout: Duration) -> Result<BufStream<TcpStream>> {
        let attempt = TcpStream::connect((self.host.as_str(), self.port));
        match tokio::time::timeout(timeout, attempt).await {
            Ok(Ok(s)) => {
                // One small command per round trip: never wait for more bytes to send.
                let _ = s.set_nodelay(true);
                Ok(BufStream::new(s))
            }
            Ok(Err(e)) => Err(self.unavailable(format!("cannot connect to {}: {e}", self.addr))),
            Err(_) => Err(self.unavailable(format!("no connection to {} within {timeout:?}", self.addr))),
        }
    }
}

/// One command and its whole answer. The outer error is the connection's, the inner one the
/// server's refusal (after which the connection is still in step).
async fn exchange(
    stream: &mut BufStream<TcpStream>,
    request: &[u8],
) -> std::io::Result<std::result::Result<Reply, Refusal>> {
    stream.write_all(request).await?;
    stream.flush().await?;
    let mut line = Vec::new();
    (&mut *stream).take(MAX_LINE).read_until(b'\n', &mut line).await?;
    let Some(line) = line.strip_suffix(b"\r\n") else {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "an answer line without \\r\\n"));
    };
    let line = String::from_utf8_lossy(line);
    match parse_head(&line) {
        Ok(Head::Complete(reply)) => Ok(Ok(reply)),
        Ok(Head::Value { len, cas, ttl }) => {
            let mut data = vec![0; len + 2];
            stream.read_exact(&mut data).await?;
            if !data.ends_with(b"\r\n") {
                return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "a value block without \\r\\n"));
            }
            data.truncate(len);
            Ok(Ok(Reply::Value { data, cas, ttl }))
        }
        Err(refusal) => Ok(Err(refusal)),
    }
}
