//! A new leader's takeover as a pure function: the committed state (records), the time and the
//! fail-over time in; the machine the leader serves from and the records it must commit before
//! serving out. No clock, no I/O: tested like the machine.
//!
//! The rule (see the module docs of `crate::cluster`): the leader rebuilds the machine as a
//! restarted single node replays its log — a new epoch, every session restored with its holds and
//! a full TTL from `now` — and then pushes every session's deadline to at least `now + failover`
//! (Chubby's grace period: a client may have been unable to renew for as long as the cluster was
//! without a leader). Only the new epoch is news to the log; it is committed before a session id
//! of that epoch is handed out.

use std::time::{Duration, Instant};

use crate::machine::{Limits, Machine, Record};

/// The machine a new leader serves from, built at `now` from the committed `records` (its
/// replica's [`records`](super::ReplicaMachine::records)), with every session's deadline at
/// least `failover` away; and the records to commit before it serves (the new epoch's `Boot`).
///
/// ```
/// use std::time::{Duration, Instant};
/// use locksmith_server::cluster::takeover;
/// use locksmith_server::machine::{Limits, Machine, Record};
///
/// let t0 = Instant::now();
/// let mut old = Machine::new(Limits::default(), 1);
/// let (session, _) = old.open(t0, Duration::from_secs(1), None, [7; 32])?;
/// let committed = old.snapshot(t0);
///
/// let later = t0 + Duration::from_millis(400);
/// let (machine, commit) = takeover(Limits::default(), committed, later, Duration::from_secs(2));
/// assert!(matches!(commit[..], [Record::Boot { epoch: 2 }]));
/// assert_eq!(machine.session_ttl_left(later, session), Some(Duration::from_secs(2)));
/// # Ok::<(), locksmith_server::machine::Refusal>(())
/// ```
pub fn takeover(
    limits: Limits,
    records: impl IntoIterator<Item = Record>,
    now: Instant,
    failover: Duration,
) -> (Machine, Vec<Record>) {
    let mut machine = Machine::restore(limits, records, now);
    machine.extend_sessions(now, failover);
    // Restoring re-emits the whole state (a single node rewrites its log with it); the
    // replicated log has all of it already but the epoch.
    let commit = machine.take_records().into_iter().filter(|r| matches!(r, Record::Boot { .. })).collect();
    (machine, commit)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::{Acquire, AcquireOutcome, LockName, Owner, SessionId};

    const SECRET: crate::machine::SecretDigest = [7; 32];

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn grab(m: &mut Machine, now: Instant, s: SessionId, req: u64, name: &str) -> u64 {
        let cmd = Acquire::exclusive(s, req, LockName::new(name).unwrap(), Owner::new("o").unwrap(), false);
        match m.acquire(now, cmd).unwrap() {
            AcquireOutcome::Granted(t) => t,
            other => panic!("expected a grant of {name}, got {other:?}"),
        }
    }

    /// The old leader's committed state after a session took `name`: the records as a replica
    /// holds them.
    fn committed(t0: Instant, ttl: Duration, name: &str) -> (Vec<Record>, SessionId, u64) {
        let mut m = Machine::new(Limits::default(), 1);
        let (s, _) = m.open(t0, ttl, None, SECRET).unwrap();
        let token = grab(&mut m, t0, s, 1, name);
        (m.snapshot(t0), s, token)
    }

    /// The new leader commits only its new epoch, above every epoch the log has seen.
    #[test]
    fn a_takeover_commits_only_a_new_epoch() {
        let t0 = Instant::now();
        let (records, _, _) = committed(t0, ms(1_000), "a");
        let (machine, commit) = takeover(Limits::default(), records, t0 + ms(500), ms(650));
        assert_eq!(commit.len(), 1, "{commit:?}");
        assert!(matches!(commit[0], Record::Boot { epoch: 2 }), "{commit:?}");
        assert_eq!(machine.epoch(), 2);
    }

    /// Every restored session gets at least a full TTL from the takeover, and no less than the
    /// fail-over time: a client that renewed just before the leader died keeps its holds.
    #[test]
    fn sessions_get_the_longer_of_their_ttl_and_the_failover_time() {
        let t0 = Instant::now();
        let at = t0 + ms(800);
        let (records, s, _) = committed(t0, ms(1_000), "a");
        let (short, _) = takeover(Limits::default(), records.clone(), at, ms(300));
        assert_eq!(short.session_ttl_left(at, s), Some(ms(1_000)));
        let (long, _) = takeover(Limits::default(), records, at, ms(2_500));
        assert_eq!(long.session_ttl_left(at, s), Some(ms(2_500)));
    }

    /// Holds survive the takeover, and the lock's next token is above every token the old
    /// leader handed out: fencing tokens continue, never repeat.
    #[test]
    fn holds_survive_and_tokens_continue_above_the_old_leaders() {
        let t0 = Instant::now();
        let (records, s, token) = committed(t0, ms(1_000), "a");
        let at = t0 + ms(100);
        let (mut m, _) = takeover(Limits::default(), records, at, ms(650));
        let holder = m.status(at, Some("a")).pop().and_then(|v| v.holder).map(|(h, _, t, _)| (h, t));
        assert_eq!(holder, Some((s, token)));
        // The holder never renews: it expires after its grace, and the next grant goes higher.
        let (other, _) = m.open(at, ms(1_000), None, SECRET).unwrap();
        let cmd = Acquire::exclusive(other, 1, LockName::new("a").unwrap(), Owner::new("o").unwrap(), true);
        assert_eq!(m.acquire(at, cmd).unwrap(), AcquireOutcome::Queued);
        m.tick(at + ms(1_001));
        let granted = m.take_records().into_iter().find_map(|r| match r {
            Record::Grant { session, token, .. } if session == other => Some(token),
            _ => None,
        });
        assert!(granted.is_some_and(|t| t > token), "granted {granted:?} after {token}");
    }

    /// The same records, time and fail-over give the same machine: nothing but the arguments
    /// enters (no clock).
    #[test]
    fn a_takeover_depends_on_its_arguments_only() {
        let t0 = Instant::now();
        let (records, _, _) = committed(t0, ms(1_000), "a");
        let at = t0 + ms(200);
        let (a, ca) = takeover(Limits::default(), records.clone(), at, ms(650));
        std::thread::sleep(ms(5));
        let (b, cb) = takeover(Limits::default(), records, at, ms(650));
        assert_eq!(ca, cb);
        assert_eq!(a.snapshot(at), b.snapshot(at));
    }
}
