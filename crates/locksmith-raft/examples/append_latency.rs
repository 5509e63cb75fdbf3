//! Measures one durable append through the log store, as openraft 0.9 drives it: `append`,
//! then wait for the callback, called once `fdatasync` returned (in the appending task: see
//! `store::sync`).
//!
//! `cargo run --release -p locksmith-raft --example append_latency [DIR] [COUNT]` (DIR defaults
//! to a temporary directory under the system's; measure on the disk the nodes will use).

use std::time::Duration;
use std::time::Instant;

use locksmith_raft::store::open_storage;
use locksmith_raft::types::Entry;
use locksmith_raft::types::LogId;
use locksmith_raft::Command;
use locksmith_raft::Replicated;
use openraft::storage::RaftLogStorageExt;
use openraft::CommittedLeaderId;
use openraft::EntryPayload;

/// A state machine that is never used here.
struct Nothing;

impl Replicated for Nothing {
    fn apply(&mut self, _: u64, _: &[u8]) {}
    fn snapshot(&self) -> Vec<u8> {
        Vec::new()
    }
    fn install(&mut self, _: &[u8]) -> Result<(), String> {
        Ok(())
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let tmp = tempfile::tempdir()?;
    let dir = args.next().map(std::path::PathBuf::from).unwrap_or_else(|| tmp.path().to_path_buf());
    let count: u64 = args.next().map(|c| c.parse()).transpose()?.unwrap_or(2000);
    let (mut log, _sm) = open_storage(&dir.join("latency"), Nothing)?;
    let mut samples = Vec::new();
    for index in 0..count {
        // About the size of one lock-server record.
        let payload = EntryPayload::Normal(Command(vec![0x5a; 100]));
        let entry = Entry { log_id: LogId::new(CommittedLeaderId::new(1, 1), index), payload };
        let t = Instant::now();
        log.blocking_append([entry]).await?;
        samples.push(t.elapsed());
    }
    samples.sort();
    println!(
        "{count} appends of a 100-byte command with fdatasync in {}: p50 {:?}, p90 {:?}, p99 {:?}, max {:?}",
        dir.display(),
        percentile(&samples, 0.5),
        percentile(&samples, 0.9),
        percentile(&samples, 0.99),
        samples[samples.len() - 1]
    );
    Ok(())
}
