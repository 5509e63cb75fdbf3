//! Waiting without polling: one pub/sub connection per backend, shared by all its waiters. A
//! reader task dispatches each message to one local waiter of its channel (no herd inside a
//! process). Queued waiters (plain mode, read/write locks, semaphores) each have a channel of
//! their own; reentrant-mode waiters, and queued ones blocked by a Java holder, also share
//! Redisson's channel of the lock. Waiters subscribe *before* they join the queue or try again,
//! so a release in between is never missed.
//!
//! The pub/sub connection is opened on demand and re-opened after it drops; every waiter is
//! woken then (it may have missed a message) and re-subscribes on its next round. When it cannot
//! be opened, waiters still make progress on their fallback timers.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use futures_util::StreamExt;
use redis::aio::{PubSubSink, PubSubStream};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::conn::NET_TIMEOUT;

/// After a failed connection attempt, waiters do not try again for this long.
const RECONNECT_PAUSE: Duration = Duration::from_secs(1);

/// The pub/sub side of one backend.
#[derive(Debug, Clone)]
pub(crate) struct Router {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    client: redis::Client,
    waiters: Mutex<Waiters>,
    /// Serialises connecting, SUBSCRIBE and UNSUBSCRIBE, so an UNSUBSCRIBE of a channel that
    /// just lost its last waiter can never overtake the SUBSCRIBE of a new one.
    link: tokio::sync::Mutex<Link>,
}

#[derive(Debug, Default)]
struct Waiters {
    by_channel: HashMap<String, Vec<Arc<Waiter>>>,
    /// Channel → the connection generation it is subscribed on.
    subscribed: HashMap<String, u64>,
}

#[derive(Debug, Default)]
struct Link {
    sink: Option<PubSubSink>,
    generation: u64,
    retry_at: Option<Instant>,
    reader: Option<JoinHandle<()>>,
}

#[derive(Debug, Default)]
struct Waiter {
    notify: Notify,
    /// Woken but not yet seen: handed on to another waiter if this one leaves.
    pending: AtomicBool,
}

impl Waiter {
    fn wake(&self) {
        self.pending.store(true, Ordering::SeqCst);
        self.notify.notify_one();
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Some(reader) = self.link.get_mut().reader.take() {
            reader.abort();
        }
    }
}

fn lock(m: &Mutex<Waiters>) -> MutexGuard<'_, Waiters> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Router {
    pub(crate) fn new(client: redis::Client) -> Self {
        Self {
            inner: Arc::new(Inner {
                client,
                waiters: Mutex::new(Waiters::default()),
                link: tokio::sync::Mutex::new(Link::default()),
            }),
        }
    }

    /// Registers a waiter on `channel` and subscribes (best effort) before returning.
    ///
    /// # Cancel safety
    /// Cancel safe: the registration is undone when the returned value (or this future) drops.
    pub(crate) async fn register(&self, channel: &str) -> Registration {
        let waiter = Arc::new(Waiter::default());
        lock(&self.inner.waiters).by_channel.entry(channel.to_string()).or_default().push(waiter.clone());
        let reg = Registration { inner: self.inner.clone(), channel: channel.to_string(), waiter };
        reg.refresh().await;
        reg
    }
}

/// One waiter's interest in one channel; dropping it unregisters (and unsubscribes the channel
/// when it was the last local waiter).
#[derive(Debug)]
pub(crate) struct Registration {
    inner: Arc<Inner>,
    channel: String,
    waiter: Arc<Waiter>,
}

impl Registration {
    /// Waits for a release message on the channel (or a reconnection of the pub/sub link).
    ///
    /// # Cancel safety
    /// Cancel safe: a wake-up that arrives later is kept for the next call.
    pub(crate) async fn notified(&self) {
        self.waiter.notify.notified().await;
        self.waiter.pending.store(false, Ordering::SeqCst);
    }

    /// Makes sure the channel is subscribed on the current pub/sub connection, opening one if
    /// there is none. Best effort: on failure the waiter relies on its fallback timer.
    ///
    /// # Cancel safety
    /// Cancel safe.
    pub(crate) async fn refresh(&self) {
        let mut link = self.inner.link.lock().await;
        if link.sink.is_none() && link.retry_at.is_none_or(|t| Instant::now() >= t) {
            connect(&self.inner, &mut link).await;
        }
        let generation = link.generation;
        if lock(&self.inner.waiters).subscribed.get(&self.channel) == Some(&generation) {
            return;
        }
        let Some(sink) = link.sink.as_mut() else { return };
        match tokio::time::timeout(NET_TIMEOUT, sink.subscribe(&self.channel)).await {
            Ok(Ok(())) => {
                lock(&self.inner.waiters).subscribed.insert(self.channel.clone(), generation);
            }
            Ok(Err(e)) => log_failure(&self.inner.client, "subscribe", &e),
            Err(_) => tracing::debug!(channel = %self.channel, "subscribe timed out"),
        }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let last = {
            let mut w = lock(&self.inner.waiters);
            let Some(list) = w.by_channel.get_mut(&self.channel) else { return };
            list.retain(|x| !Arc::ptr_eq(x, &self.waiter));
            // A wake-up meant for this lock must not die with this waiter.
            if self.waiter.pending.load(Ordering::SeqCst) {
                if let Some(next) = list.first() {
                    next.wake();
                }
            }
            let last = list.is_empty();
            if last {
                w.by_channel.remove(&self.channel);
            }
            last
        };
        if !last {
            return;
        }
        let (inner, channel) = (Arc::downgrade(&self.inner), self.channel.clone());
        locksmith_core::driver::spawn_detached("redis unsubscribe", unsubscribe(inner, channel));
    }
}

/// Unsubscribes `channel` unless a new waiter arrived meanwhile.
async fn unsubscribe(inner: Weak<Inner>, channel: String) {
    let Some(inner) = inner.upgrade() else { return };
    let mut link = inner.link.lock().await;
    {
        let mut w = lock(&inner.waiters);
        if w.by_channel.contains_key(&channel) {
            return;
        }
        w.subscribed.remove(&channel);
    }
    if let Some(sink) = link.sink.as_mut() {
        let _ = tokio::time::timeout(NET_TIMEOUT, sink.unsubscribe(&channel)).await;
    }
}

/// Opens a pub/sub connection and starts its reader.
async fn connect(inner: &Arc<Inner>, link: &mut Link) {
    match tokio::time::timeout(NET_TIMEOUT, inner.client.get_async_pubsub()).await {
        Ok(Ok(pubsub)) => {
            let (sink, stream) = pubsub.split();
            link.generation += 1;
            link.sink = Some(sink);
            link.retry_at = None;
            if let Some(old) = link.reader.take() {
                old.abort();
            }
            link.reader = Some(tokio::spawn(read(Arc::downgrade(inner), stream, link.generation)));
        }
        Ok(Err(e)) => {
            log_failure(&inner.client, "pub/sub connection", &e);
            link.retry_at = Some(Instant::now() + RECONNECT_PAUSE);
        }
        Err(_) => {
            tracing::debug!("pub/sub connection timed out; waiters fall back to timers");
            link.retry_at = Some(Instant::now() + RECONNECT_PAUSE);
        }
    }
}

/// Logs a pub/sub failure. Waiters carry on with their fallback timers either way, so a refusal
/// that will not go away by itself (an ACL user without channel access, a TLS setting) is a
/// warning: it turns every wake-up into polling.
fn log_failure(client: &redis::Client, what: &str, e: &redis::RedisError) {
    let backend = crate::connect::describe(client);
    match crate::connect::classify(e, &backend, crate::connect::is_tls(client)) {
        err @ (locksmith_core::Error::Auth { .. } | locksmith_core::Error::Config { .. }) => {
            tracing::warn!(error = %err, "redis {what} refused; waiters fall back to polling");
        }
        err => tracing::debug!(error = %err, "redis {what} failed; waiters fall back to timers"),
    }
}

/// Dispatches messages until the connection ends, then wakes everybody to re-subscribe.
async fn read(inner: Weak<Inner>, mut stream: PubSubStream, generation: u64) {
    while let Some(msg) = stream.next().await {
        let Some(inner) = inner.upgrade() else { return };
        let mut w = lock(&inner.waiters);
        if let Some(list) = w.by_channel.get_mut(msg.get_channel_name()) {
            // Wake one, and rotate it to the back so the next message wakes another.
            if !list.is_empty() {
                let first = list.remove(0);
                first.wake();
                list.push(first);
            }
        }
    }
    let Some(inner) = inner.upgrade() else { return };
    let mut link = inner.link.lock().await;
    if link.generation == generation {
        link.sink = None;
        link.reader = None;
    }
    drop(link);
    for list in lock(&inner.waiters).by_channel.values() {
        for w in list {
            w.wake();
        }
    }
}
