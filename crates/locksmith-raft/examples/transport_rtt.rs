//! Measures what one AppendEntries costs the transport alone: round trips of an empty
//! heartbeat (no entry, so no fsync) from a leader's peer client to a node, over the
//! replication stream (`AppendEntriesStream`) and as one unary call each (to a node that does
//! not serve the stream, as an older node), in alternating rounds in one process: latency
//! percentiles, and the process's CPU time (client and server, utime + stime) per round trip.
//! Both with node proofs (a cluster secret), as a real cluster runs.
//!
//! `cargo run --release -p locksmith-raft --example transport_rtt [COUNT] [ROUNDS]`

use std::collections::BTreeMap;
use std::time::Duration;
use std::time::Instant;

use locksmith_proto::node_proof::ClusterSecret;
use locksmith_raft::network::Network;
use locksmith_raft::types::Node;
use locksmith_raft::types::TypeConfig;
use locksmith_raft::NodeAuth;
use locksmith_raft::NodeConfig;
use locksmith_raft::RaftNode;
use locksmith_raft::Replicated;
use openraft::network::RPCOption;
use openraft::network::RaftNetwork;
use openraft::network::RaftNetworkFactory;
use openraft::raft::AppendEntriesRequest;
use openraft::Vote;

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

const SECRET: &[u8] = b"the transport benchmark's cluster secret";

/// A node of no cluster yet (it hears from any leader) serving on a loopback port: its address.
async fn serve(dir: &std::path::Path, legacy: bool) -> Result<(RaftNode<Nothing>, String), Box<dyn std::error::Error>> {
    let mut config = NodeConfig::default();
    config.auth = Some(NodeAuth::new(ClusterSecret::new(SECRET)?));
    config.legacy_transport = legacy;
    let node = RaftNode::start(2, dir, BTreeMap::new(), config, Nothing).await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?.to_string();
    let router = tonic::transport::Server::builder().add_service(node.service());
    tokio::spawn(async move {
        let incoming = tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true));
        let _ = router.serve_with_incoming(incoming).await;
    });
    Ok((node, addr))
}

/// utime + stime of this process, in clock ticks (100 per second on Linux).
fn cpu_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<u64> = stat
        .rsplit_once(')')
        .map(|(_, f)| f.split_whitespace().skip(11).take(2).filter_map(|x| x.parse().ok()).collect())
        .unwrap_or_default();
    fields.iter().sum()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

#[tokio::main(worker_threads = 2)]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let count: usize = args.next().map(|c| c.parse()).transpose()?.unwrap_or(5000);
    let rounds: usize = args.next().map(|c| c.parse()).transpose()?.unwrap_or(3);
    let (dir_s, dir_u) = (tempfile::tempdir()?, tempfile::tempdir()?);
    let (_streamed, streamed_addr) = serve(dir_s.path(), false).await?;
    let (_unary, unary_addr) = serve(dir_u.path(), true).await?;
    let mut network = Network::new(1, None, Duration::from_secs(1), Duration::from_millis(100), BTreeMap::new())
        .with_secret(Some(ClusterSecret::new(SECRET)?));
    let option = RPCOption::new(Duration::from_secs(1));
    let heartbeat = || AppendEntriesRequest::<TypeConfig> {
        vote: Vote::new_committed(1, 1),
        prev_log_id: None,
        entries: vec![],
        leader_commit: None,
    };
    let mut results: BTreeMap<&str, (Vec<Duration>, Vec<f64>)> = BTreeMap::new();
    for _ in 0..rounds {
        for (name, addr) in [("stream", &streamed_addr), ("unary", &unary_addr)] {
            let mut client = network.new_client(2, &Node { addr: addr.clone() }).await;
            // Warm up: the connection, and the stream (or learning that there is none).
            for _ in 0..100 {
                client.append_entries(heartbeat(), option.clone()).await?;
            }
            let (started, ticks) = (Instant::now(), cpu_ticks());
            let entry = results.entry(name).or_default();
            for _ in 0..count {
                let t = Instant::now();
                client.append_entries(heartbeat(), option.clone()).await?;
                entry.0.push(t.elapsed());
            }
            let cpu_us = (cpu_ticks() - ticks) as f64 * 10_000.0 / count as f64;
            entry.1.push(cpu_us);
            eprintln!("{name}: {count} in {:?}, {cpu_us:.1} µs CPU each", started.elapsed());
        }
    }
    for (name, (mut samples, mut cpu)) in results {
        samples.sort();
        cpu.sort_by(f64::total_cmp);
        println!(
            "{name:>6}: round trip p50 {:?} p90 {:?} p99 {:?}; CPU per round trip (client + server, median of {rounds}) \
             {:.1} µs",
            percentile(&samples, 0.5),
            percentile(&samples, 0.9),
            percentile(&samples, 0.99),
            cpu[cpu.len() / 2]
        );
    }
    Ok(())
}
