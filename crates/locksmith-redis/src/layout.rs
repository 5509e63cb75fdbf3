//! Where a lock lives in Redis: key, fencing counter, waiter queue or release channel, and the
//! holder's identity, for each of the interoperable layouts (redis-py `Lock`, Redisson `RLock`,
//! `RReadWriteLock` and `RPermitExpirableSemaphore`).

use locksmith_core::{Error, HoldMode};

/// Which lock layout a backend uses for exclusive holds (and whether it offers read locks).
/// Semaphores have one layout (Redisson's `RPermitExpirableSemaphore`) in every mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// redis-py `Lock`: a string key holding a random token (`SET key token NX PX ttl`).
    Plain,
    /// Redisson `RLock`: a hash whose field `<uuid>:<owner>` holds a hold count.
    Reentrant,
    /// Redisson `RReadWriteLock` (`?mode=rwlock`): a hash with field `mode` = `read`/`write`;
    /// exclusive holds are its write lock, shared holds its read lock.
    RwLock,
}

/// What one hold is in Redis: the layout its scripts read and write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// redis-py `Lock` (plain mode's exclusive hold).
    Plain,
    /// Redisson `RLock` (reentrant mode's exclusive hold).
    Reentrant,
    /// Redisson `RReadWriteLock`'s read lock (rwlock mode, shared).
    Read,
    /// Redisson `RReadWriteLock`'s write lock (rwlock mode, exclusive).
    Write,
    /// One permit of a Redisson `RPermitExpirableSemaphore` of this many permits (every mode).
    Permit(u32),
}

impl Kind {
    /// Whether waiters of this kind join locksmith's FIFO waiter queue (every kind but Redisson's
    /// `RLock`, whose waiters keep Redisson's own order: none).
    pub(crate) fn queued(self) -> bool {
        self != Kind::Reentrant
    }

    /// The name the renewal script knows the kind by.
    pub(crate) fn code(self) -> &'static str {
        match self {
            Kind::Plain => "plain",
            Kind::Reentrant => "reentrant",
            Kind::Read => "read",
            Kind::Write => "write",
            Kind::Permit(_) => "permit",
        }
    }
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

    /// What a hold of `mode` is in this layout; `None` where it is not offered (read locks need
    /// `?mode=rwlock`, because only there is the exclusive hold Redisson's write lock).
    pub(crate) fn kind(&self, mode: HoldMode) -> Option<Kind> {
        match (mode, self.mode) {
            (HoldMode::Exclusive, Mode::Plain) => Some(Kind::Plain),
            (HoldMode::Exclusive, Mode::Reentrant) => Some(Kind::Reentrant),
            (HoldMode::Exclusive, Mode::RwLock) => Some(Kind::Write),
            (HoldMode::Shared, Mode::RwLock) => Some(Kind::Read),
            (HoldMode::Permit(n), _) if n > 0 => Some(Kind::Permit(n)),
            _ => None,
        }
    }

    /// The kind of this layout's exclusive hold.
    pub(crate) fn exclusive(&self) -> Kind {
        match self.mode {
            Mode::Plain => Kind::Plain,
            Mode::Reentrant => Kind::Reentrant,
            Mode::RwLock => Kind::Write,
        }
    }

    /// The fencing counter of this layout's locks at `key` (semaphores: [`Layout::counter`]).
    pub(crate) fn fence_key(&self, key: &str) -> String {
        self.counter(self.exclusive(), key)
    }

    /// The fencing counter of holds of `kind` at `key`: never expires and is never deleted, so
    /// tokens only grow. Reentrant mode uses Redisson's `RFencedLock` token key, so Java and Rust
    /// share one counter; Redisson's read/write lock and semaphore have no counter of their own,
    /// so locksmith keeps one beside them (Redisson ignores it).
    pub(crate) fn counter(&self, kind: Kind, key: &str) -> String {
        match kind {
            Kind::Plain => format!("{key}:fence"),
            Kind::Reentrant => redisson_prefix_name("redisson_lock_token", key),
            Kind::Read | Kind::Write => redisson_prefix_name(RWLOCK_COUNTER, key),
            Kind::Permit(_) => redisson_prefix_name(SEMAPHORE_COUNTER, key),
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

    /// `SCAN MATCH` patterns that find every fencing counter of this layout's locks and of
    /// semaphores (and perhaps other keys: [`Layout::name_of_fence`] tells which are ours).
    pub(crate) fn fence_patterns(&self) -> [String; 2] {
        let locks = match self.mode {
            Mode::Plain => format!("{}*:fence", glob_escape(&self.prefix)),
            Mode::Reentrant => "redisson_lock_token:*".to_string(),
            Mode::RwLock => format!("{RWLOCK_COUNTER}:*"),
        };
        [locks, format!("{SEMAPHORE_COUNTER}:*")]
    }

    /// The lock name whose fencing counter is `fence`, if `fence` is one of this layout's
    /// counters or a semaphore's: the name is recovered and accepted only if it maps back to
    /// `fence` exactly.
    pub(crate) fn name_of_fence(&self, fence: &str) -> Option<String> {
        let (kind, key) = match fence.strip_prefix(SEMAPHORE_COUNTER).and_then(|r| r.strip_prefix(':')) {
            Some(rest) => (Kind::Permit(1), unwrap_prefix_name(rest)),
            None => match self.mode {
                Mode::Plain => (Kind::Plain, fence.strip_suffix(":fence")?),
                Mode::Reentrant => (Kind::Reentrant, unwrap_prefix_name(fence.strip_prefix("redisson_lock_token:")?)),
                Mode::RwLock => {
                    let rest = fence.strip_prefix(RWLOCK_COUNTER).and_then(|r| r.strip_prefix(':'))?;
                    (Kind::Write, unwrap_prefix_name(rest))
                }
            },
        };
        let name = key.strip_prefix(self.prefix.as_str())?;
        let valid = !name.is_empty() && self.check_name(name).is_ok() && self.counter(kind, key) == fence;
        valid.then(|| name.to_string())
    }

    /// Redisson's release channel for holds of `kind` at `key`, which locksmith's releases also
    /// publish on (so Java waiters wake) and its waiters listen to (so Java releases wake them).
    /// Plain mode has none (redis-py publishes nothing).
    pub(crate) fn redisson_channel(&self, kind: Kind, key: &str) -> Option<String> {
        match kind {
            Kind::Plain => None,
            Kind::Reentrant => Some(redisson_prefix_name("redisson_lock__channel", key)),
            Kind::Read | Kind::Write => Some(redisson_prefix_name("redisson_rwlock", key)),
            Kind::Permit(_) => Some(redisson_prefix_name("redisson_sc", key)),
        }
    }

    /// The waiter queue of `key` (all names in the key's cluster slot): plain locks, read/write
    /// locks and semaphores.
    pub(crate) fn queue(&self, key: &str) -> Queue {
        let waiters = redisson_prefix_name("locksmith:waiters", key);
        Queue {
            deadlines: format!("{waiters}:deadlines"),
            writers: format!("{waiters}:writers"),
            waiters,
            wake_prefix: format!("{}:", redisson_prefix_name("locksmith:wake", key)),
        }
    }

    /// Read/write locks and semaphores: locksmith's record of each holder (hash: Redisson field
    /// or permit id → `<token>:<session>:<owner>`), for `status`. Redisson ignores it; it is
    /// never needed for safety.
    pub(crate) fn holders_key(&self, key: &str) -> String {
        redisson_prefix_name("locksmith:holders", key)
    }

    /// Read locks: what Redisson prefixes to a reader's timeout keys
    /// (`<this>:<field>:rwlock_timeout:<n>`): the key in a hash tag unless it has one.
    pub(crate) fn rwlock_timeout_prefix(&self, key: &str) -> String {
        match key.contains('{') {
            true => key.to_string(),
            false => format!("{{{key}}}"),
        }
    }

    /// Semaphores: Redisson's timeout set (`suffixName(name, "timeout")`): permit id → lease
    /// expiry (ms since the epoch).
    pub(crate) fn timeout_set(&self, key: &str) -> String {
        format!("{}:timeout", self.rwlock_timeout_prefix(key))
    }

    /// The holder's identity stored in Redis. Plain: a fresh random token per hold (like
    /// redis-py's `uuid1().hex`). Reentrant and read locks: Redisson's `<client-uuid>:<thread-id>`
    /// with the session id as the uuid and the engine's owner id as the thread id; write locks
    /// add Redisson's `:write`. Permits: a fresh random 16-byte id per hold (Redisson's
    /// `generateId`), here in hex (Redis stores the bytes: see [`Layout::member`]).
    pub(crate) fn ident(&self, kind: Kind, session_id: &str, owner: &str) -> String {
        match kind {
            Kind::Plain | Kind::Permit(_) => format!("{:032x}", locksmith_core::driver::identity::random_u128()),
            Kind::Reentrant | Kind::Read => format!("{session_id}:{owner}"),
            Kind::Write => format!("{session_id}:{owner}:write"),
        }
    }

    /// The bytes a hold's scripts store for `ident`: a permit id's 16 raw bytes (as Redisson
    /// stores `ByteBufUtil.decodeHexDump(permitId)`), anything else as it is.
    pub(crate) fn member(kind: Kind, ident: &str) -> Vec<u8> {
        match kind {
            Kind::Permit(_) => decode_hex(ident).unwrap_or_else(|| ident.as_bytes().to_vec()),
            _ => ident.as_bytes().to_vec(),
        }
    }
}

/// locksmith's fencing counter of a Redisson read/write lock (the name in a hash tag follows).
const RWLOCK_COUNTER: &str = "locksmith:rwlock_token";

/// locksmith's fencing counter of a Redisson permit-expirable semaphore.
const SEMAPHORE_COUNTER: &str = "locksmith:semaphore_token";

/// The name inside `prefix:{name}` (or `prefix:name` when the name has its own hash tag), as
/// [`redisson_prefix_name`] built it.
fn unwrap_prefix_name(rest: &str) -> &str {
    rest.strip_prefix('{').and_then(|r| r.strip_suffix('}')).filter(|k| !k.contains('{')).unwrap_or(rest)
}

/// Even-length lower- or upper-case hex to bytes.
fn decode_hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| s.get(i..i + 2).and_then(|b| u8::from_str_radix(b, 16).ok())).collect()
}

/// Bytes as lower-case hex (a foreign permit id in `status`, as Redisson prints ids).
pub(crate) fn encode_hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The waiter queue of one lock or semaphore: who waits in which order, and until when each
/// entry is live.
#[derive(Debug, Clone)]
pub(crate) struct Queue {
    /// zset: waiter id → enqueue time (server µs), the order in which waiters are served.
    pub(crate) waiters: String,
    /// zset: waiter id → deadline (server ms) after which the entry is stale and dropped.
    pub(crate) deadlines: String,
    /// Read/write locks: zset of the queued writers' ids (same scores as `waiters`), so a
    /// reader finds "a writer queued before me" in O(log n).
    pub(crate) writers: String,
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
pub(crate) use locksmith_core::driver::identity::random_uuid;

#[cfg(test)]
mod tests {
    use super::*;

    /// Key names match redis-py (plain) and Redisson (reentrant).
    #[test]
    fn names_match_the_ecosystems() {
        let plain = Layout { mode: Mode::Plain, prefix: "p:".into() };
        assert_eq!(plain.key("job"), "p:job");
        assert_eq!(plain.fence_key("p:job"), "p:job:fence");
        assert_eq!(plain.ident(Kind::Plain, "s", "o").len(), 32);
        let q = plain.queue("p:job");
        assert_eq!(q.waiters, "locksmith:waiters:{p:job}");
        assert_eq!(q.deadlines, "locksmith:waiters:{p:job}:deadlines");
        assert_eq!(q.wake_channel("w1"), "locksmith:wake:{p:job}:w1");
        // A name with its own hash tag keeps it, so every name stays in the key's slot.
        assert_eq!(plain.queue("{a}b").waiters, "locksmith:waiters:{a}b");
        let re = Layout { mode: Mode::Reentrant, prefix: String::new() };
        assert_eq!(re.redisson_channel(Kind::Reentrant, "job").as_deref(), Some("redisson_lock__channel:{job}"));
        assert_eq!(re.fence_key("job"), "redisson_lock_token:{job}");
        assert_eq!(re.redisson_channel(Kind::Reentrant, "{a}b").as_deref(), Some("redisson_lock__channel:{a}b"));
        assert_eq!(re.ident(Kind::Reentrant, "u", "o-1"), "u:o-1");
        let u = random_uuid();
        assert_eq!(u.len(), 36);
        assert_eq!(&u[14..15], "4");
    }

    /// Listing finds a lock's name from its fencing counter, and nothing else.
    #[test]
    fn a_fencing_counter_names_its_lock() {
        let plain = Layout { mode: Mode::Plain, prefix: "p*:".into() };
        assert_eq!(plain.fence_patterns(), ["p\\*:*:fence".to_string(), "locksmith:semaphore_token:*".to_string()]);
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
        // Semaphores are listed in every mode; read/write locks by their own counter.
        let rw = Layout { mode: Mode::RwLock, prefix: String::new() };
        assert_eq!(rw.name_of_fence("locksmith:rwlock_token:{job}").as_deref(), Some("job"));
        assert_eq!(rw.name_of_fence("redisson_lock_token:{job}"), None);
        for layout in [&plain, &re_prefixed, &rw] {
            let fence = format!("locksmith:semaphore_token:{{{}sem}}", layout.prefix);
            assert_eq!(layout.name_of_fence(&fence).as_deref(), Some("sem"), "{layout:?}");
        }
        assert_eq!(re.name_of_fence("locksmith:semaphore_token:{a}b").as_deref(), Some("{a}b"));
    }

    /// Read/write locks and semaphores use Redisson's key names: the reader's field and timeout
    /// keys, the writer's `:write` field, the semaphore's timeout set and channels.
    #[test]
    fn rwlock_and_semaphore_names_match_redisson() {
        let rw = Layout { mode: Mode::RwLock, prefix: String::new() };
        assert_eq!(rw.kind(HoldMode::Shared), Some(Kind::Read));
        assert_eq!(rw.kind(HoldMode::Exclusive), Some(Kind::Write));
        assert_eq!(rw.ident(Kind::Read, "u", "7"), "u:7");
        assert_eq!(rw.ident(Kind::Write, "u", "7"), "u:7:write");
        assert_eq!(rw.rwlock_timeout_prefix("doc"), "{doc}");
        assert_eq!(rw.rwlock_timeout_prefix("{a}b"), "{a}b");
        assert_eq!(rw.redisson_channel(Kind::Read, "doc").as_deref(), Some("redisson_rwlock:{doc}"));
        assert_eq!(rw.counter(Kind::Write, "doc"), "locksmith:rwlock_token:{doc}");
        assert_eq!(rw.holders_key("doc"), "locksmith:holders:{doc}");
        assert_eq!(rw.queue("doc").writers, "locksmith:waiters:{doc}:writers");
        let plain = Layout { mode: Mode::Plain, prefix: String::new() };
        assert_eq!(plain.kind(HoldMode::Shared), None, "read locks need ?mode=rwlock");
        assert_eq!(plain.kind(HoldMode::Permit(3)), Some(Kind::Permit(3)));
        assert_eq!(plain.timeout_set("sem"), "{sem}:timeout");
        assert_eq!(plain.timeout_set("{a}b"), "{a}b:timeout");
        assert_eq!(plain.redisson_channel(Kind::Permit(3), "sem").as_deref(), Some("redisson_sc:{sem}"));
        assert_eq!(plain.counter(Kind::Permit(3), "sem"), "locksmith:semaphore_token:{sem}");
        let id = plain.ident(Kind::Permit(3), "u", "o");
        assert_eq!(id.len(), 32);
        let bytes = Layout::member(Kind::Permit(3), &id);
        assert_eq!(bytes.len(), 16);
        assert_eq!(encode_hex(&bytes), id);
    }
}
