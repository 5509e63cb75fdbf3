//! The native server as a 3-node cluster against what a team would run instead, in one
//! `locksmith bench` run (issues 18 and 27): the same server as a single node (default
//! durability, and `--durability leases`: what a cluster mode without per-grant replication
//! could at best approach), etcd as a 3-member cluster, Redis without persistence and Redis with `appendfsync always` (the same
//! durability as a native grant). Options after the binary's path go to `locksmith bench` as
//! they are, `--floor-dir` too (give a directory on the disk the servers' data dirs are on, so
//! the floor's fdatasync is theirs):
//!
//! ```text
//! cargo build --release -p locksmith-cli
//! cargo run --release -p locksmith-bench --example bench_cluster -- target/release/locksmith \
//!     --workloads uncontended,contended --duration 2s --rounds 3 --floor-dir /tmp/floor
//! ```
use std::process::Command;

use locksmith_testkit::{EtcdCluster, NativeCluster, NativeServer, RedisServer};

fn main() {
    // The servers are dropped (killed by PID) when `run` returns, before the process exits.
    std::process::exit(run());
}

fn run() -> i32 {
    let mut args = std::env::args().skip(1);
    let Some(bin) = args.next() else {
        eprintln!("usage: bench_cluster PATH-TO-locksmith [bench options…]");
        return 2;
    };
    let cluster = NativeCluster::start(bin.as_ref(), 3);
    let single = NativeServer::start(bin.as_ref());
    let single_leases = NativeServer::start_with(bin.as_ref(), &["--durability", "leases"]);
    let etcd = EtcdCluster::start(3);
    let redis = RedisServer::start();
    let redis_durable = RedisServer::start_durable();
    let mut cmd = Command::new(&bin);
    cmd.arg("bench").args(args);
    for url in [cluster.url(), single.url(), single_leases.url(), etcd.url(), redis.url(), redis_durable.url()] {
        cmd.args(["--backend", &url]);
    }
    let status = cmd.status().expect("run locksmith bench");
    status.code().unwrap_or(1)
}
