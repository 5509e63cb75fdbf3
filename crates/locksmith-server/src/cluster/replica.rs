//! The committed state every node of a cluster keeps: the same [`Machine`] a single node runs,
//! applying the records the leader decided, in log order, through the one `apply` a single node
//! uses to replay its write-ahead log. A replica never reads its clock to decide anything: it
//! never ticks, so no session expires and no lock is handed over on a follower.
//!
//! It does read its clock (`Instant::now()` in `apply` and `install`) to stamp what `apply`
//! measures from "now": a session's deadline (`now + ttl`) and a lock-delay's end
//! (`now + delay`). Those stamps decide nothing while the node follows, and differ from node
//! to node by when each applied the record. They matter once the node leads: the takeover
//! ([`takeover`](super::takeover)) gives every session a fresh deadline, but a lock-delay
//! carries over as what is left of it by this node's stamp — which runs from when this node
//! applied the record, never before the leader decided it, so it errs long, never short. Stamping
//! them with the leader's time instead would put a time in every record: a change of the log
//! format, on disk and on the wire.

use std::time::{Duration, Instant};

use crate::machine::{Limits, Machine, Record};
use crate::wal;

/// A batch of records as one replicated command: the write-ahead log's frames, back to back.
pub(crate) fn encode(records: &[Record]) -> Vec<u8> {
    let mut buf = Vec::with_capacity(records.len() * 48);
    for r in records {
        wal::encode_into(r, &mut buf);
    }
    buf
}

/// The records of a command. Every frame must check out: a replicated command is never torn.
///
/// # Errors
/// What is wrong, and where.
pub(crate) fn decode(bytes: &[u8]) -> Result<Vec<Record>, String> {
    let mut records = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let (record, used) = wal::decode_frame(&bytes[at..]).map_err(|e| format!("command offset {at}: {e}"))?;
        records.push(record);
        at += used;
    }
    Ok(records)
}

/// The replicated state of one node.
#[derive(Debug)]
pub struct ReplicaMachine {
    machine: Machine,
}

impl ReplicaMachine {
    /// An empty replica checking `limits` (only a leader checks them; a replica applies).
    pub fn new(limits: Limits) -> Self {
        Self { machine: Machine::new(limits, 0) }
    }

    /// The committed state as records: what a new leader builds its machine from.
    pub fn records(&self) -> Vec<Record> {
        self.machine.snapshot(Instant::now())
    }

    /// The committed state.
    pub fn machine(&self) -> &Machine {
        &self.machine
    }
}

impl locksmith_raft::Replicated for ReplicaMachine {
    fn apply(&mut self, index: u64, command: &[u8]) {
        match decode(command) {
            Ok(records) => {
                let now = Instant::now();
                for r in &records {
                    self.machine.apply(now, r);
                }
            }
            // Every node decodes the same bytes the same way, so every node skips it alike and
            // the replicas stay equal; it can only come from a bug, never from a client.
            Err(e) => tracing::error!(index, error = %e, "a replicated command does not decode; skipped"),
        }
    }

    fn snapshot(&self) -> Vec<u8> {
        encode(&self.records())
    }

    fn install(&mut self, snapshot: &[u8]) -> Result<(), String> {
        let records = decode(snapshot)?;
        let mut machine = Machine::new(self.machine.limits().clone(), 0);
        let now = Instant::now();
        for r in &records {
            machine.apply(now, r);
        }
        // Whatever a snapshot says, fencing counters and the token floor never go down on this
        // node: a snapshot that lowered them (a bug, or one forged by someone who got past node
        // authentication) would hand out tokens again that holders already had.
        for r in self.machine.snapshot(now) {
            match r {
                Record::Floor { .. } => machine.apply(now, &r),
                Record::Counter { name, token, .. } => {
                    machine.apply(now, &Record::Counter { name, token, delay: Duration::ZERO });
                }
                _ => {}
            }
        }
        self.machine = machine;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use locksmith_raft::Replicated;

    use super::*;

    /// An empty snapshot (once forged by a client on the Raft port) or a stale one leaves every
    /// lock's fencing counter and the token floor where they were: tokens never go backwards.
    #[test]
    fn a_snapshot_never_lowers_a_counter_or_the_floor() {
        let mut replica = ReplicaMachine::new(Limits::default());
        let now = Instant::now();
        let counter = Record::Counter { name: "fenced".into(), token: 5, delay: Duration::ZERO };
        replica.apply(1, &encode(&[Record::Floor { upto: 1_024 }, counter]));
        replica.install(&[]).unwrap();
        assert_eq!(replica.machine().floor(), 1_024);
        let view = replica.machine.status(now, Some("fenced"));
        assert_eq!(view.first().map(|v| v.last_token), Some(5));
        // A snapshot with higher values still raises them.
        let newer = Record::Counter { name: "fenced".into(), token: 7, delay: Duration::ZERO };
        replica.install(&encode(&[Record::Floor { upto: 2_048 }, newer])).unwrap();
        assert_eq!(replica.machine().floor(), 2_048);
        assert_eq!(replica.machine.status(now, Some("fenced")).first().map(|v| v.last_token), Some(7));
    }
}
