//! `status` of read/write locks and semaphores: one read-only script each, whose flat reply is
//! turned into holders here.

use std::time::Duration;

use locksmith_core::{Error, HoldMode, HolderStatus, LockName, LockStatus, Result};
use redis::Value;

use crate::conn::invocation;
use crate::layout::{encode_hex, Kind};
use crate::scripts::{as_int, as_text};
use crate::shared::Shared;
use crate::{rwlock, semaphore};

/// Whether `key` is a semaphore's: locksmith's semaphore counter exists, or the key is a string
/// beside a Redisson timeout set (as the lock scripts decide).
///
/// # Cancel safety
/// Cancel safe: read only.
pub(crate) async fn is_semaphore(shared: &Shared, key: &str) -> Result<bool> {
    let mut p = redis::pipe();
    p.cmd("EXISTS").arg(shared.layout.counter(Kind::Permit(1), key));
    p.cmd("TYPE").arg(key);
    p.cmd("TYPE").arg(shared.layout.timeout_set(key));
    let replies = shared.conn.pipe(&p).await?;
    let [counter, ty, timeouts] = replies.as_slice() else {
        return Err(Error::Protocol(format!("redis: unexpected status reply {replies:?}")));
    };
    let is = |v: &Value, t: &str| matches!(v, Value::SimpleString(s) if s == t);
    Ok(as_int(counter) == Some(1) || (is(ty, "string") && is(timeouts, "zset")))
}

/// A read/write lock's status (`?mode=rwlock`), or `Ok(Err(why))` when its key is not one.
///
/// # Cancel safety
/// Cancel safe: read only.
pub(crate) async fn rwlock(
    shared: &Shared,
    name: &LockName,
    key: &str,
) -> Result<std::result::Result<LockStatus, String>> {
    let l = &shared.layout;
    let q = l.queue(key);
    let keys = [
        key,
        &l.holders_key(key),
        &l.rwlock_timeout_prefix(key),
        &l.counter(Kind::Write, key),
        &q.waiters,
        &q.deadlines,
    ];
    let reply = shared.conn.run(&invocation(rwlock::status(), &keys.map(|k| k as &str), &[])).await?;
    let bad = || Error::Protocol(format!("redis: unexpected status reply {reply:?}"));
    let (ty, last_token, waiters, rest) = head(&reply).ok_or_else(bad)?;
    if ty != "none" && ty != "hash" {
        return Ok(Err(format!("redis: key {key:?} holds a {ty}, not a lock")));
    }
    let mut holders = Vec::new();
    for h in rest.chunks(4) {
        let [kind, field, record, left] = h else { return Err(bad()) };
        let (kind, field) = (as_text(kind).ok_or_else(bad)?, as_text(field).ok_or_else(bad)?);
        let mode = if kind == "read" { HoldMode::Shared } else { HoldMode::Exclusive };
        // Redisson's field is `<uuid>:<thread>` (the writer's with `:write`).
        let ident = match kind.as_str() {
            "write" => field.strip_suffix(":write").unwrap_or(&field),
            _ => field.as_str(),
        };
        let (session, owner) = ident.split_once(':').unwrap_or(("", ident));
        holders.push(
            HolderStatus::new(session.to_string(), owner.to_string(), record_token(record), millis(left))
                .with_mode(mode, None),
        );
    }
    Ok(Ok(LockStatus::new(name.to_string(), None, waiters, last_token).with_holders(holders)))
}

/// A semaphore's status: its number of permits and the holders of leased permits (Java
/// clients' permits show their id as the owner, with no session and token 0), or `Ok(Err(why))`
/// when its key is not one.
///
/// # Cancel safety
/// Cancel safe: read only.
pub(crate) async fn semaphore(
    shared: &Shared,
    name: &LockName,
    key: &str,
) -> Result<std::result::Result<LockStatus, String>> {
    let l = &shared.layout;
    let q = l.queue(key);
    let keys =
        [key, &l.timeout_set(key), &l.holders_key(key), &l.counter(Kind::Permit(1), key), &q.waiters, &q.deadlines];
    let reply = shared.conn.run(&invocation(semaphore::status(), &keys.map(|k| k as &str), &[])).await?;
    let bad = || Error::Protocol(format!("redis: unexpected status reply {reply:?}"));
    let (ty, last_token, waiters, rest) = head(&reply).ok_or_else(bad)?;
    let [permits, rest @ ..] = rest else { return Err(bad()) };
    if ty == "none" {
        return Ok(Ok(LockStatus::new(name.to_string(), None, waiters, last_token)));
    }
    let Some(permits) = as_int(permits).and_then(|n| u32::try_from(n).ok()) else {
        return Ok(Err(format!("redis: key {key:?} holds a {ty} that is not a semaphore's count of permits")));
    };
    let mut holders = Vec::new();
    for h in rest.chunks(3) {
        let [id, record, left] = h else { return Err(bad()) };
        let Value::BulkString(id) = id else { return Err(bad()) };
        let record = as_text(record).unwrap_or_default();
        // locksmith's record is `<token>:<session>:<owner>`; a Java permit has none.
        let (session, owner) = match record.split_once(':').and_then(|(_, r)| r.split_once(':')) {
            Some((s, o)) => (s.to_string(), o.to_string()),
            None => (String::new(), encode_hex(id)),
        };
        holders.push(
            HolderStatus::new(session, owner, record_token(&Value::BulkString(record.into_bytes())), millis(left))
                .with_mode(HoldMode::Permit(permits), None),
        );
    }
    let status = LockStatus::new(name.to_string(), None, waiters, last_token).with_holders(holders);
    Ok(Ok(status.with_permits(Some(permits))))
}

/// What the status scripts' replies start with (their `status_head`): the key's type, the last
/// token, the live waiters; then the rest of the reply.
fn head(reply: &Value) -> Option<(String, u64, u64, &[Value])> {
    let Value::Array(items) = reply else { return None };
    let [ty, last, waiters, rest @ ..] = items.as_slice() else { return None };
    Some((as_text(ty)?, token(last), as_int(waiters).and_then(|n| u64::try_from(n).ok())?, rest))
}

/// A counter's value (0 if missing or not a number).
fn token(v: &Value) -> u64 {
    as_int(v).and_then(|n| u64::try_from(n).ok()).unwrap_or(0)
}

/// The token in a holder record `<token>:…` (0 for a holder locksmith has no record of).
fn record_token(v: &Value) -> u64 {
    as_text(v).and_then(|r| r.split(':').next().and_then(|t| t.parse().ok())).unwrap_or(0)
}

/// A millisecond count (negative: 0).
fn millis(v: &Value) -> Duration {
    Duration::from_millis(as_int(v).and_then(|n| u64::try_from(n).ok()).unwrap_or(0))
}
