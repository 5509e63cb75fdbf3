//! The `Leases` durability mode of the state machine: only token reservations and the longest
//! lease are persisted, so a restart must continue tokens above every reservation and keep every
//! lock ever granted unavailable until the previous run's leases have certainly expired.
//! Simulated time, as in `machine.rs`.

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

/// The acquire command of request `req` in session `s`: `name` as `owner`, no wait, no lock-delay.
fn cmd(s: SessionId, req: u64, name: &str, owner: &str) -> Acquire {
    Acquire::exclusive(s, req, LockName::new(name).unwrap(), Owner::new(owner).unwrap(), false)
}

/// The release command of the hold `(s, owner, token)` on `name`.
fn rel(s: SessionId, name: &str, owner: &str, token: u64) -> Release {
    Release { session: s, name: LockName::new(name).unwrap(), owner: Owner::new(owner).unwrap(), token }
}

/// A fresh machine in `Leases` mode (restored from an empty log) and its snapshot records.
fn leases(now: Instant) -> (Machine, Vec<Record>) {
    let mut m = Machine::restore_with(limits(), Durability::Leases, Vec::new(), now);
    let log = m.take_records();
    (m, log)
}

fn open(m: &mut Machine, now: Instant, ttl_ms: u64) -> SessionId {
    m.open(now, ms(ttl_ms), None, SECRET).unwrap().0
}

fn try_acq(m: &mut Machine, now: Instant, s: SessionId, name: &str) -> AcquireOutcome {
    m.acquire(now, cmd(s, 0, name, "o")).unwrap()
}

fn grab(m: &mut Machine, now: Instant, s: SessionId, name: &str) -> u64 {
    match try_acq(m, now, s, name) {
        AcquireOutcome::Granted(t) => t,
        other => panic!("expected a grant of {name}, got {other:?}"),
    }
}

fn holder_token(m: &Machine, now: Instant, name: &str) -> Option<u64> {
    m.status(now, Some(name)).pop().and_then(|v| v.holder).map(|(_, _, t, _)| t)
}

#[test]
fn grants_emit_no_records_but_one_synced_reservation_per_block() {
    let t0 = Instant::now();
    let (mut m, _) = leases(t0);
    let s = open(&mut m, t0, 1000);
    let opened = m.take_records();
    assert_eq!(opened, vec![Record::Horizon { ttl: ms(1000), lock_delay: Duration::ZERO }]);
    let mut log = Vec::new();
    for i in 1..=RESERVE_BLOCK + 1 {
        let token = grab(&mut m, t0, s, "a");
        assert_eq!(token, i);
        assert!(m.release(t0, rel(s, "a", "o", token)));
        log.extend(m.take_records());
    }
    assert_eq!(
        log,
        vec![
            Record::Floor { upto: FLOOR_BLOCK },
            Record::Reserve { name: "a".into(), upto: RESERVE_BLOCK },
            Record::Floor { upto: FLOOR_BLOCK + RESERVE_BLOCK },
            Record::Reserve { name: "a".into(), upto: 2 * RESERVE_BLOCK },
        ],
        "only reservations and the token floor are logged: no grants, releases or sessions"
    );
    assert!(log.iter().all(Record::needs_sync), "a reservation is synced before its first token is seen");
}

#[test]
fn horizon_is_logged_only_when_the_longest_ttl_or_lock_delay_grows() {
    let t0 = Instant::now();
    let (mut m, _) = leases(t0);
    let a = open(&mut m, t0, 1000);
    let _ = open(&mut m, t0, 500);
    let _ = open(&mut m, t0, 1000);
    assert_eq!(m.take_records().len(), 1);
    m.acquire(t0, Acquire { lock_delay: ms(300), ..cmd(a, 1, "x", "o") }).unwrap();
    let logged = m.take_records();
    assert!(logged.contains(&Record::Horizon { ttl: ms(1000), lock_delay: ms(300) }), "{logged:?}");
}

#[test]
fn tokens_after_a_restart_continue_above_the_reservation() {
    let t0 = Instant::now();
    let (mut m, mut disk) = leases(t0);
    let s = open(&mut m, t0, 1000);
    let mut last = 0;
    for _ in 0..5 {
        last = grab(&mut m, t0, s, "a");
        m.release(t0, rel(s, "a", "o", last));
    }
    disk.extend(m.take_records());
    // kill -9: only what was logged survives.
    let t1 = t0 + ms(10);
    let mut m = Machine::restore_with(limits(), Durability::Leases, disk, t1);
    let s = open(&mut m, t1 + ms(1000), 1000);
    let next = grab(&mut m, t1 + ms(1000), s, "a");
    assert!(next > last && next > RESERVE_BLOCK, "token {next} after {last} (block {RESERVE_BLOCK})");
}

#[test]
fn after_a_restart_a_granted_lock_stays_unavailable_for_the_longest_ttl_and_then_is_handed_over() {
    let t0 = Instant::now();
    let (mut m, mut disk) = leases(t0);
    let s = open(&mut m, t0, 2000);
    let old = grab(&mut m, t0, s, "a");
    disk.extend(m.take_records());
    let t1 = t0 + ms(500);
    let mut m = Machine::restore_with(limits(), Durability::Leases, disk, t1);
    assert_eq!(holder_token(&m, t1, "a"), None, "holders are not known after a restart");
    let n = open(&mut m, t1, 5000);
    assert_eq!(try_acq(&mut m, t1, n, "a"), AcquireOutcome::Busy);
    assert_eq!(try_acq(&mut m, t1 + ms(1999), n, "a"), AcquireOutcome::Busy, "the old holder may still act");
    // A lock never granted is free at once; its tokens start above the floor, like every lock's.
    assert_eq!(try_acq(&mut m, t1 + ms(1999), n, "never-granted"), AcquireOutcome::Granted(FLOOR_BLOCK + 1));
    assert_eq!(
        m.acquire(t1 + ms(1999), Acquire { wait: true, ..cmd(n, 7, "a", "o") }).unwrap(),
        AcquireOutcome::Queued
    );
    m.tick(t1 + ms(2000));
    let granted: Vec<_> = m
        .take_effects()
        .into_iter()
        .filter_map(|e| match e {
            Effect::Granted { session, request, token } => Some((session, request, token)),
            _ => None,
        })
        .collect();
    assert_eq!(granted.len(), 1, "the queued waiter is served when the quiet period ends");
    assert!(granted[0].0 == n && granted[0].1 == 7 && granted[0].2 > old);
}

#[test]
fn the_quiet_period_covers_the_longest_lock_delay_too() {
    let t0 = Instant::now();
    let (mut m, mut disk) = leases(t0);
    let s = open(&mut m, t0, 1000);
    m.acquire(t0, Acquire { lock_delay: ms(400), ..cmd(s, 1, "a", "o") }).unwrap();
    disk.extend(m.take_records());
    let mut m = Machine::restore_with(limits(), Durability::Leases, disk, t0);
    let n = open(&mut m, t0, 5000);
    assert_eq!(try_acq(&mut m, t0 + ms(1399), n, "a"), AcquireOutcome::Busy);
    assert!(matches!(try_acq(&mut m, t0 + ms(1400), n, "a"), AcquireOutcome::Granted(_)));
}

#[test]
fn a_crash_during_the_quiet_period_starts_it_again() {
    let t0 = Instant::now();
    let (mut m, mut disk) = leases(t0);
    let s = open(&mut m, t0, 1000);
    grab(&mut m, t0, s, "a");
    disk.extend(m.take_records());
    let mut m = Machine::restore_with(limits(), Durability::Leases, disk, t0);
    let snapshot = m.take_records();
    let t1 = t0 + ms(900);
    let mut m = Machine::restore_with(limits(), Durability::Leases, snapshot, t1);
    let n = open(&mut m, t1, 5000);
    assert_eq!(try_acq(&mut m, t1 + ms(999), n, "a"), AcquireOutcome::Busy);
    assert!(matches!(try_acq(&mut m, t1 + ms(1000), n, "a"), AcquireOutcome::Granted(t) if t > RESERVE_BLOCK));
}

#[test]
fn a_grants_log_restored_in_leases_mode_drops_holders_and_waits_out_their_ttl() {
    let t0 = Instant::now();
    let mut m = Machine::new(limits(), 1);
    let s = m.open(t0, ms(3000), None, SECRET).unwrap().0;
    let old = grab(&mut m, t0, s, "a");
    let disk = m.take_records();
    let t1 = t0 + ms(100);
    let mut m = Machine::restore_with(limits(), Durability::Leases, disk, t1);
    assert_eq!(holder_token(&m, t1, "a"), None);
    let n = open(&mut m, t1, 5000);
    assert_eq!(try_acq(&mut m, t1 + ms(2999), n, "a"), AcquireOutcome::Busy);
    assert!(matches!(try_acq(&mut m, t1 + ms(3000), n, "a"), AcquireOutcome::Granted(t) if t > old));
    assert!(
        m.take_records().iter().any(|r| matches!(r, Record::Horizon { ttl, .. } if *ttl == ms(3000))),
        "the restored sessions' TTL is kept for the next restart"
    );
}

#[test]
fn a_leases_log_restored_in_grants_mode_keeps_the_quiet_period_and_the_tokens() {
    let t0 = Instant::now();
    let (mut m, mut disk) = leases(t0);
    let s = open(&mut m, t0, 1000);
    grab(&mut m, t0, s, "a");
    disk.extend(m.take_records());
    let mut m = Machine::restore(limits(), disk, t0);
    let n = m.open(t0, ms(5000), None, SECRET).unwrap().0;
    assert_eq!(try_acq(&mut m, t0 + ms(999), n, "a"), AcquireOutcome::Busy);
    assert!(matches!(try_acq(&mut m, t0 + ms(1000), n, "a"), AcquireOutcome::Granted(t) if t > RESERVE_BLOCK));
}
