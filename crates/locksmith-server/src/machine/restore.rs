//! Restarts: [`Machine::restore`] replays a log through [`Machine::apply`] and then applies the
//! restart policy (a new epoch, what a durability mode may trust of the previous run);
//! [`Machine::snapshot`] writes the current state as the records of a compacted log.

use std::time::{Duration, Instant};

use super::apply::set_delay;
use super::{Durability, Limits, Machine, Record, RESTORED_IDLE_GRACE};

impl Machine {
    /// Rebuilds state from persisted records at `now` in a new boot. Restored sessions keep
    /// their holds and get one full TTL from `now` to reconnect (their clients stopped trusting
    /// their holds at most one TTL after their last renewal, which came before the crash, so
    /// nobody else can be granted their locks while they may still act on them). Waiters are not
    /// restored: clients re-send them when they resume. Emits the records of a snapshot of the
    /// restored state (starting with the new `Boot`) for the caller to write as the new log.
    pub fn restore(limits: Limits, records: impl IntoIterator<Item = Record>, now: Instant) -> Self {
        Self::restore_with(limits, Durability::Grants, records, now)
    }

    /// [`Machine::restore`] in a chosen [`Durability`]. Whatever mode wrote the log: if grants
    /// of the previous run may be missing from it (it was a `Leases` run), or this run will
    /// not keep the restored holders (`Leases`), every lock ever granted stays unavailable
    /// until the longest lease (+ lock-delay) of the previous run has passed from `now`.
    pub fn restore_with(
        limits: Limits,
        durability: Durability,
        records: impl IntoIterator<Item = Record>,
        now: Instant,
    ) -> Self {
        let mut m = Self::new(limits, 0);
        // Reservations and horizons are written only by `Leases` runs, whose grants are not in
        // the log: the holders of that run are unknown.
        let mut leases_log = false;
        for r in records {
            leases_log |= matches!(r, Record::Reserve { .. } | Record::Horizon { .. });
            m.apply(now, &r);
        }
        m.start_boot(durability, leases_log, now);
        m
    }

    /// Turns a replayed state into a new boot at `now`.
    fn start_boot(&mut self, durability: Durability, leases_log: bool, now: Instant) {
        self.durability = durability;
        self.epoch = self.seen_epoch + 1;
        // Every lock continues above the floor: the log may have lost grants (a torn or cut
        // tail, an old copy) that the separately kept floor still covers. Logs written before
        // the floor existed have none, and their counters continue as they were.
        self.base = self.floor;
        // A restored session that holds nothing protects no guard: it gets a short time to
        // resume instead of its whole TTL (see RESTORED_IDLE_GRACE).
        for (id, s) in self.sessions.iter_mut().filter(|(_, s)| s.holds.is_empty()) {
            let deadline = now + s.ttl.min(RESTORED_IDLE_GRACE);
            if deadline < s.deadline {
                self.deadlines.remove(&(s.deadline, *id));
                s.deadline = deadline;
                self.deadlines.insert((deadline, *id));
            }
        }
        if durability == Durability::Leases {
            // Restored holders will not be kept: their clients may trust them for one more TTL
            // (+ lock-delay if they expire), which the quiet period below must cover.
            for s in self.sessions.values() {
                self.horizon.0 = self.horizon.0.max(s.ttl);
            }
            for lock in self.locks.values_mut() {
                for h in lock.clear_holders() {
                    self.horizon.1 = self.horizon.1.max(h.lock_delay);
                }
                lock.settle();
            }
            self.sessions.clear();
            self.deadlines.clear();
        }
        // Tokens up to a reservation may have been seen: continue above it.
        for lock in self.locks.values_mut() {
            lock.counter = lock.counter.max(lock.reserved);
        }
        if leases_log || durability == Durability::Leases {
            let quiet = self.horizon.0 + self.horizon.1;
            if !quiet.is_zero() {
                for (name, lock) in self.locks.iter_mut().filter(|(_, l)| l.counter > 0 && l.holders().next().is_none())
                {
                    let until = lock.delay_until().map_or(now + quiet, |t| t.max(now + quiet));
                    set_delay(&mut self.delays, lock, name, Some(until));
                }
            }
        }
        // `Leases`: the next grant of every lock reserves a new block above the counter.
        for lock in self.locks.values_mut() {
            lock.reserved = lock.counter;
        }
        self.records = self.snapshot(now);
    }

    /// The current state at `now` as records (a compacted log), starting with this boot's epoch.
    pub fn snapshot(&self, now: Instant) -> Vec<Record> {
        // A replica applying another node's log has no epoch of its own: the highest seen is
        // what a snapshot must carry, so a node restored from it never reuses one.
        let mut out = vec![Record::Boot { epoch: self.epoch.max(self.seen_epoch) }];
        if self.floor > 0 {
            out.push(Record::Floor { upto: self.floor });
        }
        let delay_left = |until: Option<Instant>| until.map(|t| t.saturating_duration_since(now)).unwrap_or_default();
        if self.durability == Durability::Leases {
            if self.horizon != (Duration::ZERO, Duration::ZERO) {
                out.push(Record::Horizon { ttl: self.horizon.0, lock_delay: self.horizon.1 });
            }
            for (name, lock) in &self.locks {
                out.push(Record::Counter {
                    name: name.to_string(),
                    // Tokens up to the reservation may be out there: continue above it.
                    token: lock.counter.max(lock.reserved),
                    delay: delay_left(lock.delay_until()),
                });
            }
            return out;
        }
        for (id, s) in &self.sessions {
            out.push(Record::Session { id: *id, ttl: s.ttl, secret: s.secret });
        }
        for (name, lock) in &self.locks {
            // The counter first: readers and permit holders may hold older tokens than the
            // last one issued.
            out.push(Record::Counter {
                name: name.to_string(),
                token: lock.counter,
                delay: delay_left(lock.delay_until()),
            });
            for h in lock.holders() {
                out.push(Record::Grant {
                    name: name.to_string(),
                    session: h.session,
                    owner: h.owner.clone(),
                    token: h.token,
                    lock_delay: h.lock_delay,
                    mode: h.mode,
                    value: h.value.clone(),
                });
            }
        }
        out
    }
}
