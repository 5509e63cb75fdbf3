//! A raw text/meta-protocol connection to the test server, playing a third party or an
//! inspector, and the options every acquisition needs.
#![allow(dead_code)]

use std::time::Duration;

use locksmith_testkit::MemcachedServer;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufStream};
use tokio::net::TcpStream;

/// A unique lock name per test run.
pub fn unique(prefix: &str) -> String {
    format!("memcached-test/{prefix}/{:08x}", rand::random::<u32>())
}

/// Options every memcached acquisition needs: an explicit opt-in to holds without fencing.
pub fn unfenced() -> locksmith::LockOptions {
    locksmith::LockOptions::new().allow_unfenced()
}

pub async fn client(server: &MemcachedServer, ttl: Duration) -> locksmith::Client {
    locksmith::connect_with_ttl(&server.url(), ttl).await.unwrap()
}

/// One plain connection.
pub struct Raw {
    stream: BufStream<TcpStream>,
}

impl Raw {
    pub async fn connect(server: &MemcachedServer) -> Self {
        let stream = TcpStream::connect(server.addr()).await.unwrap();
        Self { stream: BufStream::new(stream) }
    }

    async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.unwrap();
        self.stream.flush().await.unwrap();
    }

    async fn line(&mut self) -> String {
        let mut line = String::new();
        self.stream.read_line(&mut line).await.unwrap();
        line.trim_end().to_string()
    }

    /// `mg KEY v t`: the value and the seconds left (-1: no expiry).
    pub async fn get(&mut self, key: &str) -> Option<(String, i64)> {
        self.send(format!("mg {key} v t\r\n").as_bytes()).await;
        let head = self.line().await;
        if head == "EN" {
            return None;
        }
        let words: Vec<&str> = head.split(' ').collect();
        assert_eq!(words[0], "VA", "mg answered {head:?}");
        let len: usize = words[1].parse().unwrap();
        let ttl = words.iter().find_map(|w| w.strip_prefix('t')).unwrap().parse().unwrap();
        let mut data = vec![0; len + 2];
        self.stream.read_exact(&mut data).await.unwrap();
        data.truncate(len);
        Some((String::from_utf8(data).unwrap(), ttl))
    }

    /// The text protocol's `add KEY 0 TTL LEN`, as the usual memcached lock recipes (pymemcache's
    /// `client.add(key, value, expire)`) send it: whether it was stored.
    pub async fn add(&mut self, key: &str, value: &str, ttl: u32) -> bool {
        self.send(format!("add {key} 0 {ttl} {}\r\n{value}\r\n", value.len()).as_bytes()).await;
        match self.line().await.as_str() {
            "STORED" => true,
            "NOT_STORED" => false,
            other => panic!("add answered {other:?}"),
        }
    }

    /// The text protocol's `set KEY 0 TTL LEN`.
    pub async fn set(&mut self, key: &str, value: &str, ttl: u32) {
        self.send(format!("set {key} 0 {ttl} {}\r\n{value}\r\n", value.len()).as_bytes()).await;
        assert_eq!(self.line().await, "STORED");
    }

    /// The text protocol's `delete KEY`: whether it was there.
    pub async fn delete(&mut self, key: &str) -> bool {
        self.send(format!("delete {key}\r\n").as_bytes()).await;
        self.line().await == "DELETED"
    }

    /// Writes `count` filler items with keys and values of the given lengths (those of the lock
    /// item: the same slab class, so they compete with it for the same memory), in one
    /// pipelined batch of `noreply` sets, and waits until the server has handled them all.
    pub async fn fill(&mut self, from: usize, count: usize, key_len: usize, value_len: usize) {
        let value = "f".repeat(value_len);
        let mut batch = Vec::with_capacity(count * (key_len + value_len + 40));
        for i in from..from + count {
            let key = format!("{:x<key_len$}", format!("filler/{i:08}/"));
            batch.extend_from_slice(format!("set {key} 0 0 {value_len} noreply\r\n{value}\r\n").as_bytes());
        }
        self.send(&batch).await;
        // An answered command after the batch: every set before it is done.
        self.send(b"mn\r\n").await;
        assert_eq!(self.line().await, "MN");
    }
}
