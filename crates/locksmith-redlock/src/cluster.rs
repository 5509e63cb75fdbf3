//! The N instances together: every operation goes to all of them concurrently and is counted
//! as votes.

use std::time::Duration;

use futures_util::future::join_all;
use locksmith_core::driver::millis;
use locksmith_core::Error;
use redis::Script;

use crate::instance::{Denial, Instance, Reply};
use crate::timing::Timeouts;

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
    /// The set as named in messages (no password).
    pub(crate) describe: String,
    /// Prepended to every lock name to form the Redis key.
    pub(crate) prefix: String,
    pub(crate) instances: Vec<Instance>,
    release: Script,
    extend: Script,
}

impl Cluster {
    /// No I/O: every instance connects on first use.
    pub(crate) fn new(describe: String, prefix: String, clients: Vec<redis::Client>) -> Self {
        let instances = clients.into_iter().map(Instance::new).collect();
        Self { describe, prefix, instances, release: Script::new(RELEASE), extend: Script::new(EXTEND) }
    }

    /// Votes needed: N/2 + 1.
    pub(crate) fn quorum(&self) -> usize {
        self.instances.len() / 2 + 1
    }

    /// The Redis key of a lock.
    pub(crate) fn key(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
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

    /// `PING` on every instance: who answers now.
    pub(crate) async fn ping(&self, t: Timeouts) -> Vec<Reply<()>> {
        join_all(
            self.instances
                .iter()
                .map(|i| i.run(t, |mut c| async move { redis::cmd("PING").query_async::<()>(&mut c).await })),
        )
        .await
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
        let pattern = format!("{}*", escape_glob(&self.prefix));
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

    /// The error for a round without a quorum of answers: the instances' refusal
    /// ([`Cluster::hopeless`]) when that alone rules a quorum out, [`Error::Unavailable`]
    /// otherwise.
    pub(crate) fn failure<T>(&self, replies: &[Reply<T>]) -> Error {
        self.hopeless(replies).unwrap_or_else(|| self.unavailable(replies))
    }

    /// An [`Error::Auth`] or [`Error::Config`] when so many instances refused our credentials or
    /// TLS settings that the others cannot make a quorum: no retry can succeed until someone
    /// fixes the configuration. One refusing instance of three is only a missing vote (Redlock
    /// tolerates it), reported by the warnings of the rounds. Auth wins over Config: with both,
    /// the credentials are what the operator fixes first.
    pub(crate) fn hopeless<T>(&self, replies: &[Reply<T>]) -> Option<Error> {
        let denied: Vec<(&Instance, &Denial)> = self
            .instances
            .iter()
            .zip(replies)
            .filter_map(|(i, r)| match r {
                Reply::Denied(d) => Some((i, d)),
                _ => None,
            })
            .collect();
        if self.instances.len() - denied.len() >= self.quorum() {
            return None;
        }
        let auth = denied.iter().any(|(_, d)| d.auth);
        let reasons: Vec<String> = denied
            .iter()
            .filter(|(_, d)| d.auth == auth)
            .map(|(i, d)| format!("instance {}: {}", i.addr, d.message))
            .collect();
        let message = format!(
            "redlock: {} of {} instances refused us, need {} ({})",
            denied.len(),
            self.instances.len(),
            self.quorum(),
            reasons.join("; ")
        );
        let backend = self.describe.clone();
        Some(match auth {
            true => Error::Auth { backend, message },
            false => Error::Config { backend, message },
        })
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
                Reply::Denied(d) => Some(format!("{}: refused: {}", i.addr, d.message)),
                _ => None,
            })
            .collect();
        Error::Unavailable {
            backend: self.describe.clone(),
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
