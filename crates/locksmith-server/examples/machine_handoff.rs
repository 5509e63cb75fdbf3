//! The pure lock machine's cost per hand-off, for counting instructions (`valgrind
//! --tool=callgrind`) rather than timing on a shared machine: 8 sessions queue on one lock; each
//! release hands it to the next in line, and the releasing session queues again.
//!
//! ```text
//! cargo build --release -p locksmith-server --example machine_handoff
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null \
//!     target/release/examples/machine_handoff 200000
//! ```
//!
//! Instructions per hand-off = callgrind's total ÷ the count (start-up is a few hundred
//! thousand instructions: noise at 200,000 hand-offs). Without valgrind it prints the time.

use std::time::{Duration, Instant};

use locksmith_server::machine::{self, AcquireOutcome, Effect, Limits, LockName, Machine, Owner};

fn main() {
    let n: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(200_000);
    let now = Instant::now();
    let mut m = Machine::new(Limits::default(), 1);
    let lock = LockName::new("jobs/nightly-export").unwrap_or_else(|e| panic!("{e}"));
    let owner = Owner::new("worker").unwrap_or_else(|e| panic!("{e}"));
    let sessions: Vec<_> = (0..8)
        .map(|_| m.open(now, Duration::from_secs(3600), None, [0; 32]).unwrap_or_else(|e| panic!("{e}")).0)
        .collect();
    let acquire = |m: &mut Machine, session, request| {
        let cmd = machine::Acquire::exclusive(session, request, lock.clone(), owner.clone(), true);
        m.acquire(now, cmd).unwrap_or_else(|e| panic!("{e}"))
    };
    // (session, token) of the holder.
    let mut holder = None;
    for (i, &s) in sessions.iter().enumerate() {
        if let AcquireOutcome::Granted(token) = acquire(&mut m, s, i as u64) {
            holder = Some((s, token));
        }
    }
    let started = Instant::now();
    for request in 100..100 + n {
        let Some((session, token)) = holder else { panic!("nobody holds the lock") };
        m.release(now, machine::Release { session, name: lock.clone(), owner: owner.clone(), token });
        holder = m.take_effects().into_iter().find_map(|e| match e {
            Effect::Granted { session, token, .. } => Some((session, token)),
            _ => None,
        });
        acquire(&mut m, session, request);
        m.take_records();
    }
    let per = started.elapsed() / u32::try_from(n).unwrap_or(u32::MAX);
    println!("{n} hand-offs, {per:?} each");
}
