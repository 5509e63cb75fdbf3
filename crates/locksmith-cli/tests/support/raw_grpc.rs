//! A raw gRPC client on the `h2` crate, for tests that misbehave on purpose: it frames any bytes
//! as a message, and it releases HTTP/2 flow-control window only when told to read, so it can
//! pipeline requests while never reading the answers.

#![allow(dead_code)]

use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use locksmith_proto::client_message::Body as In;
use locksmith_proto::{ClientMessage, ServerMessage};
use prost::Message;

/// One HTTP/2 connection to a server on loopback.
pub struct RawConn {
    port: u16,
    send: h2::client::SendRequest<Bytes>,
    task: tokio::task::JoinHandle<()>,
}

impl RawConn {
    /// Connects with `stream_window` bytes of receive window per stream (HTTP/2 setting
    /// `INITIAL_WINDOW_SIZE`); what the client does not read is never given back.
    pub async fn connect(port: u16, stream_window: u32) -> Self {
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.expect("connect");
        let (send, conn) = h2::client::Builder::new()
            .initial_window_size(stream_window)
            .handshake(tcp)
            .await
            .expect("HTTP/2 handshake");
        let task = tokio::spawn(async move {
            let _ = conn.await;
        });
        Self { port, send, task }
    }

    /// Starts a `Session` stream (headers only; nothing sent on it yet).
    pub async fn session(&mut self) -> RawStream {
        self.try_session(Duration::from_secs(10)).await.expect("no stream could be started in 10 s")
    }

    /// [`RawConn::session`], or `None` when the server's stream limit leaves no room within
    /// `wait`.
    pub async fn try_session(&mut self, wait: Duration) -> Option<RawStream> {
        self.try_call("/locksmith.v1.Locksmith/Session", wait).await
    }

    /// Starts a call to the gRPC method `path` (e.g. `/grpc.health.v1.Health/Check`), headers
    /// only; `None` when the server's stream limit leaves no room within `wait`.
    pub async fn try_call(&mut self, path: &str, wait: Duration) -> Option<RawStream> {
        let req = http::Request::builder()
            .method("POST")
            .uri(format!("http://127.0.0.1:{}{path}", self.port))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .expect("request");
        let mut send = tokio::time::timeout(wait, self.send.clone().ready()).await.ok()?.expect("connection");
        let (response, stream) = send.send_request(req, false).expect("send request");
        Some(RawStream { response: Some(response), body: None, send: stream, buf: BytesMut::new(), ended: None })
    }
}

impl Drop for RawConn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What came next on a stream.
#[derive(Debug)]
pub enum Next {
    /// A message.
    Message(ServerMessage),
    /// The stream ended with this gRPC status code and message.
    End(i32, String),
}

/// One raw session stream.
pub struct RawStream {
    response: Option<h2::client::ResponseFuture>,
    body: Option<h2::RecvStream>,
    send: h2::SendStream<Bytes>,
    buf: BytesMut,
    ended: Option<(i32, String)>,
}

/// `payload` in gRPC's length-prefixed framing.
pub fn frame(payload: &[u8]) -> Bytes {
    let mut f = Vec::with_capacity(payload.len() + 5);
    f.push(0);
    f.extend_from_slice(&u32::try_from(payload.len()).unwrap().to_be_bytes());
    f.extend_from_slice(payload);
    f.into()
}

/// A message with `body`.
pub fn msg(id: u64, body: In) -> ClientMessage {
    ClientMessage { id, body: Some(body) }
}

/// An `open` for a new session.
pub fn open(id: u64) -> ClientMessage {
    msg(id, In::Open(locksmith_proto::Open { ttl_ms: 10_000, ..Default::default() }))
}

impl RawStream {
    /// Sends `m`, framed.
    ///
    /// # Panics
    /// When the stream is closed.
    pub fn send(&mut self, m: &ClientMessage) {
        assert!(self.send_bytes(frame(&m.encode_to_vec())), "the stream is closed");
    }

    /// Sends bytes as they are (framing included); `false` when the stream is closed already
    /// (the server ended it, and reset its request half).
    pub fn send_bytes(&mut self, bytes: Bytes) -> bool {
        self.send.send_data(bytes, false).is_ok()
    }

    /// The next message or the stream's end, reading (and so giving window back) as needed;
    /// `None` after `timeout` without either.
    pub async fn next_within(&mut self, timeout: Duration) -> Option<Next> {
        tokio::time::timeout(timeout, self.next()).await.ok()
    }

    /// The next message or the stream's end.
    pub async fn next(&mut self) -> Next {
        if let Some((code, message)) = &self.ended {
            return Next::End(*code, message.clone());
        }
        loop {
            if let Some(m) = self.decoded() {
                return Next::Message(m);
            }
            let body = match &mut self.body {
                Some(body) => body,
                None => {
                    // Awaited in place: `next_within` may cancel this.
                    let response = self.response.as_mut().expect("a response").await.expect("response headers");
                    self.response = None;
                    // A stream ended before any message may carry its status in the headers.
                    if let Some(end) = status(response.headers()) {
                        self.ended = Some(end.clone());
                        return Next::End(end.0, end.1);
                    }
                    self.body.insert(response.into_body())
                }
            };
            match body.data().await {
                Some(Ok(data)) => {
                    let _ = body.flow_control().release_capacity(data.len());
                    self.buf.extend_from_slice(&data);
                }
                Some(Err(e)) => {
                    let end = (-1, format!("stream broke: {e}"));
                    self.ended = Some(end.clone());
                    return Next::End(end.0, end.1);
                }
                None => {
                    let trailers = body.trailers().await.ok().flatten().unwrap_or_default();
                    let end = status(&trailers).unwrap_or((-1, "no grpc-status".into()));
                    self.ended = Some(end.clone());
                    return Next::End(end.0, end.1);
                }
            }
        }
    }

    /// The stream's end, skipping messages; how many were skipped.
    pub async fn end(&mut self) -> (i32, String, usize) {
        let mut skipped = 0;
        loop {
            match self.next().await {
                Next::Message(_) => skipped += 1,
                Next::End(code, message) => return (code, message, skipped),
            }
        }
    }

    fn decoded(&mut self) -> Option<ServerMessage> {
        if self.buf.len() < 5 {
            return None;
        }
        let len = u32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]) as usize;
        if self.buf.len() < 5 + len {
            return None;
        }
        self.buf.advance(5);
        let payload = self.buf.split_to(len);
        Some(ServerMessage::decode(payload.freeze()).expect("a ServerMessage"))
    }
}

/// `grpc-status` and `grpc-message` (percent-decoded) from headers or trailers.
fn status(headers: &http::HeaderMap) -> Option<(i32, String)> {
    let code = headers.get("grpc-status")?.to_str().ok()?.parse().ok()?;
    let message = headers.get("grpc-message").and_then(|v| v.to_str().ok()).map(percent_decode).unwrap_or_default();
    Some((code, message))
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let Ok(b) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(b);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}
