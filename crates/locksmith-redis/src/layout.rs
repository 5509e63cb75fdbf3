//! Where a lock lives in Redis: key, fencing counter, waiter queue or release channel, and the
//! holder's identity, for each of the two interoperable layouts.

use locksmith_core::Error;

/// Which lock layout a backend uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// redis-py `Lock`: a string key holding a random token (`SET key token NX PX ttl`).
    Plain,
    /// Redisson `RLock`: a hash whose field `<uuid>:<owner>` holds a hold count.
    Reentrant,
}

/// Key naming for one backend.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    pub(crate) mode: Mode,
    pub(crate) prefix: String,
}

impl Layout {
    /// The lock's key: prefix + name.
    pub(crate) fn key(&self, name: &str) -> String {
        format!("{}{name}", self.prefix)
    }

    /// The fencing counter of `key`: never expires and is never deleted, so tokens only grow.
    /// Reentrant mode uses Redisson's `RFencedLock` token key, so Java and Rust share one counter.
    pub(crate) fn fence_key(&self, key: &str) -> String {
        match self.mode {
            Mode::Plain => format!("{key}:fence"),
            Mode::Reentrant => redisson_prefix_name("redisson_lock_token", key),
        }
    }

    /// Refuses a name whose key another lock's fencing counter could occupy. Plain mode only:
    /// lock `a`'s counter is key `a:fence`, so a lock named `a:fence` would find a counter where
    /// its key should be and wait for it forever.
    pub(crate) fn check_name(&self, name: &str) -> Result<(), Error> {
        match self.mode == Mode::Plain && name.ends_with(":fence") {
            true => Err(Error::InvalidArgument(format!(
                "redis plain mode: lock name {name:?} ends in \":fence\", which is reserved for fencing counters \
                 (lock X counts its tokens in key X:fence); choose another name"
            ))),
            false => Ok(()),
        }
    }

    /// A `SCAN MATCH` pattern that finds every fencing counter of this layout (and perhaps other
    /// keys: [`Layout::name_of_fence`] tells which are ours).
    pub(crate) fn fence_pattern(&self) -> String {
        match self.mode {
            Mode::Plain => format!("{}*:fence", glob_escape(&self.prefix)),
            Mode::Reentrant => "redisson_lock_token:*".to_string(),
        }
    }

    /// The lock name whose fencing counter is `fence`, if `fence` is one of this layout's
    /// counters: the name is recovered and accepted only if it maps back to `fence` exactly.
    pub(crate) fn name_of_fence(&self, fence: &str) -> Option<String> {
        let key = match self.mode {
            Mode::Plain => fence.strip_suffix(":fence")?,
            Mode::Reentrant => {
                let rest = fence.strip_prefix("redisson_lock_token:")?;
                rest.strip_prefix('{').and_then(|r| r.strip_suffix('}')).filter(|k| !k.contains('{')).unwrap_or(rest)
            }
        };
        let name = key.strip_prefix(self.prefix.as_str())?;
        let valid = !name.is_empty() && self.check_name(name).is_ok() && self.fence_key(key) == fence;
        valid.then(|| name.to_string())
    }

    /// Reentrant mode: Redisson's release channel of `key`, so its unlocks wake our waiters and
    /// ours wake its.
    pub(crate) fn channel(&self, key: &str) -> String {
        redisson_prefix_name("redisson_lock__channel", key)
    }

    /// Plain mode: the waiter queue of `key` (all names in the key's cluster slot).
    pub(crate) fn queue(&self, key: &str) -> Queue {
        let waiters = redisson_prefix_name("locksmith:waiters", key);
        Queue {
            deadlines: format!("{waiters}:deadlines"),
            waiters,
            wake_prefix: format!("{}:", redisson_prefix_name("locksmith:wake", key)),
        }
    }

    /// The holder's identity stored in Redis. Plain: a fresh random token per hold (like
    /// redis-py's `uuid1().hex`). Reentrant: Redisson's `<client-uuid>:<thread-id>` with the
    /// session id as the uuid and the engine's owner id as the thread id.
    pub(crate) fn ident(&self, session_id: &str, owner: &str) -> String {
        match self.mode {
            Mode::Plain => format!("{:032x}", rand::random::<u128>()),
            Mode::Reentrant => format!("{session_id}:{owner}"),
        }
    }
}

/// The waiter queue of one plain lock: who waits in which order, and until when each entry is
/// live.
#[derive(Debug, Clone)]
pub(crate) struct Queue {
    /// zset: waiter id → enqueue time (server µs), the order in which waiters are served.
    pub(crate) waiters: String,
    /// zset: waiter id → deadline (server ms) after which the entry is stale and dropped.
    pub(crate) deadlines: String,
    /// A waiter's wake-up channel is this prefix + its id.
    pub(crate) wake_prefix: String,
}

impl Queue {
    /// The channel a release publishes on to wake waiter `id`.
    pub(crate) fn wake_channel(&self, id: &str) -> String {
        format!("{}{id}", self.wake_prefix)
    }
}

/// Redisson's `RedissonObject.prefixName`: a hash tag around the name unless it has one.
fn redisson_prefix_name(prefix: &str, name: &str) -> String {
    if name.contains('{') {
        format!("{prefix}:{name}")
    } else {
        format!("{prefix}:{{{name}}}")
    }
}

/// `s` with Redis glob metacharacters escaped, so a prefix matches only itself.
fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// A random version-4 UUID in its text form, as Redisson uses for a client id.
pub(crate) fn random_uuid() -> String {
    let mut v = rand::random::<u128>();
    v = (v & !(0xf << 76)) | (0x4 << 76); // version 4
    v = (v & !(0x3 << 62)) | (0x2 << 62); // RFC 4122 variant
    let h = format!("{v:032x}");
    format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Key names match redis-py (plain) and Redisson (reentrant).
    #[test]
    fn names_match_the_ecosystems() {
        let plain = Layout { mode: Mode::Plain, prefix: "p:".into() };
        assert_eq!(plain.key("job"), "p:job");
        assert_eq!(plain.fence_key("p:job"), "p:job:fence");
        assert_eq!(plain.ident("s", "o").len(), 32);
        let q = plain.queue("p:job");
        assert_eq!(q.waiters, "locksmith:waiters:{p:job}");
        assert_eq!(q.deadlines, "locksmith:waiters:{p:job}:deadlines");
        assert_eq!(q.wake_channel("w1"), "locksmith:wake:{p:job}:w1");
        // A name with its own hash tag keeps it, so every name stays in the key's slot.
        assert_eq!(plain.queue("{a}b").waiters, "locksmith:waiters:{a}b");
        let re = Layout { mode: Mode::Reentrant, prefix: String::new() };
        assert_eq!(re.channel("job"), "redisson_lock__channel:{job}");
        assert_eq!(re.fence_key("job"), "redisson_lock_token:{job}");
        assert_eq!(re.channel("{a}b"), "redisson_lock__channel:{a}b");
        assert_eq!(re.ident("u", "o-1"), "u:o-1");
        let u = random_uuid();
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "4");
    }

    /// Listing finds a lock's name from its fencing counter, and nothing else.
    #[test]
    fn a_fencing_counter_names_its_lock() {
        let plain = Layout { mode: Mode::Plain, prefix: "p*:".into() };
        assert_eq!(plain.fence_pattern(), "p\\*:*:fence");
        assert_eq!(plain.name_of_fence("p*:job:fence").as_deref(), Some("job"));
        // `a:fence` is lock `a`'s counter, never a lock of its own.
        for other in ["p*::fence", "q:job:fence", "p*:job", "p*:job:fenc", "p*:a:fence:fence"] {
            assert_eq!(plain.name_of_fence(other), None, "{other}");
        }
        let re = Layout { mode: Mode::Reentrant, prefix: String::new() };
        assert_eq!(re.name_of_fence("redisson_lock_token:{job}").as_deref(), Some("job"));
        assert_eq!(re.name_of_fence("redisson_lock_token:{a}b").as_deref(), Some("{a}b"));
        for other in ["redisson_lock_token:job", "redisson_lock_token:{}", "redisson_lock__channel:{job}"] {
            assert_eq!(re.name_of_fence(other), None, "{other}");
        }
        let re_prefixed = Layout { mode: Mode::Reentrant, prefix: "app:".into() };
        assert_eq!(re_prefixed.name_of_fence("redisson_lock_token:{app:job}").as_deref(), Some("job"));
        assert_eq!(re_prefixed.name_of_fence("redisson_lock_token:{job}"), None);
    }
}
