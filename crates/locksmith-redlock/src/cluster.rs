//! The N instances together: every operation goes to all of them concurrently and is counted
//! as votes.

use std::time::Duration;

use futures_util::future::join_all;
use locksmith_core::driver::millis;
use locksmith_core::{Error, Result};
use redis::Script;

use crate::instance::{Instance, Reply};
use crate::timing::Timeouts;
use crate::url::RedlockUrl;

/// Deletes the key only if it still holds our value: a release never frees someone else's hold.
const RELEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0";

/// Extends the key's expiry only if it still holds our value: never extends someone else's hold.
const EXTEND: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0";

/// The votes of one operation on every instance, in instance order.
#[derive(Debug, Clone)]
pub(crate) struct Tally {
    pub(crate) replies: Vec<Reply<bool>>,
}

impl Tally {
    /// Instances that said yes (set, deleted, extended).
    pub(crate) fn yes(&self) -> usize {
        self.replies.iter().filter(|r| matches!(r, Reply::Value(true))).count()
    }

    /// Instances that answered at all.
    pub(crate) fn reachable(&self) -> usize {
        self.replies.iter().filter(|r| r.reachable()).count()
    }
}

/// The instance set of one backend, shared by its sessions.
#[derive(Debug)]
pub(crate) struct Cluster {
    pub(crate) url: RedlockUrl,
    pub(crate) instances: Vec<Instance>,
    release: Script,
    extend: Script,
}

impl Cluster {
    pub(crate) fn new(url: RedlockUrl) -> Result<Self> {
        let mut instances = Vec::with_capacity(url.instances.len());
        for addr in &url.instances {
            let instance = Instance::new(addr.clone(), &url.instance_url(addr))
                .map_err(|e| Error::InvalidUrl { url: url.describe(), reason: format!("instance {addr}: {e}") })?;
            instances.push(instance);
        }
        Ok(Self { url, instances, release: Script::new(RELEASE), extend: Script::new(EXTEND) })
    }

    /// Votes needed: N/2 + 1.
    pub(crate) fn quorum(&self) -> usize {
        self.instances.len() / 2 + 1
    }

    /// The Redis key of a lock.
    pub(crate) fn key(&self, name: &str) -> String {
        format!("{}{name}", self.url.prefix)
    }

    /// `SET key value NX PX ttl` everywhere: yes where the key was free.
    pub(crate) async fn set_nx(&self, key: &str, value: &str, ttl: Duration, t: Timeouts) -> Tally {
        let ms = millis(ttl);
        let replies = join_all(self.instances.iter().map(|i| {
            i.run(t, move |mut c| async move {
                let set: Option<String> =
                    redis::cmd("SET").arg(key).arg(value).arg("NX").arg("PX").arg(ms).query_async(&mut c).await?;
                Ok(set.is_some())
            })
        }))
        .await;
        Tally { replies }
    }

    /// Owner-checked delete everywhere: yes where the key held `value`.
    pub(crate) async fn release(&self, key: &str, value: &str, t: Timeouts) -> Tally {
        let script = &self.release;
        let replies = join_all(self.instances.iter().map(|i| {
            i.run(t, move |mut c| async move {
                let n: i64 = script.key(key).arg(value).invoke_async(&mut c).await?;
                Ok(n == 1)
            })
        }))
        .await;
        Tally { replies }
    }

    /// Owner-checked PEXPIRE everywhere: yes where the key still held `value`.
    pub(crate) async fn extend(&self, key: &str, value: &str, ttl: Duration, t: Timeouts) -> Tally {
        let (script, ms) = (&self.extend, millis(ttl));
        let replies = join_all(self.instances.iter().map(|i| {
            i.run(t, move |mut c| async move {
                let n: i64 = script.key(key).arg(value).arg(ms).invoke_async(&mut c).await?;
                Ok(n == 1)
            })
        }))
        .await;
        Tally { replies }
    }

    /// `GET` and `PTTL` of `key` on every instance.
    pub(crate) async fn inspect(&self, key: &str, t: Timeouts) -> Vec<Reply<(Option<String>, i64)>> {
        join_all(self.instances.iter().map(|i| {
            i.run(t, move |mut c| async move {
                redis::pipe().cmd("GET").arg(key).cmd("PTTL").arg(key).query_async(&mut c).await
            })
        }))
        .await
    }

    /// Keys starting with the prefix on every instance (SCAN, at most `limit` per instance).
    pub(crate) async fn scan_prefix(&self, limit: usize, t: Timeouts) -> Vec<Reply<Vec<String>>> {
        let pattern = format!("{}*", escape_glob(&self.url.prefix));
        let pattern = pattern.as_str();
        join_all(self.instances.iter().map(|i| {
            i.run(t, move |mut c| async move {
                let mut keys = Vec::new();
                let mut cursor = 0u64;
                loop {
                    let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
                        .arg(cursor)
                        .arg("MATCH")
                        .arg(pattern)
                        .arg("COUNT")
                        .arg(100)
                        .query_async(&mut c)
                        .await?;
                    keys.extend(batch);
                    cursor = next;
                    if cursor == 0 || keys.len() >= limit {
                        return Ok(keys);
                    }
                }
            })
        }))
        .await
    }

    /// The error for "fewer than a quorum answered", naming the count and why the others did not.
    pub(crate) fn unavailable<T>(&self, replies: &[Reply<T>]) -> Error {
        let reachable = replies.iter().filter(|r| r.reachable()).count();
        let why: Vec<String> = self
            .instances
            .iter()
            .zip(replies)
            .filter_map(|(i, r)| match r {
                Reply::Down(reason) => Some(format!("{}: {reason}", i.addr)),
                _ => None,
            })
            .collect();
        Error::Unavailable {
            backend: self.url.describe(),
            message: format!(
                "redlock: only {reachable} of {} instances reachable, need {} ({})",
                self.instances.len(),
                self.quorum(),
                why.join("; ")
            ),
        }
    }
}

/// Escapes Redis glob metacharacters so the prefix matches literally.
fn escape_glob(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}
