//! Helpers shared by the integration tests: a raw Redis connection that plays "the other
//! client" (redis-py, Redisson, an operator with redis-cli).
#![allow(dead_code)]

use redis::aio::MultiplexedConnection;

/// A plain connection to the test server, bypassing locksmith.
pub async fn raw(url: &str) -> MultiplexedConnection {
    redis::Client::open(url).unwrap().get_multiplexed_async_connection().await.unwrap()
}

/// Runs one command on `c` and converts its reply.
pub async fn cmd<T: redis::FromRedisValue>(c: &mut MultiplexedConnection, args: &[&str]) -> T {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query_async(c).await.unwrap()
}

/// A unique lock name per test run.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{:08x}", rand::random::<u32>())
}
