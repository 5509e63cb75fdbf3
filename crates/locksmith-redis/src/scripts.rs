//! The Lua scripts: every compare-then-act runs atomically on the server (DESIGN.md §2.3).
//!
//! Common calling convention, so the session code is the same for both layouts:
//! - acquire: `KEYS = [key, fence]`, `ARGV = [ident, ttl_ms]` → `{1, token}` granted,
//!   `{0, pttl}` busy, `{-1, type}` the key holds a foreign type, `{-2, err}` the fence key is
//!   unusable (nothing was changed in either error case);
//! - release: `KEYS = [key]`, `ARGV = [ident, ttl_ms, channel]` → `>= 0` if it was ours;
//! - renew: `KEYS = [key…]`, `ARGV = [ttl_ms, ident…]` → one `1` (renewed) or `0` (not ours) per key.

use std::sync::LazyLock;

use redis::{Script, Value};

use crate::layout::Mode;

/// redis-py's `SET NX PX`, plus an `INCR` of the fencing counter in the same script. The
/// counter is bumped before the `SET` so that a failing `INCR` leaves no hold behind.
static PLAIN_ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local t = redis.call('type', KEYS[1]).ok
if t == 'none' then
  local tok = redis.pcall('incr', KEYS[2])
  if type(tok) == 'table' then return {-2, tok.err} end
  redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
  return {1, tok}
end
if t ~= 'string' then return {-1, t} end
return {0, redis.call('pttl', KEYS[1])}
",
    )
});

/// redis-py's release (GET == token then DEL), plus a wake-up for our waiters.
static PLAIN_RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('type', KEYS[1]).ok == 'string' and redis.call('get', KEYS[1]) == ARGV[1] then
  redis.call('del', KEYS[1])
  redis.call('publish', ARGV[3], '0')
  return 1
end
return -1
",
    )
});

/// redis-py's `extend(replace_ttl=True)` for many keys at once.
static PLAIN_RENEW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local out = {}
for i, k in ipairs(KEYS) do
  out[i] = 0
  if redis.call('type', k).ok == 'string' and redis.call('get', k) == ARGV[i + 1] then
    redis.call('pexpire', k, ARGV[1])
    out[i] = 1
  end
end
return out
",
    )
});

/// Redisson's `RedissonFencedLock.tryLockInnerAsync`: create or re-enter the hash field, and
/// take a token from the shared counter on every grant.
static REENTRANT_ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local t = redis.call('type', KEYS[1]).ok
if t ~= 'none' and t ~= 'hash' then return {-1, t} end
if t == 'none' or redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
  local tok = redis.pcall('incr', KEYS[2])
  if type(tok) == 'table' then return {-2, tok.err} end
  redis.call('hincrby', KEYS[1], ARGV[1], 1)
  redis.call('pexpire', KEYS[1], ARGV[2])
  return {1, tok}
end
return {0, redis.call('pttl', KEYS[1])}
",
    )
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

/// Redisson's watchdog renewal (`renewExpirationAsync`) for many keys at once.
static REENTRANT_RENEW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local out = {}
for i, k in ipairs(KEYS) do
  out[i] = 0
  if redis.call('type', k).ok == 'hash' and redis.call('hexists', k, ARGV[i + 1]) == 1 then
    redis.call('pexpire', k, ARGV[1])
    out[i] = 1
  end
end
return out
",
    )
});

/// The acquire script of `mode`.
pub(crate) fn acquire(mode: Mode) -> &'static Script {
    match mode {
        Mode::Plain => &PLAIN_ACQUIRE,
        Mode::Reentrant => &REENTRANT_ACQUIRE,
    }
}

/// The release script of `mode`.
pub(crate) fn release(mode: Mode) -> &'static Script {
    match mode {
        Mode::Plain => &PLAIN_RELEASE,
        Mode::Reentrant => &REENTRANT_RELEASE,
    }
}

/// The renewal script of `mode`.
pub(crate) fn renew(mode: Mode) -> &'static Script {
    match mode {
        Mode::Plain => &PLAIN_RENEW,
        Mode::Reentrant => &REENTRANT_RENEW,
    }
}

/// What an acquire script answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// Ours, with this fencing token.
    Granted(u64),
    /// Held by someone else; the key expires in this many ms (negative: no expiry known).
    Busy(i64),
    /// The key holds a value of this other type.
    WrongType(String),
    /// The fencing counter cannot be incremented (its value is not an integer).
    BadFence(String),
}

impl Attempt {
    /// Reads the script's `{code, value}` reply; `None` for anything else.
    pub(crate) fn parse(v: &Value) -> Option<Self> {
        let Value::Array(items) = v else { return None };
        let [code, value] = items.as_slice() else { return None };
        match (as_int(code)?, value) {
            (1, v) => Some(Self::Granted(u64::try_from(as_int(v)?).ok()?)),
            (0, v) => Some(Self::Busy(as_int(v)?)),
            (-1, v) => Some(Self::WrongType(as_text(v)?)),
            (-2, v) => Some(Self::BadFence(as_text(v)?)),
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

fn as_text(v: &Value) -> Option<String> {
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
        assert_eq!(Attempt::parse(&arr(Value::Int(0), Value::Int(-1))), Some(Attempt::Busy(-1)));
        assert_eq!(
            Attempt::parse(&arr(Value::Int(-1), Value::BulkString(b"list".to_vec()))),
            Some(Attempt::WrongType("list".into()))
        );
        assert_eq!(Attempt::parse(&Value::Nil), None);
        assert_eq!(Attempt::parse(&arr(Value::Int(1), Value::Int(-3))), None);
    }
}
