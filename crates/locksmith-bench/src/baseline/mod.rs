//! Raw-recipe baselines: the uncontended lock→unlock cycle of the plain recipe a user would
//! write by hand, on the same server, through the same client crate the driver uses but
//! without locksmith's engine (no session keeper, no fencing counter, no wait queue). The ratio
//! of the driver's cycle to this one is the driver's overhead.
//!
//! One file per backend family, each behind the cargo feature of its backend (its client crate
//! is compiled only then): [`redis`], [`etcd`], [`zk`], [`sql`].

#[cfg(feature = "etcd")]
mod etcd;
#[cfg(feature = "redis")]
mod redis;
#[cfg(feature = "sql")]
mod sql;
#[cfg(feature = "zk")]
mod zk;

use std::time::Duration;

use async_trait::async_trait;
use locksmith::driver::BackendUrl;
use tokio::time::Instant;

use super::stats::{record, Failure, Run};
use super::workloads::WARMUP_CYCLES;

/// An open connection and what one cycle needs.
#[async_trait]
trait Recipe: Send {
    /// One acquire + release; an acquisition that finds the lock taken is an error (nobody
    /// else uses the bench's lock name).
    ///
    /// # Cancel safety
    /// Not cancel safe: a dropped cycle may leave the lock taken until the connection closes or
    /// the lease expires.
    async fn cycle(&mut self) -> Result<(), Failure>;

    /// Gives back what the recipe set up (best effort: the server cleans up after a closed
    /// connection or an expired lease anyway).
    ///
    /// # Cancel safety
    /// Cancel safe: dropping it drops the connection, which the server cleans up after.
    async fn close(self: Box<Self>);
}

/// The recipe measured for `url`, if its backend has one.
pub(crate) fn recipe(url: &str) -> Option<&'static str> {
    match scheme(url) {
        #[cfg(feature = "redis")]
        "redis" => Some(redis::RECIPE),
        #[cfg(feature = "etcd")]
        "etcd" => Some(etcd::RECIPE),
        #[cfg(feature = "zk")]
        "zk" => Some(zk::RECIPE),
        #[cfg(feature = "sql")]
        "postgres" | "postgresql" => Some(sql::POSTGRES_RECIPE),
        #[cfg(feature = "sql")]
        "mysql" => Some(sql::MYSQL_RECIPE),
        _ => None,
    }
}

/// Runs the recipe of `url`'s backend on lock `name` for `duration` after [`WARMUP_CYCLES`]
/// unrecorded cycles; `None` when the backend has no baseline.
///
/// # Cancel safety
/// Not cancel safe, as [`Recipe::cycle`].
pub(crate) async fn baseline(url: &str, ttl: Duration, duration: Duration, name: &str) -> Result<Option<Run>, Failure> {
    let Some(mut recipe) = connect(url, name, ttl).await? else {
        return Ok(None);
    };
    let run = timed(recipe.as_mut(), duration).await;
    recipe.close().await;
    run.map(Some)
}

/// Opens the recipe of `url`'s backend for lock `name`; `None` when it has none.
// Without some backends' features, `ttl` or `name` has no recipe left to use it.
#[cfg_attr(not(all(feature = "redis", feature = "etcd", feature = "zk", feature = "sql")), allow(unused_variables))]
async fn connect(url: &str, name: &str, ttl: Duration) -> Result<Option<Box<dyn Recipe>>, Failure> {
    match scheme(url) {
        #[cfg(feature = "redis")]
        "redis" => Ok(Some(Box::new(redis::connect(url, name, ttl).await?))),
        #[cfg(feature = "etcd")]
        "etcd" => Ok(Some(Box::new(etcd::connect(url, name, ttl).await?))),
        #[cfg(feature = "zk")]
        "zk" => Ok(Some(Box::new(zk::connect(url, name).await?))),
        #[cfg(feature = "sql")]
        "postgres" | "postgresql" => Ok(Some(Box::new(sql::Postgres::connect(url).await?))),
        #[cfg(feature = "sql")]
        "mysql" => Ok(Some(Box::new(sql::MySql::connect(url, name).await?))),
        _ => Ok(None),
    }
}

/// Warm-up, then cycles until `duration` has passed.
async fn timed(recipe: &mut dyn Recipe, duration: Duration) -> Result<Run, Failure> {
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

/// What a client error becomes: the bench's own failure, naming the recipe's backend.
#[cfg(any(feature = "redis", feature = "etcd", feature = "zk", feature = "sql"))]
fn backend<E: std::fmt::Display>(what: &'static str) -> impl Fn(E) -> Failure {
    move |e| Failure::Internal(format!("baseline ({what}): {e}"))
}

/// The failure of an acquisition that found the lock taken.
#[cfg(any(feature = "redis", feature = "etcd", feature = "sql"))]
fn taken(what: &str) -> Failure {
    Failure::Internal(format!("baseline: {what} found the lock taken"))
}

/// The scheme of `url` as the drivers read it ("" when it does not parse).
fn scheme(url: &str) -> &'static str {
    BackendUrl::parse(url).map_or("", |u| u.scheme().name)
}

/// What the client crate connects to: the URL with credentials and the client's own options,
/// without locksmith's (`mode`, `prefix`, `schema`, `pool_size`).
#[cfg(any(feature = "redis", feature = "sql", test))]
fn driver_url(url: &str) -> Result<String, Failure> {
    let mut u = BackendUrl::parse(url).map_err(Failure::Backend)?;
    for ours in ["mode", "prefix", "schema", "pool_size"] {
        u.take_option(ours);
    }
    Ok(u.to_driver_url())
}

/// `host:port[,host:port…]` of `url`, default ports filled in.
#[cfg(any(feature = "etcd", feature = "zk", test))]
fn hosts(url: &str) -> Result<String, Failure> {
    let u = BackendUrl::parse(url).map_err(Failure::Backend)?;
    Ok(u.hosts().iter().map(ToString::to_string).collect::<Vec<_>>().join(","))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The recipes read the server's address from the URL as the drivers do.
    #[test]
    fn urls_are_taken_apart_like_the_drivers_do() {
        assert_eq!(scheme("redis://127.0.0.1:6379/0"), "redis");
        assert_eq!(scheme("no-scheme"), "");
        assert_eq!(
            driver_url("postgres://u:p%40w@h/db?mode=advisory&sslmode=require").ok().as_deref(),
            Some("postgres://u:p%40w@h:5432/db?sslmode=require")
        );
        assert_eq!(hosts("etcd://127.0.0.1:2379,127.0.0.1").ok().as_deref(), Some("127.0.0.1:2379,127.0.0.1:2379"));
        assert_eq!(hosts("zk://127.0.0.1:2181/chroot").ok().as_deref(), Some("127.0.0.1:2181"));
    }

    /// Backends without a raw recipe (the native server, Redlock, SQLite) get no baseline row.
    #[test]
    fn only_backends_with_a_plain_recipe_have_a_baseline() {
        for url in ["locksmith://127.0.0.1:7531", "memory://", "redlock://a:1,b:2", "sqlite:///tmp/x.db"] {
            assert_eq!(recipe(url), None, "{url}");
        }
        #[cfg(all(feature = "redis", feature = "etcd", feature = "zk", feature = "sql"))]
        for (url, words) in [
            ("redis://127.0.0.1:6379", "SET NX PX"),
            ("etcd://127.0.0.1:2379", "txn create_revision"),
            ("zk://127.0.0.1:2181", "ephemeral"),
            ("postgres://u@h/db", "pg_try_advisory_lock"),
            ("mysql://u@h/db", "GET_LOCK"),
        ] {
            assert!(recipe(url).is_some_and(|r| r.contains(words)), "{url}: {:?}", recipe(url));
        }
    }
}
