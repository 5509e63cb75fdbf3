//! The command connection: one `ConnectionManager` per backend (it reconnects by itself after a
//! dropped connection), created on first use so that building a backend needs no runtime.

use std::time::Duration;

use locksmith_core::{Error, Result};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{AsyncConnectionConfig, RedisError, Script, Value};
use tokio::sync::OnceCell;

/// How long to wait for a TCP connection or a reply before calling the server unreachable.
pub(crate) const NET_TIMEOUT: Duration = Duration::from_secs(3);

/// The shared command connection of one backend.
#[derive(Debug)]
pub(crate) struct Conn {
    client: redis::Client,
    describe: String,
    /// Whether the client connects with TLS (for the hints in messages).
    tls: bool,
    manager: OnceCell<ConnectionManager>,
}

impl Conn {
    pub(crate) fn new(client: redis::Client, describe: String) -> Self {
        let tls = crate::connect::is_tls(&client);
        Self { client, describe, tls, manager: OnceCell::new() }
    }

    /// The backend as named in messages.
    pub(crate) fn describe(&self) -> &str {
        &self.describe
    }

    /// The connection, connecting on first use.
    ///
    /// The manager retries every failed connect (twice, about 0.6 s), also those no retry can
    /// mend. So the first connect is tried once on its own: a wrong password, a CA that does not
    /// verify or a missing client certificate is reported from that attempt at once, as
    /// [`Error::Auth`] or [`Error::Config`], which nothing above retries either. Any other
    /// failure is left to the manager's retries, as before. The price is one extra connection per
    /// backend, on first use only.
    ///
    /// # Cancel safety
    /// Cancel safe: a dropped first connection attempt leaves the cell empty.
    pub(crate) async fn get(&self) -> Result<ConnectionManager> {
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(NET_TIMEOUT))
            .set_response_timeout(Some(NET_TIMEOUT))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_millis(500));
        let init = self.manager.get_or_try_init(|| async {
            let probe = AsyncConnectionConfig::new()
                .set_connection_timeout(Some(NET_TIMEOUT))
                .set_response_timeout(Some(NET_TIMEOUT));
            if let Err(e) = self.client.get_multiplexed_async_connection_with_config(&probe).await {
                let e = self.error(e);
                if matches!(e, Error::Auth { .. } | Error::Config { .. }) {
                    return Err(e);
                }
            }
            ConnectionManager::new_with_config(self.client.clone(), config).await.map_err(|e| self.error(e))
        });
        match tokio::time::timeout(NET_TIMEOUT, init).await {
            Ok(Ok(m)) => Ok(m.clone()),
            Ok(Err(e)) => Err(e),
            Err(_) if self.tls => Err(self.unavailable(format!(
                "no connection within {NET_TIMEOUT:?} (a server without TLS on this port never answers the handshake: \
                 use redis://?)"
            ))),
            Err(_) => Err(self.unavailable(format!("no connection within {NET_TIMEOUT:?}"))),
        }
    }

    /// Runs `invocation` of a script (EVALSHA, loading it on NOSCRIPT).
    ///
    /// # Cancel safety
    /// Cancel safe for the connection; the script may or may not have run.
    pub(crate) async fn run(&self, invocation: &redis::ScriptInvocation<'_>) -> Result<Value> {
        let mut c = self.get().await?;
        let call = invocation.invoke_async::<Value>(&mut c);
        match tokio::time::timeout(NET_TIMEOUT, call).await {
            Ok(r) => r.map_err(|e| self.error(e)),
            Err(_) => Err(self.unavailable(format!("no answer within {NET_TIMEOUT:?}"))),
        }
    }

    /// Runs a pipeline and returns its replies.
    ///
    /// # Cancel safety
    /// Cancel safe for the connection; the commands may or may not have run.
    pub(crate) async fn pipe(&self, pipe: &redis::Pipeline) -> Result<Vec<Value>> {
        let mut c = self.get().await?;
        let call = pipe.query_async::<Vec<Value>>(&mut c);
        match tokio::time::timeout(NET_TIMEOUT, call).await {
            Ok(r) => r.map_err(|e| self.error(e)),
            Err(_) => Err(self.unavailable(format!("no answer within {NET_TIMEOUT:?}"))),
        }
    }

    /// Classifies a `redis` error ([`crate::connect::classify`]): connection trouble is
    /// [`Error::Unavailable`] (transient, the engine retries), refused credentials or permissions
    /// [`Error::Auth`], TLS trouble [`Error::Config`] (neither is retried), another server-side
    /// refusal [`Error::Backend`].
    pub(crate) fn error(&self, e: RedisError) -> Error {
        crate::connect::classify(&e, &self.describe, self.tls)
    }

    pub(crate) fn unavailable(&self, message: String) -> Error {
        Error::Unavailable { backend: self.describe.clone(), message }
    }
}

/// Starts an invocation of `script` with `keys` and `args`.
pub(crate) fn invocation<'a>(script: &'a Script, keys: &[&str], args: &[&str]) -> redis::ScriptInvocation<'a> {
    let mut inv = script.prepare_invoke();
    for k in keys {
        inv.key(*k);
    }
    for a in args {
        inv.arg(*a);
    }
    inv
}
