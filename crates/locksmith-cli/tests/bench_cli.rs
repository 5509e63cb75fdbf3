//! `locksmith bench` measures every backend the suite can start, in one table.

use std::process::{Command, Stdio};

use locksmith_testkit::{EtcdServer, MySqlServer, NativeServer, PostgresServer, RedisServer, ZkServer};

const BIN: &str = env!("CARGO_BIN_EXE_locksmith");

/// One run over the native server, Redis, Redlock, etcd, ZooKeeper, PostgreSQL, MariaDB and
/// SQLite prints one table row per backend and one ratio line per backend after the first.
#[test]
fn bench_prints_one_table_for_every_backend() {
    let native = NativeServer::start(BIN.as_ref());
    let redis = RedisServer::start();
    let instances: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let redlock = format!("redlock://{}", instances.iter().map(RedisServer::addr).collect::<Vec<_>>().join(","));
    let etcd = EtcdServer::start();
    let zk = ZkServer::start();
    let pg = PostgresServer::start();
    let my = MySqlServer::start();
    let dir = tempfile::tempdir().unwrap();
    let sqlite = format!("sqlite://{}", dir.path().join("bench.db").display());
    let backends = [native.url(), redis.url(), redlock, etcd.url(), zk.url(), pg.url(), my.url(), sqlite];
    let mut cmd = Command::new(BIN);
    cmd.args(["bench", "--duration", "200ms", "--clients", "3", "--locks", "4"]).stdin(Stdio::null());
    for b in &backends {
        cmd.args(["--backend", b]);
    }
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}\n{stdout}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("cycle p50") && stdout.contains("fairness"), "{stdout}");
    for b in &backends {
        let row =
            stdout.lines().find(|l| l.starts_with(b.as_str())).unwrap_or_else(|| panic!("no row for {b}:\n{stdout}"));
        assert!(row.split('|').count() >= 8, "{row}");
    }
    assert_eq!(stdout.matches('÷').count(), backends.len() - 1, "one ratio line per extra backend:\n{stdout}");
}
