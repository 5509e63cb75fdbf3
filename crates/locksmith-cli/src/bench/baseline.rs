//! Raw-recipe baselines: the uncontended lock→unlock cycle of the plain recipe a user would
//! write by hand, on the same server, through the same client crate the driver uses but
//! without locksmith's engine (no session keeper, no fencing counter, no wait queue). The ratio
//! of the driver's cycle to this one is the driver's overhead.

use std::time::Duration;

use sqlx::Connection;
use tokio::time::Instant;

use super::stats::{record, Failure, Run};
use super::workloads::WARMUP_CYCLES;

/// Redis: the single-instance recipe of the Redis documentation.
const REDIS: &str = "SET NX PX + Lua compare-and-delete";
/// etcd: a create-if-absent transaction bound to a lease granted once.
const ETCD: &str = "txn create_revision==0 → put with lease; delete";
/// ZooKeeper: one ephemeral node.
const ZK: &str = "create ephemeral node; delete";
/// PostgreSQL: session advisory locks.
const POSTGRES: &str = "pg_try_advisory_lock; pg_advisory_unlock";
/// MySQL/MariaDB: named locks.
const MYSQL: &str = "GET_LOCK(name, 0); RELEASE_LOCK";

/// The Lua compare-and-delete of the Redis recipe: delete the key only if it is still ours.
const REDIS_UNLOCK: &str =
    r#"if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end"#;

/// The recipe measured for `url`, if its backend has one.
pub(crate) fn recipe(url: &str) -> Option<&'static str> {
    match scheme(url) {
        "redis" | "rediss" => Some(REDIS),
        "etcd" => Some(ETCD),
        "zk" => Some(ZK),
        "postgres" | "postgresql" => Some(POSTGRES),
        "mysql" | "mariadb" => Some(MYSQL),
        _ => None,
    }
}

/// Runs the recipe of `url`'s backend on lock `name` for `duration` after [`WARMUP_CYCLES`]
/// unrecorded cycles; `None` when the backend has no baseline.
pub(crate) async fn baseline(url: &str, ttl: Duration, duration: Duration, name: &str) -> Result<Option<Run>, Failure> {
    let mut recipe = match scheme(url) {
        "redis" | "rediss" => redis(url, name, ttl).await?,
        "etcd" => etcd(url, name, ttl).await?,
        "zk" => zk(url, name).await?,
        "postgres" | "postgresql" => postgres(url).await?,
        "mysql" | "mariadb" => mysql(url, name).await?,
        _ => return Ok(None),
    };
    let run = timed(&mut recipe, duration).await;
    recipe.close().await;
    run.map(Some)
}

/// Warm-up, then cycles until `duration` has passed.
async fn timed(recipe: &mut Recipe, duration: Duration) -> Result<Run, Failure> {
    for _ in 0..WARMUP_CYCLES {
        recipe.cycle().await?;
    }
    let mut run = Run::new()?;
    let start = Instant::now();
    let mut cycles = 0;
    while start.elapsed() < duration {
        let t = Instant::now();
        recipe.cycle().await?;
        record(&mut run.cycle, t.elapsed());
        cycles += 1;
    }
    run.elapsed = start.elapsed();
    run.acquisitions.push(cycles);
    Ok(run)
}

/// An open connection and what one cycle needs.
enum Recipe {
    Redis { conn: redis::aio::MultiplexedConnection, key: String, ttl_ms: u64, unlock: redis::Script },
    Etcd { client: locksmith_etcd::raw::Client, key: String, lease: i64 },
    Zk { client: zookeeper_client::Client, path: String },
    Postgres { conn: sqlx::PgConnection },
    MySql { conn: sqlx::MySqlConnection, name: String },
}

/// Advisory lock id of the PostgreSQL recipe (any constant: the bench is its only user).
const PG_LOCK_ID: i64 = 0x6c6f_636b;

impl Recipe {
    /// One acquire + release; an acquisition that finds the lock taken is an error (nobody
    /// else uses the bench's lock name).
    async fn cycle(&mut self) -> Result<(), Failure> {
        let taken = |what: &str| Failure::Internal(format!("baseline: {what} found the lock taken"));
        match self {
            Self::Redis { conn, key, ttl_ms, unlock } => {
                let set: Option<String> = redis::cmd("SET")
                    .arg(&*key)
                    .arg("bench")
                    .arg("NX")
                    .arg("PX")
                    .arg(*ttl_ms)
                    .query_async(conn)
                    .await
                    .map_err(backend("redis"))?;
                if set.is_none() {
                    return Err(taken("SET NX"));
                }
                let _: i64 = unlock.key(&*key).arg("bench").invoke_async(conn).await.map_err(backend("redis"))?;
            }
            Self::Etcd { client, key, lease } => {
                use locksmith_etcd::raw::pb::{Compare, RequestOp, TxnRequest};
                let txn = TxnRequest {
                    compare: vec![Compare::create_revision_is(key.as_str(), 0)],
                    success: vec![RequestOp::put(key.as_str(), "bench", *lease)],
                    failure: Vec::new(),
                };
                if !client.txn(txn).await.map_err(backend("etcd"))?.succeeded {
                    return Err(taken("the txn"));
                }
                client.delete(key.as_str()).await.map_err(backend("etcd"))?;
            }
            Self::Zk { client, path } => {
                let opts = zookeeper_client::CreateMode::Ephemeral.with_acls(zookeeper_client::Acls::anyone_all());
                client.create(path, b"bench", &opts).await.map_err(backend("zk"))?;
                client.delete(path, None).await.map_err(backend("zk"))?;
            }
            Self::Postgres { conn } => {
                let got: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
                    .bind(PG_LOCK_ID)
                    .fetch_one(&mut *conn)
                    .await
                    .map_err(backend("postgres"))?;
                if !got {
                    return Err(taken("pg_try_advisory_lock"));
                }
                sqlx::query_scalar::<_, bool>("SELECT pg_advisory_unlock($1)")
                    .bind(PG_LOCK_ID)
                    .fetch_one(&mut *conn)
                    .await
                    .map_err(backend("postgres"))?;
            }
            Self::MySql { conn, name } => {
                // CAST: GET_LOCK's integer type differs between MySQL and MariaDB.
                let got: Option<i64> = sqlx::query_scalar("SELECT CAST(GET_LOCK(?, 0) AS SIGNED)")
                    .bind(&*name)
                    .fetch_one(&mut *conn)
                    .await
                    .map_err(backend("mysql"))?;
                if got != Some(1) {
                    return Err(taken("GET_LOCK"));
                }
                sqlx::query_scalar::<_, Option<i64>>("SELECT CAST(RELEASE_LOCK(?) AS SIGNED)")
                    .bind(&*name)
                    .fetch_one(&mut *conn)
                    .await
                    .map_err(backend("mysql"))?;
            }
        }
        Ok(())
    }

    /// Gives back what the recipe set up (best effort: the server cleans up after a closed
    /// connection or an expired lease anyway).
    async fn close(self) {
        match self {
            Self::Redis { .. } => {}
            Self::Etcd { mut client, lease, .. } => {
                let _ = client.lease_revoke(lease).await;
            }
            Self::Zk { client, .. } => drop(client),
            Self::Postgres { conn } => {
                let _ = conn.close().await;
            }
            Self::MySql { conn, .. } => {
                let _ = conn.close().await;
            }
        }
    }
}

fn backend<E: std::fmt::Display>(what: &'static str) -> impl Fn(E) -> Failure {
    move |e| Failure::Internal(format!("baseline ({what}): {e}"))
}

fn scheme(url: &str) -> &str {
    url.split_once("://").map_or("", |(s, _)| s)
}

/// The URL without locksmith's own query options.
fn without_query(url: &str) -> &str {
    url.split_once('?').map_or(url, |(u, _)| u)
}

/// `host:port[,host:port…]` of `scheme://hosts[/path][?query]`.
fn hosts(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    &rest[..end]
}

async fn redis(url: &str, name: &str, ttl: Duration) -> Result<Recipe, Failure> {
    let client = redis::Client::open(without_query(url)).map_err(backend("redis"))?;
    let conn = client.get_multiplexed_async_connection().await.map_err(backend("redis"))?;
    let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
    Ok(Recipe::Redis { conn, key: format!("{name}-raw"), ttl_ms, unlock: redis::Script::new(REDIS_UNLOCK) })
}

async fn etcd(url: &str, name: &str, ttl: Duration) -> Result<Recipe, Failure> {
    let endpoints: Vec<String> = hosts(url).split(',').map(|h| format!("http://{h}")).collect();
    let mut client = locksmith_etcd::raw::Client::connect(&endpoints).await.map_err(backend("etcd"))?;
    let secs = i64::try_from(ttl.as_secs().max(1)).unwrap_or(i64::MAX);
    let lease = client.lease_grant(secs).await.map_err(backend("etcd"))?.id;
    Ok(Recipe::Etcd { client, key: format!("{name}-raw"), lease })
}

async fn zk(url: &str, name: &str) -> Result<Recipe, Failure> {
    let client = zookeeper_client::Client::connect(hosts(url)).await.map_err(backend("zk"))?;
    Ok(Recipe::Zk { client, path: format!("/{name}-raw") })
}

async fn postgres(url: &str) -> Result<Recipe, Failure> {
    let conn = sqlx::PgConnection::connect(without_query(url)).await.map_err(backend("postgres"))?;
    Ok(Recipe::Postgres { conn })
}

async fn mysql(url: &str, name: &str) -> Result<Recipe, Failure> {
    let conn = sqlx::MySqlConnection::connect(without_query(url)).await.map_err(backend("mysql"))?;
    Ok(Recipe::MySql { conn, name: format!("{name}-raw") })
}
