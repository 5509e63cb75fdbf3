//! Beyond the mutex, in the pure state machine: read/write locks (shared holds), semaphores
//! (permits of N) and observed locks. Simulated time, as in `machine.rs`.

use std::time::{Duration, Instant};

use locksmith_server::machine::*;

const SECRET: SecretDigest = [7; 32];

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn machine() -> Machine {
    Machine::new(Limits::default(), 1)
}

fn open(m: &mut Machine, now: Instant, ttl_ms: u64) -> SessionId {
    m.open(now, ms(ttl_ms), None, SECRET).unwrap().0
}

fn acq(
    m: &mut Machine,
    now: Instant,
    s: SessionId,
    req: u64,
    name: &str,
    mode: HoldMode,
    wait: bool,
) -> AcquireOutcome {
    let cmd =
        Acquire { mode, ..Acquire::exclusive(s, req, LockName::new(name).unwrap(), Owner::new("o").unwrap(), wait) };
    m.acquire(now, cmd).unwrap()
}

fn rel(m: &mut Machine, now: Instant, s: SessionId, name: &str, token: u64) -> bool {
    m.release(now, Release { session: s, name: LockName::new(name).unwrap(), owner: Owner::new("o").unwrap(), token })
}

fn granted(m: &mut Machine) -> Vec<(SessionId, u64)> {
    m.take_effects()
        .into_iter()
        .filter_map(|e| match e {
            Effect::Granted { session, request, .. } => Some((session, request)),
            _ => None,
        })
        .collect()
}

fn token(o: AcquireOutcome) -> u64 {
    match o {
        AcquireOutcome::Granted(t) => t,
        other => panic!("expected a grant, got {other:?}"),
    }
}

/// Readers hold together; a writer waits for every reader; readers that come after a queued
/// writer wait behind it (FIFO: a stream of readers cannot starve a writer); when the writer
/// leaves, the readers queued behind it all get in at once.
#[test]
fn readers_share_and_a_queued_writer_is_not_starved() {
    let t = Instant::now();
    let mut m = machine();
    let (r1, r2, w, r3, r4) = (
        open(&mut m, t, 10_000),
        open(&mut m, t, 10_000),
        open(&mut m, t, 10_000),
        open(&mut m, t, 10_000),
        open(&mut m, t, 10_000),
    );
    let t1 = token(acq(&mut m, t, r1, 1, "rw", HoldMode::Shared, true));
    let t2 = token(acq(&mut m, t, r2, 1, "rw", HoldMode::Shared, true));
    assert!(t2 > t1, "every grant gets its own, higher token");
    assert_eq!(acq(&mut m, t, w, 1, "rw", HoldMode::Exclusive, false), AcquireOutcome::Busy);
    assert_eq!(acq(&mut m, t, w, 2, "rw", HoldMode::Exclusive, true), AcquireOutcome::Queued);
    assert_eq!(
        acq(&mut m, t, r3, 1, "rw", HoldMode::Shared, false),
        AcquireOutcome::Busy,
        "a reader does not pass a queued writer"
    );
    assert_eq!(acq(&mut m, t, r3, 2, "rw", HoldMode::Shared, true), AcquireOutcome::Queued);
    assert_eq!(acq(&mut m, t, r4, 2, "rw", HoldMode::Shared, true), AcquireOutcome::Queued);
    let v = m.status(t, Some("rw")).pop().unwrap();
    assert_eq!((v.holders.len(), v.waiters), (2, 3));
    assert!(v.holders.iter().all(|h| h.mode == HoldMode::Shared));

    assert!(rel(&mut m, t, r1, "rw", t1));
    assert!(granted(&mut m).is_empty(), "a reader still holds");
    assert!(rel(&mut m, t, r2, "rw", t2));
    assert_eq!(granted(&mut m), vec![(w, 2)], "the writer, and only it");
    let wt = m.status(t, Some("rw")).pop().unwrap().holders[0].token;
    assert!(rel(&mut m, t, w, "rw", wt));
    assert_eq!(granted(&mut m), vec![(r3, 2), (r4, 2)], "both queued readers at once");
}

/// A semaphore of 3 permits: three holders at a time, the fourth queued until a permit comes
/// back; each permit has its own token.
#[test]
fn a_semaphore_admits_its_number_of_holders() {
    let t = Instant::now();
    let mut m = machine();
    let s: Vec<SessionId> = (0..4).map(|_| open(&mut m, t, 10_000)).collect();
    let tokens: Vec<u64> =
        s[..3].iter().map(|&x| token(acq(&mut m, t, x, 1, "sem", HoldMode::Permit(3), true))).collect();
    assert!(tokens.windows(2).all(|w| w[1] > w[0]));
    assert_eq!(acq(&mut m, t, s[3], 1, "sem", HoldMode::Permit(3), true), AcquireOutcome::Queued);
    let v = m.status(t, Some("sem")).pop().unwrap();
    assert_eq!((v.holders.len(), v.waiters, v.permits), (3, 1, Some(3)));
    assert!(rel(&mut m, t, s[1], "sem", tokens[1]));
    assert_eq!(granted(&mut m), vec![(s[3], 1)]);
}

/// A crashed permit holder's permit comes back when its session expires (leased permits).
#[test]
fn a_permit_comes_back_when_its_holders_session_expires() {
    let t = Instant::now();
    let mut m = machine();
    let crashed = open(&mut m, t, 1_000);
    let waiting = open(&mut m, t, 60_000);
    token(acq(&mut m, t, crashed, 1, "sem", HoldMode::Permit(1), true));
    assert_eq!(acq(&mut m, t, waiting, 1, "sem", HoldMode::Permit(1), true), AcquireOutcome::Queued);
    m.tick(t + ms(999));
    assert!(granted(&mut m).is_empty());
    m.tick(t + ms(1_000));
    assert_eq!(granted(&mut m), vec![(waiting, 1)]);
}

/// While a semaphore is in use, everyone must agree on its number of permits, and its name is
/// not a lock; once idle, the name is free for any use.
#[test]
fn a_semaphore_in_use_refuses_another_permit_count_and_lock_requests() {
    let t = Instant::now();
    let mut m = machine();
    let a = open(&mut m, t, 10_000);
    let b = open(&mut m, t, 10_000);
    let held = token(acq(&mut m, t, a, 1, "sem", HoldMode::Permit(2), true));
    let ask = |m: &mut Machine, mode| {
        m.acquire(
            t,
            Acquire { mode, ..Acquire::exclusive(b, 9, LockName::new("sem").unwrap(), Owner::new("o").unwrap(), true) },
        )
    };
    for (mode, says) in [
        (HoldMode::Permit(5), "semaphore of 2 permits now; asked for one of 5"),
        (HoldMode::Exclusive, "not a lock"),
        (HoldMode::Shared, "not a lock"),
    ] {
        match ask(&mut m, mode) {
            Err(Refusal::Invalid(why)) => assert!(why.contains(says), "{why}"),
            other => panic!("{mode}: expected a refusal, got {other:?}"),
        }
    }
    assert!(rel(&mut m, t, a, "sem", held));
    assert!(matches!(ask(&mut m, HoldMode::Exclusive), Ok(AcquireOutcome::Granted(_))), "idle: any use");
}

/// A lock-delay is for exclusive holds; the same owner acquiring a shared hold again gets the
/// same token (idempotent, as for the mutex).
#[test]
fn shared_holds_are_idempotent_and_take_no_lock_delay() {
    let t = Instant::now();
    let mut m = machine();
    let a = open(&mut m, t, 10_000);
    let first = token(acq(&mut m, t, a, 1, "rw", HoldMode::Shared, true));
    assert_eq!(acq(&mut m, t, a, 2, "rw", HoldMode::Shared, true), AcquireOutcome::Granted(first));
    let delayed = Acquire {
        mode: HoldMode::Shared,
        lock_delay: ms(100),
        ..Acquire::exclusive(a, 3, LockName::new("other").unwrap(), Owner::new("o").unwrap(), true)
    };
    assert!(matches!(m.acquire(t, delayed), Err(Refusal::Invalid(_))));
}

/// A restart keeps readers and permit holders, and tokens continue above every token issued,
/// including those of holds released before the restart that were newer than the ones kept.
#[test]
fn readers_and_permits_survive_a_restore() {
    let t = Instant::now();
    let mut m = machine();
    let mut log = vec![Record::Boot { epoch: 1 }];
    let a = open(&mut m, t, 10_000);
    let b = open(&mut m, t, 10_000);
    let kept = token(acq(&mut m, t, a, 1, "rw", HoldMode::Shared, true));
    let newer = token(acq(&mut m, t, b, 1, "rw", HoldMode::Shared, true));
    assert!(rel(&mut m, t, b, "rw", newer));
    let permit = token(acq(&mut m, t, b, 2, "sem", HoldMode::Permit(2), true));
    log.extend(m.take_records());
    // A snapshot of this state restores to the same holders and counters.
    let snap = Machine::restore(Limits::default(), m.snapshot(t), t);
    let from_log = Machine::restore(Limits::default(), log, t);
    for r in [&snap, &from_log] {
        let rw = r.status(t, Some("rw")).pop().unwrap();
        assert_eq!(
            rw.holders.iter().map(|h| (h.session, h.token, h.mode)).collect::<Vec<_>>(),
            vec![(a, kept, HoldMode::Shared)]
        );
        assert_eq!(rw.last_token, newer, "the counter is above the holder's token");
        let sem = r.status(t, Some("sem")).pop().unwrap();
        assert_eq!((sem.holders[0].token, sem.permits), (permit, Some(2)));
    }
    let mut r = snap;
    let c = open(&mut r, t, 10_000);
    assert!(token(acq(&mut r, t, c, 1, "rw", HoldMode::Shared, true)) > newer);
}

/// A watched lock is reported once per batch of changes of its holders; others are not.
#[test]
fn watched_locks_report_changes_of_their_holders() {
    let t = Instant::now();
    let mut m = machine();
    let a = open(&mut m, t, 10_000);
    m.watch("leader", true);
    let term = token(acq(&mut m, t, a, 1, "leader", HoldMode::Exclusive, true));
    token(acq(&mut m, t, a, 2, "unwatched", HoldMode::Exclusive, true));
    assert_eq!(m.take_changed(), vec!["leader".into()]);
    assert!(rel(&mut m, t, a, "leader", term));
    assert_eq!(m.take_changed(), vec!["leader".into()]);
    m.watch("leader", false);
    token(acq(&mut m, t, a, 3, "leader", HoldMode::Exclusive, true));
    assert!(m.take_changed().is_empty());
}
