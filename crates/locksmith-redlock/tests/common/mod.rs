//! Five real `redis-server` processes (no persistence) for the Redlock tests.
#![allow(dead_code)]

use std::time::Duration;

use locksmith_testkit::RedisServer;

/// Five independent Redis masters, killed on drop.
pub struct Five {
    pub servers: Vec<RedisServer>,
}

impl Five {
    pub fn start() -> Self {
        Self { servers: (0..5).map(|_| RedisServer::start()).collect() }
    }

    pub fn url(&self) -> String {
        let addrs: Vec<String> = self.servers.iter().map(RedisServer::addr).collect();
        format!("redlock://{}", addrs.join(","))
    }

    pub async fn client(&self, ttl: Duration) -> locksmith::Client {
        locksmith::connect_with_ttl(&self.url(), ttl).await.unwrap()
    }

    /// A plain connection to instance `i`, playing a third party or an inspector.
    pub async fn raw(&self, i: usize) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.servers[i].url()).unwrap().get_multiplexed_async_connection().await.unwrap()
    }

    /// `GET key` on instance `i`.
    pub async fn get(&self, i: usize, key: &str) -> Option<String> {
        let mut c = self.raw(i).await;
        redis::cmd("GET").arg(key).query_async(&mut c).await.unwrap()
    }

    /// Indices of the instances where `key` exists.
    pub async fn holding(&self, key: &str) -> Vec<usize> {
        let all: Vec<usize> = (0..self.servers.len()).collect();
        self.holding_on(key, &all).await
    }

    /// Indices among `among` (live instances) where `key` exists.
    pub async fn holding_on(&self, key: &str, among: &[usize]) -> Vec<usize> {
        let mut out = Vec::new();
        for &i in among {
            if self.get(i, key).await.is_some() {
                out.push(i);
            }
        }
        out
    }
}

/// A unique lock name per test run.
pub fn unique(prefix: &str) -> String {
    format!("redlock-test/{prefix}/{:08x}", rand::random::<u32>())
}

/// Options every Redlock acquisition needs: an explicit opt-in to holds without fencing tokens.
pub fn unfenced() -> locksmith::LockOptions {
    locksmith::LockOptions::new().allow_unfenced()
}
