//! Deterministic tests of the shared engine (`Client`, `Guard`, the session keeper) on tokio's
//! paused clock, against a scripted in-memory driver double (`Backend` + `Session`).
//!
//! The double grants locks from a map with increasing tokens, records every call (keep-alives
//! with the instant each was received and, for successes, answered; acquisitions; releases), and
//! can be told how to answer keep-alives: succeed, fail with `Unavailable`, hang, say the session
//! expired, or succeed only after a delay / at a given instant. It can also take a hold away and
//! report that through `KeepAlive.lost` on the session's next keep-alive.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use locksmith_core::driver::drift;
use locksmith_core::{
    AcquireRequest, Acquired, Backend, Client, Error, Guard, KeepAlive, LockName, LockOptions, LockStatus, LostHold,
    Result, Session,
};
use tokio::sync::Notify;
use tokio::time::{sleep, sleep_until, timeout, timeout_at, Instant};

/// The session TTL most tests use; keep-alives go out every TTL/3 = 1 s.
const TTL: Duration = Duration::from_secs(3);
/// TTL/3, the keep-alive period the engine documents.
const PERIOD: Duration = Duration::from_secs(1);
const MS: Duration = Duration::from_millis(1);

/// Asserts two instants of the paused clock agree within a millisecond.
#[track_caller]
fn assert_at(actual: Instant, expected: Instant, what: &str) {
    let diff = if actual > expected { actual - expected } else { expected - actual };
    assert!(diff <= MS, "{what}: off by {diff:?} (actual {actual:?}, expected {expected:?})");
}

/// Awaits `guard.lost()`, failing instead of hanging (in virtual time) if it takes over `bound`.
async fn lost_within(guard: &Guard, bound: Duration) {
    timeout(bound, guard.lost()).await.expect("lost() did not resolve in time");
}

// ---------------------------------------------------------------------------------------------
// The scripted driver double.
// ---------------------------------------------------------------------------------------------

/// How the double answers keep-alives (for every session, from the next call on).
#[derive(Debug, Clone, Copy, Default)]
enum KeepAliveMode {
    /// Renew at once.
    #[default]
    Succeed,
    /// Fail with `Error::Unavailable` at once.
    Unavailable,
    /// Never answer.
    Hang,
    /// Answer `Error::SessionExpired` (and free the session's holds, as a server would).
    Expire,
    /// Renew, answering after this delay.
    SucceedAfter(Duration),
    /// Renew, answering at this instant (at once if it has passed).
    SucceedAt(Instant),
}

/// One keep-alive the double received.
#[derive(Debug, Clone)]
struct KeepAliveCall {
    session: String,
    /// When the call reached the double (with no network in between: when it was sent).
    sent: Instant,
    /// When a success was handed back, if one was.
    answered_ok: Option<Instant>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct AcquireCall {
    name: String,
    owner: String,
    wait: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct ReleaseCall {
    name: String,
    owner: String,
    token: u64,
}

#[derive(Debug)]
struct Holder {
    session: String,
    owner: String,
    token: u64,
}

#[derive(Debug, Default)]
struct State {
    mode: KeepAliveMode,
    /// The lease the backend grants when it is not the TTL asked for (a negotiated timeout).
    granted_lease: Option<Duration>,
    sessions_opened: usize,
    dead_sessions: HashSet<String>,
    holds: HashMap<String, Holder>,
    last_token: u64,
    /// Holds taken away, to report on the owning session's next successful keep-alive.
    pending_lost: Vec<(String, LostHold)>,
    keep_alives: Vec<KeepAliveCall>,
    acquires: Vec<AcquireCall>,
    releases: Vec<ReleaseCall>,
    /// How long the backend takes to answer a release (zero: at once).
    release_delay: Duration,
}

/// The double's shared state; tests keep an `Arc` to script and inspect it.
#[derive(Debug, Default)]
struct Script {
    state: Mutex<State>,
    /// Woken whenever a hold is freed, for queued acquisitions.
    freed: Notify,
    /// Acquisitions currently queued (waiting for a holder to go).
    queued: AtomicUsize,
    /// Acquisition futures dropped before they answered.
    acquires_dropped: AtomicUsize,
}

const FOREIGN: &str = "foreign-session";

impl Script {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap()
    }

    fn set_mode(&self, mode: KeepAliveMode) {
        self.state().mode = mode;
    }

    fn sessions_opened(&self) -> usize {
        self.state().sessions_opened
    }

    fn keep_alives(&self) -> Vec<KeepAliveCall> {
        self.state().keep_alives.clone()
    }

    fn last_keep_alive(&self) -> KeepAliveCall {
        self.state().keep_alives.last().cloned().unwrap()
    }

    fn acquires(&self) -> Vec<AcquireCall> {
        self.state().acquires.clone()
    }

    fn releases(&self) -> Vec<ReleaseCall> {
        self.state().releases.clone()
    }

    fn is_free(&self, name: &str) -> bool {
        !self.state().holds.contains_key(name)
    }

    /// Somebody outside the engine under test holds `name`.
    fn hold_foreign(&self, name: &str) {
        let mut s = self.state();
        s.last_token += 1;
        let token = s.last_token;
        s.holds.insert(name.to_owned(), Holder { session: FOREIGN.into(), owner: "someone-else".into(), token });
    }

    fn release_foreign(&self, name: &str) {
        let removed = self.state().holds.remove(name);
        assert_eq!(removed.map(|h| h.session), Some(FOREIGN.to_owned()));
        self.freed.notify_waiters();
    }

    /// A third party takes `name` over; the holder's session learns on its next keep-alive.
    fn take_over(&self, name: &str) {
        let mut s = self.state();
        let old = s.holds.remove(name).unwrap();
        s.pending_lost.push((old.session, LostHold::new(LockName::new(name).unwrap(), old.owner, old.token)));
        s.last_token += 1;
        let token = s.last_token;
        s.holds.insert(name.to_owned(), Holder { session: FOREIGN.into(), owner: "usurper".into(), token });
    }

    fn end_session(&self, id: &str) {
        {
            let mut s = self.state();
            s.dead_sessions.insert(id.to_owned());
            s.holds.retain(|_, h| h.session != id);
        }
        self.freed.notify_waiters();
    }
}

#[derive(Debug)]
struct ScriptedBackend(Arc<Script>);

#[async_trait]
impl Backend for ScriptedBackend {
    fn describe(&self) -> String {
        "scripted://test".into()
    }

    fn scheme(&self) -> &'static str {
        "scripted"
    }

    async fn open_session(&self, ttl: Duration) -> Result<Box<dyn Session>> {
        let mut s = self.0.state();
        s.sessions_opened += 1;
        let id = format!("session-{}", s.sessions_opened);
        let lease = s.granted_lease.unwrap_or(ttl);
        Ok(Box::new(ScriptedSession { id, lease, script: self.0.clone() }))
    }

    async fn status(&self, _name: Option<&LockName>) -> Result<Vec<LockStatus>> {
        Ok(Vec::new())
    }
}

struct ScriptedSession {
    id: String,
    lease: Duration,
    script: Arc<Script>,
}

/// Lives inside a pending acquisition; notices when the future is dropped before answering.
struct PendingAcquire {
    script: Arc<Script>,
    answered: bool,
    queued: bool,
}

impl Drop for PendingAcquire {
    fn drop(&mut self) {
        if self.queued {
            self.script.queued.fetch_sub(1, Ordering::SeqCst);
        }
        if !self.answered {
            self.script.acquires_dropped.fetch_add(1, Ordering::SeqCst);
        }
    }
}

fn unavailable() -> Error {
    Error::Unavailable { backend: "scripted://test".into(), message: "scripted outage".into() }
}

#[async_trait]
impl Session for ScriptedSession {
    fn id(&self) -> String {
        self.id.clone()
    }

    fn lease(&self) -> Duration {
        self.lease
    }

    async fn keep_alive(&self) -> Result<KeepAlive> {
        let (call, mode) = {
            let mut s = self.script.state();
            s.keep_alives.push(KeepAliveCall { session: self.id.clone(), sent: Instant::now(), answered_ok: None });
            (s.keep_alives.len() - 1, s.mode)
        };
        match mode {
            KeepAliveMode::Succeed => {}
            KeepAliveMode::Unavailable => return Err(unavailable()),
            KeepAliveMode::Hang => std::future::pending::<()>().await,
            KeepAliveMode::Expire => {
                self.script.end_session(&self.id);
                return Err(Error::SessionExpired);
            }
            KeepAliveMode::SucceedAfter(delay) => sleep(delay).await,
            KeepAliveMode::SucceedAt(at) => sleep_until(at).await,
        }
        let mut s = self.script.state();
        if s.dead_sessions.contains(&self.id) {
            return Err(Error::SessionExpired);
        }
        s.keep_alives[call].answered_ok = Some(Instant::now());
        let mut outcome = KeepAlive::default();
        let (mine, others): (Vec<_>, Vec<_>) = s.pending_lost.drain(..).partition(|(session, _)| *session == self.id);
        s.pending_lost = others;
        outcome.lost.extend(mine.into_iter().map(|(_, lost)| lost));
        Ok(outcome)
    }

    async fn acquire(&self, req: AcquireRequest) -> Result<Acquired> {
        let name = req.name.as_str().to_owned();
        self.script.state().acquires.push(AcquireCall { name: name.clone(), owner: req.owner.clone(), wait: req.wait });
        let mut pending = PendingAcquire { script: self.script.clone(), answered: false, queued: false };
        loop {
            // Created before looking, so a release in between is not missed.
            let freed = self.script.freed.notified();
            {
                let mut s = self.script.state();
                if s.dead_sessions.contains(&self.id) {
                    pending.answered = true;
                    return Err(Error::SessionExpired);
                }
                if !s.holds.contains_key(&name) {
                    s.last_token += 1;
                    let token = s.last_token;
                    s.holds.insert(name, Holder { session: self.id.clone(), owner: req.owner.clone(), token });
                    pending.answered = true;
                    return Ok(Acquired::Granted { token });
                }
                if !req.wait {
                    pending.answered = true;
                    return Ok(Acquired::Busy);
                }
            }
            if !pending.queued {
                pending.queued = true;
                self.script.queued.fetch_add(1, Ordering::SeqCst);
            }
            freed.await;
        }
    }

    async fn release(&self, name: &LockName, owner: &str, token: u64) -> Result<bool> {
        let delay = self.script.state().release_delay;
        if !delay.is_zero() {
            sleep(delay).await;
        }
        let ours = {
            let mut s = self.script.state();
            s.releases.push(ReleaseCall { name: name.as_str().to_owned(), owner: owner.to_owned(), token });
            let ours = matches!(
                s.holds.get(name.as_str()),
                Some(h) if h.session == self.id && h.owner == owner && h.token == token
            );
            if ours {
                s.holds.remove(name.as_str());
            }
            ours
        };
        if ours {
            self.script.freed.notify_waiters();
        }
        Ok(ours)
    }

    async fn close(&self) -> Result<()> {
        self.script.end_session(&self.id);
        Ok(())
    }
}

fn setup(ttl: Duration) -> (Client, Arc<Script>) {
    let script = Arc::new(Script::default());
    let client = Client::new(Arc::new(ScriptedBackend(script.clone())), ttl).unwrap();
    (client, script)
}

/// Sets a flag when dropped (completion or cancellation).
struct SetOnDrop(Arc<AtomicBool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

// ---------------------------------------------------------------------------------------------
// Keep-alive cadence and the local deadline.
// ---------------------------------------------------------------------------------------------

/// While a guard lives, the session is renewed about every TTL/3 (30 renewals over 10 TTLs).
#[tokio::test(start_paused = true)]
async fn keep_alives_are_sent_every_third_of_the_ttl_while_a_guard_lives() {
    let (client, script) = setup(TTL);
    let t0 = Instant::now();
    let guard = client.lock("job").await.unwrap();

    sleep(TTL * 10 + MS).await;

    let calls = script.keep_alives();
    assert!((29..=31).contains(&calls.len()), "{} keep-alives in 10 TTLs, expected about 30", calls.len());
    let mut previous = t0;
    for call in &calls {
        let gap = call.sent - previous;
        assert!(gap.abs_diff(PERIOD) <= 10 * MS, "keep-alive gap {gap:?}, expected about {PERIOD:?}");
        assert_eq!(call.session, guard.session_id());
        previous = call.sent;
    }
    assert!(guard.is_held());
    assert!(guard.unlock().await.unwrap());
}

/// An `unlock` whose future is dropped while the backend has not answered yet still releases:
/// the hold never stays on the backend under a live session (a cancelled asyncio task in
/// unlock left a native lock held for as long as its session lived).
#[tokio::test(start_paused = true)]
async fn an_unlock_dropped_before_the_backend_answers_still_releases() {
    let (client, script) = setup(TTL);
    let guard = client.lock("job").await.unwrap();
    script.state().release_delay = 200 * MS;
    let cut = tokio::time::timeout(50 * MS, guard.unlock()).await;
    assert!(cut.is_err(), "the release answered before the cut");
    assert!(!script.is_free("job"), "released before the backend answered");
    sleep(300 * MS).await;
    assert!(script.is_free("job"), "the dropped unlock left the hold on the backend");
    assert_eq!(script.releases().len(), 1);
}

/// A backend that grants a shorter lease than asked (a negotiated session timeout) ends the
/// session sooner: the guard renews by that lease and is lost by it, never by the longer TTL.
#[tokio::test(start_paused = true)]
async fn a_shorter_lease_than_asked_sets_renewals_and_the_deadline() {
    let (client, script) = setup(TTL);
    let lease = TTL / 2;
    script.state().granted_lease = Some(lease);
    let t0 = Instant::now();
    let guard = client.lock("job").await.unwrap();
    sleep(lease / 3 + MS).await;
    assert_eq!(script.keep_alives().len(), 1, "renewed by the granted lease, every lease/3");
    script.set_mode(KeepAliveMode::Unavailable);
    let deadline = t0 + lease / 3 + lease - drift(lease);
    lost_within(&guard, TTL * 3).await;
    assert_at(Instant::now(), deadline, "lost() by the granted lease");
    // A longer lease than asked changes nothing: the TTL is what the caller was promised.
    let (client, script) = setup(TTL);
    script.state().granted_lease = Some(TTL * 10);
    let t0 = Instant::now();
    script.set_mode(KeepAliveMode::Unavailable);
    let guard = client.lock("job").await.unwrap();
    lost_within(&guard, TTL * 3).await;
    assert_at(Instant::now(), t0 + TTL - drift(TTL), "lost() by the TTL asked for");
}

/// With keep-alives failing (Unavailable), `lost()` resolves at last successful keep-alive sent +
/// TTL − drift; until then the guard is held with shrinking `remaining()`, after it not at all.
#[tokio::test(start_paused = true)]
async fn failing_keep_alives_lose_the_guard_at_last_success_sent_plus_ttl_minus_drift() {
    let (client, script) = setup(TTL);
    let t0 = Instant::now();
    let guard = client.lock("job").await.unwrap();

    sleep(PERIOD * 2 + PERIOD / 2).await; // renewals at 1 s and 2 s succeed
    script.set_mode(KeepAliveMode::Unavailable);
    let last_ok = script.last_keep_alive();
    assert!(last_ok.answered_ok.is_some());
    assert_at(last_ok.sent, t0 + PERIOD * 2, "last successful keep-alive");
    let deadline = last_ok.sent + TTL - drift(TTL);

    assert!(guard.is_held());
    let early = guard.remaining();
    assert_eq!(early, deadline - Instant::now());

    sleep_until(t0 + Duration::from_secs(4)).await;
    assert!(script.keep_alives().len() >= 4, "the engine keeps retrying failed keep-alives");
    assert!(guard.is_held());
    let later = guard.remaining();
    assert!(later < early, "remaining() must shrink: {early:?} then {later:?}");
    assert_eq!(later, deadline - Instant::now());

    assert!(timeout_at(deadline - MS, guard.lost()).await.is_err(), "lost() resolved before the deadline");
    assert!(guard.is_held(), "held until the deadline");

    lost_within(&guard, TTL * 3).await;
    assert_at(Instant::now(), deadline, "lost() resolution");
    assert!(!guard.is_held());
    assert_eq!(guard.remaining(), Duration::ZERO);
}

/// A keep-alive that never answers counts as failed: the guard is lost at the same deadline.
#[tokio::test(start_paused = true)]
async fn hanging_keep_alives_lose_the_guard_at_last_success_sent_plus_ttl_minus_drift() {
    let (client, script) = setup(TTL);
    let t0 = Instant::now();
    let guard = client.lock("job").await.unwrap();

    sleep(PERIOD * 2 + PERIOD / 2).await;
    script.set_mode(KeepAliveMode::Hang);
    let deadline = script.last_keep_alive().sent + TTL - drift(TTL);
    assert_at(deadline, t0 + PERIOD * 2 + TTL - drift(TTL), "expected deadline");

    lost_within(&guard, TTL * 3).await;
    assert_at(Instant::now(), deadline, "lost() resolution");
    assert!(!guard.is_held());
    assert_eq!(guard.remaining(), Duration::ZERO);
    assert!(script.keep_alives().len() >= 4, "a hung keep-alive is abandoned and retried");
}

/// The deadline runs from when the keep-alive was SENT, not from when its answer came back.
#[tokio::test(start_paused = true)]
async fn the_deadline_counts_from_when_the_keep_alive_was_sent_not_answered() {
    let (client, script) = setup(TTL);
    let t0 = Instant::now();
    script.set_mode(KeepAliveMode::SucceedAfter(TTL / 4));
    let guard = client.lock("job").await.unwrap();

    // Renewals sent at 1 s and 2 s, answered at 1.75 s and 2.75 s.
    sleep_until(t0 + Duration::from_millis(2900)).await;
    script.set_mode(KeepAliveMode::Unavailable);
    let last_ok = script.last_keep_alive();
    assert_at(last_ok.sent, t0 + PERIOD * 2, "last keep-alive sent");
    assert_at(last_ok.answered_ok.unwrap(), t0 + PERIOD * 2 + TTL / 4, "last keep-alive answered");

    let from_sent = last_ok.sent + TTL - drift(TTL);
    assert_eq!(guard.remaining(), from_sent - Instant::now());

    lost_within(&guard, TTL * 3).await;
    assert_at(Instant::now(), from_sent, "lost() resolution");
    assert!(!guard.is_held());
}

/// A keep-alive sent before the deadline whose success arrives after it does not revive the
/// guard: loss is final.
#[tokio::test(start_paused = true)]
async fn a_keep_alive_success_arriving_after_the_deadline_does_not_revive_the_guard() {
    let (client, script) = setup(TTL);
    let t0 = Instant::now();
    let guard = client.lock("job").await.unwrap();

    sleep(PERIOD * 2 + PERIOD / 2).await; // last success sent at 2 s
    let deadline = script.last_keep_alive().sent + TTL - drift(TTL);
    // Every renewal from now on answers (successfully) only at 5.2 s, after the deadline (4.968 s).
    let late = t0 + Duration::from_millis(5200);
    script.set_mode(KeepAliveMode::SucceedAt(late));

    lost_within(&guard, TTL * 3).await;
    assert_at(Instant::now(), deadline, "lost() resolution");

    sleep_until(late + PERIOD / 2).await;
    let revivers: Vec<_> = script
        .keep_alives()
        .into_iter()
        .filter(|c| c.answered_ok.is_some_and(|at| at > deadline) && c.sent < deadline)
        .collect();
    assert!(
        revivers.iter().any(|c| c.sent + TTL - drift(TTL) > c.answered_ok.unwrap()),
        "the scenario needs a success that would extend the deadline past its arrival: {revivers:?}"
    );
    assert!(!guard.is_held(), "a late renewal revived the guard");
    assert_eq!(guard.remaining(), Duration::ZERO);
    assert!(timeout(Duration::ZERO, guard.lost()).await.is_ok(), "lost() must stay resolved");

    script.set_mode(KeepAliveMode::Succeed);
    sleep(TTL * 3).await;
    assert!(!guard.is_held(), "renewals after the loss revived the guard");
    assert_eq!(guard.remaining(), Duration::ZERO);
    assert!(!guard.unlock().await.unwrap());
}

/// `Error::SessionExpired` from a keep-alive makes `lost()` resolve at once, not at the deadline.
#[tokio::test(start_paused = true)]
async fn session_expired_from_a_keep_alive_makes_lost_resolve_at_once() {
    let (client, script) = setup(TTL);
    let t0 = Instant::now();
    let guard = client.lock("job").await.unwrap();

    sleep(PERIOD + PERIOD / 2).await;
    script.set_mode(KeepAliveMode::Expire);

    lost_within(&guard, TTL * 3).await;
    let expired_at = script.last_keep_alive().sent;
    assert_at(expired_at, t0 + PERIOD * 2, "the expiring keep-alive");
    assert_at(Instant::now(), expired_at, "lost() resolution");
    assert!(!guard.is_held());
    assert_eq!(guard.remaining(), Duration::ZERO);
}

/// A hold reported in `KeepAlive.lost` loses that guard at once; a guard on another lock stays
/// held.
#[tokio::test(start_paused = true)]
async fn a_hold_reported_lost_by_a_keep_alive_loses_only_that_guard() {
    let (client, script) = setup(TTL);
    let t0 = Instant::now();
    let a = client.lock("a").await.unwrap();
    let b = client.lock("b").await.unwrap();
    assert_eq!(a.session_id(), b.session_id());

    script.take_over("a");
    lost_within(&a, TTL * 3).await;
    assert_at(Instant::now(), t0 + PERIOD, "lost() resolution at the first keep-alive");
    assert!(!a.is_held());
    assert_eq!(a.remaining(), Duration::ZERO);

    assert!(b.is_held());
    assert!(timeout(TTL * 3, b.lost()).await.is_err(), "the other guard was lost too");
    assert!(b.is_held());

    assert!(!a.unlock().await.unwrap());
    assert!(b.unlock().await.unwrap());
    assert!(script.is_free("b"));
    assert!(!script.is_free("a"), "the usurper's hold must not be touched");
}

// ---------------------------------------------------------------------------------------------
// Sessions, release, drop.
// ---------------------------------------------------------------------------------------------

/// After the session is lost, the next `lock()` on the same client opens a new session and works.
#[tokio::test(start_paused = true)]
async fn the_next_lock_after_a_session_loss_opens_a_new_session() {
    let (client, script) = setup(TTL);
    let first = client.lock("x").await.unwrap();
    assert_eq!(script.sessions_opened(), 1);

    script.set_mode(KeepAliveMode::Expire);
    lost_within(&first, TTL * 3).await;
    script.set_mode(KeepAliveMode::Succeed);

    let second = timeout(PERIOD, client.lock("x")).await.expect("the lock is free on a new session").unwrap();
    assert_eq!(script.sessions_opened(), 2);
    assert_ne!(second.session_id(), first.session_id());
    assert!(second.token() > first.token());
    assert!(second.is_held());
    assert!(!first.is_held());

    let before = script.keep_alives().len();
    sleep(TTL * 2).await;
    let renewals: Vec<_> = script.keep_alives().split_off(before);
    assert!(renewals.len() >= 5, "the new session must be kept alive, got {renewals:?}");
    assert!(renewals.iter().all(|c| c.session == second.session_id()));
    assert!(second.is_held());

    assert!(!first.unlock().await.unwrap());
    assert!(second.unlock().await.unwrap());
}

/// `unlock()` of a live guard calls the session's release exactly once and returns true.
#[tokio::test(start_paused = true)]
async fn unlock_of_a_live_guard_releases_once_and_returns_true() {
    let (client, script) = setup(TTL);
    let guard = client.lock("x").await.unwrap();
    let (owner, token) = (guard.owner().to_owned(), guard.token());

    assert!(guard.unlock().await.unwrap());
    assert_eq!(script.releases(), vec![ReleaseCall { name: "x".into(), owner, token }]);
    assert!(script.is_free("x"));

    sleep(TTL).await; // nothing else (e.g. a second release from a drop) follows
    assert_eq!(script.releases().len(), 1);
}

/// `unlock()` after the hold was lost returns `Ok(false)`.
#[tokio::test(start_paused = true)]
async fn unlock_after_loss_returns_false() {
    let (client, script) = setup(TTL);
    script.set_mode(KeepAliveMode::Unavailable);
    let guard = client.lock("x").await.unwrap();

    lost_within(&guard, TTL * 3).await;
    assert!(!guard.is_held());
    assert!(!guard.unlock().await.unwrap());
}

/// Dropping a guard inside a runtime releases it on the backend promptly, without an unlock call.
#[tokio::test(start_paused = true)]
async fn dropping_a_guard_inside_a_runtime_releases_it() {
    let (client, script) = setup(TTL);
    let guard = client.lock("x").await.unwrap();
    let (owner, token) = (guard.owner().to_owned(), guard.token());
    let t0 = Instant::now();

    drop(guard);
    tokio::task::yield_now().await;

    assert_eq!(script.releases(), vec![ReleaseCall { name: "x".into(), owner, token }]);
    assert_eq!(Instant::now(), t0, "the release must not wait for time to pass");
    assert!(script.is_free("x"));
    assert!(client.try_lock("x").await.unwrap().is_some());
}

// ---------------------------------------------------------------------------------------------
// Reentrancy.
// ---------------------------------------------------------------------------------------------

/// With an explicit owner, two acquisitions make one backend acquire sharing one token, and the
/// backend release happens only with the second unlock.
#[tokio::test(start_paused = true)]
async fn an_explicit_owner_reenters_with_one_backend_hold_released_by_the_last_unlock() {
    let (client, script) = setup(TTL);
    let first = client.lock_with("x", LockOptions::new().owner("o")).await.unwrap();
    let second = timeout(PERIOD, client.lock_with("x", LockOptions::new().owner("o")))
        .await
        .expect("a reentrant acquisition must not wait for the lock")
        .unwrap();

    assert_eq!(script.acquires(), vec![AcquireCall { name: "x".into(), owner: "o".into(), wait: true }]);
    assert_eq!(first.token(), second.token());
    assert_eq!((first.owner(), second.owner()), ("o", "o"));

    assert!(first.unlock().await.unwrap());
    assert!(script.releases().is_empty(), "released on the backend while a reentrant guard remains");
    assert!(second.is_held());
    assert!(!script.is_free("x"));

    let token = second.token();
    assert!(second.unlock().await.unwrap());
    assert_eq!(script.releases(), vec![ReleaseCall { name: "x".into(), owner: "o".into(), token }]);
    assert!(script.is_free("x"));
}

/// Without an owner id, every acquisition is its own backend acquire with a distinct owner, so
/// a second one on a held lock does not reenter.
#[tokio::test(start_paused = true)]
async fn without_an_owner_each_acquisition_is_a_distinct_backend_acquire() {
    let (client, script) = setup(TTL);
    let first = client.lock("x").await.unwrap();
    assert!(client.try_lock("x").await.unwrap().is_none(), "an anonymous second acquisition reentered");

    let acquires = script.acquires();
    assert_eq!(acquires.len(), 2);
    assert_ne!(acquires[0].owner, acquires[1].owner);
    assert_eq!(acquires[0].owner, first.owner());

    let first_token = first.token();
    assert!(first.unlock().await.unwrap());
    let again = client.lock("x").await.unwrap();
    let acquires = script.acquires();
    assert_eq!(acquires.len(), 3);
    assert!(acquires[2].owner != acquires[0].owner && acquires[2].owner != acquires[1].owner);
    assert!(again.token() > first_token);
    assert!(again.unlock().await.unwrap());
}

// ---------------------------------------------------------------------------------------------
// Timeouts and scoped critical sections.
// ---------------------------------------------------------------------------------------------

/// `lock_with(timeout)` on a lock that is never granted fails with `Timeout` after exactly the
/// timeout and drops the queued backend acquisition.
#[tokio::test(start_paused = true)]
async fn lock_with_timeout_gives_up_after_exactly_the_timeout_and_drops_the_backend_wait() {
    let (client, script) = setup(TTL);
    script.hold_foreign("x");
    let t0 = Instant::now();

    let result = timeout(TTL * 10, client.lock_with("x", LockOptions::new().timeout(Duration::from_secs(2))))
        .await
        .expect("lock_with ignored its timeout");
    assert!(matches!(result, Err(Error::Timeout)), "{result:?}");
    assert_eq!(Instant::now() - t0, Duration::from_secs(2));

    assert_eq!(script.acquires().len(), 1);
    assert!(script.acquires()[0].wait);
    assert_eq!(script.acquires_dropped.load(Ordering::SeqCst), 1, "the backend acquisition was not dropped");
    assert_eq!(script.queued.load(Ordering::SeqCst), 0, "a waiter was left queued");

    // Nothing of ours lingers: once the holder goes, the lock is free and ours on asking.
    script.release_foreign("x");
    assert!(script.is_free("x"));
    let guard = client.try_lock("x").await.unwrap().unwrap();
    assert!(guard.unlock().await.unwrap());
}

/// `with_lock` returns `Err(Error::Lost)` and drops the critical section when the hold is lost
/// mid-way.
#[tokio::test(start_paused = true)]
async fn with_lock_returns_lost_and_drops_the_critical_section_when_the_hold_is_lost() {
    let (client, script) = setup(TTL);
    script.set_mode(KeepAliveMode::Unavailable);
    let started = Arc::new(AtomicBool::new(false));
    let finished = Arc::new(AtomicBool::new(false));
    let dropped = Arc::new(AtomicBool::new(false));
    let t0 = Instant::now();

    let result = client
        .with_lock("x", LockOptions::new(), |token| {
            let (started, finished, dropped) = (started.clone(), finished.clone(), dropped.clone());
            async move {
                let _flag = SetOnDrop(dropped);
                started.store(true, Ordering::SeqCst);
                sleep(TTL * 10).await;
                finished.store(true, Ordering::SeqCst);
                token
            }
        })
        .await;

    assert!(matches!(&result, Err(Error::Lost(name)) if name == "x"), "{result:?}");
    assert_at(Instant::now(), t0 + TTL - drift(TTL), "with_lock gave up");
    assert!(started.load(Ordering::SeqCst));
    assert!(!finished.load(Ordering::SeqCst));
    assert!(dropped.load(Ordering::SeqCst), "the critical section was not dropped");
}

/// `with_lock` runs the critical section with the token, returns its output and releases the lock.
#[tokio::test(start_paused = true)]
async fn with_lock_returns_the_output_and_releases_the_lock() {
    let (client, script) = setup(TTL);
    let result = client
        .with_lock("x", LockOptions::new(), |token| async move {
            sleep(TTL * 2).await;
            token * 10
        })
        .await
        .unwrap();

    let releases = script.releases();
    assert_eq!(releases.len(), 1);
    assert_eq!(result, releases[0].token * 10);
    assert!(script.is_free("x"));
}
