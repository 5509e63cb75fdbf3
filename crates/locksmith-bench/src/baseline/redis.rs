//! Redis: the single-instance recipe of the Redis documentation, `SET key token NX PX ttl` and a
//! Lua compare-and-delete.

use std::time::Duration;

use async_trait::async_trait;

use super::{backend, driver_url, taken, Failure, Recipe};

/// What the baseline row calls it.
pub(super) const RECIPE: &str = "SET NX PX + Lua compare-and-delete";

/// The Lua compare-and-delete of the recipe: delete the key only if it is still ours.
const UNLOCK: &str =
    r#"if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end"#;

/// One multiplexed connection, the key and the unlock script.
pub(super) struct Redis {
    conn: redis::aio::MultiplexedConnection,
    key: String,
    ttl_ms: u64,
    unlock: redis::Script,
}

/// Connects to the server of `url`; the key is `<name>-raw`.
pub(super) async fn connect(url: &str, name: &str, ttl: Duration) -> Result<Redis, Failure> {
    let client = redis::Client::open(driver_url(url)?).map_err(backend("redis"))?;
    let conn = client.get_multiplexed_async_connection().await.map_err(backend("redis"))?;
    let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX);
    Ok(Redis { conn, key: format!("{name}-raw"), ttl_ms, unlock: redis::Script::new(UNLOCK) })
}

#[async_trait]
impl Recipe for Redis {
    async fn cycle(&mut self) -> Result<(), Failure> {
        let set: Option<String> = redis::cmd("SET")
            .arg(&self.key)
            .arg("bench")
            .arg("NX")
            .arg("PX")
            .arg(self.ttl_ms)
            .query_async(&mut self.conn)
            .await
            .map_err(backend("redis"))?;
        if set.is_none() {
            return Err(taken("SET NX"));
        }
        let _: i64 =
            self.unlock.key(&self.key).arg("bench").invoke_async(&mut self.conn).await.map_err(backend("redis"))?;
        Ok(())
    }

    async fn close(self: Box<Self>) {}
}
