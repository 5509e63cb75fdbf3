//! `redis://[user:pass@]host:port[/db][?mode=plain|reentrant&prefix=P]`, parsed without I/O.
//!
//! Our own query options are taken off before the rest goes to the `redis` crate, which parses
//! credentials, host, port and database.

use locksmith_core::driver::BackendUrl;
use locksmith_core::Result;

use crate::layout::Mode;

/// A parsed backend URL.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    /// What the `redis` crate connects to (the URL without our query options).
    pub(crate) client: redis::Client,
    /// The URL without credentials, for messages and logs.
    pub(crate) describe: String,
    /// Which lock layout.
    pub(crate) mode: Mode,
    /// Prepended to every lock name to form the key.
    pub(crate) prefix: String,
}

impl Config {
    /// Parses `url`.
    ///
    /// # Errors
    /// [`Error::InvalidUrl`] for another scheme, a missing host, an unknown option or mode, or
    /// anything the `redis` crate refuses.
    pub(crate) fn parse(url: &str) -> Result<Self> {
        let mut u = BackendUrl::parse(url)?;
        if u.scheme().name != "redis" {
            return Err(u.invalid("expected redis://[user:pass@]host:port[/db][?mode=plain|reentrant&prefix=P]".into()));
        }
        if u.hosts().len() != 1 {
            return Err(u.invalid("expected one host (for several independent instances use redlock://)".into()));
        }
        let mode = match u.take_option("mode").as_deref() {
            None | Some("plain") => Mode::Plain,
            Some("reentrant") => Mode::Reentrant,
            Some(other) => return Err(u.invalid(format!("unknown mode {other:?}; expected plain or reentrant"))),
        };
        let prefix = u.take_option("prefix").unwrap_or_default();
        u.refuse_other_options(&["mode", "prefix"])?;
        u.refuse_extras(true, true, false)?;
        let client = redis::Client::open(u.to_driver_url()).map_err(|e| u.invalid(e.to_string()))?;
        let describe = u.describe(if mode == Mode::Reentrant { &[("mode", "reentrant")] } else { &[] });
        Ok(Self { client, describe, mode, prefix })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use locksmith_core::Error;

    /// Options are parsed, the password never shows in `describe`.
    #[test]
    fn parses_options_and_hides_the_password() {
        let c = Config::parse("redis://u:secret@127.0.0.1:6380/2?mode=reentrant&prefix=app%3A").unwrap();
        assert_eq!(c.mode, Mode::Reentrant);
        assert_eq!(c.prefix, "app:");
        assert_eq!(c.describe, "redis://u@127.0.0.1:6380/2?mode=reentrant");
        let c = Config::parse("redis://127.0.0.1:6379").unwrap();
        assert_eq!(c.mode, Mode::Plain);
        assert_eq!(c.prefix, "");
    }

    /// Bad URLs are typed errors that do not echo the password.
    #[test]
    fn refuses_bad_urls() {
        for url in [
            "http://x:1",
            "redis://",
            "redis://:6379",
            "redis://h:1?mode=fair",
            "redis://h:1?color=red",
            "redis://h:1?prefix=%zz",
            "redis://u:pw@h:notaport",
        ] {
            match Config::parse(url) {
                Err(Error::InvalidUrl { url: shown, .. }) => assert!(!shown.contains("pw"), "{shown}"),
                other => panic!("{url}: {other:?}"),
            }
        }
    }
}
