//! A byte budget per peer address for request messages not yet whole.
//!
//! A gRPC message is buffered whole before it is decoded, and a unary call is decoded before
//! its handler runs — before any authentication. A peer that announces large messages and
//! stalls before their last byte makes the server hold each one: measured with `--auth`, 20
//! connections × 100 stalled 64 KiB calls from one address grew a server by 152 MB, so the
//! 1,000 connections one address may open could hold gigabytes. The HTTP/2 windows bound one
//! connection only. [`Budgeted`] wraps the services that decode before they know the caller
//! (lock, cluster admin, health; Raft's gate refuses a non-node at its headers, body unread)
//! and counts, per address, the announced size of each message begun but not complete (tonic
//! reserves a message's announced size as soon as its 5-byte prefix is in: 100 connections ×
//! 100 calls sending nothing but the prefix of a 64 KiB message took 161 MB); a call whose
//! message would take its address past [`PARTIAL_BYTES_PER_ADDRESS`] ends with
//! `RESOURCE_EXHAUSTED` and its bytes are freed. Whole messages cost nothing here: a client's
//! lock messages are a few hundred bytes and complete within one frame.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use http_body::Frame;
use tonic::body::Body;
use tonic::codegen::{http, Bytes, Service};
use tonic::server::NamedService;
use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};
use tonic::Status;

use crate::telemetry::{self, Limit};

/// Bytes of incomplete messages one address may have the server hold, on all its connections
/// and calls together: 64 messages of the largest size the lock service accepts.
pub(crate) const PARTIAL_BYTES_PER_ADDRESS: usize = 4 << 20;

/// Incomplete bytes held per address (entries at zero are removed); cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct Budgets {
    held: Arc<Mutex<HashMap<IpAddr, usize>>>,
    max: usize,
}

impl Budgets {
    pub(crate) fn new(max: usize) -> Self {
        Self { held: Arc::default(), max }
    }

    /// Takes `n` more bytes for `ip`, unless that passes the budget.
    fn charge(&self, ip: IpAddr, n: usize) -> bool {
        let mut held = self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let now = held.entry(ip).or_insert(0);
        if *now + n > self.max {
            if *now == 0 {
                held.remove(&ip);
            }
            return false;
        }
        *now += n;
        true
    }

    fn refund(&self, ip: IpAddr, n: usize) {
        if n == 0 {
            return;
        }
        let mut held = self.held.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(now) = held.get_mut(&ip) {
            *now = now.saturating_sub(n);
            if *now == 0 {
                held.remove(&ip);
            }
        }
    }

    /// Wraps `inner` so that its calls' request bodies are counted against these budgets.
    pub(crate) fn wrap<S>(&self, inner: S) -> Budgeted<S> {
        Budgeted { inner, budgets: self.clone() }
    }
}

/// A service whose request bodies are counted against their address's budget.
#[derive(Debug, Clone)]
pub(crate) struct Budgeted<S> {
    inner: S,
    budgets: Budgets,
}

impl<S> Service<http::Request<Body>> for Budgeted<S>
where
    S: Service<http::Request<Body>, Response = http::Response<Body>, Error = Infallible>,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        match peer_ip(&req) {
            Some(ip) => {
                let budgets = self.budgets.clone();
                self.inner.call(req.map(|body| Body::new(Counted::new(body, ip, budgets))))
            }
            None => self.inner.call(req),
        }
    }
}

impl<S: NamedService> NamedService for Budgeted<S> {
    const NAME: &'static str = S::NAME;
}

fn peer_ip<B>(req: &http::Request<B>) -> Option<IpAddr> {
    let ext = req.extensions();
    ext.get::<TcpConnectInfo>()
        .and_then(TcpConnectInfo::remote_addr)
        .or_else(|| ext.get::<TlsConnectInfo<TcpConnectInfo>>().and_then(|i| i.get_ref().remote_addr()))
        .map(|a| a.ip())
}

/// A request body that follows the gRPC framing (a flag byte, a 4-byte length, the message)
/// and holds its address's budget for the bytes of the message it has begun and not finished.
struct Counted {
    inner: Body,
    ip: IpAddr,
    budgets: Budgets,
    /// The current message's 5-byte prefix, as far as it came.
    prefix: Vec<u8>,
    /// The current message's size with its prefix, once the prefix is whole.
    size: usize,
    /// Its bytes received so far.
    received: usize,
    /// What this body holds of the budget.
    charged: usize,
    failed: bool,
}

impl Counted {
    fn new(inner: Body, ip: IpAddr, budgets: Budgets) -> Self {
        Self { inner, ip, budgets, prefix: Vec::with_capacity(5), size: 0, received: 0, charged: 0, failed: false }
    }

    /// What the message left incomplete holds: its announced size once its prefix is whole
    /// (tonic reserves that much for it at once), else the prefix's bytes.
    fn held(&self) -> usize {
        if self.prefix.len() == 5 {
            self.size
        } else {
            self.prefix.len()
        }
    }

    /// Follows the framing through `data`; afterwards `received` counts the bytes of the
    /// message left incomplete at its end.
    fn absorb(&mut self, mut data: &[u8]) {
        while !data.is_empty() {
            if self.prefix.len() < 5 {
                let take = (5 - self.prefix.len()).min(data.len());
                self.prefix.extend_from_slice(&data[..take]);
                self.received += take;
                data = &data[take..];
                if self.prefix.len() == 5 {
                    let len = u32::from_be_bytes([self.prefix[1], self.prefix[2], self.prefix[3], self.prefix[4]]);
                    self.size = 5 + len as usize;
                }
            } else {
                let take = (self.size - self.received).min(data.len());
                self.received += take;
                data = &data[take..];
            }
            if self.prefix.len() == 5 && self.received == self.size {
                self.prefix.clear();
                self.received = 0;
                self.size = 0;
            }
        }
    }
}

impl http_body::Body for Counted {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = &mut *self;
        if this.failed {
            return Poll::Ready(None);
        }
        let frame = match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => frame,
            other => return other,
        };
        if let Some(data) = frame.data_ref() {
            this.absorb(data);
            let held = this.held();
            if held > this.charged {
                if !this.budgets.charge(this.ip, held - this.charged) {
                    this.failed = true;
                    this.budgets.refund(this.ip, std::mem::take(&mut this.charged));
                    telemetry::limit_hit(Limit::PartialBytesPerAddress);
                    tracing::debug!(peer = %this.ip, "incomplete messages of one address past its byte budget; call ended");
                    return Poll::Ready(Some(Err(Status::resource_exhausted(format!(
                        "this address has {} bytes of incomplete messages in flight; send whole messages",
                        PARTIAL_BYTES_PER_ADDRESS
                    )))));
                }
            } else {
                this.budgets.refund(this.ip, this.charged - held);
            }
            this.charged = held;
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        self.failed || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        self.budgets.refund(self.ip, self.charged);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counted(budgets: &Budgets) -> Counted {
        Counted::new(Body::empty(), "10.0.0.1".parse().unwrap(), budgets.clone())
    }

    fn message(len: u32) -> Vec<u8> {
        let mut m = vec![0u8];
        m.extend_from_slice(&len.to_be_bytes());
        m.extend(std::iter::repeat_n(7u8, len as usize));
        m
    }

    /// Whole messages leave nothing held, however they are cut; a message begun holds its
    /// announced size (its prefix's bytes until the prefix is whole) until it is whole.
    #[test]
    fn only_the_bytes_of_an_incomplete_message_are_held() {
        let budgets = Budgets::new(100);
        let mut c = counted(&budgets);
        let mut two = message(10);
        two.extend(message(3));
        for chunk in two.chunks(4) {
            c.absorb(chunk);
        }
        assert_eq!(c.received, 0);
        let m = message(20);
        c.absorb(&m[..3]);
        assert_eq!((c.received, c.held()), (3, 3));
        c.absorb(&m[3..17]);
        assert_eq!((c.received, c.held()), (17, 25), "a whole prefix holds the announced size");
        c.absorb(&m[17..]);
        assert_eq!((c.received, c.held()), (0, 0));
        let mut tail = message(2);
        tail.extend(&message(50)[..9]);
        c.absorb(&tail);
        assert_eq!(c.received, 9, "the second message's bytes");
    }

    /// One address's budget is shared by all its bodies and given back when they end.
    #[test]
    fn an_address_budget_is_shared_and_given_back() {
        let budgets = Budgets::new(100);
        let ip = "10.0.0.1".parse().unwrap();
        assert!(budgets.charge(ip, 60));
        assert!(!budgets.charge(ip, 41));
        assert!(budgets.charge("10.0.0.2".parse().unwrap(), 100), "another address has its own");
        budgets.refund(ip, 60);
        assert!(budgets.charge(ip, 100));
        budgets.refund(ip, 100);
        assert!(budgets.held.lock().unwrap().get(&ip).is_none());
    }
}
