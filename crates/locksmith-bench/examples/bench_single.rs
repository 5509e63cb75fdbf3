//! The native single node (default durability, `grants`) against Redis with the same
//! durability (`appendfsync always`) and without persistence, in one `locksmith bench` run
//! (issue 27). With `--before OTHER-locksmith` a second single node served by another build
//! joins the run, right after the first: a before/after comparison on the same machine at the
//! same time. Options after that go to `locksmith bench` as they are:
//!
//! ```text
//! cargo build --release -p locksmith-cli
//! cargo run --release -p locksmith-bench --example bench_single -- target/release/locksmith \
//!     --workloads uncontended,contended,many --duration 2s --rounds 3 --floor-dir target
//! ```
use std::process::Command;

use locksmith_bench::ExampleArgs;
use locksmith_testkit::{NativeServer, RedisServer};

fn main() {
    // The servers are dropped (killed by PID) when `run` returns, before the process exits.
    std::process::exit(run());
}

fn run() -> i32 {
    let Some(ExampleArgs { bin, before, bench: args, .. }) = ExampleArgs::parse(std::env::args().skip(1)) else {
        eprintln!("usage: bench_single PATH-TO-locksmith [--before PATH-TO-OTHER-locksmith] [bench options…]");
        return 2;
    };
    let native = NativeServer::start(bin.as_ref());
    let native_before = before.map(|b| NativeServer::start(b.as_ref()));
    let redis_fsync = RedisServer::start_durable();
    let redis = RedisServer::start();
    let mut cmd = Command::new(&bin);
    cmd.arg("bench").args(&args);
    let urls = std::iter::once(native.url())
        .chain(native_before.as_ref().map(NativeServer::url))
        .chain([redis_fsync.url(), redis.url()]);
    for url in urls {
        cmd.args(["--backend", &url]);
    }
    let status = cmd.status().expect("run locksmith bench");
    status.code().unwrap_or(1)
}
