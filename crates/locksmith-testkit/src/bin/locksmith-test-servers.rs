//! Real servers for tests written in other languages (the Python package's pytest suite), started
//! exactly as the Rust tests start them: `locksmith-test-servers KIND [LOCKSMITH_BIN]` starts one
//! server (`native`, `redis`, `etcd`, `zk`, `postgres`) on loopback with a free port and a temp
//! dir, prints its URL on one line, and stops it (by PID) when its standard input closes — so a
//! test runner that dies takes its servers with it. `native` needs the `locksmith` binary's path.
//! A server that cannot start exits 1 with the setup command on stderr.

use std::io::{Read, Write};
use std::path::PathBuf;

use locksmith_testkit::{EtcdServer, NativeServer, PostgresServer, RedisServer, ZkServer};

fn main() {
    let mut args = std::env::args().skip(1);
    let kind = args.next().unwrap_or_default();
    let bin = args.next().map(PathBuf::from);
    let (url, server): (String, Box<dyn std::any::Any>) = match (kind.as_str(), bin) {
        ("native", Some(bin)) => {
            let s = NativeServer::start(&bin);
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
            eprintln!("usage: locksmith-test-servers native LOCKSMITH_BIN | redis | etcd | zk | postgres");
            std::process::exit(2);
        }
    };
    let mut out = std::io::stdout();
    if writeln!(out, "{url}").and_then(|()| out.flush()).is_err() {
        return;
    }
    // Until the test runner closes our stdin (or dies); then the server is dropped: killed.
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    drop(server);
}
