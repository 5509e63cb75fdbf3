//! Redisson's `RPermitExpirableSemaphore` layout (every mode), with locksmith's FIFO waiter
//! queue and fencing counter beside it.
//!
//! What Redisson writes, and so what these scripts read and write (from
//! `RedissonPermitExpirableSemaphore`):
//! - the key holds the number of **available** permits (a string integer, no expiry): its first
//!   user sets it (`trySetPermits`: `SET` only if missing);
//! - `{key}:timeout` (Redisson's `suffixName(name, "timeout")`) is a sorted set: each permit out,
//!   as its 16 random bytes, scored with the end of its lease (ms since the epoch);
//! - every script first reclaims permits whose lease ended (removes them from the set, adds them
//!   back to the count and publishes the new count): a crashed holder's permit comes back to
//!   whoever looks next after its lease;
//! - releases and reclaims publish the new count on `redisson_sc:{key}`.
//!
//! So available + leased = the number of permits, which is how locksmith checks that everyone
//! asks for the same number (Redisson's `getPermits` computes it the same way).
//!
//! What locksmith adds (Redisson clients ignore all of it): a fencing token per grant from
//! `locksmith:semaphore_token:{key}` (never deleted; it also marks the name as a semaphore for
//! locksmith's lock scripts), `locksmith:holders:{key}` (permit id → `<token>:<session>:<owner>`,
//! for `status`), and the FIFO waiter queue: a locksmith client takes a free permit only when the
//! waiters queued before it leave enough free permits for it. Java clients do not queue and take
//! any free permit.

use std::sync::LazyLock;

use redis::Script;

use crate::scripts::QUEUE_LIB;

/// Redisson's reclaim of expired permits (at most 1,000 per call), and the wake-up of the
/// locksmith waiters that the free permits admit (the first `available` of the queue).
const SEM_LIB: &str = r"
local function reclaim(key, timeouts, holders, channel, now_ms)
  local expired = redis.call('zrangebyscore', timeouts, 0, now_ms, 'LIMIT', 0, 1000)
  if #expired == 0 then return end
  for _, id in ipairs(expired) do
    redis.call('zrem', timeouts, id)
    redis.call('hdel', holders, id)
  end
  local v = redis.call('incrby', key, #expired)
  if v > 0 then redis.call('publish', channel, v) end
end
local function wake_sem(key, q, d, prefix, now_ms)
  if redis.call('exists', q) == 0 then return end
  prune(q, d, nil, now_ms)
  local v = redis.pcall('get', key)
  if type(v) ~= 'string' then return end
  local avail = tonumber(v) or 0
  if avail <= 0 then return end
  for _, id in ipairs(redis.call('zrange', q, 0, avail - 1)) do redis.call('publish', prefix .. id, '0') end
end
";

/// Acquire one permit. `KEYS = [key, timeouts, counter, waiters, deadlines, holders]`,
/// `ARGV = [permit_id, ttl_ms, waiter, lifetime_ms, permits, '<session>:<owner>', channel]`;
/// replies as the mutex scripts (see `scripts.rs`); `{-1, type, key}` names a key of a foreign
/// type that is not the semaphore's own key.
static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{QUEUE_LIB}{SEM_LIB}{}",
        r"
local t = redis.call('type', KEYS[1]).ok
if t == 'hash' then return {-3, 'lock'} end
if t ~= 'none' and t ~= 'string' then return {-1, t} end
local tt = redis.call('type', KEYS[2]).ok
if tt ~= 'none' and tt ~= 'zset' then return {-1, tt, KEYS[2]} end
local value = false
if t == 'string' then
  value = redis.call('get', KEYS[1])
  -- A count, as Redisson writes it; anything else is a plain (redis-py) lock's token.
  if not string.match(value, '^%-?%d+$') then return {-3, 'lock'} end
end
local now = now_us()
local now_ms = math.floor(now / 1000)
if value then
  reclaim(KEYS[1], KEYS[2], KEYS[6], ARGV[7], now_ms)
  value = redis.call('get', KEYS[1])
end
local n = tonumber(ARGV[5])
local avail = n
if value then avail = tonumber(value) end
local total = avail + redis.call('zcard', KEYS[2])
if total ~= n then return {-4, total} end
if not value then
  -- Redisson's trySetPermits: the first user fixes the number of permits.
  redis.call('set', KEYS[1], ARGV[5])
  redis.call('publish', ARGV[7], ARGV[5])
end
-- Records of permits that a Java client reclaimed.
if redis.call('hlen', KEYS[6]) > total - avail then
  for _, f in ipairs(redis.call('hkeys', KEYS[6])) do
    if not redis.call('zscore', KEYS[2], f) then redis.call('hdel', KEYS[6], f) end
  end
end
if redis.call('exists', KEYS[4]) == 1 then prune(KEYS[4], KEYS[5], nil, now_ms) end
local me = ARGV[3]
local ahead = redis.call('zcard', KEYS[4])
if me ~= '' then
  local r = redis.call('zrank', KEYS[4], me)
  if r then ahead = r end
end
-- This very permit already out (a grant whose reply was lost and not yet given back): granted
-- again in place, without taking a second permit.
local held = redis.call('zscore', KEYS[2], ARGV[1])
if held or ahead < avail then
  local tok = redis.pcall('incr', KEYS[3])
  if me ~= '' then dequeue(KEYS[4], KEYS[5], nil, me) end
  if type(tok) == 'table' then return {-2, tok.err} end
  if not held then redis.call('decrby', KEYS[1], 1) end
  redis.call('zadd', KEYS[2], num(now_ms + tonumber(ARGV[2])), ARGV[1])
  local kttl = redis.call('pttl', KEYS[1])
  if kttl > 0 then redis.call('pexpire', KEYS[2], kttl) end
  redis.call('hset', KEYS[6], ARGV[1], num(tok) .. ':' .. ARGV[6])
  return {1, tok}
end
local rank = -1
if me ~= '' then
  enqueue(KEYS[4], KEYS[5], nil, me, now, tonumber(ARGV[4]))
  rank = math.max(0, redis.call('zrank', KEYS[4], me) - avail)
end
local pttl = -1
local first = redis.call('zrange', KEYS[2], 0, 0, 'WITHSCORES')[2]
if first then pttl = math.max(0, tonumber(first) - now_ms) end
-- Permits out that locksmith has no record of (a Java client's): their release comes only on
-- Redisson's channel, which the waiter then listens to as well.
local foreign = 0
if total - avail > redis.call('hlen', KEYS[6]) then foreign = 1 end
return {0, pttl, rank, foreign}
"
    ))
});

/// Redisson's `tryRelease`: the permit leaves the timeout set, the count goes up by one and is
/// published; then the locksmith waiters the free permits admit are woken. `KEYS = [key,
/// timeouts, waiters, deadlines, holders]`, `ARGV = [permit_id, channel, wake_prefix]` → 1
/// released, -1 not ours (never granted, released, reclaimed, or past its lease: then it is
/// given back all the same, as Redisson does).
static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{QUEUE_LIB}{SEM_LIB}{}",
        r"
if redis.call('type', KEYS[2]).ok ~= 'zset' then return -1 end
local expire = redis.call('zscore', KEYS[2], ARGV[1])
redis.call('hdel', KEYS[5], ARGV[1])
if not expire then return -1 end
redis.call('zrem', KEYS[2], ARGV[1])
local v = redis.call('incrby', KEYS[1], 1)
redis.call('publish', ARGV[2], v)
local now_ms = math.floor(now_us() / 1000)
wake_sem(KEYS[1], KEYS[3], KEYS[4], ARGV[3], now_ms)
if tonumber(expire) <= now_ms then return -1 end
return 1
"
    ))
});

/// A waiter gives up: it leaves the queue, and the waiters the free permits admit are woken (it
/// may have been woken itself and not acted on it). `KEYS = [key, waiters, deadlines]`,
/// `ARGV = [waiter, wake_prefix]`.
static LEAVE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{QUEUE_LIB}{SEM_LIB}{}",
        r"
if redis.call('exists', KEYS[2]) == 0 then return 0 end
dequeue(KEYS[2], KEYS[3], nil, ARGV[1])
wake_sem(KEYS[1], KEYS[2], KEYS[3], ARGV[2], math.floor(now_us() / 1000))
return 1
"
    ))
});

/// One semaphore's state, read only (nothing reclaimed). `KEYS = [key, timeouts, holders,
/// counter, waiters, deadlines]` → `{type, last_token, live_waiters, permits, (id, record,
/// ttl_ms)…}`, `permits` -1 when the key is no semaphore count; only permits within their lease.
static STATUS: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{QUEUE_LIB}{}",
        r"
local now_ms = math.floor(now_us() / 1000)
local out = status_head(KEYS[1], KEYS[4], KEYS[5], KEYS[6], now_ms)
local t = out[1]
table.insert(out, -1)
if t ~= 'string' then return out end
local v = redis.call('get', KEYS[1])
if not string.match(v, '^%-?%d+$') then return out end
if redis.call('type', KEYS[2]).ok ~= 'zset' then
  out[4] = tonumber(v)
  return out
end
out[4] = tonumber(v) + redis.call('zcard', KEYS[2])
local live = redis.call('zrangebyscore', KEYS[2], '(' .. num(now_ms), '+inf', 'WITHSCORES', 'LIMIT', 0, 10000)
for i = 1, #live, 2 do
  table.insert(out, live[i])
  table.insert(out, redis.call('hget', KEYS[3], live[i]) or '')
  table.insert(out, tonumber(live[i + 1]) - now_ms)
end
return out
"
    ))
});

/// The acquire script.
pub(crate) fn acquire() -> &'static Script {
    &ACQUIRE
}

/// The release script.
pub(crate) fn release() -> &'static Script {
    &RELEASE
}

/// A waiter leaves the queue.
pub(crate) fn leave() -> &'static Script {
    &LEAVE
}

/// The status script.
pub(crate) fn status() -> &'static Script {
    &STATUS
}
