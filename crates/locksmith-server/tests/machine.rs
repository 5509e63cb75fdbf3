//! Deterministic unit tests of the pure lock state machine. Time is simulated: every test builds
//! instants from one `t0`, so nothing sleeps and nothing depends on the wall clock.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use locksmith_server::machine::*;

/// The resume-secret digest every session of these tests is opened with.
const SECRET: locksmith_server::machine::SecretDigest = [7; 32];

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn limits() -> Limits {
    Limits {
        min_ttl: ms(100),
        max_ttl: Duration::from_secs(3600),
        max_lock_delay: Duration::from_secs(60),
        max_owner_len: 128,
        max_waiters_per_lock: 100,
        max_sessions: 100,
        max_entries_per_session: 1_000,
        ..Limits::default()
    }
}

fn machine() -> Machine {
    Machine::new(limits(), 1)
}

/// The acquire command of request `req` in session `s`: `name` as `owner`, no wait, no lock-delay.
fn cmd(s: SessionId, req: u64, name: &str, owner: &str) -> Acquire {
    Acquire::exclusive(s, req, LockName::new(name).unwrap(), Owner::new(owner).unwrap(), false)
}

/// The release command of the hold `(s, owner, token)` on `name`.
fn rel(s: SessionId, name: &str, owner: &str, token: u64) -> Release {
    Release { session: s, name: LockName::new(name).unwrap(), owner: Owner::new(owner).unwrap(), token }
}

/// Opens a fresh session with a TTL of `ttl_ms`.
fn open(m: &mut Machine, now: Instant, ttl_ms: u64) -> SessionId {
    m.open(now, ms(ttl_ms), None, SECRET).unwrap().0
}

/// Acquire without lock-delay.
fn acq(m: &mut Machine, now: Instant, s: SessionId, req: u64, name: &str, owner: &str, wait: bool) -> AcquireOutcome {
    m.acquire(now, Acquire { wait, ..cmd(s, req, name, owner) }).unwrap()
}

/// Acquire that must be granted at once; returns the token.
fn grab(m: &mut Machine, now: Instant, s: SessionId, req: u64, name: &str, owner: &str) -> u64 {
    match acq(m, now, s, req, name, owner, false) {
        AcquireOutcome::Granted(t) => t,
        other => panic!("expected a grant of {name}, got {other:?}"),
    }
}

/// The view of one lock (panics if the machine does not know it).
fn view(m: &Machine, now: Instant, name: &str) -> LockView {
    let mut v = m.status(now, Some(name));
    assert_eq!(v.len(), 1, "lock {name} unknown");
    v.pop().unwrap()
}

/// `(session, owner, token)` of the holder of `name`, if any.
fn holder(m: &Machine, now: Instant, name: &str) -> Option<(SessionId, String, u64)> {
    m.status(now, Some(name)).pop().and_then(|v| v.holder).map(|(s, o, t, _)| (s, o, t))
}

/// Queued waiters on `name` (0 if the lock is unknown).
fn waiters(m: &Machine, now: Instant, name: &str) -> u64 {
    m.status(now, Some(name)).pop().map_or(0, |v| v.waiters)
}

/// The Grant records among `records`, as `(name, session, token)`.
fn grants(records: &[Record]) -> Vec<(String, SessionId, u64)> {
    records
        .iter()
        .filter_map(|r| match r {
            Record::Grant { name, session, token, .. } => Some((name.clone(), *session, *token)),
            _ => None,
        })
        .collect()
}

fn granted_effects(effects: &[Effect]) -> Vec<(SessionId, u64, u64)> {
    effects
        .iter()
        .filter_map(|e| match e {
            Effect::Granted { session, request, token } => Some((*session, *request, *token)),
            _ => None,
        })
        .collect()
}

/// A machine that appends every record it emits to a log, as a service writing a WAL would.
struct Logged {
    m: Machine,
    log: Vec<Record>,
}

impl Logged {
    fn new() -> Self {
        Self { m: machine(), log: vec![Record::Boot { epoch: 1 }] }
    }

    /// Moves the records emitted by the last step into the log.
    fn sync(&mut self) {
        self.log.extend(self.m.take_records());
    }
}

// ----- grants and fencing tokens -----

/// A free lock is granted at once with token 1.
#[test]
fn acquire_of_a_free_lock_is_granted_with_token_1() {
    let t0 = Instant::now();
    let at = |n: u64| t0 + Duration::from_millis(n);
    let mut m = machine();
    let s = open(&mut m, at(0), 10_000);
    assert_eq!(acq(&mut m, at(1), s, 1, "a", "o", false), AcquireOutcome::Granted(1));
    assert_eq!(holder(&m, at(1), "a"), Some((s, "o".to_string(), 1)));
    let v = view(&m, at(1), "a");
    assert_eq!(v.last_token, 1);
    assert_eq!(v.waiters, 0);
    assert_eq!(v.delay_left, None);
    assert!(m.take_effects().is_empty(), "a direct grant is answered, not delivered as an effect");
}

/// Successive holders of one lock get strictly increasing tokens (counter + 1 each time).
#[test]
fn tokens_strictly_increase_across_holders_of_one_lock() {
    let t0 = Instant::now();
    let at = |n: u64| t0 + Duration::from_millis(n);
    let mut m = machine();
    let a = open(&mut m, at(0), 10_000);
    let b = open(&mut m, at(0), 10_000);
    let mut last = 0;
    for i in 0..10u64 {
        let s = if i % 2 == 0 { a } else { b };
        let t = grab(&mut m, at(i), s, i, "x", "o");
        assert_eq!(t, last + 1);
        assert!(m.release(at(i), rel(s, "x", "o", t)));
        assert_eq!(view(&m, at(i), "x").last_token, t, "the counter is remembered while free");
        last = t;
    }
}

/// Each lock name has its own independent token counter.
#[test]
fn each_lock_has_its_own_token_counter() {
    let t0 = Instant::now();
    let at = |n: u64| t0 + Duration::from_millis(n);
    let mut m = machine();
    let s = open(&mut m, at(0), 10_000);
    for i in 0..3 {
        let t = grab(&mut m, at(1), s, i, "a", "o");
        assert!(m.release(at(1), rel(s, "a", "o", t)));
    }
    assert_eq!(grab(&mut m, at(2), s, 10, "b", "o"), 1);
    assert_eq!(grab(&mut m, at(2), s, 11, "a", "o"), 4);
    assert_eq!(grab(&mut m, at(2), s, 12, "c", "o"), 1);
    let all = m.status(at(2), None);
    let names: Vec<_> = all.iter().map(|v| (v.name.as_str(), v.last_token)).collect();
    assert_eq!(names, vec![("a", 4), ("b", 1), ("c", 1)]);
}

/// A no-wait acquire of a held lock answers Busy and leaves no waiter behind.
#[test]
fn no_wait_acquire_of_a_held_lock_is_busy_and_queues_nothing() {
    let t0 = Instant::now();
    let at = |n: u64| t0 + Duration::from_millis(n);
    let mut m = machine();
    let a = open(&mut m, at(0), 10_000);
    let b = open(&mut m, at(0), 10_000);
    let t = grab(&mut m, at(1), a, 1, "x", "o");
    assert_eq!(acq(&mut m, at(2), b, 2, "x", "o", false), AcquireOutcome::Busy);
    assert_eq!(waiters(&m, at(2), "x"), 0);
    assert_eq!(grants(&m.take_records()), vec![("x".to_string(), a, t)]);
    assert!(!m.cancel(at(3), b, 2), "a busy answer leaves nothing to cancel");
    // Released: nobody is waiting, so nobody is handed the lock.
    assert!(m.release(at(4), rel(a, "x", "o", t)));
    assert!(m.take_effects().is_empty());
    assert_eq!(holder(&m, at(4), "x"), None);
}

/// Each release hands the lock to the oldest waiter, with exactly one Granted effect (no herd).
#[test]
fn release_hands_the_lock_to_the_oldest_waiter() {
    let t0 = Instant::now();
    let at = |n: u64| t0 + Duration::from_millis(n);
    let mut m = machine();
    let h = open(&mut m, at(0), 10_000);
    let w: Vec<SessionId> = (0..3).map(|_| open(&mut m, at(0), 10_000)).collect();
    let mut token = grab(&mut m, at(1), h, 1, "x", "h");
    for (i, s) in w.iter().enumerate() {
        let req = 100 + i as u64;
        assert_eq!(acq(&mut m, at(2 + i as u64), *s, req, "x", "w", true), AcquireOutcome::Queued);
    }
    assert_eq!(waiters(&m, at(5), "x"), 3);
    assert!(m.take_effects().is_empty());

    let mut current = h;
    let mut owner = "h";
    for (i, s) in w.iter().enumerate() {
        m.take_records();
        assert!(m.release(at(10 + i as u64), rel(current, "x", owner, token)));
        let effects = m.take_effects();
        assert_eq!(effects, vec![Effect::Granted { session: *s, request: 100 + i as u64, token: token + 1 }]);
        assert_eq!(grants(&m.take_records()), vec![("x".to_string(), *s, token + 1)]);
        assert_eq!(holder(&m, at(10 + i as u64), "x"), Some((*s, "w".to_string(), token + 1)));
        assert_eq!(waiters(&m, at(10 + i as u64), "x"), 2 - i as u64);
        token += 1;
        current = *s;
        owner = "w";
    }
    assert!(m.release(at(20), rel(current, "x", owner, token)));
    assert!(m.take_effects().is_empty());
    assert_eq!(holder(&m, at(20), "x"), None);
}

/// Re-acquiring by the holding (session, owner) returns the same token and records no new grant.
#[test]
fn reacquire_by_the_holder_returns_the_same_token_without_a_new_grant() {
    let t0 = Instant::now();
    let at = |n: u64| t0 + Duration::from_millis(n);
    let mut m = machine();
    let s = open(&mut m, at(0), 10_000);
    let t = grab(&mut m, at(1), s, 1, "x", "o");
    m.take_records();
    assert_eq!(acq(&mut m, at(2), s, 2, "x", "o", false), AcquireOutcome::Granted(t));
    assert_eq!(acq(&mut m, at(3), s, 3, "x", "o", true), AcquireOutcome::Granted(t));
    assert!(m.take_records().is_empty(), "no new Grant record for an idempotent acquire");
    assert!(m.take_effects().is_empty());
    assert_eq!(view(&m, at(3), "x").last_token, t);
    assert_eq!(waiters(&m, at(3), "x"), 0);
}

/// Another owner in the holding session is not granted: it is Busy, or queued behind the hold.
#[test]
fn another_owner_in_the_holding_session_is_not_granted() {
    let t0 = Instant::now();
    let at = |n: u64| t0 + Duration::from_millis(n);
    let mut m = machine();
    let s = open(&mut m, at(0), 10_000);
    let t = grab(&mut m, at(1), s, 1, "x", "alice");
    assert_eq!(acq(&mut m, at(2), s, 2, "x", "bob", false), AcquireOutcome::Busy);
    assert_eq!(acq(&mut m, at(3), s, 3, "x", "bob", true), AcquireOutcome::Queued);
    assert_eq!(holder(&m, at(3), "x"), Some((s, "alice".to_string(), t)));
    assert_eq!(waiters(&m, at(3), "x"), 1);
    assert!(m.release(at(4), rel(s, "x", "alice", t)));
    assert_eq!(m.take_effects(), vec![Effect::Granted { session: s, request: 3, token: t + 1 }]);
    assert_eq!(holder(&m, at(4), "x"), Some((s, "bob".to_string(), t + 1)));
}

/// Re-sending a queued acquire (same session and request) does not queue it twice.
#[test]
fn resent_queued_acquire_is_queued_once() {
    let t0 = Instant::now();
    let at = |n: u64| t0 + Duration::from_millis(n);
    let mut m = machine();
    let a = open(&mut m, at(0), 10_000);
    let b = open(&mut m, at(0), 10_000);
    let t = grab(&mut m, at(1), a, 1, "x", "o");
    assert_eq!(acq(&mut m, at(2), b, 7, "x", "o", true), AcquireOutcome::Queued);
    assert_eq!(acq(&mut m, at(3), b, 7, "x", "o", true), AcquireOutcome::Queued);
    assert_eq!(waiters(&m, at(3), "x"), 1);
    assert!(m.release(at(4), rel(a, "x", "o", t)));
    assert_eq!(m.take_effects(), vec![Effect::Granted { session: b, request: 7, token: t + 1 }]);
    assert_eq!(waiters(&m, at(4), "x"), 0);
}

// ----- release -----

/// A release with the wrong owner, token or session returns false and changes nothing.
#[test]
fn release_with_wrong_owner_token_or_session_is_refused_and_changes_nothing() {
    let t0 = Instant::now();
    let at = |n: u64| t0 + Duration::from_millis(n);
    let mut m = machine();
    let a = open(&mut m, at(0), 10_000);
    let b = open(&mut m, at(0), 10_000);
    let t = grab(&mut m, at(1), a, 1, "x", "o");
    assert_eq!(acq(&mut m, at(1), b, 2, "x", "o", true), AcquireOutcome::Queued);
    m.take_records();
    let before = m.status(at(2), None);

    assert!(!m.release(at(2), rel(a, "x", "other", t)), "wrong owner");
    assert!(!m.release(at(2), rel(a, "x", "o", t + 1)), "wrong token");
    assert!(!m.release(at(2), rel(a, "x", "o", t - 1)), "stale token");
    assert!(!m.release(at(2), rel(b, "x", "o", t)), "wrong session");
    assert!(!m.release(at(2), rel(a, "y", "o", t)), "wrong lock");

    assert_eq!(m.status(at(2), None), before);
    assert!(m.take_records().is_empty());
    assert!(m.take_effects().is_empty());
}

/// A repeated release returns false and never touches the next holder of the lock.
#[test]
fn repeated_release_returns_false() {
    let t0 = Instant::now();
    let at = |n: u64| t0 + Duration::from_millis(n);
    let mut m = machine();
    let a = open(&mut m, at(0), 10_000);
    let b = open(&mut m, at(0), 10_000);
    let t = grab(&mut m, at(1), a, 1, "x", "o");
    assert!(m.release(at(2), rel(a, "x", "o", t)));
    assert!(!m.release(at(3), rel(a, "x", "o", t)));
    let t2 = grab(&mut m, at(4), b, 2, "x", "o");
    // Same owner string, old token, another session's hold: still refused.
    assert!(!m.release(at(5), rel(a, "x", "o", t)));
    assert!(!m.release(at(5), rel(b, "x", "o", t)));
    assert_eq!(holder(&m, at(5), "x"), Some((b, "o".to_string(), t2)));
}

// ----- cancel -----

/// Cancel removes a queued waiter and returns true; the next release skips it.
#[test]
fn cancel_removes_a_queued_waiter() {
    let t0 = Instant::now();
    let at = |n: u64| t0 + Duration::from_millis(n);
    let mut m = machine();
    let h = open(&mut m, at(0), 10_000);
    let b = open(&mut m, at(0), 10_000);
    let c = open(&mut m, at(0), 10_000);
    let t = grab(&mut m, at(1), h, 1, "x", "o");
    assert_eq!(acq(&mut m, at(2), b, 5, "x", "o", true), AcquireOutcome::Queued);
    assert_eq!(acq(&mut m, at(3), c, 6, "x", "o", true), AcquireOutcome::Queued);
    assert_eq!(waiters(&m, at(3), "x"), 2);
    assert!(m.cancel(at(4), b, 5));
    assert_eq!(waiters(&m, at(4), "x"), 1);
    assert!(!m.cancel(at(5), b, 5), "already cancelled");
    assert!(m.release(at(6), rel(h, "x", "o", t)));
    assert_eq!(m.take_effects(), vec![Effect::Granted { session: c, request: 6, token: t + 1 }]);
}

/// Cancel of an unknown request, of another session's request, or of a granted one returns false.
#[test]
fn cancel_of_an_unknown_or_granted_request_returns_false() {
    let t0 = Instant::now();
    let at = |n: u64| t0 + Duration::from_millis(n);
    let mut m = machine();
    let h = open(&mut m, at(0), 10_000);
    let b = open(&mut m, at(0), 10_000);
    assert!(!m.cancel(at(1), b, 42), "never queued");
    assert!(!m.cancel(at(1), 999, 42), "unknown session");
    let t = grab(&mut m, at(1), h, 1, "x", "o");
    assert!(!m.cancel(at(1), h, 1), "granted at once, never queued");
    assert_eq!(acq(&mut m, at(2), b, 2, "x", "o", true), AcquireOutcome::Queued);
    assert!(!m.cancel(at(3), h, 2), "the request belongs to another session");
    assert_eq!(waiters(&m, at(3), "x"), 1);
    assert!(m.release(at(4), rel(h, "x", "o", t)));
    assert_eq!(m.take_effects().len(), 1);
    assert!(!m.cancel(at(5), b, 2), "already granted");
    assert_eq!(holder(&m, at(5), "x"), Some((b, "o".to_string(), t + 1)), "a late cancel keeps the hold");
}

// ----- sessions and expiry -----

/// keep_alive moves the session deadline to now + ttl, so the session outlives its first deadline.
#[test]
fn keep_alive_extends_the_session_deadline() {
    let t0 = Instant::now();
    let at = |n: u64| t0 + Duration::from_millis(n);
    let mut m = machine();
    let s = open(&mut m, at(0), 1_000);
    let t = grab(&mut m, at(0), s, 1, "x", "o");
    assert_eq!(m.session_ttl_left(at(400), s), Some(ms(600)));
    m.keep_alive(at(800), s).unwrap();
    assert_eq!(m.session_ttl_left(at(800), s), Some(ms(1_000)));
    assert_eq!(m.next_deadline(), Some(at(1_800)));
    m.tick(at(1_000));
    m.tick(at(1_799));
    assert!(m.take_effects().is_empty());
    assert_eq!(holder(&m, at(1_799), "x"), Some((s, "o".to_string(), t)));
    m.tick(at(1_800));
    assert_eq!(m.take_effects(), vec![Effect::Expired { session: s }]);
    assert_eq!(m.session_ttl_left(at(1_800), s), None);
}

/// At its deadline tick expires the session, emits Expired, frees its hold and grants the next waiter.
#[test]
fn tick_at_the_deadline_expires_the_session_and_grants_the_next_waiter() {
    let t0 = Instant::now();
    let at = |n: u64| t0 + Duration::from_millis(n);
    let mut m = machine();
    let a = open(&mut m, at(0), 1_000);
    let b = open(&mut m, at(0), 10_000);
    let t = grab(&mut m, at(0), a, 1, "x", "o");
    assert_eq!(acq(&mut m, at(10), b, 2, "x", "o", true), AcquireOutcome::Queued);
    m.take_records();
    m.tick(at(999));
    assert!(m.take_effects().is_empty());
    assert_eq!(holder(&m, at(999), "x"), Some((a, "o".to_string(), t)));

    m.tick(at(1_000));
    let effects = m.take_effects();
    assert_eq!(effects.len(), 2, "{effects:?}");
    assert!(effects.contains(&Effect::Expired { session: a }));
    assert!(effects.contains(&Effect::Granted { session: b, request: 2, token: t + 1 }));
    assert_eq!(holder(&m, at(1_000), "x"), Some((b, "o".to_string(), t + 1)));
    let records = m.take_records();
    assert!(records.contains(&Record::Release { name: "x".into(), token: t, delay: Duration::ZERO }));
    assert!(records.contains(&Record::SessionEnd { id: a }));
    assert_eq!(grants(&records), vec![("x".to_string(), b, t + 1)]);
    assert_eq!(m.session_ttl_left(at(1_000), a), None);
}

/// Expiry also removes the expired session's own waiters, so they are never granted.
#[test]
fn expiry_removes_the_expired_sessions_own_waiters() {
    let t0 = Instant::now();
    let at = |n: u64| t0 + Duration::from_millis(n);
    let mut m = machine();
    let h = open(&mut m, at(0), 10_000);
    let dying = open(&mut m, at(0), 1_000);
    let c = open(&mut m, at(0), 10_000);
    let t = grab(&mut m, at(0), h, 1, "x", "o");
    assert_eq!(acq(&mut m, at(1), dying, 2, "x", "o", true), AcquireOutcome::Queued);
    assert_eq!(acq(&mut m, at(2), c, 3, "x", "o", true), AcquireOutcome::Queued);
    assert_eq!(waiters(&m, at(2), "x"), 2);
    m.tick(at(1_000));
    assert_eq!(m.take_effects(), vec![Effect::Expired { session: dying }]);
    assert_eq!(waiters(&m, at(1_000), "x"), 1);
    assert!(m.release(at(1_001), rel(h, "x", "o", t)));
    assert_eq!(m.take_effects(), vec![Effect::Granted { session: c, request: 3, token: t + 1 }]);
}

/// An expired session is refused with SessionExpired for keep_alive, acquire and resume.
#[test]
fn expired_session_is_refused_for_keep_alive_acquire_and_resume() {
    let t0 = Instant::now();
    let at = |n: u64| t0 + Duration::from_millis(n);
    let mut m = machine();
    let s = open(&mut m, at(0), 1_000);
    // Without a tick in between: the call itself notices the deadline has passed.
    assert_eq!(m.keep_alive(at(1_000), s), Err(Refusal::SessionExpired));
    assert_eq!(m.take_effects(), vec![Effect::Expired { session: s }]);
    assert_eq!(m.acquire(at(1_001), Acquire { wait: true, ..cmd(s, 1, "x", "o") }), Err(Refusal::SessionExpired));
    assert_eq!(m.open(at(1_002), ms(1_000), Some(s), SECRET), Err(Refusal::SessionExpired));
    assert!(m.status(at(1_002), None).is_empty(), "the refused acquire left no lock behind");

    // An acquire past the deadline, with no tick or keep-alive before it, is refused too.
    let s2 = open(&mut m, at(2_000), 1_000);
    assert_eq!(m.acquire(at(3_000), cmd(s2, 1, "x", "o")), Err(Refusal::SessionExpired));
    // A session id never issued is refused the same way.
    assert_eq!(m.keep_alive(at(3_000), 12_345), Err(Refusal::SessionExpired));
}

/// A resume needs the digest of the session's own secret: another one is refused with
/// `Denied` and changes nothing (the session keeps its deadline and holds, no record is
/// written); a session restored from a log without a digest cannot be resumed at all.
#[test]
fn resume_needs_the_sessions_secret_and_a_refusal_changes_nothing() {
    let t0 = Instant::now();
    let at = |n: u64| t0 + Duration::from_millis(n);
    let mut m = machine();
    let s = open(&mut m, at(0), 1_000);
    let t = grab(&mut m, at(0), s, 1, "x", "o");
    m.take_records();
    let mut other = SECRET;
    other[31] ^= 1;
    assert!(matches!(m.open(at(900), ms(1_000), Some(s), other), Err(Refusal::Denied(_))));
    assert!(m.take_records().is_empty());
    // Not renewed by the refused resume: it expires at 1 000 as before.
    assert_eq!(m.keep_alive(at(1_000), s), Err(Refusal::SessionExpired));
    let _ = t;

    let mut r = machine();
    r.apply(at(0), &Record::Session { id: 1 << 32 | 1, ttl: ms(5_000), secret: None });
    assert!(matches!(r.open(at(1), ms(5_000), Some(1 << 32 | 1), SECRET), Err(Refusal::Denied(_))));
}

/// Resuming a live session renews it and keeps its TTL and holds.
#[test]
fn resume_of_a_live_session_renews_it() {
    let t0 = Instant::now();
    let at = |n: u64| t0 + Duration::from_millis(n);
    let mut m = machine();
    let s = open(&mut m, at(0), 1_000);
    let t = grab(&mut m, at(0), s, 1, "x", "o");
    m.take_records();
    assert_eq!(m.open(at(900), ms(5_000), Some(s), SECRET), Ok((s, ms(1_000))));
    assert!(m.take_records().is_empty(), "resume opens no new session");
    assert_eq!(m.session_ttl_left(at(900), s), Some(ms(1_000)));
    m.tick(at(1_500));
    assert_eq!(holder(&m, at(1_500), "x"), Some((s, "o".to_string(), t)));
}

/// next_deadline is the earliest session deadline or lock-delay end, and None when idle.
#[test]
fn next_deadline_reports_the_earliest_deadline() {
    let t0 = Instant::now();
    let at = |n: u64| t0 + Duration::from_millis(n);
    let mut m = machine();
    assert_eq!(m.next_deadline(), None);
    let a = open(&mut m, at(0), 3_000);
    assert_eq!(m.next_deadline(), Some(at(3_000)));
    let b = open(&mut m, at(100), 1_000);
    assert_eq!(m.next_deadline(), Some(at(1_100)));
    m.keep_alive(at(500), b).unwrap();
    assert_eq!(m.next_deadline(), Some(at(1_500)));
    assert_eq!(
        m.acquire(at(500), Acquire { lock_delay: ms(5_000), ..cmd(b, 1, "x", "o") }),
        Ok(AcquireOutcome::Granted(1))
    );
    m.tick(at(1_500));
    // b expired holding x with a 5 s lock-delay: running until 6_500, a's deadline is 3_000.
    assert_eq!(m.next_deadline(), Some(at(3_000)));
    m.keep_alive(at(2_000), a).unwrap();
    m.keep_alive(at(3_900), a).unwrap();
    assert_eq!(m.next_deadline(), Some(at(6_500)), "the lock-delay end is now the earliest");
    m.tick(at(6_500));
    assert_eq!(m.next_deadline(), Some(at(6_900)));
    m.close(at(6_600), a);
    assert_eq!(m.next_deadline(), None);
}

// ----- lock-delay -----

/// A holder that expires with a lock-delay keeps the lock unavailable until the delay ends.
#[test]
fn expiry_with_lock_delay_keeps_the_lock_unavailable_until_the_delay_ends() {
    let t0 = Instant::now();
    let at = |n: u64| t0 + Duration::from_millis(n);
    let mut m = machine();
    let a = open(&mut m, at(0), 1_000);
    let b = open(&mut m, at(0), 60_000);
    let c = open(&mut m, at(0), 60_000);
    assert_eq!(
        m.acquire(at(0), Acquire { lock_delay: ms(2_000), ..cmd(a, 1, "x", "o") }),
        Ok(AcquireOutcome::Granted(1))
    );
    assert_eq!(acq(&mut m, at(10), b, 2, "x", "o", true), AcquireOutcome::Queued);
    m.take_records();

    m.tick(at(1_000));
    assert_eq!(m.take_effects(), vec![Effect::Expired { session: a }], "no grant while the delay runs");
    let records = m.take_records();
    assert!(records.contains(&Record::Release { name: "x".into(), token: 1, delay: ms(2_000) }), "{records:?}");
    let v = view(&m, at(1_000), "x");
    assert_eq!(v.holder, None);
    assert_eq!(v.waiters, 1);
    assert_eq!(v.delay_left, Some(ms(2_000)));
    assert_eq!(m.next_deadline(), Some(at(3_000)));

    // Newcomers neither jump the queue nor get the lock while the delay runs.
    assert_eq!(acq(&mut m, at(1_500), c, 3, "x", "o", false), AcquireOutcome::Busy);
    assert_eq!(acq(&mut m, at(1_600), c, 4, "x", "o", true), AcquireOutcome::Queued);
    m.tick(at(2_999));
    assert!(m.take_effects().is_empty());
    assert_eq!(holder(&m, at(2_999), "x"), None);

    m.tick(at(3_000));
    assert_eq!(m.take_effects(), vec![Effect::Granted { session: b, request: 2, token: 2 }]);
    let v = view(&m, at(3_000), "x");
    assert_eq!(v.delay_left, None);
    assert_eq!(v.waiters, 1);
}

/// A lock-delay with nobody waiting blocks new acquires until it ends, then the lock is free.
#[test]
fn lock_delay_without_waiters_blocks_new_acquires_until_it_ends() {
    let t0 = Instant::now();
    let at = |n: u64| t0 + Duration::from_millis(n);
    let mut m = machine();
    let a = open(&mut m, at(0), 1_000);
    let b = open(&mut m, at(0), 60_000);
    assert_eq!(
        m.acquire(at(0), Acquire { lock_delay: ms(500), ..cmd(a, 1, "x", "o") }),
        Ok(AcquireOutcome::Granted(1))
    );
    m.tick(at(1_000));
    assert_eq!(acq(&mut m, at(1_499), b, 2, "x", "o", false), AcquireOutcome::Busy);
    // The acquire itself ends the delay that is over: no tick needed.
    assert_eq!(acq(&mut m, at(1_500), b, 3, "x", "o", false), AcquireOutcome::Granted(2));
}

/// A clean release of a hold with lock-delay hands the lock over at once (no delay).
#[test]
fn clean_release_does_not_apply_the_lock_delay() {
    let t0 = Instant::now();
    let at = |n: u64| t0 + Duration::from_millis(n);
    let mut m = machine();
    let a = open(&mut m, at(0), 10_000);
    let b = open(&mut m, at(0), 10_000);
    assert_eq!(
        m.acquire(at(0), Acquire { lock_delay: ms(5_000), ..cmd(a, 1, "x", "o") }),
        Ok(AcquireOutcome::Granted(1))
    );
    assert_eq!(acq(&mut m, at(1), b, 2, "x", "o", true), AcquireOutcome::Queued);
    m.take_records();
    assert!(m.release(at(2), rel(a, "x", "o", 1)));
    assert_eq!(m.take_effects(), vec![Effect::Granted { session: b, request: 2, token: 2 }]);
    assert!(m.take_records().contains(&Record::Release { name: "x".into(), token: 1, delay: Duration::ZERO }));
    assert_eq!(view(&m, at(2), "x").delay_left, None);
}

/// Closing a session that holds with lock-delay frees the lock at once (no delay).
#[test]
fn close_does_not_apply_the_lock_delay() {
    let t0 = Instant::now();
    let at = |n: u64| t0 + Duration::from_millis(n);
    let mut m = machine();
    let a = open(&mut m, at(0), 10_000);
    let b = open(&mut m, at(0), 10_000);
    assert_eq!(
        m.acquire(at(0), Acquire { lock_delay: ms(5_000), ..cmd(a, 1, "x", "o") }),
        Ok(AcquireOutcome::Granted(1))
    );
    assert_eq!(acq(&mut m, at(1), b, 2, "x", "o", true), AcquireOutcome::Queued);
    m.take_records();
    m.close(at(2), a);
    assert_eq!(m.take_effects(), vec![Effect::Granted { session: b, request: 2, token: 2 }], "close is not expiry");
    let records = m.take_records();
    assert!(records.contains(&Record::Release { name: "x".into(), token: 1, delay: Duration::ZERO }));
    assert!(records.contains(&Record::SessionEnd { id: a }));
    assert_eq!(view(&m, at(2), "x").delay_left, None);
}

// ----- close -----

/// close frees all holds and drops all waiters of the session at once, granting the next in line.
#[test]
fn close_frees_holds_and_waiters_at_once() {
    let t0 = Instant::now();
    let at = |n: u64| t0 + Duration::from_millis(n);
    let mut m = machine();
    let a = open(&mut m, at(0), 10_000);
    let b = open(&mut m, at(0), 10_000);
    let ta = grab(&mut m, at(0), a, 1, "x", "o");
    let _ = grab(&mut m, at(0), a, 2, "y", "o");
    let tz = grab(&mut m, at(0), b, 3, "z", "o");
    assert_eq!(acq(&mut m, at(1), a, 4, "z", "o", true), AcquireOutcome::Queued);
    assert_eq!(acq(&mut m, at(2), b, 5, "x", "o", true), AcquireOutcome::Queued);
    m.close(at(3), a);
    assert_eq!(m.take_effects(), vec![Effect::Granted { session: b, request: 5, token: ta + 1 }]);
    assert_eq!(holder(&m, at(3), "x"), Some((b, "o".to_string(), ta + 1)));
    assert_eq!(holder(&m, at(3), "y"), None);
    assert_eq!(waiters(&m, at(3), "z"), 0);
    assert_eq!(m.session_ttl_left(at(3), a), None);
    assert_eq!(m.keep_alive(at(3), a), Err(Refusal::SessionExpired));
    // b releases z: a's dropped waiter is not granted.
    assert!(m.release(at(4), rel(b, "z", "o", tz)));
    assert!(m.take_effects().is_empty());
    assert_eq!(holder(&m, at(4), "z"), None);
    // Closing twice, or closing an unknown session, is harmless.
    m.take_records();
    m.close(at(5), a);
    m.close(at(5), 777);
    assert!(m.take_records().is_empty());
}

/// A request id still queued on one lock, sent again for another lock, leaves no orphan waiter.
#[test]
fn request_id_reused_on_another_lock_leaves_no_orphan_waiter() {
    let t0 = Instant::now();
    let at = |n: u64| t0 + Duration::from_millis(n);
    let mut m = machine();
    let h = open(&mut m, at(0), 10_000);
    let s = open(&mut m, at(0), 10_000);
    let tx = grab(&mut m, at(0), h, 1, "x", "o");
    let ty = grab(&mut m, at(0), h, 2, "y", "o");
    assert_eq!(acq(&mut m, at(1), s, 7, "x", "o", true), AcquireOutcome::Queued);
    // Whatever the answer to the reused id (refused or queued), the machine must stay consistent.
    let _ = m.acquire(at(2), Acquire { wait: true, ..cmd(s, 7, "y", "o") });
    m.close(at(3), s);
    assert_eq!(waiters(&m, at(3), "x"), 0, "closed session left a waiter on x");
    assert_eq!(waiters(&m, at(3), "y"), 0, "closed session left a waiter on y");
    assert!(m.release(at(4), rel(h, "x", "o", tx)));
    assert!(m.release(at(4), rel(h, "y", "o", ty)));
    assert!(m.take_effects().is_empty(), "a closed session was granted a lock");
    assert_eq!(holder(&m, at(4), "x"), None);
    assert_eq!(holder(&m, at(4), "y"), None);
}

// ----- limits -----

/// A TTL below the minimum or above the maximum is refused as Invalid; the bounds themselves are fine.
#[test]
fn ttl_outside_the_limits_is_refused_as_invalid() {
    let t0 = Instant::now();
    let at = |n: u64| t0 + Duration::from_millis(n);
    let mut m = machine();
    let l = limits();
    assert!(matches!(m.open(at(0), l.min_ttl - ms(1), None, SECRET), Err(Refusal::Invalid(_))));
    assert!(matches!(m.open(at(0), l.max_ttl + ms(1), None, SECRET), Err(Refusal::Invalid(_))));
    assert!(matches!(m.open(at(0), Duration::ZERO, None, SECRET), Err(Refusal::Invalid(_))));
    assert!(m.take_records().is_empty(), "a refused open records nothing");
    assert_eq!(m.open(at(0), l.min_ttl, None, SECRET).unwrap().1, l.min_ttl);
    assert_eq!(m.open(at(0), l.max_ttl, None, SECRET).unwrap().1, l.max_ttl);
}

/// A lock-delay above the maximum is refused as Invalid and changes nothing.
#[test]
fn lock_delay_above_the_maximum_is_refused_as_invalid() {
    let t0 = Instant::now();
    let at = |n: u64| t0 + Duration::from_millis(n);
    let mut m = machine();
    let s = open(&mut m, at(0), 10_000);
    m.take_records();
    let max = limits().max_lock_delay;
    assert!(matches!(
        m.acquire(at(1), Acquire { lock_delay: max + ms(1), ..cmd(s, 1, "x", "o") }),
        Err(Refusal::Invalid(_))
    ));
    assert!(m.status(at(1), None).is_empty());
    assert!(m.take_records().is_empty());
    assert_eq!(m.acquire(at(1), Acquire { lock_delay: max, ..cmd(s, 2, "x", "o") }), Ok(AcquireOutcome::Granted(1)));
}

/// An owner id longer than max_owner_len is refused as Invalid and changes nothing; the limit itself is fine.
#[test]
fn owner_longer_than_the_limit_is_refused_as_invalid() {
    let t0 = Instant::now();
    let at = |n: u64| t0 + Duration::from_millis(n);
    let mut m = machine();
    let s = open(&mut m, at(0), 10_000);
    m.take_records();
    let max = limits().max_owner_len;
    assert_eq!(max, locksmith_core::MAX_OWNER_LEN, "the server's limit agrees with every client's");
    let long = "o".repeat(max + 1);
    assert!(matches!(m.acquire(at(1), cmd(s, 1, "x", &long)), Err(Refusal::Invalid(_))));
    assert!(matches!(m.acquire(at(1), Acquire { wait: true, ..cmd(s, 2, "x", &long) }), Err(Refusal::Invalid(_))));
    assert!(m.status(at(1), None).is_empty());
    assert!(m.take_records().is_empty());
    assert_eq!(acq(&mut m, at(1), s, 3, "x", &"o".repeat(max), false), AcquireOutcome::Granted(1));
    assert_eq!(Limits::default().max_owner_len, locksmith_core::MAX_OWNER_LEN);
}

/// Queueing beyond max_waiters_per_lock is refused with Limit; a slot freed by cancel is reusable.
#[test]
fn full_wait_queue_is_refused_with_limit() {
    let t0 = Instant::now();
    let at = |n: u64| t0 + Duration::from_millis(n);
    let mut m = Machine::new(Limits { max_waiters_per_lock: 2, ..limits() }, 1);
    let h = open(&mut m, at(0), 10_000);
    let s: Vec<SessionId> = (0..3).map(|_| open(&mut m, at(0), 10_000)).collect();
    grab(&mut m, at(0), h, 1, "x", "o");
    assert_eq!(acq(&mut m, at(1), s[0], 10, "x", "o", true), AcquireOutcome::Queued);
    assert_eq!(acq(&mut m, at(1), s[1], 11, "x", "o", true), AcquireOutcome::Queued);
    assert!(matches!(m.acquire(at(1), Acquire { wait: true, ..cmd(s[2], 12, "x", "o") }), Err(Refusal::Limit(..))));
    assert_eq!(waiters(&m, at(1), "x"), 2);
    assert!(!m.cancel(at(1), s[2], 12), "the refused acquire was not queued");
    // A no-wait acquire is still answered Busy, and another lock is unaffected.
    assert_eq!(acq(&mut m, at(1), s[2], 13, "x", "o", false), AcquireOutcome::Busy);
    assert_eq!(acq(&mut m, at(1), s[2], 14, "y", "o", true), AcquireOutcome::Granted(1));
    assert!(m.cancel(at(2), s[0], 10));
    assert_eq!(acq(&mut m, at(2), s[2], 15, "x", "o", true), AcquireOutcome::Queued);
}

/// Opening more than max_sessions live sessions is refused with Limit.
#[test]
fn too_many_sessions_are_refused_with_limit() {
    let t0 = Instant::now();
    let at = |n: u64| t0 + Duration::from_millis(n);
    let mut m = Machine::new(Limits { max_sessions: 2, ..limits() }, 1);
    let a = open(&mut m, at(0), 1_000);
    open(&mut m, at(0), 10_000);
    assert!(matches!(m.open(at(1), ms(1_000), None, SECRET), Err(Refusal::Limit(..))));
    m.close(at(2), a);
    open(&mut m, at(3), 1_000);
}

// ----- records -----

/// A grant emits a Grant record that needs a sync; a release emits a Release record that does not.
#[test]
fn grant_and_release_emit_records_with_the_right_durability() {
    let t0 = Instant::now();
    let at = |n: u64| t0 + Duration::from_millis(n);
    let mut m = machine();
    let s = open(&mut m, at(0), 10_000);
    let opened = m.take_records();
    assert_eq!(opened, vec![Record::Session { id: s, ttl: ms(10_000), secret: Some(SECRET) }]);
    assert!(!opened[0].needs_sync());

    assert_eq!(
        m.acquire(at(1), Acquire { lock_delay: ms(300), ..cmd(s, 1, "x", "own") }),
        Ok(AcquireOutcome::Granted(1))
    );
    let granted = m.take_records();
    assert_eq!(
        granted,
        vec![
            // The first token above the server-wide floor moves the floor first.
            Record::Floor { upto: FLOOR_BLOCK },
            Record::Grant {
                name: "x".into(),
                session: s,
                owner: "own".into(),
                token: 1,
                lock_delay: ms(300),
                mode: HoldMode::Exclusive,
                value: None
            }
        ]
    );
    assert!(granted.iter().all(Record::needs_sync));

    assert!(m.release(at(2), rel(s, "x", "own", 1)));
    let released = m.take_records();
    assert_eq!(released, vec![Record::Release { name: "x".into(), token: 1, delay: Duration::ZERO }]);
    assert!(!released[0].needs_sync());

    m.close(at(3), s);
    let ended = m.take_records();
    assert_eq!(ended, vec![Record::SessionEnd { id: s }]);
    assert!(!ended[0].needs_sync());
    assert!(Record::Boot { epoch: 1 }.needs_sync());
}

// ----- restore -----

/// Restore keeps live holders with their owners and tokens, and the counters of free locks.
#[test]
fn restore_keeps_holders_and_counters() {
    let t0 = Instant::now();
    let at = |n: u64| t0 + Duration::from_millis(n);
    let mut l = Logged::new();
    let a = open(&mut l.m, at(0), 10_000);
    let b = open(&mut l.m, at(0), 10_000);
    l.sync();
    for i in 0..3 {
        let t = grab(&mut l.m, at(1), a, i, "free", "o");
        l.sync();
        assert!(l.m.release(at(1), rel(a, "free", "o", t)));
        l.sync();
    }
    let tx = grab(&mut l.m, at(2), a, 10, "x", "alice");
    l.sync();
    let ty = grab(&mut l.m, at(2), b, 11, "y", "bob");
    l.sync();

    let r = Machine::restore(limits(), l.log.clone(), at(5_000));
    assert_eq!(holder(&r, at(5_000), "x"), Some((a, "alice".to_string(), tx)));
    assert_eq!(holder(&r, at(5_000), "y"), Some((b, "bob".to_string(), ty)));
    let free = view(&r, at(5_000), "free");
    assert_eq!((free.holder, free.last_token), (None, 3));
}

/// Tokens issued after a restore are greater than every token issued before it.
#[test]
fn tokens_after_restore_exceed_every_token_before() {
    let t0 = Instant::now();
    let at = |n: u64| t0 + Duration::from_millis(n);
    let mut l = Logged::new();
    let a = open(&mut l.m, at(0), 1_000);
    l.sync();
    let mut max_before: HashMap<&str, u64> = HashMap::new();
    for (i, name) in ["x", "x", "y", "x", "z"].into_iter().enumerate() {
        let t = grab(&mut l.m, at(1), a, i as u64, name, "o");
        l.sync();
        assert!(l.m.release(at(1), rel(a, name, "o", t)));
        l.sync();
        max_before.insert(name, t);
    }
    // "z" stays held across the crash by a session that must expire first.
    let z = grab(&mut l.m, at(2), a, 99, "z", "o");
    l.sync();
    max_before.insert("z", z);

    let mut r = Machine::restore(limits(), l.log.clone(), at(10_000));
    let s = open(&mut r, at(10_000), 60_000);
    for (i, name) in ["x", "y"].into_iter().enumerate() {
        let t = grab(&mut r, at(10_001), s, i as u64, name, "o");
        assert!(t > max_before[name], "{name}: {t} after restore, {} before", max_before[name]);
    }
    assert_eq!(acq(&mut r, at(10_001), s, 5, "z", "o", true), AcquireOutcome::Queued);
    r.tick(at(11_000));
    let g = granted_effects(&r.take_effects());
    // Every lock continues above the floor the previous run had reserved.
    assert_eq!(g, vec![(s, 5, FLOOR_BLOCK + 1)]);
}

/// The restored epoch is greater, so sessions opened after a restore get ids never used before.
#[test]
fn restore_starts_a_new_epoch_with_fresh_session_ids() {
    let t0 = Instant::now();
    let at = |n: u64| t0 + Duration::from_millis(n);
    let mut l = Logged::new();
    let old: Vec<SessionId> = (0..4).map(|_| open(&mut l.m, at(0), 10_000)).collect();
    l.sync();
    assert!(old.iter().all(|id| id >> 32 == 1));
    let mut r = Machine::restore(limits(), l.log.clone(), at(1));
    assert!(r.epoch() > 1);
    let new: Vec<SessionId> = (0..4).map(|_| open(&mut r, at(2), 10_000)).collect();
    for id in &new {
        assert_eq!(id >> 32, r.epoch());
        assert!(!old.contains(id), "session id {id:#x} reused after restore");
    }
    // A second restore from the first restore's own log moves the epoch on again.
    let log2 = r.take_records();
    let e2 = r.epoch();
    assert_eq!(log2.first(), Some(&Record::Boot { epoch: e2 }));
    assert!(log2.iter().all(|rec| !matches!(rec, Record::Boot { epoch } if *epoch != e2)));
    let r2 = Machine::restore(limits(), log2, at(3));
    assert!(r2.epoch() > e2);
}

/// The epoch after restore exceeds the epoch of every session id in the log, even without Boot.
#[test]
fn restore_epoch_exceeds_the_epoch_of_every_logged_session() {
    let t0 = Instant::now();
    let at = |n: u64| t0 + Duration::from_millis(n);
    let mut m = Machine::new(limits(), 7);
    let s = open(&mut m, at(0), 10_000);
    assert_eq!(s >> 32, 7);
    let r = Machine::restore(limits(), m.take_records(), at(1));
    assert!(r.epoch() > 7);
}

/// Restored sessions get a full TTL from the restore time: nobody else is granted their locks before.
#[test]
fn restored_session_gets_a_full_ttl_from_the_restore_time() {
    let t0 = Instant::now();
    let at = |n: u64| t0 + Duration::from_millis(n);
    let mut l = Logged::new();
    let a = open(&mut l.m, at(0), 1_000);
    l.sync();
    let t = grab(&mut l.m, at(900), a, 1, "x", "o");
    l.sync();
    // The crash happens at 950; the server comes back at 5_000, long after a's old deadline.
    let mut r = Machine::restore(limits(), l.log.clone(), at(5_000));
    assert_eq!(r.session_ttl_left(at(5_000), a), Some(ms(1_000)));
    assert_eq!(r.next_deadline(), Some(at(6_000)));
    let b = open(&mut r, at(5_000), 60_000);
    assert_eq!(acq(&mut r, at(5_001), b, 2, "x", "o", true), AcquireOutcome::Queued);
    r.tick(at(5_999));
    assert!(r.take_effects().is_empty(), "granted before the restored session's grace ended");
    assert_eq!(holder(&r, at(5_999), "x"), Some((a, "o".to_string(), t)));

    r.tick(at(6_000));
    let effects = r.take_effects();
    assert!(effects.contains(&Effect::Expired { session: a }), "{effects:?}");
    assert!(effects.contains(&Effect::Granted { session: b, request: 2, token: FLOOR_BLOCK + 1 }), "{effects:?}");
    assert!(FLOOR_BLOCK + 1 > t);
}

/// A restored session can resume, renew and release its hold.
#[test]
fn restored_session_can_resume_and_release() {
    let t0 = Instant::now();
    let at = |n: u64| t0 + Duration::from_millis(n);
    let mut l = Logged::new();
    let a = open(&mut l.m, at(0), 1_000);
    l.sync();
    let t = grab(&mut l.m, at(1), a, 1, "x", "o");
    l.sync();
    let mut r = Machine::restore(limits(), l.log.clone(), at(2_000));
    assert_eq!(r.open(at(2_500), ms(1_000), Some(a), SECRET), Ok((a, ms(1_000))));
    assert_eq!(r.session_ttl_left(at(2_500), a), Some(ms(1_000)));
    assert_eq!(acq(&mut r, at(2_600), a, 2, "x", "o", false), AcquireOutcome::Granted(t));
    assert!(r.release(at(2_700), rel(a, "x", "o", t)));
    assert_eq!(holder(&r, at(2_700), "x"), None);
}

/// Waiters are not restored: clients re-send them after resuming.
#[test]
fn restore_does_not_bring_back_waiters() {
    let t0 = Instant::now();
    let at = |n: u64| t0 + Duration::from_millis(n);
    let mut l = Logged::new();
    let a = open(&mut l.m, at(0), 10_000);
    let b = open(&mut l.m, at(0), 10_000);
    l.sync();
    let t = grab(&mut l.m, at(1), a, 1, "x", "o");
    l.sync();
    assert_eq!(acq(&mut l.m, at(2), b, 2, "x", "o", true), AcquireOutcome::Queued);
    l.sync();
    let mut r = Machine::restore(limits(), l.log.clone(), at(3));
    assert_eq!(waiters(&r, at(3), "x"), 0);
    assert!(!r.cancel(at(3), b, 2));
    assert!(r.release(at(4), rel(a, "x", "o", t)));
    assert!(r.take_effects().is_empty());
    assert_eq!(holder(&r, at(4), "x"), None);
}

/// Sessions that closed or expired before the crash do not come back, nor do their holds.
#[test]
fn session_that_ended_before_the_crash_is_not_restored() {
    let t0 = Instant::now();
    let at = |n: u64| t0 + Duration::from_millis(n);
    let mut l = Logged::new();
    let closed = open(&mut l.m, at(0), 10_000);
    let expired = open(&mut l.m, at(0), 1_000);
    let live = open(&mut l.m, at(0), 10_000);
    l.sync();
    grab(&mut l.m, at(1), closed, 1, "x", "o");
    l.sync();
    grab(&mut l.m, at(1), expired, 2, "y", "o");
    l.sync();
    l.m.close(at(2), closed);
    l.sync();
    l.m.keep_alive(at(1_500), live).unwrap();
    l.sync();
    l.m.tick(at(1_500));
    l.sync();
    assert_eq!(l.m.take_effects(), vec![Effect::Expired { session: expired }]);

    let mut r = Machine::restore(limits(), l.log.clone(), at(2_000));
    assert_eq!(r.session_ttl_left(at(2_000), closed), None);
    assert_eq!(r.session_ttl_left(at(2_000), expired), None);
    assert_eq!(r.session_ttl_left(at(2_000), live), Some(ms(10_000)));
    assert_eq!(r.keep_alive(at(2_000), closed), Err(Refusal::SessionExpired));
    assert_eq!(r.open(at(2_000), ms(1_000), Some(expired), SECRET), Err(Refusal::SessionExpired));
    assert_eq!(holder(&r, at(2_000), "x"), None);
    assert_eq!(holder(&r, at(2_000), "y"), None);
    assert_eq!(grab(&mut r, at(2_001), live, 3, "x", "o"), FLOOR_BLOCK + 1);
    assert_eq!(grab(&mut r, at(2_001), live, 4, "y", "o"), FLOOR_BLOCK + 1);
}

/// A lock-delay still running at the crash is kept after restore (counted from the restore time).
#[test]
fn restore_keeps_a_running_lock_delay() {
    let t0 = Instant::now();
    let at = |n: u64| t0 + Duration::from_millis(n);
    let mut l = Logged::new();
    let a = open(&mut l.m, at(0), 1_000);
    l.sync();
    assert_eq!(
        l.m.acquire(at(0), Acquire { lock_delay: ms(3_000), ..cmd(a, 1, "x", "o") }),
        Ok(AcquireOutcome::Granted(1))
    );
    l.sync();
    l.m.tick(at(1_000));
    l.sync();
    let mut r = Machine::restore(limits(), l.log.clone(), at(2_000));
    assert_eq!(view(&r, at(2_000), "x").delay_left, Some(ms(3_000)));
    let b = open(&mut r, at(2_000), 60_000);
    assert_eq!(acq(&mut r, at(2_001), b, 2, "x", "o", true), AcquireOutcome::Queued);
    r.tick(at(4_999));
    assert!(r.take_effects().is_empty());
    r.tick(at(5_000));
    assert_eq!(r.take_effects(), vec![Effect::Granted { session: b, request: 2, token: FLOOR_BLOCK + 1 }]);
}

/// A lock-delay that ended before the crash (the lock was granted again after it) is not re-imposed.
#[test]
fn restore_does_not_reimpose_a_lock_delay_that_already_ended() {
    let t0 = Instant::now();
    let at = |n: u64| t0 + Duration::from_millis(n);
    let mut l = Logged::new();
    let a = open(&mut l.m, at(0), 1_000);
    let b = open(&mut l.m, at(0), 60_000);
    l.sync();
    assert_eq!(
        l.m.acquire(at(0), Acquire { lock_delay: ms(10_000), ..cmd(a, 1, "x", "o") }),
        Ok(AcquireOutcome::Granted(1))
    );
    l.sync();
    assert_eq!(acq(&mut l.m, at(1), b, 2, "x", "o", true), AcquireOutcome::Queued);
    l.sync();
    l.m.tick(at(1_000)); // a expires: delay until 11_000
    l.sync();
    l.m.keep_alive(at(11_000), b).unwrap(); // delay over: b is granted x
    l.sync();
    assert_eq!(l.m.take_effects().last(), Some(&Effect::Granted { session: b, request: 2, token: 2 }));

    let mut r = Machine::restore(limits(), l.log.clone(), at(12_000));
    let v = view(&r, at(12_000), "x");
    assert_eq!(v.holder.map(|h| (h.0, h.2)), Some((b, 2)));
    assert_eq!(v.delay_left, None, "the delay served before the crash came back");
    let c = open(&mut r, at(12_000), 60_000);
    assert_eq!(acq(&mut r, at(12_001), c, 3, "x", "o", true), AcquireOutcome::Queued);
    assert!(r.release(at(12_002), rel(b, "x", "o", 2)));
    assert_eq!(r.take_effects(), vec![Effect::Granted { session: c, request: 3, token: FLOOR_BLOCK + 1 }]);
}

/// Restoring from snapshot(now) gives the same status as the machine had at now.
#[test]
fn restore_from_a_snapshot_gives_the_same_status() {
    let t0 = Instant::now();
    let at = |n: u64| t0 + Duration::from_millis(n);
    let mut m = Machine::new(limits(), 3);
    let a = open(&mut m, at(0), 2_000);
    let b = open(&mut m, at(0), 5_000);
    let dying = open(&mut m, at(0), 500);
    for i in 0..4 {
        let t = grab(&mut m, at(1), a, i, "counted", "o");
        assert!(m.release(at(1), rel(a, "counted", "o", t)));
    }
    grab(&mut m, at(2), a, 10, "x", "alice");
    grab(&mut m, at(2), b, 11, "y", "bob");
    grab(&mut m, at(2), b, 12, "x2", "carol");
    assert_eq!(
        m.acquire(at(2), Acquire { lock_delay: ms(4_000), ..cmd(dying, 13, "delayed", "d") }),
        Ok(AcquireOutcome::Granted(1))
    );
    m.tick(at(500)); // dying expires: "delayed" is in lock-delay until 4_500
    let now = at(1_000);
    // Renew everyone at `now` so the TTL left matches the full TTL a restore grants.
    m.keep_alive(now, a).unwrap();
    m.keep_alive(now, b).unwrap();
    let before = m.status(now, None);
    assert_eq!(before.len(), 5);

    let snap = m.snapshot(now);
    assert_eq!(snap.first(), Some(&Record::Boot { epoch: 3 }));
    let r = Machine::restore(limits(), snap, now);
    assert_eq!(r.status(now, None), before);
    assert!(r.epoch() > 3);
    assert_eq!(r.next_deadline(), m.next_deadline());
    for s in [a, b] {
        assert_eq!(r.session_ttl_left(now, s), m.session_ttl_left(now, s));
    }
}

/// A restored machine emits its own snapshot as the new log, and restoring that gives the same state.
#[test]
fn restore_emits_a_snapshot_that_restores_to_the_same_state() {
    let t0 = Instant::now();
    let at = |n: u64| t0 + Duration::from_millis(n);
    let mut l = Logged::new();
    let a = open(&mut l.m, at(0), 1_000);
    l.sync();
    for i in 0..3 {
        let t = grab(&mut l.m, at(1), a, i, "x", "o");
        l.sync();
        assert!(l.m.release(at(1), rel(a, "x", "o", t)));
        l.sync();
    }
    grab(&mut l.m, at(2), a, 9, "y", "o");
    l.sync();
    let mut r1 = Machine::restore(limits(), l.log.clone(), at(100));
    let log1 = r1.take_records();
    assert_eq!(log1.first(), Some(&Record::Boot { epoch: r1.epoch() }));
    let r2 = Machine::restore(limits(), log1, at(100));
    assert_eq!(r2.status(at(100), None), r1.status(at(100), None));
    assert!(r2.epoch() > r1.epoch());
}

// ----- property test -----

/// A tiny deterministic PRNG (64-bit LCG, high bits out).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Random open/acquire/release/cancel/keep_alive/tick/close sequences keep the machine's invariants.
#[test]
fn random_operation_sequences_keep_the_invariants() {
    const LOCKS: [&str; 3] = ["a", "b", "c"];
    const OWNERS: [&str; 2] = ["o1", "o2"];
    for seed in [1u64, 7, 42, 2024, 99_991] {
        let t0 = Instant::now();
        let at = |n: u64| t0 + Duration::from_millis(n);
        let mut rng = Lcg(seed);
        let mut m = machine();
        let mut clock = 0u64;
        let mut slots: [Option<SessionId>; 5] = [None; 5];
        let mut dead: Vec<SessionId> = Vec::new();
        // Model built from the records: holder (session, token) and last token of every lock.
        let mut held: HashMap<String, (SessionId, u64)> = HashMap::new();
        let mut last: HashMap<String, u64> = HashMap::new();
        // The server-wide token floor, from the Floor records: every token is at or below it.
        let mut floor = 0u64;
        // Coverage counters: the run must exercise hand-offs, expiry and lock-delay.
        let (mut grants_seen, mut handoffs, mut expiries, mut delayed_with_waiters) = (0usize, 0usize, 0usize, 0usize);
        for step in 0..5_000u64 {
            clock += rng.below(40);
            let now = at(clock);
            let slot = rng.below(5) as usize;
            let lock = LOCKS[rng.below(3) as usize];
            let owner = OWNERS[rng.below(2) as usize];
            // Small per-session request ids: retries and reuse happen.
            let request = rng.below(6);
            let op = rng.below(100);
            let ctx = format!("seed {seed} step {step} op {op} slot {slot}");
            // An acquire answered Granted: checked against the model once this step is replayed.
            let mut answered_grant = None;
            // An empty slot mostly opens a session, so most steps act on a live one.
            let op = if slots[slot].is_none() && rng.below(2) == 0 { 0 } else { op };
            match (op, slots[slot]) {
                (0..=9, _) => {
                    let resume = if rng.below(3) == 0 { slots[slot].or(dead.last().copied()) } else { None };
                    let ttl = ms(300 + rng.below(1_200));
                    match m.open(now, ttl, resume, SECRET) {
                        Ok((id, _)) => slots[slot] = Some(id),
                        Err(Refusal::SessionExpired) => assert!(resume.is_some(), "{ctx}"),
                        Err(e) => panic!("{ctx}: open refused: {e}"),
                    }
                }
                (10..=44, Some(s)) => {
                    let delay = if rng.below(4) == 0 { ms(rng.below(400)) } else { Duration::ZERO };
                    let wait = rng.below(3) != 0;
                    match m.acquire(now, Acquire { wait, lock_delay: delay, ..cmd(s, request, lock, owner) }) {
                        Ok(AcquireOutcome::Granted(t)) => answered_grant = Some((lock, s, t)),
                        Ok(AcquireOutcome::Busy) => {
                            assert!(!wait, "{ctx}: Busy for a waiting acquire")
                        }
                        Ok(AcquireOutcome::Queued) => {
                            assert!(wait, "{ctx}: queued a no-wait acquire")
                        }
                        Err(Refusal::SessionExpired) => slots[slot] = None,
                        Err(Refusal::Invalid(_)) => {} // e.g. a request id still queued on another lock
                        Err(e) => panic!("{ctx}: acquire refused: {e}"),
                        Ok(other) => panic!("{ctx}: unexpected answer {other:?}"),
                    }
                }
                (45..=64, Some(s)) => {
                    // Mostly one of this session's own holds, sometimes a wrong token, owner or lock.
                    let mine: Vec<&str> =
                        LOCKS.into_iter().filter(|l| held.get(*l).is_some_and(|h| h.0 == s)).collect();
                    let name = if !mine.is_empty() && rng.below(5) != 0 {
                        mine[rng.below(mine.len() as u64) as usize]
                    } else {
                        lock
                    };
                    // A session whose deadline has passed is expired by the call itself.
                    let alive = m.session_ttl_left(now, s).is_some_and(|l| l > Duration::ZERO);
                    let (tok, who, expect) = match held.get(name) {
                        Some(&(hs, t)) if hs == s => {
                            let real = holder(&m, now, name).unwrap().1;
                            let other = if real == OWNERS[0] { OWNERS[1] } else { OWNERS[0] };
                            match rng.below(8) {
                                0 => (t + 1, real, false),
                                1 => (t, other.to_string(), false),
                                _ => (t, real, alive),
                            }
                        }
                        _ => (last.get(name).copied().unwrap_or(0), owner.to_string(), false),
                    };
                    let ok = m.release(now, rel(s, name, &who, tok));
                    assert_eq!(ok, expect, "{ctx}: release({name}, {who}, {tok})");
                }
                (65..=74, Some(s)) => {
                    m.cancel(now, s, request);
                }
                (75..=89, Some(s)) => {
                    if m.keep_alive(now, s).is_err() {
                        slots[slot] = None;
                    }
                }
                (90..=94, _) => m.tick(now),
                (95..=99, Some(s)) => {
                    m.close(now, s);
                    slots[slot] = None;
                    dead.push(s);
                }
                _ => m.tick(now),
            }

            // Replay this step's records into the model.
            let records = m.take_records();
            let mut step_grants = Vec::new();
            for r in &records {
                match r {
                    Record::Grant { name, session, token, .. } => {
                        assert!(!held.contains_key(name), "{ctx}: second holder of {name}: {records:?}");
                        let prev = last.get(name).copied().unwrap_or(0);
                        assert!(*token > prev, "{ctx}: token {token} on {name} after {prev}");
                        assert!(*token <= floor, "{ctx}: token {token} above the durable floor {floor}");
                        assert!(
                            m.session_ttl_left(now, *session).is_some()
                                || records.contains(&Record::SessionEnd { id: *session }),
                            "{ctx}"
                        );
                        held.insert(name.clone(), (*session, *token));
                        last.insert(name.clone(), *token);
                        step_grants.push((*session, *token));
                        grants_seen += 1;
                    }
                    Record::Release { name, token, .. } => {
                        let h = held.remove(name);
                        assert_eq!(h.map(|h| h.1), Some(*token), "{ctx}: release of a hold that did not exist");
                    }
                    Record::SessionEnd { id } => {
                        assert!(held.values().all(|h| h.0 != *id), "{ctx}: ended session {id} still holds");
                        if let Some(sl) = slots.iter_mut().find(|sl| **sl == Some(*id)) {
                            *sl = None;
                        }
                        dead.push(*id);
                    }
                    Record::Session { .. } => {}
                    Record::Floor { upto } => {
                        assert!(*upto > floor, "{ctx}: the floor went down");
                        floor = *upto;
                    }
                    other => panic!("{ctx}: unexpected record {other:?}"),
                }
            }
            if let Some((lock, s, t)) = answered_grant {
                assert_eq!(held.get(lock), Some(&(s, t)), "{ctx}: answered Granted({t}) on {lock} but not held");
            }
            for e in m.take_effects() {
                match e {
                    Effect::Granted { session, token, .. } => {
                        assert!(
                            step_grants.contains(&(session, token)),
                            "{ctx}: Granted effect without a Grant record"
                        );
                        handoffs += 1;
                    }
                    Effect::Expired { session } => {
                        assert!(dead.contains(&session), "{ctx}");
                        expiries += 1;
                    }
                    other => panic!("{ctx}: unexpected effect {other:?}"),
                }
            }

            // Invariants visible through status.
            let views = m.status(now, None);
            let mut names: Vec<&str> = views.iter().map(|v| v.name.as_str()).collect();
            names.dedup();
            assert_eq!(names.len(), views.len(), "{ctx}: a lock listed twice");
            for v in &views {
                let model = held.get(&v.name).copied();
                assert_eq!(v.holder.as_ref().map(|h| (h.0, h.2)), model, "{ctx}: status disagrees with records");
                assert_eq!(v.last_token, last.get(&v.name).copied().unwrap_or(0), "{ctx}: {}", v.name);
                if let Some((s, ..)) = &v.holder {
                    assert!(
                        m.session_ttl_left(now, *s).is_some_and(|l| l > Duration::ZERO),
                        "{ctx}: holder session dead"
                    );
                }
                if v.holder.is_none() && v.waiters > 0 {
                    delayed_with_waiters += 1;
                    assert!(
                        v.delay_left.is_some_and(|d| d > Duration::ZERO),
                        "{ctx}: {} is free with {} waiters and no lock-delay",
                        v.name,
                        v.waiters
                    );
                }
            }
            for name in held.keys() {
                assert!(views.iter().any(|v| &v.name == name), "{ctx}: held lock {name} missing from status");
            }
        }
        let coverage = (grants_seen, handoffs, expiries, delayed_with_waiters);
        println!("seed {seed}: (grants, hand-offs, expiries, delayed with waiters) = {coverage:?}");
        assert!(
            grants_seen > 200 && handoffs > 100 && expiries > 50 && delayed_with_waiters > 50,
            "seed {seed}: {coverage:?}"
        );
    }
}

// ----- bounded work and resources (issue 17) -----

/// A session with 100,000 queued acquires on one lock ends (expiry) and takes exactly its own
/// entries out of the queue: the other waiters keep their order and the next holder is the
/// first of them. Ending costs O(log n) per entry of the ended session (the old queue scan made
/// this quadratic: ~20 s in a release build for this test's queue).
#[test]
fn a_session_with_a_huge_queue_ends_and_leaves_the_others_in_order() {
    let t0 = Instant::now();
    let at = |n: u64| t0 + Duration::from_millis(n);
    let big = Limits { max_waiters_per_lock: 200_000, max_entries_per_session: 200_000, ..limits() };
    let mut m = Machine::new(big, 1);
    let holder_s = open(&mut m, at(0), 60_000);
    let t = grab(&mut m, at(0), holder_s, 0, "x", "h");
    let flood = open(&mut m, at(0), 1_000);
    let polite = open(&mut m, at(0), 60_000);
    // Interleaved: the polite session's waiters sit between the flood's.
    for i in 0..100_000u64 {
        assert_eq!(acq(&mut m, at(1), flood, i + 1, "x", &format!("f{i}"), true), AcquireOutcome::Queued);
        if i % 25_000 == 0 {
            assert_eq!(acq(&mut m, at(1), polite, i, "x", &format!("p{i}"), true), AcquireOutcome::Queued);
        }
    }
    assert_eq!(waiters(&m, at(1), "x"), 100_004);
    m.keep_alive(at(900), holder_s).unwrap();
    m.keep_alive(at(900), polite).unwrap();
    m.tick(at(1_000));
    assert_eq!(m.take_effects(), vec![Effect::Expired { session: flood }]);
    assert_eq!(waiters(&m, at(1_000), "x"), 4);
    assert!(m.release(at(1_001), rel(holder_s, "x", "h", t)));
    assert_eq!(granted_effects(&m.take_effects()), vec![(polite, 0, t + 1)], "the oldest remaining waiter");
}

/// Holds plus queued acquires of one session are bounded: one client cannot grow the server
/// through a single session. Re-acquiring what it holds, or re-sending a queued acquire, is not
/// a new entry.
#[test]
fn a_session_cannot_hold_and_wait_for_more_than_its_limit() {
    let t0 = Instant::now();
    let at = |n: u64| t0 + Duration::from_millis(n);
    let mut m = Machine::new(Limits { max_entries_per_session: 3, ..limits() }, 1);
    let a = open(&mut m, at(0), 10_000);
    let b = open(&mut m, at(0), 10_000);
    grab(&mut m, at(1), b, 1, "busy", "o");
    grab(&mut m, at(1), a, 1, "x", "o");
    grab(&mut m, at(1), a, 2, "y", "o");
    assert_eq!(acq(&mut m, at(1), a, 3, "busy", "o", true), AcquireOutcome::Queued);
    match m.acquire(at(1), cmd(a, 4, "z", "o")) {
        Err(Refusal::Limit(_, why)) => assert!(why.contains("3 locks held and waited for"), "{why}"),
        other => panic!("expected a limit refusal, got {other:?}"),
    }
    assert_eq!(view(&m, at(1), "x").holder.map(|h| h.2), Some(1), "a retry of a hold still answers");
    assert_eq!(acq(&mut m, at(1), a, 1, "x", "o", false), AcquireOutcome::Granted(1));
    assert_eq!(acq(&mut m, at(1), a, 3, "busy", "o", true), AcquireOutcome::Queued);
    assert!(m.status(at(1), Some("z")).is_empty(), "the refused acquire left nothing behind");
}

/// Listing locks goes page by page in name order; every lock appears exactly once, and a
/// filter (what a principal may observe) hides locks without losing the place.
#[test]
fn status_pages_cover_every_lock_once_in_name_order() {
    let t0 = Instant::now();
    let mut m = machine();
    let s = open(&mut m, t0, 10_000);
    let mut names: Vec<String> = (0..2_500).map(|i| format!("lock/{i:05}")).collect();
    for (i, n) in names.iter().enumerate() {
        let t = grab(&mut m, t0, s, i as u64, n, "o");
        if i % 3 != 0 {
            assert!(m.release(t0, rel(s, n, "o", t)));
        }
    }
    names.sort();
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    let mut pages = 0;
    loop {
        let page = m.status_page(t0, after.as_deref(), 1_000, &|_| true);
        assert!(page.locks.len() <= 1_000);
        seen.extend(page.locks.into_iter().map(|v| v.name));
        pages += 1;
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    assert_eq!(seen, names);
    assert_eq!(pages, 3);
    let odd = |n: &str| n.ends_with(['1', '3', '5', '7', '9']);
    let page = m.status_page(t0, Some("lock/01000"), 10, &odd);
    let got: Vec<_> = page.locks.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(got[..3], ["lock/01001", "lock/01003", "lock/01005"]);
    assert_eq!(page.next.as_deref(), Some("lock/01019"));
}

/// A page looks at a bounded number of locks whatever the filter lets through: a principal that
/// may observe none of 25,000 locks gets empty pages with a cursor, never a scan of them all.
#[test]
fn a_status_page_looks_at_a_bounded_number_of_locks() {
    let t0 = Instant::now();
    let mut m = Machine::new(Limits { max_entries_per_session: 30_000, ..limits() }, 1);
    let s = open(&mut m, t0, 10_000);
    for i in 0..25_000u64 {
        let name = format!("n{i:06}");
        let t = grab(&mut m, t0, s, i, &name, "o");
        assert!(m.release(t0, rel(s, &name, "o", t)));
    }
    let mut after: Option<String> = None;
    let mut pages = 0;
    loop {
        let page = m.status_page(t0, after.as_deref(), 1_000, &|_| false);
        assert!(page.locks.is_empty());
        pages += 1;
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    assert_eq!(pages, 25_000usize.div_ceil(STATUS_SCAN));
}

/// A principal's status pages never reveal a name outside its prefixes — not in a page, not as
/// the cursor, whatever `after` it sends (a binary search on `after` over the cursor once
/// recovered a hidden lock's name in 224 calls).
#[test]
fn status_pages_within_prefixes_never_reveal_another_name() {
    let t0 = Instant::now();
    let mut m = Machine::new(limits(), 1);
    let s = open(&mut m, t0, 10_000);
    let names = ["db/1", "hidden/secret-a", "hidden/secret-b", "jobs/1", "jobs/2", "jobs/3", "zzz"];
    for (i, n) in names.iter().enumerate() {
        let t = grab(&mut m, t0, s, i as u64, n, "o");
        assert!(m.release(t0, rel(s, n, "o", t)));
    }
    let prefixes = ["jobs/", "db/", "jobs/2"];
    let visible = ["db/1", "jobs/1", "jobs/2", "jobs/3"];
    let (mut seen, mut after) = (Vec::new(), None::<String>);
    loop {
        let page = m.status_page_within(t0, after.as_deref(), 1, &prefixes);
        seen.extend(page.locks.iter().map(|v| v.name.clone()));
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    assert_eq!(seen, visible);
    for after in ["", "a", "hidden/", "hidden/secret-a", "hidden/secret-b", "hidden/t", "i", "jobs/1", "z", "zzz"] {
        let page = m.status_page_within(t0, Some(after), 2, &prefixes);
        let got: Vec<&str> = page.locks.iter().map(|v| v.name.as_str()).collect();
        let expected: Vec<&str> = visible.iter().copied().filter(|n| *n > after).take(2).collect();
        assert_eq!(got, expected, "after {after:?}");
        assert!(page.next.as_deref().is_none_or(|n| visible.contains(&n)), "after {after:?}: cursor {:?}", page.next);
    }
}

/// After a restart a session that held nothing gets a short time to resume (its TTL, at most
/// RESTORED_IDLE_GRACE), a session with holds its full TTL: a table filled with idle one-hour
/// sessions empties soon after a restart, and no holder loses its lock early.
#[test]
fn restored_idle_sessions_get_a_short_grace_and_holders_a_full_ttl() {
    let t0 = Instant::now();
    let at = |n: u64| t0 + Duration::from_millis(n);
    let mut l = Logged::new();
    let idle = open(&mut l.m, at(0), 3_600_000);
    let short = open(&mut l.m, at(0), 2_000);
    let holding = open(&mut l.m, at(0), 3_600_000);
    grab(&mut l.m, at(1), holding, 1, "x", "o");
    l.sync();
    let r = Machine::restore(limits(), l.log.clone(), at(10));
    assert_eq!(r.session_ttl_left(at(10), idle), Some(RESTORED_IDLE_GRACE));
    assert_eq!(r.session_ttl_left(at(10), short), Some(ms(2_000)));
    assert_eq!(r.session_ttl_left(at(10), holding), Some(ms(3_600_000)));
}

/// Every token is at or below a durable floor, and a machine restored from a log that lost
/// records (here: everything after the floor) still issues tokens above every token seen.
#[test]
fn tokens_stay_below_the_floor_and_a_restore_starts_above_it() {
    let t0 = Instant::now();
    let at = |n: u64| t0 + Duration::from_millis(n);
    let mut l = Logged::new();
    let s = open(&mut l.m, at(0), 10_000);
    let mut seen = 0;
    for i in 0..(FLOOR_BLOCK * 2 + 5) {
        seen = grab(&mut l.m, at(1), s, i, "x", "o");
        assert!(seen <= l.m.floor());
        assert!(l.m.release(at(1), rel(s, "x", "o", seen)));
    }
    l.sync();
    // Only the floor survives (say the log was emptied): what the data dir keeps apart.
    let floor = Record::Floor { upto: l.m.floor() };
    let mut r = Machine::restore(limits(), vec![floor], at(2));
    let s = open(&mut r, at(2), 10_000);
    assert!(grab(&mut r, at(3), s, 1, "x", "o") > seen);
    assert!(grab(&mut r, at(3), s, 2, "never-seen", "o") > seen);
}

// ----- an administrator's release -----

/// `revoke` ends the holder's session (only the one named, when given): the next waiter is
/// granted with a greater token at once, the holder is told its session expired, no lock-delay
/// starts, and a restart from the log sees the same state.
#[test]
fn revoke_hands_a_stuck_lock_to_the_next_waiter_and_replays_the_same() {
    let t0 = Instant::now();
    let at = |n: u64| t0 + Duration::from_millis(n);
    let mut l = Logged::new();
    let stuck = open(&mut l.m, at(0), 10_000);
    let next = open(&mut l.m, at(0), 10_000);
    let t1 = l.m.acquire(at(1), Acquire { lock_delay: ms(5_000), ..cmd(stuck, 1, "x", "a") }).unwrap();
    let AcquireOutcome::Granted(t1) = t1 else { panic!("{t1:?}") };
    assert_eq!(acq(&mut l.m, at(2), next, 2, "x", "b", true), AcquireOutcome::Queued);
    l.sync();
    let _ = l.m.take_effects();

    assert!(l.m.revoke(at(3), "x", Some(next)).is_empty(), "a session that does not hold x");
    let revoked = l.m.revoke(at(3), "x", Some(stuck));
    assert_eq!(revoked.iter().map(|h| (h.session, h.token)).collect::<Vec<_>>(), vec![(stuck, t1)]);
    l.sync();
    let effects = l.m.take_effects();
    assert!(effects.contains(&Effect::Expired { session: stuck }), "{effects:?}");
    let (s, o, t2) = holder(&l.m, at(3), "x").expect("granted to the waiter");
    assert_eq!((s, o.as_str()), (next, "b"));
    assert!(t2 > t1, "token {t2} after {t1}");
    assert_eq!(granted_effects(&effects), vec![(next, 2, t2)]);
    assert!(l.m.keep_alive(at(4), stuck).is_err(), "the revoked session lives on");
    assert!(l.m.revoke(at(5), "y", None).is_empty(), "an unknown lock");

    let r = Machine::restore(limits(), l.log.clone(), at(5_000));
    assert_eq!(holder(&r, at(5_000), "x"), Some((next, "b".to_string(), t2)));
}
