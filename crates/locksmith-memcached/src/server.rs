//! The lock operations on the one server, shared by the backend's sessions and `status`:
//! add, read, and the owner-checked renew and delete (value compared, then written or deleted
//! under the CAS that was read, so nothing written in between is ever overwritten).

use std::time::Duration;

use locksmith_core::{Error, Result};

use crate::conn::{Conn, Timeouts};
use crate::meta::{self, Reply};

/// memcached's longest key.
const MAX_KEY: usize = 250;
/// A value read, then changed before our CAS write or delete, this many times in a row: given
/// up (someone else keeps writing this key).
const CAS_ATTEMPTS: usize = 3;

/// The item under a lock's key.
#[derive(Debug, Clone)]
pub(crate) struct Item {
    pub(crate) value: Vec<u8>,
    cas: u64,
    /// Seconds left; `None`: no expiry (written by another tool).
    pub(crate) ttl: Option<Duration>,
}

/// The server, its key prefix and its connection.
#[derive(Debug)]
pub(crate) struct Server {
    /// `memcached://host:port[?prefix=…]`: no credentials exist in this scheme.
    pub(crate) describe: String,
    prefix: String,
    conn: Conn,
}

impl Server {
    pub(crate) fn new(describe: String, prefix: String, conn: Conn) -> Self {
        Self { describe, prefix, conn }
    }

    /// The key of lock `name`: `prefix + name`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] over memcached's 250 bytes.
    pub(crate) fn key(&self, name: &str) -> Result<String> {
        let key = format!("{}{name}", self.prefix);
        if key.len() > MAX_KEY {
            return Err(Error::InvalidArgument(format!(
                "memcached keys are at most {MAX_KEY} bytes; prefix + name {name:?} is {}",
                key.len()
            )));
        }
        Ok(key)
    }

    /// Stores `value` under `key` for `secs` if the key is free; whether it was.
    pub(crate) async fn add(&self, key: &str, value: &str, secs: u64, t: Timeouts) -> Result<bool> {
        match self.conn.call(&meta::add(key, value.as_bytes(), secs), t).await? {
            Reply::Done => Ok(true),
            Reply::NotStored => Ok(false),
            other => Err(self.unexpected("ms (add)", &other)),
        }
    }

    /// The item under `key`, if any.
    pub(crate) async fn read(&self, key: &str, t: Timeouts) -> Result<Option<Item>> {
        match self.conn.call(&meta::read(key), t).await? {
            Reply::Value { data, cas, ttl } => {
                let ttl = u64::try_from(ttl).ok().map(Duration::from_secs);
                Ok(Some(Item { value: data, cas, ttl }))
            }
            Reply::Missing => Ok(None),
            other => Err(self.unexpected("mg", &other)),
        }
    }

    /// Sets the expiry of `key` to `secs` from now if it still holds `value`; whether it did
    /// (`false`: gone, expired, evicted, or someone else's).
    pub(crate) async fn renew(&self, key: &str, value: &str, secs: u64, t: Timeouts) -> Result<bool> {
        for _ in 0..CAS_ATTEMPTS {
            let Some(item) = self.read_ours(key, value, t).await? else { return Ok(false) };
            match self.conn.call(&meta::replace_if(key, value.as_bytes(), secs, item.cas), t).await? {
                Reply::Done => return Ok(true),
                Reply::Missing => return Ok(false),
                // Changed since read (a concurrent renewal of ours, or someone else): read again.
                Reply::Exists => continue,
                other => return Err(self.unexpected("ms (CAS)", &other)),
            }
        }
        Err(self.contended(key))
    }

    /// Deletes `key` if it still holds `value`; whether it did.
    pub(crate) async fn delete(&self, key: &str, value: &str, t: Timeouts) -> Result<bool> {
        for _ in 0..CAS_ATTEMPTS {
            let Some(item) = self.read_ours(key, value, t).await? else { return Ok(false) };
            match self.conn.call(&meta::delete_if(key, item.cas), t).await? {
                Reply::Done => return Ok(true),
                Reply::Missing => return Ok(false),
                Reply::Exists => continue,
                other => return Err(self.unexpected("md", &other)),
            }
        }
        Err(self.contended(key))
    }

    /// The item under `key` if its value is `value`.
    async fn read_ours(&self, key: &str, value: &str, t: Timeouts) -> Result<Option<Item>> {
        Ok(self.read(key, t).await?.filter(|item| item.value == value.as_bytes()))
    }

    fn unexpected(&self, command: &str, reply: &Reply) -> Error {
        Error::Protocol(format!("{}: unexpected answer to {command}: {reply:?}", self.describe))
    }

    fn contended(&self, key: &str) -> Error {
        Error::Backend(format!(
            "{}: key {key:?} changed between read and write {CAS_ATTEMPTS} times in a row",
            self.describe
        ))
    }
}
