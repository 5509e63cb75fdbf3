//! The Lua scripts: every compare-then-act runs atomically on the server (DESIGN.md §2.3).
//!
//! Calling conventions (the session code branches on the hold's kind only to build the key
//! lists; the read/write lock's and the semaphore's scripts are in `rwlock.rs` and
//! `semaphore.rs`):
//! - acquire, plain: `KEYS = [key, fence, waiters, deadlines, sem_counter, sem_timeouts]`,
//!   `ARGV = [ident, ttl_ms, waiter, lifetime_ms]` (`waiter` empty: not queued); reentrant:
//!   `KEYS = [key, fence, sem_counter, sem_timeouts]`, `ARGV = [ident, ttl_ms]`. Replies:
//!   `{1, token}` granted, `{0, pttl, rank}` busy (`rank` is how many queued waiters go before
//!   the caller, `-1` when not queued; reentrant replies `{0, pttl}`; read/write locks and
//!   semaphores `{0, pttl, rank, foreign}`, `foreign` 1 when a Java holder blocks the caller), `{-1, type}` the key holds
//!   a foreign type, `{-2, err}` the fence key is unusable, `{-3, what}` the name is in use as
//!   another primitive (`semaphore`, `lock`), `{-4, permits}` a semaphore of another number of
//!   permits (nothing was changed in the error cases, except that a queued waiter left the
//!   queue and expired permits were reclaimed);
//! - release, plain: `KEYS = [key, waiters, deadlines]`, `ARGV = [ident, ttl_ms, wake_prefix]`;
//!   reentrant: `KEYS = [key]`, `ARGV = [ident, ttl_ms, channel]` → `>= 0` if it was ours;
//! - renew (every kind at once): `KEYS = [k1, k2, k3]` per hold, `ARGV = [ttl_ms, (kind,
//!   ident)…]` → one `1` (renewed) or `0` (not ours) per hold;
//! - leave (plain): `KEYS = [key, waiters, deadlines]`, `ARGV = [waiter, wake_prefix]`;
//! - waiters: `KEYS = [waiters, deadlines]` → the number of live entries.
//!
//! The waiter queue: `waiters` orders waiter ids by enqueue time (server µs, kept strictly
//! increasing), `deadlines` gives each entry's expiry (server ms). Every script that reads the
//! queue first drops the entries past their deadline, so a crashed waiter holds its place at most
//! until then. Both zsets expire `lifetime_ms` after the last refresh, so an abandoned queue
//! disappears with its last live entry.

use std::sync::LazyLock;

use redis::{Script, Value};

use crate::layout::Kind;

/// Helpers of the plain waiter queue, prepended to the scripts that use it.
pub(crate) const QUEUE_LIB: &str = r"
if redis.replicate_commands then redis.replicate_commands() end
local function num(x) return string.format('%.0f', x) end
local function now_us()
  local t = redis.call('time')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
-- Drops the entries past their deadline (also from `w`, the writers of a read/write lock).
local function prune(q, d, w, now_ms)
  local stale = redis.call('zrangebyscore', d, '-inf', '(' .. num(now_ms))
  for _, id in ipairs(stale) do
    redis.call('zrem', q, id)
    redis.call('zrem', d, id)
    if w then redis.call('zrem', w, id) end
  end
end
-- What every status reply starts with: the key's type, the last token (its counter, '0' when
-- missing) and the number of live waiters (0 when the queue is gone).
local function status_head(key, counter, q, d, now_ms)
  local last = redis.pcall('get', counter)
  if type(last) ~= 'string' then last = '0' end
  local live = 0
  if redis.call('exists', q) == 1 then live = redis.call('zcount', d, num(now_ms), '+inf') end
  return {redis.call('type', key).ok, last, live}
end
-- Drops the entries past their deadline; answers the live head's id (nil: no live waiter).
local function live_head(q, d, now_ms)
  prune(q, d, nil, now_ms)
  return redis.call('zrange', q, 0, 0)[1]
end
-- Joins the queue at its tail (scores strictly increasing) or keeps the place already held, and
-- pushes the entry's deadline out; `w`: also listed there (a writer).
local function enqueue(q, d, w, me, now, lifetime)
  if not redis.call('zscore', q, me) then
    local score = now
    local tail = redis.call('zrange', q, -1, -1, 'WITHSCORES')[2]
    if tail and tonumber(tail) >= score then score = tonumber(tail) + 1 end
    redis.call('zadd', q, num(score), me)
    if w then redis.call('zadd', w, num(score), me) end
  end
  redis.call('zadd', d, num(math.floor(now / 1000) + lifetime), me)
  redis.call('pexpire', q, lifetime)
  redis.call('pexpire', d, lifetime)
  if w then redis.call('pexpire', w, lifetime) end
end
local function dequeue(q, d, w, me)
  redis.call('zrem', q, me)
  redis.call('zrem', d, me)
  if w then redis.call('zrem', w, me) end
end
";

/// Whether a lock's name is a semaphore's: locksmith's semaphore counter exists, or the key is a
/// string beside a Redisson timeout set. Prepended to the lock scripts, which then refuse the
/// name as a lock (`{-3, 'semaphore'}`).
pub(crate) const SEMAPHORE_CHECK: &str = r"
local function is_semaphore(t, counter, timeouts)
  return redis.call('exists', counter) == 1 or (t == 'string' and redis.call('type', timeouts).ok == 'zset')
end
";

/// redis-py's `SET NX PX`, plus an `INCR` of the fencing counter in the same script. The
/// counter is bumped before the `SET` so that a failing `INCR` leaves no hold behind.
///
/// A free key goes to the live head of the queue, or to anyone when no live waiter is queued;
/// a queued caller that is not granted joins the queue (keeping its place if it has one) and
/// pushes its deadline out.
static PLAIN_ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{QUEUE_LIB}{SEMAPHORE_CHECK}{}",
        r"
local t = redis.call('type', KEYS[1]).ok
if is_semaphore(t, KEYS[5], KEYS[6]) then return {-3, 'semaphore'} end
if t ~= 'none' and t ~= 'string' then return {-1, t} end
local me = ARGV[3]
local head, now = nil, nil
if me ~= '' or redis.call('exists', KEYS[3]) == 1 then
  now = now_us()
  head = live_head(KEYS[3], KEYS[4], math.floor(now / 1000))
end
if t == 'none' and (head == nil or head == me) then
  local tok = redis.pcall('incr', KEYS[2])
  if me ~= '' then dequeue(KEYS[3], KEYS[4], nil, me) end
  if type(tok) == 'table' then return {-2, tok.err} end
  redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
  return {1, tok}
end
local rank = -1
if me ~= '' then
  enqueue(KEYS[3], KEYS[4], nil, me, now, tonumber(ARGV[4]))
  rank = redis.call('zrank', KEYS[3], me)
end
local pttl = -2
if t == 'string' then pttl = redis.call('pttl', KEYS[1]) end
return {0, pttl, rank}
"
    ))
});

/// redis-py's release (GET == token then DEL), plus one wake-up: a message to the live head of
/// the queue only.
static PLAIN_RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{QUEUE_LIB}{}",
        r"
if redis.call('type', KEYS[1]).ok == 'string' and redis.call('get', KEYS[1]) == ARGV[1] then
  redis.call('del', KEYS[1])
  if redis.call('exists', KEYS[2]) == 1 then
    local head = live_head(KEYS[2], KEYS[3], math.floor(now_us() / 1000))
    if head then redis.call('publish', ARGV[3] .. head, '0') end
  end
  return 1
end
return -1
"
    ))
});

/// A waiter gives up: it leaves the queue, and if it was the live head of a free lock (it may
/// have been woken and not acted on it), the next live waiter is woken in its place.
static PLAIN_LEAVE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{QUEUE_LIB}{}",
        r"
if redis.call('exists', KEYS[2]) == 0 then return 0 end
local head = live_head(KEYS[2], KEYS[3], math.floor(now_us() / 1000))
dequeue(KEYS[2], KEYS[3], nil, ARGV[1])
if head == ARGV[1] and redis.call('exists', KEYS[1]) == 0 then
  local next = redis.call('zrange', KEYS[2], 0, 0)[1]
  if next then redis.call('publish', ARGV[2] .. next, '0') end
end
return 1
"
    ))
});

/// The number of live entries in a plain lock's queue.
static PLAIN_WAITERS: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{QUEUE_LIB}{}",
        r"
if redis.call('exists', KEYS[1]) == 0 then return 0 end
return redis.call('zcount', KEYS[2], num(math.floor(now_us() / 1000)), '+inf')
"
    ))
});

/// Redisson's `RedissonFencedLock.tryLockInnerAsync`: create or re-enter the hash field, and
/// take a token from the shared counter on every grant.
static REENTRANT_ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{SEMAPHORE_CHECK}{}",
        r"
local t = redis.call('type', KEYS[1]).ok
if is_semaphore(t, KEYS[3], KEYS[4]) then return {-3, 'semaphore'} end
if t ~= 'none' and t ~= 'hash' then return {-1, t} end
if t == 'none' or redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
  local tok = redis.pcall('incr', KEYS[2])
  if type(tok) == 'table' then return {-2, tok.err} end
  redis.call('hincrby', KEYS[1], ARGV[1], 1)
  redis.call('pexpire', KEYS[1], ARGV[2])
  return {1, tok}
end
return {0, redis.call('pttl', KEYS[1])}
"
    ))
});

/// Redisson's `unlockInnerAsync`: count down; at zero delete and publish the unlock message 0.
static REENTRANT_RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('type', KEYS[1]).ok ~= 'hash' or redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  return -1
end
local counter = redis.call('hincrby', KEYS[1], ARGV[1], -1)
if counter > 0 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return 0
end
redis.call('del', KEYS[1])
redis.call('publish', ARGV[3], 0)
return 1
",
    )
});

/// Every hold of a session renewed in one script, owner-checked per kind: redis-py's
/// `extend(replace_ttl=True)` (plain), Redisson's watchdog renewals (`RLock`; the read lock's
/// `ReadLockTask`, which also extends the reader's timeout keys; the write lock's), and Redisson's
/// `updateLeaseTime` for a permit (its timeout-set score, while its lease has not run out).
/// Per hold: `KEYS = [k1, k2, k3]` (plain, reentrant: `[key, key, key]`; read, write: `[key,
/// holders, timeout_prefix]`; permit: `[timeouts, timeouts, timeouts]`), `ARGV = [kind, ident]`.
static RENEW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.replicate_commands then redis.replicate_commands() end
local ttl = tonumber(ARGV[1])
local now_ms = nil
local out = {}
for i = 1, #KEYS / 3 do
  local k1, k2, k3 = KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i]
  local kind, id = ARGV[2 * i], ARGV[2 * i + 1]
  local t = redis.call('type', k1).ok
  local ok = 0
  if kind == 'plain' then
    if t == 'string' and redis.call('get', k1) == id then
      redis.call('pexpire', k1, ttl)
      ok = 1
    end
  elseif kind == 'reentrant' then
    if t == 'hash' and redis.call('hexists', k1, id) == 1 then
      redis.call('pexpire', k1, ttl)
      ok = 1
    end
  elseif kind == 'write' then
    if t == 'hash' and redis.call('hget', k1, 'mode') == 'write' and redis.call('hexists', k1, id) == 1 then
      redis.call('pexpire', k1, ttl)
      redis.call('pexpire', k2, ttl)
      ok = 1
    end
  elseif kind == 'read' then
    -- A reader is live while one of its timeout keys is: the last reader to leave frees the lock
    -- once every other reader's timeout keys are gone, whatever fields are left in the hash.
    if t == 'hash' and redis.call('hget', k1, 'mode') == 'read' then
      local c = tonumber(redis.call('hget', k1, id))
      if c then
        for j = c, 1, -1 do
          if redis.call('pexpire', k3 .. ':' .. id .. ':rwlock_timeout:' .. j, ttl) == 1 then ok = 1 end
        end
      end
      if ok == 1 then
        -- Never shortens the hash: other readers may hold longer leases.
        local keep = math.max(redis.call('pttl', k1), ttl)
        redis.call('pexpire', k1, keep)
        redis.call('pexpire', k2, keep)
      end
    end
  elseif kind == 'permit' then
    -- A permit past its lease is lost even before someone reclaims it.
    if t == 'zset' then
      if not now_ms then
        local tm = redis.call('time')
        now_ms = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
      end
      local s = redis.call('zscore', k1, id)
      if s and tonumber(s) > now_ms then
        redis.call('zadd', k1, 'XX', string.format('%.0f', now_ms + ttl), id)
        ok = 1
      end
    end
  end
  out[i] = ok
end
return out
",
    )
});

/// The acquire script of a mutex `kind` (plain or reentrant).
pub(crate) fn acquire(kind: Kind) -> &'static Script {
    match kind {
        Kind::Plain => &PLAIN_ACQUIRE,
        _ => &REENTRANT_ACQUIRE,
    }
}

/// The release script of a mutex `kind` (plain or reentrant).
pub(crate) fn release(kind: Kind) -> &'static Script {
    match kind {
        Kind::Plain => &PLAIN_RELEASE,
        _ => &REENTRANT_RELEASE,
    }
}

/// Plain (and reentrant, never queued) mode: a waiter leaves the queue.
pub(crate) fn leave() -> &'static Script {
    &PLAIN_LEAVE
}

/// The number of live waiters of a queue.
pub(crate) fn waiters() -> &'static Script {
    &PLAIN_WAITERS
}

/// The renewal script of every kind.
pub(crate) fn renew() -> &'static Script {
    &RENEW
}

/// Why an attempt was not granted, and what the waiter should expect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Busy {
    /// The key expires in this many ms (negative: no expiry known, or the key is free and a
    /// queued waiter goes first).
    pub(crate) pttl: i64,
    /// How many queued waiters go before the caller (0: next to be woken; a reader counts the
    /// writers before it, a permit the waiters beyond the permits free); negative: not queued.
    pub(crate) rank: i64,
    /// Read/write locks and semaphores: a holder locksmith has no record of (a Java client)
    /// blocks the caller; its release is announced only on Redisson's channel.
    pub(crate) foreign: bool,
}

impl Busy {
    /// The holder's remaining lease, when the key has one.
    pub(crate) fn left(&self) -> Option<std::time::Duration> {
        u64::try_from(self.pttl).ok().map(std::time::Duration::from_millis)
    }
}

/// What an acquire script answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// Ours, with this fencing token.
    Granted(u64),
    /// Not granted.
    Busy(Busy),
    /// The key holds a value of this other type.
    WrongType(String),
    /// Another key of the lock's (a semaphore's timeout set) holds a value of another type:
    /// `(key, type)`.
    WrongTypeAt(String, String),
    /// The fencing counter cannot be incremented (its value is not an integer).
    BadFence(String),
    /// The name is in use as another primitive: `semaphore` (asked for as a lock) or `lock`
    /// (asked for as a semaphore).
    InUse(String),
    /// The name is a semaphore of this many permits (asked for with another number).
    Permits(u64),
}

impl Attempt {
    /// Reads the script's `{code, value}` reply; `None` for anything else.
    pub(crate) fn parse(v: &Value) -> Option<Self> {
        let Value::Array(items) = v else { return None };
        if let [code, a, b] = items.as_slice() {
            return match as_int(code)? {
                0 => Some(Self::Busy(Busy { pttl: as_int(a)?, rank: as_int(b)?, foreign: false })),
                -1 => Some(Self::WrongTypeAt(as_text(b)?, as_text(a)?)),
                _ => None,
            };
        }
        if let [code, pttl, rank, foreign] = items.as_slice() {
            return match as_int(code)? {
                0 => {
                    Some(Self::Busy(Busy { pttl: as_int(pttl)?, rank: as_int(rank)?, foreign: as_int(foreign)? == 1 }))
                }
                _ => None,
            };
        }
        let [code, value] = items.as_slice() else { return None };
        match (as_int(code)?, value) {
            (1, v) => Some(Self::Granted(u64::try_from(as_int(v)?).ok()?)),
            (0, v) => Some(Self::Busy(Busy { pttl: as_int(v)?, rank: -1, foreign: false })),
            (-1, v) => Some(Self::WrongType(as_text(v)?)),
            (-2, v) => Some(Self::BadFence(as_text(v)?)),
            (-3, v) => Some(Self::InUse(as_text(v)?)),
            (-4, v) => Some(Self::Permits(u64::try_from(as_int(v)?).ok()?)),
            _ => None,
        }
    }
}

/// An integer reply (Redis sometimes sends integers as strings).
pub(crate) fn as_int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::SimpleString(s) => s.parse().ok(),
        _ => None,
    }
}

pub(crate) fn as_text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Script replies map to attempts; malformed replies are refused rather than guessed.
    #[test]
    fn parses_replies() {
        let arr = |a: Value, b: Value| Value::Array(vec![a, b]);
        assert_eq!(Attempt::parse(&arr(Value::Int(1), Value::Int(7))), Some(Attempt::Granted(7)));
        assert_eq!(
            Attempt::parse(&arr(Value::Int(0), Value::Int(-1))),
            Some(Attempt::Busy(Busy { pttl: -1, rank: -1, foreign: false }))
        );
        let queued = Value::Array(vec![Value::Int(0), Value::Int(900), Value::Int(3)]);
        assert_eq!(Attempt::parse(&queued), Some(Attempt::Busy(Busy { pttl: 900, rank: 3, foreign: false })));
        let java = Value::Array(vec![Value::Int(0), Value::Int(900), Value::Int(0), Value::Int(1)]);
        assert_eq!(Attempt::parse(&java), Some(Attempt::Busy(Busy { pttl: 900, rank: 0, foreign: true })));
        assert_eq!(
            Attempt::parse(&arr(Value::Int(-1), Value::BulkString(b"list".to_vec()))),
            Some(Attempt::WrongType("list".into()))
        );
        assert_eq!(
            Attempt::parse(&arr(Value::Int(-3), Value::BulkString(b"semaphore".to_vec()))),
            Some(Attempt::InUse("semaphore".into()))
        );
        assert_eq!(Attempt::parse(&arr(Value::Int(-4), Value::Int(3))), Some(Attempt::Permits(3)));
        assert_eq!(Attempt::parse(&Value::Nil), None);
        assert_eq!(Attempt::parse(&arr(Value::Int(1), Value::Int(-3))), None);
    }
}
