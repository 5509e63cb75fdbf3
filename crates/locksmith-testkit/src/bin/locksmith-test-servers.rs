//! Real servers for tests written in other languages (the Python package's pytest suite), started
//! exactly as the Rust tests start them: `locksmith-test-servers KIND [LOCKSMITH_BIN]` starts one
//! server (`native`, `cluster`, `redis`, `etcd`, `zk`, `postgres`) on loopback with a free port
//! and a temp dir, prints its URL on one line, and stops it (by PID) when its standard input
//! closes — so a test runner that dies takes its servers with it. `native` and `cluster` need the
//! `locksmith` binary's path. A server that cannot start exits 1 with the setup command on stderr.
//!
//! `cluster` is a 3-node native cluster ([`NativeCluster`]); its URL names every node. It takes
//! commands on standard input, one a line, each answered with one line on standard output:
//! `kill-leader` kills the node that leads now with `kill -9` and answers its id; `leader`
//! answers the id of the node that leads now (after waiting up to 20 s for one).

use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::time::Duration;

use locksmith_testkit::{EtcdServer, NativeCluster, NativeServer, PostgresServer, RedisServer, ZkServer};

fn main() {
    let mut args = std::env::args().skip(1);
    let kind = args.next().unwrap_or_default();
    let bin = args.next().map(PathBuf::from);
    let (url, mut server): (String, Box<dyn std::any::Any>) = match (kind.as_str(), bin) {
        ("native", Some(bin)) => {
            let s = NativeServer::start(&bin);
            (s.url(), Box::new(s))
        }
        ("cluster", Some(bin)) => {
            let s = NativeCluster::start(&bin, 3);
            (s.url(), Box::new(s))
        }
        ("redis", _) => {
            let s = RedisServer::start();
            (s.url(), Box::new(s))
        }
        ("etcd", _) => {
            let s = EtcdServer::start();
            (s.url(), Box::new(s))
        }
        ("zk", _) => {
            let s = ZkServer::start();
            (s.url(), Box::new(s))
        }
        ("postgres", _) => {
            let s = PostgresServer::start();
            (s.url(), Box::new(s))
        }
        _ => {
            eprintln!(
                "usage: locksmith-test-servers native LOCKSMITH_BIN | cluster LOCKSMITH_BIN | redis | etcd | zk | postgres"
            );
            std::process::exit(2);
        }
    };
    let mut out = std::io::stdout();
    if writeln!(out, "{url}").and_then(|()| out.flush()).is_err() {
        return;
    }
    // Until the test runner closes our stdin (or dies); then the server is dropped: killed.
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let answer = match server.downcast_mut::<NativeCluster>() {
            Some(cluster) => command(cluster, line.trim()),
            None => format!("error: a {kind} server takes no commands"),
        };
        if writeln!(out, "{answer}").and_then(|()| out.flush()).is_err() {
            break;
        }
    }
    drop(server);
}

/// Runs one command of the cluster's and returns its one-line answer.
fn command(cluster: &mut NativeCluster, line: &str) -> String {
    let limit = Duration::from_secs(20);
    match line {
        "kill-leader" => {
            let leader = cluster.wait_for_leader(limit);
            cluster.kill9(leader);
            leader.to_string()
        }
        "leader" => cluster.wait_for_leader(limit).to_string(),
        other => format!("error: unknown command {other:?} (kill-leader, leader)"),
    }
}
