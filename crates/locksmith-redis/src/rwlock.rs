//! Redisson's `RReadWriteLock` layout (`?mode=rwlock`), with locksmith's FIFO waiter queue and
//! fencing counter beside it.
//!
//! What Redisson writes, and so what these scripts read and write (from `RedissonReadLock` /
//! `RedissonWriteLock` and the watchdog's `ReadLockTask`):
//! - the lock is a hash at the key: field `mode` = `read` or `write`; each reader's field
//!   `<uuid>:<thread>` = its hold count; the writer's field `<uuid>:<thread>:write` = its count;
//! - each read hold also has a timeout key `{key}:<uuid>:<thread>:rwlock_timeout:<n>` (n = 1 …
//!   count) with the reader's lease as PX: the hash lives as long as its longest-lived reader,
//!   and a reader whose timeout keys are gone no longer counts (a crashed Java or Rust reader
//!   frees the lock after its lease even while others keep the hash alive);
//! - releases publish on `redisson_rwlock:{key}`: `0` when the last reader leaves (Redisson's
//!   `UNLOCK_MESSAGE`), `1` when the writer leaves (`READ_UNLOCK_MESSAGE`, which wakes every
//!   Java waiter).
//!
//! What locksmith adds (Redisson clients ignore all of it):
//! - a fencing token per grant from `locksmith:rwlock_token:{key}` (never deleted);
//! - `locksmith:holders:{key}` (hash: field → `<token>:<session>:<owner>`) for `status`;
//! - the FIFO waiter queue of the plain mode plus `…:writers`, so a queued writer is not starved
//!   by readers that keep arriving: a reader may join other readers only when no live writer is
//!   queued before it; a writer only takes a free lock at the head of the queue. Redisson's own
//!   read/write lock is documented "non-fair"; Java readers still join whenever the lock is in
//!   read mode, so only Java readers can starve a locksmith writer.
//!
//! Where locksmith is stricter than Redisson (never looser): a hash without `mode` (Redisson's
//! `RLock`, or `?mode=reentrant`) is held, not free (Redisson's read/write scripts would join it);
//! locksmith's readers never join a write-mode hash (Redisson lets the writing thread read: each
//! locksmith hold has its own owner); a release acts only on a hash in its own mode.

use std::sync::LazyLock;

use redis::Script;

use crate::scripts::{QUEUE_LIB, SEMAPHORE_CHECK};

/// Wakes whoever may now take the lock: nobody while it is held for writing (or by an `RLock`);
/// when it is free or read, the head of the queue if it is a writer (free lock only), or every
/// reader before the first queued writer.
const RW_LIB: &str = r"
local function wake_rw(key, q, d, w, prefix, now_ms)
  if redis.call('exists', q) == 0 then return end
  prune(q, d, w, now_ms)
  local t = redis.call('type', key).ok
  local mode = false
  if t == 'hash' then mode = redis.call('hget', key, 'mode') end
  if t ~= 'none' and mode ~= 'read' then return end
  local head = redis.call('zrange', q, 0, 0)[1]
  if not head then return end
  if redis.call('zscore', w, head) then
    if t == 'none' then redis.call('publish', prefix .. head, '0') end
    return
  end
  local first_writer = redis.call('zrange', w, 0, 0, 'WITHSCORES')[2]
  local ids
  if first_writer then
    ids = redis.call('zrangebyscore', q, '-inf', '(' .. first_writer)
  else
    ids = redis.call('zrange', q, 0, -1)
  end
  for _, id in ipairs(ids) do redis.call('publish', prefix .. id, '0') end
end
";

/// Acquire a read or write hold. `KEYS = [key, counter, waiters, deadlines, writers, holders,
/// timeout_prefix, sem_counter, sem_timeouts]`, `ARGV = [field, ttl_ms, waiter, lifetime_ms,
/// 'read'|'write', '<session>:<owner>']`; replies as the mutex scripts (see `scripts.rs`).
static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{QUEUE_LIB}{SEMAPHORE_CHECK}{}",
        r"
local t = redis.call('type', KEYS[1]).ok
if is_semaphore(t, KEYS[8], KEYS[9]) then return {-3, 'semaphore'} end
if t ~= 'none' and t ~= 'hash' then return {-1, t} end
local writer = ARGV[5] == 'write'
local me = ARGV[3]
local ttl = tonumber(ARGV[2])
local now = now_us()
local now_ms = math.floor(now / 1000)
if redis.call('exists', KEYS[3]) == 1 then prune(KEYS[3], KEYS[4], KEYS[5], now_ms) end
local mode = false
if t == 'hash' then mode = redis.call('hget', KEYS[1], 'mode') end
-- This very hold already there (a grant whose reply was lost and not yet given back): granted
-- again in place, still one count.
local mine = t == 'hash' and redis.call('hexists', KEYS[1], ARGV[1]) == 1
  and ((writer and mode == 'write') or (not writer and mode == 'read'))
-- What fits the holders: a writer a free key, a reader a free key or other readers.
local fits = mine or t == 'none' or (not writer and mode == 'read')
-- Whose turn it is: a writer's at the head of the queue (or with nobody queued); a reader's
-- when no live writer is queued before it.
local turn = mine
if not turn then
  local queued = false
  if me ~= '' then queued = redis.call('zscore', KEYS[3], me) end
  if writer then
    local head = redis.call('zrange', KEYS[3], 0, 0)[1]
    turn = head == nil or head == me
  else
    local bound = '+inf'
    if queued then bound = '(' .. queued end
    turn = #redis.call('zrangebyscore', KEYS[5], '-inf', bound, 'LIMIT', 0, 1) == 0
  end
end
if fits and turn then
  local tok = redis.pcall('incr', KEYS[2])
  if me ~= '' then dequeue(KEYS[3], KEYS[4], KEYS[5], me) end
  if type(tok) == 'table' then return {-2, tok.err} end
  -- Records of an earlier lock's holders (crashed ones) go with it.
  if t == 'none' then redis.call('del', KEYS[6]) end
  if writer then
    redis.call('hset', KEYS[1], 'mode', 'write', ARGV[1], 1)
    redis.call('pexpire', KEYS[1], ttl)
  else
    if t == 'none' then redis.call('hset', KEYS[1], 'mode', 'read') end
    local old = tonumber(redis.call('hget', KEYS[1], ARGV[1]) or '0') or 0
    for i = 2, old do redis.call('del', KEYS[7] .. ':' .. ARGV[1] .. ':rwlock_timeout:' .. i) end
    redis.call('hset', KEYS[1], ARGV[1], 1)
    redis.call('set', KEYS[7] .. ':' .. ARGV[1] .. ':rwlock_timeout:1', 1, 'PX', ttl)
    redis.call('pexpire', KEYS[1], math.max(redis.call('pttl', KEYS[1]), ttl))
  end
  redis.call('hset', KEYS[6], ARGV[1], num(tok) .. ':' .. ARGV[6])
  redis.call('pexpire', KEYS[6], redis.call('pttl', KEYS[1]))
  return {1, tok}
end
local rank = -1
if me ~= '' then
  local w = nil
  if writer then w = KEYS[5] end
  enqueue(KEYS[3], KEYS[4], w, me, now, tonumber(ARGV[4]))
  redis.call('pexpire', KEYS[5], ARGV[4])
  if writer then
    rank = redis.call('zrank', KEYS[3], me)
  else
    rank = redis.call('zcount', KEYS[5], '-inf', '(' .. redis.call('zscore', KEYS[3], me))
  end
end
local pttl = -2
if t ~= 'none' then pttl = redis.call('pttl', KEYS[1]) end
-- Held by someone locksmith has no record of (a Java client): its release comes only on
-- Redisson's channel, which the waiter then listens to as well.
local foreign = 0
if t == 'hash' and redis.call('hlen', KEYS[1]) - 1 > redis.call('hlen', KEYS[6]) then foreign = 1 end
return {0, pttl, rank, foreign}
"
    ))
});

/// Redisson's read unlock: the reader's count down (its timeout key deleted); when no live
/// reader is left (every timeout key gone), the hash is deleted, `0` published on Redisson's
/// channel and the next locksmith waiters woken; otherwise the hash lives as long as the
/// longest-lived reader. `KEYS = [key, waiters, deadlines, writers, holders, timeout_prefix]`,
/// `ARGV = [field, wake_prefix, channel]` → 1 released, -1 not ours (any more).
static RELEASE_READ: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{QUEUE_LIB}{RW_LIB}{}",
        r"
if redis.call('type', KEYS[1]).ok ~= 'hash' or redis.call('hget', KEYS[1], 'mode') ~= 'read' then return -1 end
local counter = tonumber(redis.call('hget', KEYS[1], ARGV[1]))
if not counter then return -1 end
local timeout = KEYS[6] .. ':' .. ARGV[1] .. ':rwlock_timeout:' .. counter
local live = redis.call('exists', timeout) == 1
counter = redis.call('hincrby', KEYS[1], ARGV[1], -1)
if counter <= 0 then
  redis.call('hdel', KEYS[1], ARGV[1])
  redis.call('hdel', KEYS[5], ARGV[1])
end
redis.call('del', timeout)
if redis.call('hlen', KEYS[1]) > 1 then
  local left = -3
  for _, f in ipairs(redis.call('hkeys', KEYS[1])) do
    local c = tonumber(redis.call('hget', KEYS[1], f))
    if c then
      for i = c, 1, -1 do
        left = math.max(left, redis.call('pttl', KEYS[6] .. ':' .. f .. ':rwlock_timeout:' .. i))
      end
    end
  end
  if left > 0 then
    redis.call('pexpire', KEYS[1], left)
    if live then return 1 end
    return -1
  end
end
redis.call('del', KEYS[1])
redis.call('del', KEYS[5])
redis.call('publish', ARGV[3], '0')
wake_rw(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[2], math.floor(now_us() / 1000))
if live then return 1 end
return -1
"
    ))
});

/// Redisson's write unlock: the writer's field removed; the hash deleted (and `1` published on
/// Redisson's channel) when only `mode` is left, else back to read mode (a Java thread that read
/// under its own write lock); then the next locksmith waiters woken. `KEYS`/`ARGV` as
/// [`RELEASE_READ`] → 1 released, -1 not ours.
static RELEASE_WRITE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{QUEUE_LIB}{RW_LIB}{}",
        r"
if redis.call('type', KEYS[1]).ok ~= 'hash' or redis.call('hget', KEYS[1], 'mode') ~= 'write'
  or redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  return -1
end
redis.call('hdel', KEYS[1], ARGV[1])
redis.call('hdel', KEYS[5], ARGV[1])
if redis.call('hlen', KEYS[1]) <= 1 then
  redis.call('del', KEYS[1])
  redis.call('del', KEYS[5])
  redis.call('publish', ARGV[3], '1')
else
  redis.call('hset', KEYS[1], 'mode', 'read')
end
wake_rw(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[2], math.floor(now_us() / 1000))
return 1
"
    ))
});

/// A waiter gives up: it leaves the queue, and whoever may now take the lock is woken (it may
/// have been woken itself and not acted on it). `KEYS = [key, waiters, deadlines, writers]`,
/// `ARGV = [waiter, wake_prefix]`.
static LEAVE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{QUEUE_LIB}{RW_LIB}{}",
        r"
if redis.call('exists', KEYS[2]) == 0 then return 0 end
dequeue(KEYS[2], KEYS[3], KEYS[4], ARGV[1])
wake_rw(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[2], math.floor(now_us() / 1000))
return 1
"
    ))
});

/// One lock's state, read only. `KEYS = [key, holders, timeout_prefix, counter, waiters,
/// deadlines]` → `{type, last_token, live_waiters, (kind, field, record, ttl_ms)…}` with kind
/// `read` (only readers with a live timeout key), `write`, or `lock` (a hash without `mode`:
/// Redisson's `RLock`).
static STATUS: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        "{QUEUE_LIB}{}",
        r"
local out = status_head(KEYS[1], KEYS[4], KEYS[5], KEYS[6], math.floor(now_us() / 1000))
local t = out[1]
if t ~= 'hash' then return out end
local mode = redis.call('hget', KEYS[1], 'mode')
local pttl = redis.call('pttl', KEYS[1])
for _, f in ipairs(redis.call('hkeys', KEYS[1])) do
  if f ~= 'mode' then
    local rec = redis.call('hget', KEYS[2], f) or ''
    local kind = 'lock'
    if mode == 'write' and string.sub(f, -6) == ':write' then kind = 'write'
    elseif mode then kind = 'read' end
    local left = pttl
    if kind == 'read' then
      left = -2
      local c = tonumber(redis.call('hget', KEYS[1], f)) or 0
      for i = c, 1, -1 do
        left = math.max(left, redis.call('pttl', KEYS[3] .. ':' .. f .. ':rwlock_timeout:' .. i))
      end
    end
    if left > 0 or kind ~= 'read' then
      table.insert(out, kind)
      table.insert(out, f)
      table.insert(out, rec)
      table.insert(out, left)
    end
  end
end
return out
"
    ))
});

/// The acquire script (read and write holds).
pub(crate) fn acquire() -> &'static Script {
    &ACQUIRE
}

/// The release script of a read (`writer == false`) or write hold.
pub(crate) fn release(writer: bool) -> &'static Script {
    match writer {
        true => &RELEASE_WRITE,
        false => &RELEASE_READ,
    }
}

/// A waiter leaves the queue.
pub(crate) fn leave() -> &'static Script {
    &LEAVE
}

/// The status script.
pub(crate) fn status() -> &'static Script {
    &STATUS
}
