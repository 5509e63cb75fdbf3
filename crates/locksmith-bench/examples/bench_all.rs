//! Starts every backend the test suite can start (loopback, temp dirs, free ports) and runs
//! `locksmith bench` over all of them in one run, for `docs/benchmarks.md`. Every workload runs
//! by default: the timed ones, the herd (1,000 waiters, 50 hand-offs) and the raw-recipe
//! baselines; options after the binary's path go to `locksmith bench` as they are:
//!
//! ```text
//! cargo build --release -p locksmith-cli
//! cargo run --release -p locksmith-bench --example bench_all -- target/release/locksmith \
//!     --duration 2s --rounds 2 --plot docs/bench.svg
//! ```
//!
//! Servers as the test helpers start them: the native server in both durability modes
//! (`grants`, the default, and `leases`), Redis without persistence (also in Redisson's
//! read/write-lock layout, `?mode=rwlock`, plus one with `appendfsync always`), memcached (64 MiB), PostgreSQL with `fsync=off`, MariaDB and etcd with their defaults; the
//! SQL databases in every mode (lease table, advisory / `GET_LOCK`, row locks).
use std::process::Command;

use locksmith_testkit::{
    EtcdServer, MemcachedServer, MySqlServer, NativeServer, PostgresServer, RedisServer, ZkServer,
};

fn main() {
    // The servers are dropped (killed by PID) when `run` returns, before the process exits.
    std::process::exit(run());
}

fn run() -> i32 {
    let mut args = std::env::args().skip(1);
    let Some(bin) = args.next() else {
        eprintln!("usage: bench_all PATH-TO-locksmith [bench options…]");
        return 2;
    };
    let native = NativeServer::start(bin.as_ref());
    let native_leases = NativeServer::start_with(bin.as_ref(), &["--durability", "leases"]);
    let redis = RedisServer::start();
    let redis_fsync = RedisServer::start_durable();
    let instances: Vec<RedisServer> = (0..5).map(|_| RedisServer::start()).collect();
    let redlock = format!("redlock://{}", instances.iter().map(RedisServer::addr).collect::<Vec<_>>().join(","));
    let memcached = MemcachedServer::start();
    let etcd = EtcdServer::start();
    let zk = ZkServer::start();
    let pg = PostgresServer::start();
    let my = MySqlServer::start();
    let dir = tempfile::tempdir().expect("temp dir");
    let sqlite = format!("sqlite://{}", dir.path().join("bench.db").display());
    let mut cmd = Command::new(&bin);
    cmd.arg("bench").args(args);
    let pg_advisory = format!("{}?mode=advisory", pg.url());
    let pg_row_lock = format!("{}?mode=row_lock", pg.url());
    let my_get_lock = format!("{}?mode=get_lock", my.url());
    // Read/write locks and semaphores on Redis take Redisson's layouts (`?mode=rwlock`).
    let redis_rwlock = format!("{}?mode=rwlock", redis.url());
    let my_row_lock = format!("{}?mode=row_lock", my.url());
    for url in [
        native.url(),
        native_leases.url(),
        redis.url(),
        redis_rwlock,
        redis_fsync.url(),
        redlock,
        memcached.url(),
        etcd.url(),
        zk.url(),
        pg.url(),
        pg_advisory,
        pg_row_lock,
        my.url(),
        my_get_lock,
        my_row_lock,
        sqlite,
    ] {
        cmd.args(["--backend", &url]);
    }
    let status = cmd.status().expect("run locksmith bench");
    status.code().unwrap_or(1)
}
