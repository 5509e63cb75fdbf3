//! A session stream's outbox: where the service task and the log writer put the messages for one
//! stream, and why that stream ended when it did not simply close.
//!
//! The gRPC transport's outbox is bounded. Its messages leave as fast as HTTP/2 flow control
//! lets them, so it fills up only when the client stopped reading (or withholds its window on
//! purpose). Then the stream is ended with [`StreamEnd::NotReading`] instead of the server
//! holding ever more answers: the writers never wait for a client ([`Outbox::deliver`] does not
//! block), and the session lives on until its TTL, so a client that was merely slow resumes it.
//!
//! `memory://` and test doubles hand [`serve_stream`](crate::serve_stream) an unbounded
//! sender ([`From`]): their reader is the same process, which does not stall on purpose.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::Stream;
use locksmith_proto::ServerMessage;
use tokio::sync::{mpsc, Notify};

/// Messages queued for one stream before the server ends it: the default of
/// [`NetLimits::max_queued_messages`](crate::NetLimits::max_queued_messages).
#[cfg(feature = "cluster")]
pub(crate) const DEFAULT_CAPACITY: usize = 1024;

/// The sending side of a session stream; cheap to clone.
///
/// A bounded outbox counts its queued messages itself over an unbounded channel (the count
/// goes up before a message is queued, down when the stream takes it): tokio's bounded channel
/// would give back a permit under a lock for every message taken, and the writers never wait
/// for room anyway.
#[derive(Clone)]
pub struct Outbox {
    tx: mpsc::UnboundedSender<ServerMessage>,
    bounded: bool,
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    capacity: usize,
    /// Messages queued and not yet taken by the stream (bounded outboxes only).
    queued: AtomicUsize,
    /// Set by the first message that did not fit; nothing is queued after it.
    overflowed: AtomicBool,
    /// Wakes the stream's connection task when the outbox overflowed.
    overflow: Notify,
    /// Why the stream ends, when something other than its senders going away ends it.
    end: Mutex<Option<StreamEnd>>,
}

/// Why the server ended a session stream (the transport turns it into a status).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StreamEnd {
    /// The outbox filled up: the client does not read what it asked for.
    #[error(
        "the client does not read its stream: {queued} messages queued; the stream is closed, the session lives on \
         until its TTL and can be resumed"
    )]
    NotReading {
        /// The outbox's capacity.
        queued: usize,
    },
    /// The stream's first message did not arrive in time.
    #[error("no open message within {}: a session stream starts with open", locksmith_core::format_duration(*.0))]
    NoOpen(Duration),
    /// A message could not be decoded (malformed, too large, a string that is not UTF-8).
    #[error("invalid message: {0}")]
    Invalid(String),
    /// The lock service has stopped.
    #[error("the lock service has stopped")]
    Stopped,
    /// The policy no longer knows the stream's credential: the session is closed, its holds
    /// released.
    #[error("the credential of this session was revoked (auth policy reloaded): the session is closed and its holds released")]
    Revoked,
}

impl Outbox {
    /// A bounded outbox holding up to `capacity` messages (at least 1), and its receiving end.
    pub fn bounded(capacity: usize) -> (Self, OutboxStream) {
        let capacity = capacity.max(1);
        let (tx, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared::new(capacity));
        (Self { tx, bounded: true, shared: shared.clone() }, OutboxStream { rx: Some(rx), shared, done: false })
    }

    /// Queues `m` without waiting. If the outbox is full the message is dropped, the outbox is
    /// marked overflowed (its stream is then ended) and `false` is returned; a closed stream
    /// also returns `false`.
    pub(crate) fn deliver(&self, m: ServerMessage) -> bool {
        if !self.bounded {
            return self.tx.send(m).is_ok();
        }
        let shared = &self.shared;
        if shared.overflowed.load(Ordering::Acquire) {
            return false;
        }
        if shared.queued.fetch_add(1, Ordering::AcqRel) >= shared.capacity {
            shared.queued.fetch_sub(1, Ordering::AcqRel);
            if !shared.overflowed.swap(true, Ordering::AcqRel) {
                crate::telemetry::outbox_disconnect();
                shared.overflow.notify_one();
            }
            return false;
        }
        if self.tx.send(m).is_err() {
            shared.queued.fetch_sub(1, Ordering::AcqRel);
            return false;
        }
        true
    }

    /// Whether nothing reaches the stream any more: its receiver is gone, or it overflowed.
    pub(crate) fn is_closed(&self) -> bool {
        self.shared.overflowed.load(Ordering::Acquire) || self.tx.is_closed()
    }

    /// A handle on the outbox's state that holds no sender: the stream still ends when every
    /// sender is gone.
    pub(crate) fn watch(&self) -> OutboxWatch {
        OutboxWatch { shared: self.shared.clone() }
    }
}

/// What a connection task keeps of its stream's [`Outbox`] once the service has it: the
/// overflow signal and the way to say why the stream ends.
#[derive(Debug, Clone)]
pub(crate) struct OutboxWatch {
    shared: Arc<Shared>,
}

impl OutboxWatch {
    /// Resolves once the outbox has overflowed (never for an unbounded one).
    ///
    /// # Cancel safety
    /// Cancel safe: an overflow that happens while nobody waits is seen by the next call.
    pub(crate) async fn overflowed(&self) -> StreamEnd {
        loop {
            let notified = self.shared.overflow.notified();
            if self.shared.overflowed.load(Ordering::Acquire) {
                return StreamEnd::NotReading { queued: self.shared.capacity };
            }
            notified.await;
        }
    }

    /// Ends the stream with `why` once the messages already queued are out and every sender
    /// is gone (the first reason given wins). An unbounded outbox has no way to say why: its
    /// stream just ends.
    pub(crate) fn end_with(&self, why: StreamEnd) {
        let mut end = self.shared.end.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        end.get_or_insert(why);
    }
}

impl Shared {
    fn new(capacity: usize) -> Self {
        Self {
            capacity,
            queued: AtomicUsize::new(0),
            overflowed: AtomicBool::new(false),
            overflow: Notify::new(),
            end: Mutex::new(None),
        }
    }
}

/// An unbounded outbox over `tx` (`memory://`, tests).
impl From<mpsc::UnboundedSender<ServerMessage>> for Outbox {
    fn from(tx: mpsc::UnboundedSender<ServerMessage>) -> Self {
        Self { tx, bounded: false, shared: Arc::new(Shared::new(usize::MAX)) }
    }
}

impl std::fmt::Debug for Outbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbox")
            .field("bounded", &self.bounded)
            .field("overflowed", &self.shared.overflowed.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// The receiving end of a bounded [`Outbox`]: the stream's messages, then, if the server ended
/// the stream, why. After an overflow the reason comes at once and what was queued is dropped
/// (a client that reads again resumes its session and asks anew).
#[derive(Debug)]
pub struct OutboxStream {
    rx: Option<mpsc::UnboundedReceiver<ServerMessage>>,
    shared: Arc<Shared>,
    done: bool,
}

impl Stream for OutboxStream {
    type Item = Result<ServerMessage, StreamEnd>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        if this.shared.overflowed.load(Ordering::Acquire) {
            this.done = true;
            this.rx = None;
            return Poll::Ready(Some(Err(StreamEnd::NotReading { queued: this.shared.capacity })));
        }
        let Some(rx) = this.rx.as_mut() else { return Poll::Ready(None) };
        match rx.poll_recv(cx) {
            Poll::Ready(Some(m)) => {
                this.shared.queued.fetch_sub(1, Ordering::AcqRel);
                Poll::Ready(Some(Ok(m)))
            }
            Poll::Ready(None) => {
                this.done = true;
                this.rx = None;
                let end = this.shared.end.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
                Poll::Ready(end.map(Err))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

#[cfg(test)]
mod tests {
    use futures_util::StreamExt;

    use super::*;

    fn msg(id: u64) -> ServerMessage {
        ServerMessage { id, body: None }
    }

    /// A full outbox never blocks its writer: the message that does not fit is dropped, the
    /// stream learns at once that its client does not read, and nothing is queued after that.
    #[tokio::test]
    async fn a_full_outbox_drops_instead_of_waiting_and_ends_the_stream_as_not_reading() {
        let (out, mut rx) = Outbox::bounded(2);
        assert!(out.deliver(msg(1)));
        assert!(out.deliver(msg(2)));
        assert!(!out.deliver(msg(3)));
        assert_eq!(out.watch().overflowed().await, StreamEnd::NotReading { queued: 2 });
        assert!(!out.deliver(msg(4)), "queued after the overflow");
        let end = rx.next().await.unwrap().unwrap_err();
        assert_eq!(end, StreamEnd::NotReading { queued: 2 });
        assert!(end.to_string().starts_with("the client does not read its stream: 2 messages queued"), "{end}");
        assert!(rx.next().await.is_none());
    }

    /// The bound counts what is queued, not what was ever sent: a client that reads makes room
    /// again, however many messages its stream carries in all.
    #[tokio::test]
    async fn a_read_message_makes_room_for_the_next() {
        let (out, mut rx) = Outbox::bounded(2);
        for id in 0..100 {
            assert!(out.deliver(msg(id)), "message {id} did not fit");
            assert!(out.deliver(msg(1000 + id)));
            assert_eq!(rx.next().await.unwrap().unwrap().id, id);
            assert_eq!(rx.next().await.unwrap().unwrap().id, 1000 + id);
        }
        assert!(out.deliver(msg(1)) && out.deliver(msg(2)));
        assert!(!out.deliver(msg(3)), "a third message fit into an outbox of 2");
    }

    /// A reason given by the connection comes after the messages already queued, once every
    /// sender is gone; without one the stream just ends.
    #[tokio::test]
    async fn an_end_reason_follows_the_queued_messages() {
        let (out, mut rx) = Outbox::bounded(8);
        out.deliver(msg(1));
        out.watch().end_with(StreamEnd::Invalid("bad".into()));
        out.watch().end_with(StreamEnd::Stopped);
        drop(out);
        assert_eq!(rx.next().await.unwrap().unwrap().id, 1);
        assert_eq!(rx.next().await.unwrap().unwrap_err(), StreamEnd::Invalid("bad".into()));
        assert!(rx.next().await.is_none());

        let (out, mut rx) = Outbox::bounded(8);
        drop(out);
        assert!(rx.next().await.is_none());
    }

    /// The writers may be a plain OS thread (the log writer): delivering needs no runtime.
    #[test]
    fn delivers_from_a_thread_without_a_runtime() {
        let (out, mut rx) = Outbox::bounded(4);
        std::thread::spawn(move || assert!(out.deliver(msg(7)))).join().unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        assert_eq!(rt.block_on(rx.next()).unwrap().unwrap().id, 7);
    }
}
