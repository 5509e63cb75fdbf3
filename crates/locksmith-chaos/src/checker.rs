//! The checker: pure functions over the worker histories and the register's log.
//!
//! What counts as unsafe (exit 1):
//! - a **stale write accepted**: the register took a write whose `expected` (the value its hold
//!   read) was no longer the register's value — another hold wrote in between, and this write
//!   overwrote it (a lost update);
//! - a **token regression**: the same token granted to two holds; or a hold whose `lock()` call
//!   started after another hold's `lock()` had returned, with a token not above that hold's (the
//!   later grant must carry the higher token); or the register accepting a write whose token
//!   was below the highest it had seen (a broken register).
//!
//! Reported without being unsafe by itself: holds of different workers whose
//! `[acquired, release-start]` intervals overlap. With fencing the model allows them as long as
//! the register refused the stale side; the report says how many overlaps had writes accepted on
//! both sides. A hold without `release-start` (its worker was killed) ends at its last event.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;

use super::history::{Event, Record};
use super::register::{Entry, Op};

/// At most this many examples of each finding go into the report.
const EXAMPLES: usize = 10;

/// One hold as reconstructed from its worker's history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Hold {
    /// `worker.incarnation.seq`
    pub hold: String,
    /// The worker.
    pub worker: u32,
    /// The fencing token (`None` on Redlock).
    pub token: Option<u64>,
    /// When `lock()` was called.
    pub invoked: Option<u64>,
    /// When `lock()` returned the guard.
    pub acquired: u64,
    /// When `unlock()` was called, if it was.
    pub release_start: Option<u64>,
    /// End of the hold for overlap purposes: `release_start`, else its last event.
    pub end: u64,
}

/// A write the register accepted although it was based on a stale read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StaleWrite {
    /// The hold that wrote.
    pub hold: String,
    /// Its token.
    pub token: u64,
    /// What the hold had read.
    pub expected: u64,
    /// What the register held when it took the write (the value overwritten).
    pub value: u64,
    /// When (`CLOCK_MONOTONIC` ns).
    pub t: u64,
}

/// A token order violation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum TokenViolation {
    /// Two holds got the same token.
    Duplicate {
        /// The token.
        token: u64,
        /// The first hold.
        first: String,
        /// The second hold.
        second: String,
    },
    /// `later` called `lock()` after `earlier` had its guard, yet got a token not above it.
    Regression {
        /// The hold granted first.
        earlier: String,
        /// Its token.
        earlier_token: u64,
        /// The hold granted after.
        later: String,
        /// Its (not higher) token.
        later_token: u64,
    },
    /// The register accepted a write with a token below the highest it had seen.
    FenceBroken {
        /// The hold that wrote.
        hold: String,
        /// Its token.
        token: u64,
        /// The highest token seen before.
        max_seen: u64,
    },
}

/// Two holds of different workers that overlapped in time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Overlap {
    /// The hold that started first.
    pub first: String,
    /// The hold that started while `first` was still held.
    pub second: String,
    /// How long they overlapped (ns).
    pub overlap_ns: u64,
    /// Both holds had a write accepted by the register.
    pub both_written: bool,
}

/// Everything the checker found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Findings {
    /// Calls to `lock()`.
    pub attempts: usize,
    /// Guards returned by `lock()`.
    pub acquisitions: usize,
    /// Attempts that failed (timeout, backend or register errors).
    pub failed_attempts: usize,
    /// Writes the register took.
    pub writes_accepted: usize,
    /// Writes the register refused (fencing at work).
    pub writes_rejected: usize,
    /// The register's final value.
    pub final_value: u64,
    /// `writes_accepted − final_value`: increments lost (0 when every accepted write counted).
    pub lost_updates: i64,
    /// Accepted writes based on a stale read.
    pub stale_writes_accepted: usize,
    /// Some of them.
    pub stale_examples: Vec<StaleWrite>,
    /// Token order violations of every kind.
    pub token_regressions: usize,
    /// Some of them.
    pub token_examples: Vec<TokenViolation>,
    /// Pairs of holds of different workers whose intervals overlapped.
    pub overlapping_holds: usize,
    /// Of those, pairs where both sides had a write accepted.
    pub overlaps_both_written: usize,
    /// Some of them.
    pub overlap_examples: Vec<Overlap>,
}

impl Findings {
    /// Safe: no stale write accepted and no token regression.
    pub fn safe(&self) -> bool {
        self.stale_writes_accepted == 0 && self.token_regressions == 0
    }
}

/// Checks the histories (every worker incarnation's records, in any order) against the register
/// log (in the order the register applied it) and its final value. `fenced`: the register was
/// fencing (tokens below the highest seen must have been refused).
pub fn check(histories: &[Record], register: &[Entry], final_value: u64, fenced: bool) -> Findings {
    let holds = holds(histories, register);
    let mut f = Findings {
        attempts: histories.iter().filter(|r| matches!(r.event, Event::Invoke { .. })).count(),
        acquisitions: holds.len(),
        failed_attempts: histories.iter().filter(|r| matches!(r.event, Event::Failed { .. })).count(),
        final_value,
        ..Findings::default()
    };
    let writes = register.iter().filter(|e| e.op == Op::Write);
    f.writes_accepted = writes.clone().filter(|e| e.accepted).count();
    f.writes_rejected = writes.clone().filter(|e| !e.accepted).count();
    f.lost_updates = i64::try_from(f.writes_accepted).unwrap_or(i64::MAX) - i64::try_from(final_value).unwrap_or(0);

    for e in writes.filter(|e| e.accepted && e.expected != Some(e.value)) {
        f.stale_writes_accepted += 1;
        if f.stale_examples.len() < EXAMPLES {
            f.stale_examples.push(StaleWrite {
                hold: e.hold.clone(),
                token: e.token,
                expected: e.expected.unwrap_or(0),
                value: e.value,
                t: e.t,
            });
        }
    }

    let mut violations = token_violations(&holds);
    if fenced {
        violations.extend(
            register
                .iter()
                .filter(|e| e.op == Op::Write && e.accepted && e.token < e.max_seen)
                .map(|e| TokenViolation::FenceBroken { hold: e.hold.clone(), token: e.token, max_seen: e.max_seen }),
        );
    }
    f.token_regressions = violations.len();
    f.token_examples = violations.into_iter().take(EXAMPLES).collect();

    let written: HashSet<&str> =
        register.iter().filter(|e| e.op == Op::Write && e.accepted).map(|e| e.hold.as_str()).collect();
    let mut overlaps = overlaps(&holds, &written);
    f.overlapping_holds = overlaps.len();
    f.overlaps_both_written = overlaps.iter().filter(|o| o.both_written).count();
    // The examples that matter first: overlaps where both sides wrote.
    overlaps.sort_by_key(|o| !o.both_written);
    overlaps.truncate(EXAMPLES);
    f.overlap_examples = overlaps;
    f
}

/// Rebuilds every hold (an attempt whose `lock()` returned a guard), sorted by acquisition time.
pub fn holds(histories: &[Record], register: &[Entry]) -> Vec<Hold> {
    let mut by_id: BTreeMap<&str, Hold> = BTreeMap::new();
    let mut invoked: HashMap<&str, u64> = HashMap::new();
    let mut last: HashMap<&str, u64> = HashMap::new();
    for r in histories {
        let id = r.event.hold();
        let t = last.entry(id).or_insert(r.t);
        *t = (*t).max(r.t);
        match &r.event {
            Event::Invoke { .. } => {
                invoked.insert(id, r.t);
            }
            Event::Acquired { token, .. } => {
                by_id.insert(
                    id,
                    Hold {
                        hold: id.to_string(),
                        worker: r.worker,
                        token: *token,
                        invoked: None,
                        acquired: r.t,
                        release_start: None,
                        end: r.t,
                    },
                );
            }
            _ => {}
        }
    }
    for e in register {
        if let Some(t) = last.get_mut(e.hold.as_str()) {
            *t = (*t).max(e.t);
        }
    }
    for r in histories {
        if let Event::ReleaseStart { hold } = &r.event {
            if let Some(h) = by_id.get_mut(hold.as_str()) {
                h.release_start = Some(r.t);
            }
        }
    }
    let mut holds: Vec<Hold> = by_id
        .into_values()
        .map(|mut h| {
            h.invoked = invoked.get(h.hold.as_str()).copied();
            h.end = h.release_start.unwrap_or_else(|| last.get(h.hold.as_str()).copied().unwrap_or(h.acquired));
            h
        })
        .collect();
    holds.sort_by_key(|h| (h.acquired, h.worker));
    holds
}

/// Duplicate tokens, and holds whose `lock()` started after another hold was acquired but got a
/// token not above it. `holds` must be sorted by acquisition time.
fn token_violations(holds: &[Hold]) -> Vec<TokenViolation> {
    let mut out = Vec::new();
    let mut first_with: HashMap<u64, &str> = HashMap::new();
    for h in holds {
        let Some(token) = h.token else { continue };
        if let Some(first) = first_with.insert(token, &h.hold) {
            out.push(TokenViolation::Duplicate { token, first: first.to_string(), second: h.hold.clone() });
            first_with.insert(token, first);
        }
    }
    // prefix[i] = the hold with the highest token among holds[..=i] (by acquisition time).
    let mut prefix: Vec<Option<&Hold>> = Vec::with_capacity(holds.len());
    let mut best: Option<&Hold> = None;
    for h in holds {
        if h.token.is_some() && best.is_none_or(|b| h.token > b.token) {
            best = Some(h);
        }
        prefix.push(best);
    }
    for later in holds {
        let (Some(token), Some(invoked)) = (later.token, later.invoked) else { continue };
        // Holds acquired strictly before `later` called lock(): their grants precede its grant.
        let n = holds.partition_point(|h| h.acquired < invoked);
        let Some(Some(earlier)) = n.checked_sub(1).map(|i| prefix[i]) else { continue };
        if let Some(earlier_token) = earlier.token {
            if token <= earlier_token && earlier.hold != later.hold {
                out.push(TokenViolation::Regression {
                    earlier: earlier.hold.clone(),
                    earlier_token,
                    later: later.hold.clone(),
                    later_token: token,
                });
            }
        }
    }
    out
}

/// Pairs of holds of different workers whose `[acquired, end]` intervals overlap. `holds` must
/// be sorted by acquisition time.
fn overlaps(holds: &[Hold], written: &HashSet<&str>) -> Vec<Overlap> {
    let mut out = Vec::new();
    for (i, a) in holds.iter().enumerate() {
        for b in holds[i + 1..].iter().take_while(|b| b.acquired < a.end) {
            if a.worker == b.worker {
                continue;
            }
            out.push(Overlap {
                first: a.hold.clone(),
                second: b.hold.clone(),
                overlap_ns: a.end.min(b.end).saturating_sub(b.acquired),
                both_written: written.contains(a.hold.as_str()) && written.contains(b.hold.as_str()),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::register::Register;
    use super::*;

    /// Builds histories and a register log from a script of steps at increasing times.
    #[derive(Default)]
    struct Script {
        records: Vec<Record>,
        register: Option<Register>,
        t: u64,
    }

    impl Script {
        fn new(fenced: bool) -> Self {
            Self { register: Some(Register::new(fenced)), ..Self::default() }
        }
        fn tick(&mut self) -> u64 {
            self.t += 10;
            self.t
        }
        fn ev(&mut self, worker: u32, event: Event) {
            let t = self.tick();
            self.records.push(Record { worker, incarnation: 1, t, event });
        }
        fn hold(w: u32, n: u32) -> String {
            format!("{w}.1.{n}")
        }
        fn invoke(&mut self, w: u32, n: u32) {
            self.ev(w, Event::Invoke { hold: Self::hold(w, n) });
        }
        fn acquired(&mut self, w: u32, n: u32, token: u64) {
            self.ev(w, Event::Acquired { hold: Self::hold(w, n), token: Some(token) });
        }
        fn reg(&mut self, line: String) -> String {
            let t = self.tick();
            self.register.as_mut().unwrap().apply(&line, t)
        }
        fn read(&mut self, w: u32, n: u32, token: u64) -> u64 {
            let a = self.reg(format!("READ {token} {w} {}", Self::hold(w, n)));
            a.strip_prefix("VALUE ").unwrap().parse().unwrap()
        }
        fn write(&mut self, w: u32, n: u32, token: u64, expected: u64) {
            self.reg(format!("WRITE {token} {expected} {} {w} {}", expected + 1, Self::hold(w, n)));
        }
        fn release(&mut self, w: u32, n: u32) {
            self.ev(w, Event::ReleaseStart { hold: Self::hold(w, n) });
            self.ev(w, Event::Released { hold: Self::hold(w, n), ok: true });
        }
        /// One whole well-behaved cycle.
        fn cycle(&mut self, w: u32, n: u32, token: u64) {
            self.invoke(w, n);
            self.acquired(w, n, token);
            let v = self.read(w, n, token);
            self.write(w, n, token, v);
            self.release(w, n);
        }
        fn check(&self, fenced: bool) -> Findings {
            let r = self.register.as_ref().unwrap();
            check(&self.records, r.log(), r.value(), fenced)
        }
    }

    #[test]
    fn a_clean_sequential_history_is_safe() {
        let mut s = Script::new(true);
        for (i, w) in [1, 2, 3, 1, 2].into_iter().enumerate() {
            s.cycle(w, i as u32, i as u64 + 1);
        }
        let f = s.check(true);
        assert!(f.safe(), "{f:?}");
        assert_eq!((f.attempts, f.acquisitions, f.writes_accepted, f.writes_rejected), (5, 5, 5, 0));
        assert_eq!((f.final_value, f.lost_updates, f.overlapping_holds), (5, 0, 0));
    }

    #[test]
    fn an_unfenced_overlap_whose_stale_write_went_through_is_unsafe() {
        // 1 reads 0, is paused past its TTL; 2 gets the lock, reads 0 and writes 1; 1 wakes and
        // writes 1 based on its stale read: one increment lost.
        let mut s = Script::new(false);
        s.invoke(1, 1);
        s.acquired(1, 1, 1);
        let v1 = s.read(1, 1, 0);
        s.invoke(2, 1);
        s.acquired(2, 1, 2);
        let v2 = s.read(2, 1, 0);
        s.write(2, 1, 0, v2);
        s.release(2, 1);
        s.write(1, 1, 0, v1);
        s.release(1, 1);
        let f = s.check(false);
        assert!(!f.safe());
        assert_eq!(f.stale_writes_accepted, 1);
        assert_eq!(f.stale_examples[0].hold, "1.1.1");
        assert_eq!((f.writes_accepted, f.final_value, f.lost_updates), (2, 1, 1));
        assert_eq!((f.overlapping_holds, f.overlaps_both_written), (1, 1));
        assert_eq!(f.token_regressions, 0);
    }

    #[test]
    fn a_fenced_overlap_whose_stale_side_was_refused_is_safe() {
        let mut s = Script::new(true);
        s.invoke(1, 1);
        s.acquired(1, 1, 1);
        let v1 = s.read(1, 1, 1);
        s.invoke(2, 1);
        s.acquired(2, 1, 2);
        let v2 = s.read(2, 1, 2);
        s.write(2, 1, 2, v2);
        s.release(2, 1);
        s.write(1, 1, 1, v1);
        s.release(1, 1);
        let f = s.check(true);
        assert!(f.safe(), "{f:?}");
        assert_eq!((f.writes_accepted, f.writes_rejected, f.stale_writes_accepted), (1, 1, 0));
        assert_eq!((f.overlapping_holds, f.overlaps_both_written), (1, 0));
    }

    #[test]
    fn a_later_grant_with_a_lower_token_is_a_regression() {
        let mut s = Script::new(true);
        s.cycle(1, 1, 5);
        s.cycle(2, 1, 4);
        let f = s.check(true);
        assert!(!f.safe());
        assert_eq!(f.token_regressions, 1);
        assert!(matches!(&f.token_examples[0], TokenViolation::Regression { earlier_token: 5, later_token: 4, .. }));
    }

    #[test]
    fn a_grant_that_raced_with_another_may_carry_the_lower_token() {
        // 2 called lock() before 1's lock() returned: either order of grants is possible, so a
        // lower token for 2 is no regression, even though 2 logged its acquisition later.
        let mut s = Script::new(true);
        s.invoke(1, 1);
        s.invoke(2, 1);
        s.acquired(1, 1, 5);
        s.acquired(2, 1, 4);
        s.release(1, 1);
        s.release(2, 1);
        let f = s.check(true);
        assert_eq!(f.token_regressions, 0, "{f:?}");
        assert_eq!(f.overlapping_holds, 1);
    }

    #[test]
    fn the_same_token_for_two_holds_is_a_regression() {
        let mut s = Script::new(true);
        s.cycle(1, 1, 3);
        s.invoke(2, 1);
        s.acquired(2, 1, 3);
        let f = s.check(true);
        assert!(!f.safe());
        assert!(f.token_examples.iter().any(|v| matches!(v, TokenViolation::Duplicate { token: 3, .. })), "{f:?}");
    }

    #[test]
    fn a_register_that_accepts_a_lower_token_is_caught() {
        // An unfenced register log checked as if it had been fencing.
        let mut s = Script::new(false);
        s.cycle(1, 1, 0);
        s.reg("READ 9 2 2.1.1".into());
        s.reg("WRITE 3 1 2 3 3.1.1".into());
        let f = s.check(true);
        assert!(f
            .token_examples
            .iter()
            .any(|v| matches!(v, TokenViolation::FenceBroken { token: 3, max_seen: 9, .. })));
        assert!(!f.safe());
    }

    #[test]
    fn a_killed_holders_hold_ends_at_its_last_event() {
        let mut s = Script::new(true);
        s.invoke(1, 1);
        s.acquired(1, 1, 1);
        s.read(1, 1, 1); // then kill -9: no write, no release
        s.cycle(2, 1, 2);
        let holds = holds(&s.records, s.register.as_ref().unwrap().log());
        assert_eq!(holds[0].release_start, None);
        assert_eq!(holds[0].end, 30, "ends at the read the register logged");
        let f = s.check(true);
        assert_eq!(f.overlapping_holds, 0);
        assert!(f.safe());
    }

    #[test]
    fn holds_without_tokens_are_not_checked_for_order() {
        let mut s = Script::new(false);
        for (n, w) in [1, 2].into_iter().enumerate() {
            s.invoke(w, n as u32);
            s.ev(w, Event::Acquired { hold: Script::hold(w, n as u32), token: None });
            s.release(w, n as u32);
        }
        let f = s.check(false);
        assert_eq!((f.acquisitions, f.token_regressions), (2, 0));
    }
}
