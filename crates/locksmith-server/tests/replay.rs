//! Replay is the live path: the records a machine emits, applied again (by a twin as they are
//! emitted, or by `Machine::restore` from the whole log), give the same holders, tokens,
//! counters and sessions as the machine that wrote them. Simulated time, random operations.

use std::collections::{BTreeMap, BTreeSet};
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

/// A tiny deterministic PRNG (64-bit LCG, high bits out).
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

/// What a log must reproduce: live sessions and their TTLs, holders (with owner, token and
/// lock-delay), and the last token of every lock. Waiters, deadlines and running lock-delays
/// are not logged (clients re-send waits, a restart grants a full TTL and restarts delays).
#[derive(Debug, PartialEq, Eq)]
struct State {
    sessions: BTreeSet<(SessionId, Duration)>,
    holders: BTreeSet<(String, SessionId, String, u64, Duration)>,
    counters: BTreeMap<String, u64>,
    /// The server-wide token floor.
    floor: u64,
}

/// The state of `m`, read from its snapshot and cross-checked against its status.
fn state(m: &Machine, now: Instant) -> State {
    let mut s = State { sessions: BTreeSet::new(), holders: BTreeSet::new(), counters: BTreeMap::new(), floor: 0 };
    for r in m.snapshot(now) {
        match r {
            Record::Boot { .. } => {}
            Record::Session { id, ttl, .. } => assert!(s.sessions.insert((id, ttl))),
            Record::Grant { name, session, owner, token, lock_delay, .. } => {
                assert!(s.counters.get(&name).is_some_and(|c| *c >= token), "a grant before its lock's counter");
                s.holders.insert((name, session, owner, token, lock_delay));
            }
            Record::Counter { name, token, .. } => assert!(s.counters.insert(name, token).is_none()),
            Record::Floor { upto } => s.floor = upto,
            other => panic!("unexpected snapshot record {other:?}"),
        }
    }
    let views = m.status(now, None);
    let last: BTreeMap<String, u64> = views.iter().map(|v| (v.name.clone(), v.last_token)).collect();
    assert_eq!(last, s.counters, "status and snapshot disagree on counters");
    let held: BTreeSet<(String, SessionId, String, u64)> = views
        .iter()
        .filter_map(|v| v.holder.as_ref().map(|(s, o, t, _)| (v.name.clone(), *s, o.clone(), *t)))
        .collect();
    let snap_held: BTreeSet<_> = s.holders.iter().map(|(n, s, o, t, _)| (n.clone(), *s, o.clone(), *t)).collect();
    assert_eq!(held, snap_held, "status and snapshot disagree on holders");
    s
}

fn acquire(s: SessionId, req: u64, name: &str, owner: &str, wait: bool, lock_delay: Duration) -> Acquire {
    Acquire { lock_delay, ..Acquire::exclusive(s, req, LockName::new(name).unwrap(), Owner::new(owner).unwrap(), wait) }
}

/// Random operations in `Grants` mode: after every step a twin that applied each emitted record
/// at the step's time equals the live machine, and at checkpoints a machine restored from the
/// whole log (compactions included) equals it too.
#[test]
fn replaying_the_log_gives_the_state_of_the_machine_that_wrote_it() {
    const LOCKS: [&str; 4] = ["a", "b", "c", "jobs/ünïcode"];
    const OWNERS: [&str; 2] = ["o1", "o2"];
    for seed in [3u64, 11, 2025] {
        let t0 = Instant::now();
        let at = |n: u64| t0 + Duration::from_millis(n);
        let mut rng = Lcg(seed);
        let mut m = Machine::new(limits(), 1);
        let mut twin = Machine::new(limits(), 1);
        let mut log = vec![Record::Boot { epoch: 1 }];
        let mut slots: [Option<SessionId>; 5] = [None; 5];
        let mut clock = 0u64;
        let (mut restores, mut holders_compared, mut delays_logged) = (0usize, 0usize, 0usize);
        for step in 0..4_000u64 {
            clock += rng.below(40);
            let now = at(clock);
            let slot = rng.below(5) as usize;
            let lock = LOCKS[rng.below(4) as usize];
            let owner = OWNERS[rng.below(2) as usize];
            let request = rng.below(6);
            match (rng.below(100), slots[slot]) {
                (_, None) | (0..=9, _) => {
                    if let Ok((id, _)) = m.open(now, ms(300 + rng.below(1_200)), None, SECRET) {
                        slots[slot] = Some(id);
                    }
                }
                (10..=49, Some(s)) => {
                    let delay = if rng.below(3) == 0 { ms(rng.below(300)) } else { Duration::ZERO };
                    let _ = m.acquire(now, acquire(s, request, lock, owner, rng.below(3) != 0, delay));
                }
                (50..=69, Some(s)) => {
                    // The holder's real token and owner when it is ours, so most releases work.
                    let hold = m.status(now, Some(lock)).pop().and_then(|v| v.holder);
                    let (token, who) = match hold {
                        Some((hs, o, t, _)) if hs == s => (t, o),
                        _ => (1, owner.to_string()),
                    };
                    let name = LockName::new(lock).unwrap();
                    m.release(now, Release { session: s, name, owner: Owner::new(who).unwrap(), token });
                }
                (70..=77, Some(s)) => {
                    m.cancel(now, s, request);
                }
                (78..=91, Some(s)) => {
                    if m.keep_alive(now, s).is_err() {
                        slots[slot] = None;
                    }
                }
                (92..=95, Some(s)) => {
                    m.close(now, s);
                    slots[slot] = None;
                }
                _ => m.tick(now),
            }
            let records = m.take_records();
            m.take_effects();
            for r in &records {
                twin.apply(now, r);
                delays_logged += usize::from(matches!(r, Record::Release { delay, .. } if !delay.is_zero()));
            }
            log.extend(records);
            let live = state(&m, now);
            assert_eq!(state(&twin, now), live, "seed {seed} step {step}: the twin that applied the records differs");
            holders_compared += live.holders.len();

            if step % 97 == 0 {
                let restored = Machine::restore(limits(), log.clone(), now);
                assert_eq!(state(&restored, now), live, "seed {seed} step {step}: restored from the log");
                restores += 1;
            }
            if step % 1_000 == 999 {
                // Compaction, as the service does it: the log restarts from a snapshot.
                log = m.snapshot(now);
            }
        }
        println!("seed {seed}: {restores} restores, {holders_compared} holders compared, {delays_logged} lock-delays");
        assert!(restores > 40 && holders_compared > 1_000 && delays_logged > 20, "seed {seed}: too little covered");
    }
}

/// The restore path and the live path share one implementation: a restored machine applies
/// the records it emits afterwards exactly as a live one, so restoring again gives its state.
#[test]
fn a_restored_machine_keeps_writing_a_log_that_replays_to_its_state() {
    let t0 = Instant::now();
    let at = |n: u64| t0 + Duration::from_millis(n);
    let mut m = Machine::new(limits(), 1);
    let a = m.open(at(0), ms(10_000), None, SECRET).unwrap().0;
    let b = m.open(at(0), ms(10_000), None, SECRET).unwrap().0;
    assert_eq!(m.acquire(at(1), acquire(a, 1, "x", "o", false, ms(500))), Ok(AcquireOutcome::Granted(1)));
    assert_eq!(m.acquire(at(1), acquire(b, 2, "x", "o", true, Duration::ZERO)), Ok(AcquireOutcome::Queued));
    let mut log = vec![Record::Boot { epoch: 1 }];
    log.extend(m.take_records());

    let mut r = Machine::restore(limits(), log, at(100));
    let mut log2 = r.take_records();
    assert_eq!(state(&r, at(100)), state(&m, at(100)));
    // b re-sends its wait after resuming, as clients do; a closes and b is handed the lock.
    assert_eq!(r.acquire(at(101), acquire(b, 2, "x", "o", true, Duration::ZERO)), Ok(AcquireOutcome::Queued));
    r.close(at(102), a);
    // Tokens after a restart continue above the floor the previous run reserved.
    let next = FLOOR_BLOCK + 1;
    assert_eq!(r.take_effects(), vec![Effect::Granted { session: b, request: 2, token: next }]);
    let c = r.open(at(103), ms(2_000), None, SECRET).unwrap().0;
    assert_eq!(r.acquire(at(104), acquire(c, 3, "y", "p", false, ms(50))), Ok(AcquireOutcome::Granted(next)));
    log2.extend(r.take_records());

    let again = Machine::restore(limits(), log2, at(105));
    let s = state(&again, at(105));
    assert_eq!(s, state(&r, at(105)));
    assert_eq!(s.sessions.len(), 2);
    assert!(s.holders.contains(&("x".to_string(), b, "o".to_string(), next, Duration::ZERO)));
    assert!(s.holders.contains(&("y".to_string(), c, "p".to_string(), next, ms(50))));
}
