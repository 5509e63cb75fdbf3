//! The lock states both views show (`status --watch`, `dashboard`), read only through the public
//! backend API: a listing (`status`) every interval finds the locks under the prefix and their
//! time left; where the backend can be observed (the native server, memory://, etcd,
//! ZooKeeper), each shown lock's change stream (`observe`) brings its changes between listings.
//! Where it cannot, the listing is all there is, and the views say "polling".
//!
//! The feed reads the backend only while somebody looks (a receiver of its channel): a dashboard
//! nobody has open costs the backend nothing.

mod history;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use locksmith::{Client, Error, LockName, LockStatus};
use tokio::sync::{mpsc, watch, Notify};
use tokio::task::JoinHandle;

pub(crate) use history::Event;
use history::History;

/// At most this many locks are observed at once; beyond, the listing alone keeps them current.
/// Each stream is one HTTP/2 stream of the client's connection, and the native server allows
/// 100 per connection by default (`--max-streams-per-connection`): with more, the listing itself
/// would wait for a free stream, and the feed would stall.
pub(crate) const MAX_OBSERVED: usize = 32;

/// At least this long between two states: a lock handed over a thousand times a second would
/// otherwise have the feed (and every open page) redraw a thousand times a second.
const MIN_GAP: Duration = Duration::from_millis(200);

/// A lock whose stream brings more changes than this in a second is left to the listing for
/// [`BUSY_PAUSE`]: its states would come faster than anyone can read them, and each costs the
/// backend a message and the feed a state.
const BUSY: u32 = 50;
const BUSY_PAUSE: Duration = Duration::from_secs(30);

/// How long a listing may take before the feed reports it failed (and tries again).
const LIST_TIMEOUT: Duration = Duration::from_secs(5);

/// What a feed shows.
#[derive(Debug, Clone)]
pub(crate) struct FeedConfig {
    /// Only locks whose name starts with this.
    pub prefix: String,
    /// How often the locks are listed.
    pub interval: Duration,
}

/// How the shown states reach the feed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// Not known yet (no lock has been observed).
    Listing,
    /// The backend's change stream for each shown lock (up to [`MAX_OBSERVED`]), and the listing.
    Observe,
    /// The listing only: the backend cannot be observed.
    Polling,
}

impl Source {
    /// What a view says about it.
    pub(crate) fn describe(self, interval: Duration) -> String {
        let every = locksmith::format_duration(interval);
        match self {
            Source::Observe => format!(
                "live: each lock's change stream (observe), and a listing every {every} (new locks, time left, \
                 locks changing over {BUSY} times a second)"
            ),
            Source::Polling => format!("polling status every {every} (this backend has no change stream)"),
            Source::Listing => format!("reading status every {every}"),
        }
    }

    /// A short name for JSON.
    #[cfg_attr(not(feature = "dashboard"), allow(dead_code))]
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Source::Listing => "listing",
            Source::Observe => "observe",
            Source::Polling => "polling",
        }
    }
}

/// What the views draw: the locks as last read, and the changes seen recently.
#[derive(Debug, Clone)]
pub(crate) struct Snapshot {
    /// The locks under the prefix, by name.
    pub locks: Vec<LockStatus>,
    /// When they were read (wall clock, for the page).
    #[cfg_attr(not(feature = "dashboard"), allow(dead_code))]
    pub at: SystemTime,
    /// When they were read (monotonic, for the terminal's countdown).
    pub taken: tokio::time::Instant,
    /// How they were read.
    pub source: Source,
    /// The last read's failure, while it lasts (the locks shown are then the last ones read).
    pub error: Option<String>,
    /// Grants, releases, expiries, hand-offs and waiter counts seen since the feed started
    /// watching, the last [`history::KEEP`] of them.
    #[cfg_attr(not(feature = "dashboard"), allow(dead_code))]
    pub events: Arc<Vec<Event>>,
}

impl Snapshot {
    fn empty() -> Self {
        Self {
            locks: Vec::new(),
            at: SystemTime::now(),
            taken: tokio::time::Instant::now(),
            source: Source::Listing,
            error: None,
            events: Arc::new(Vec::new()),
        }
    }
}

/// A feed's output: subscribe to follow it; the first subscriber wakes it.
#[derive(Debug, Clone)]
pub(crate) struct Feed {
    tx: watch::Sender<Arc<Snapshot>>,
    wake: Arc<Notify>,
}

impl Feed {
    /// Starts a feed over `client` (it sleeps until somebody subscribes).
    pub(crate) fn start(client: Client, config: FeedConfig) -> Self {
        let (tx, _) = watch::channel(Arc::new(Snapshot::empty()));
        let wake = Arc::new(Notify::new());
        let feed = Self { tx, wake };
        let (updates, rx) = mpsc::channel(256);
        tokio::spawn(Reader::new(client, config, feed.clone(), updates).run(rx));
        feed
    }

    /// The snapshots from now on (the current one first).
    pub(crate) fn subscribe(&self) -> watch::Receiver<Arc<Snapshot>> {
        let rx = self.tx.subscribe();
        self.wake.notify_one();
        rx
    }

    /// Whether anybody follows the feed.
    fn watched(&self) -> bool {
        self.tx.receiver_count() > 0
    }
}

type Update = (String, locksmith::Result<LockStatus>);

/// The task behind a feed.
struct Reader {
    client: Client,
    config: FeedConfig,
    feed: Feed,
    locks: BTreeMap<String, LockStatus>,
    observers: HashMap<String, JoinHandle<()>>,
    source: Source,
    error: Option<String>,
    history: History,
    updates: mpsc::Sender<Update>,
    /// When the last state was published.
    published: tokio::time::Instant,
    /// Per observed lock: since when its changes are counted, and how many came.
    rates: HashMap<String, (tokio::time::Instant, u32)>,
    /// Locks left to the listing (too busy to observe), until when.
    too_busy: HashMap<String, tokio::time::Instant>,
}

impl Reader {
    fn new(client: Client, config: FeedConfig, feed: Feed, updates: mpsc::Sender<Update>) -> Self {
        Self {
            client,
            config,
            feed,
            locks: BTreeMap::new(),
            observers: HashMap::new(),
            source: Source::Listing,
            error: None,
            history: History::default(),
            updates,
            published: tokio::time::Instant::now(),
            rates: HashMap::new(),
            too_busy: HashMap::new(),
        }
    }

    async fn run(mut self, mut updates: mpsc::Receiver<Update>) {
        let mut tick = tokio::time::interval(self.config.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            if !self.feed.watched() {
                self.stop_observing();
                // Nobody looks: nothing is read until somebody subscribes again.
                self.feed.wake.notified().await;
                tick.reset_immediately();
                continue;
            }
            tokio::select! {
                _ = tick.tick() => self.list().await,
                Some((name, update)) = updates.recv() => {
                    self.observed(name, update);
                    // One state for a burst of changes (every stream's first state at once, a
                    // busy lock), at most one per MIN_GAP.
                    if let Some(wait) = MIN_GAP.checked_sub(self.published.elapsed()) {
                        tokio::time::sleep(wait).await;
                    }
                    while let Ok((name, update)) = updates.try_recv() {
                        self.observed(name, update);
                    }
                }
                // A check now and then that somebody still looks, when nothing else happens.
                _ = tokio::time::sleep(Duration::from_secs(1)) => continue,
            }
            self.publish();
        }
    }

    async fn list(&mut self) {
        let wait = LIST_TIMEOUT.max(self.config.interval * 4);
        let read = match tokio::time::timeout(wait, self.client.status(None)).await {
            Ok(read) => read,
            Err(_) => {
                self.error = Some(format!("status did not answer within {}", locksmith::format_duration(wait)));
                return;
            }
        };
        let now = SystemTime::now();
        match read {
            Ok(all) => {
                self.error = None;
                let prefix = &self.config.prefix;
                let fresh: BTreeMap<String, LockStatus> = all
                    .into_iter()
                    .filter(|l| l.name.starts_with(prefix.as_str()))
                    .map(|l| (l.name.clone(), l))
                    .collect();
                for (name, new) in &fresh {
                    self.history.changed(name, self.locks.get(name), Some(new), now);
                }
                let gone: Vec<String> = self.locks.keys().filter(|n| !fresh.contains_key(*n)).cloned().collect();
                for name in gone {
                    self.history.changed(&name, self.locks.get(&name), None, now);
                    if let Some(task) = self.observers.remove(&name) {
                        task.abort();
                    }
                    self.rates.remove(&name);
                }
                self.locks = fresh;
                self.observe_new();
            }
            Err(e) => self.error = Some(e.to_string()),
        }
    }

    /// Starts a change stream for each listed lock that has none, while the backend can be
    /// observed; a stream that ended (the backend went away) is started again.
    fn observe_new(&mut self) {
        if self.source == Source::Polling {
            return;
        }
        self.observers.retain(|_, task| !task.is_finished());
        let now = tokio::time::Instant::now();
        self.too_busy.retain(|_, until| *until > now);
        // The held and waited-for locks first: those change.
        let mut names: Vec<(bool, String)> = self
            .locks
            .iter()
            .filter(|(n, _)| !self.observers.contains_key(*n) && !self.too_busy.contains_key(*n))
            .map(|(n, l)| (l.holders.is_empty() && l.waiters_or_zero() == 0, n.clone()))
            .collect();
        names.sort();
        // A busy lock takes the stream of an idle one when all are in use.
        let idle = |l: Option<&LockStatus>| l.is_none_or(|l| l.holders.is_empty() && l.waiters_or_zero() == 0);
        let mut idle_observed: Vec<String> =
            self.observers.keys().filter(|n| idle(self.locks.get(*n))).cloned().collect();
        for (quiet, name) in names {
            if self.observers.len() >= MAX_OBSERVED {
                let Some(freed) = idle_observed.pop().filter(|_| !quiet) else { return };
                if let Some(task) = self.observers.remove(&freed) {
                    task.abort();
                }
            }
            let Ok(lock) = LockName::new(&name) else { continue };
            let backend = self.client.backend().clone();
            let up = self.updates.clone();
            let key = name.clone();
            let task = tokio::spawn(async move {
                match backend.observe(&lock).await {
                    Ok(mut rx) => {
                        while let Some(item) = rx.recv().await {
                            if up.send((name.clone(), item)).await.is_err() {
                                return;
                            }
                        }
                    }
                    Err(e) => {
                        let _ = up.send((name, Err(e))).await;
                    }
                }
            });
            self.observers.insert(key, task);
        }
    }

    fn observed(&mut self, name: String, update: locksmith::Result<LockStatus>) {
        match update {
            Ok(status) => {
                self.source = Source::Observe;
                // A stream may still deliver for a lock the listing has dropped since.
                if self.observers.contains_key(&name) {
                    self.history.changed(&name, self.locks.get(&name), Some(&status), SystemTime::now());
                    self.locks.insert(name.clone(), status);
                    self.count_change(name);
                }
            }
            Err(Error::Unsupported(_)) => {
                self.source = Source::Polling;
                self.stop_observing();
            }
            // The stream ended; the next listing starts it again.
            Err(e) => self.error = Some(e.to_string()),
        }
    }

    /// Counts a change of `name` from its stream, and stops observing it when it is too busy.
    fn count_change(&mut self, name: String) {
        let now = tokio::time::Instant::now();
        let (since, count) = self.rates.entry(name.clone()).or_insert((now, 0));
        if now.duration_since(*since) > Duration::from_secs(1) {
            (*since, *count) = (now, 0);
        }
        *count += 1;
        if *count > BUSY {
            self.rates.remove(&name);
            if let Some(task) = self.observers.remove(&name) {
                task.abort();
            }
            self.too_busy.insert(name, now + BUSY_PAUSE);
        }
    }

    fn stop_observing(&mut self) {
        for (_, task) in self.observers.drain() {
            task.abort();
        }
    }

    fn publish(&mut self) {
        self.published = tokio::time::Instant::now();
        let snapshot = Snapshot {
            locks: self.locks.values().cloned().collect(),
            at: SystemTime::now(),
            taken: tokio::time::Instant::now(),
            source: self.source,
            error: self.error.clone(),
            events: self.history.events(),
        };
        self.feed.tx.send_replace(Arc::new(snapshot));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use async_trait::async_trait;
    use locksmith::{Backend, Session};

    /// memory://, counting the listings.
    #[derive(Debug)]
    struct Counting {
        inner: Arc<dyn Backend>,
        listings: Arc<AtomicUsize>,
    }

    #[async_trait]
    impl Backend for Counting {
        fn describe(&self) -> String {
            self.inner.describe()
        }
        fn scheme(&self) -> &'static str {
            self.inner.scheme()
        }
        async fn open_session(&self, ttl: Duration) -> locksmith::Result<Box<dyn Session>> {
            self.inner.open_session(ttl).await
        }
        async fn status(&self, name: Option<&LockName>) -> locksmith::Result<Vec<LockStatus>> {
            self.listings.fetch_add(1, Ordering::SeqCst);
            self.inner.status(name).await
        }
    }

    /// Nobody looks, nothing is read: the feed lists the locks only while it has a subscriber.
    #[tokio::test(start_paused = true)]
    async fn the_feed_reads_the_backend_only_while_somebody_looks() {
        let listings = Arc::new(AtomicUsize::new(0));
        let backend =
            Counting { inner: locksmith::backend("memory://feed-idle").expect("memory"), listings: listings.clone() };
        let client = Client::with_default_ttl(Arc::new(backend)).expect("client");
        let feed = Feed::start(client, FeedConfig { prefix: String::new(), interval: Duration::from_millis(500) });
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(listings.load(Ordering::SeqCst), 0, "read while nobody looked");

        let rx = feed.subscribe();
        tokio::time::sleep(Duration::from_millis(2_100)).await;
        let seen = listings.load(Ordering::SeqCst);
        assert!((4..=6).contains(&seen), "{seen} listings in 2 s at one per 500 ms");

        drop(rx);
        // The feed notices within its idle check (1 s), then reads no more.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let after = listings.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(listings.load(Ordering::SeqCst), after, "read after the last subscriber left");
    }
}

#[cfg(test)]
mod busy_first {
    use super::*;

    /// With every stream in use on idle locks, a lock that gets a holder takes one of them.
    #[tokio::test(start_paused = true)]
    async fn a_lock_that_gets_busy_takes_the_stream_of_an_idle_one() {
        let client = locksmith::connect("memory://feed-busy-first").await.expect("memory");
        for i in 0..MAX_OBSERVED + 8 {
            client.lock(&format!("idle-{i:03}")).await.expect("lock").unlock().await.expect("unlock");
        }
        let feed =
            Feed::start(client.clone(), FeedConfig { prefix: String::new(), interval: Duration::from_millis(500) });
        let mut rx = feed.subscribe();
        tokio::time::sleep(Duration::from_secs(2)).await;
        // The last name in order: observed only if it takes an idle lock's stream.
        let guard = client.lock("idle-zzz").await.expect("lock");
        tokio::time::sleep(Duration::from_millis(600)).await; // listed
        rx.borrow_and_update();
        // Released: only its stream tells at once (the next listing is up to 500 ms away).
        drop(guard);
        let seen = tokio::time::timeout(Duration::from_millis(300), async {
            loop {
                if rx.changed().await.is_err() {
                    return false;
                }
                let s = rx.borrow_and_update().clone();
                if s.locks.iter().any(|l| l.name == "idle-zzz" && l.holders.is_empty()) {
                    return true;
                }
            }
        })
        .await;
        assert_eq!(seen, Ok(true), "the release was not seen through a stream");
    }
}
