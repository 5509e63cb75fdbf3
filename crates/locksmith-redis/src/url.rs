//! `redis[s]://[user:pass@]host:port[/db][?mode=plain|reentrant|rwlock&prefix=P][&tls=true&ca=FILE&cert=FILE&key=FILE][#insecure]`,
//! parsed without network I/O (the TLS files are read now, so a wrong path fails here).
//!
//! Our own options are taken off; credentials, host, port and database become the `redis`
//! crate's connection settings directly (no URL string holding the password is built).

use locksmith_core::driver::BackendUrl;
use locksmith_core::Result;

use crate::connect::{self, Tls};
use crate::layout::Mode;

const SHAPE: &str =
    "expected redis[s]://[user:pass@]host:port[/db][?mode=plain|reentrant|rwlock&prefix=P&ca=FILE&cert=FILE&key=FILE]";

/// A parsed backend URL.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    /// What the `redis` crate connects to (its Debug hides the password).
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
    /// [`Error::InvalidUrl`] for another scheme, a missing host, an unknown option or mode, a
    /// bad database number, or a contradictory TLS setting; [`Error::Config`] for TLS files that
    /// cannot be read or used.
    ///
    /// [`Error::InvalidUrl`]: locksmith_core::Error::InvalidUrl
    /// [`Error::Config`]: locksmith_core::Error::Config
    pub(crate) fn parse(url: &str) -> Result<Self> {
        let mut u = BackendUrl::parse(url)?;
        if u.scheme().base != "redis" {
            return Err(u.invalid(SHAPE.into()));
        }
        if u.hosts().len() != 1 {
            return Err(u.invalid("expected one host (for several independent instances use redlock://)".into()));
        }
        let mode = match u.take_option("mode").as_deref() {
            None | Some("plain") => Mode::Plain,
            Some("reentrant") => Mode::Reentrant,
            Some("rwlock") => Mode::RwLock,
            Some(other) => {
                return Err(u.invalid(format!("unknown mode {other:?}; expected plain, reentrant or rwlock")))
            }
        };
        let prefix = u.take_option("prefix").unwrap_or_default();
        let tls = Tls::take_from(&mut u)?;
        u.refuse_other_options(&["mode", "prefix", "tls", "ca", "cert", "key"])?;
        u.refuse_extras(true, true, false)?;
        let db = match u.path().trim_matches('/') {
            "" => 0,
            n => n
                .parse::<i64>()
                .ok()
                .filter(|n| *n >= 0)
                .ok_or_else(|| u.invalid(format!("bad database number {n:?}")))?,
        };
        let client = connect::client(&u, &u.hosts()[0], db, tls.as_ref())?;
        let mut extra = Vec::new();
        match mode {
            Mode::Plain => {}
            Mode::Reentrant => extra.push(("mode", "reentrant")),
            Mode::RwLock => extra.push(("mode", "rwlock")),
        }
        // `rediss://` says TLS by itself; `redis://…?tls=true` needs saying.
        if tls.is_some() && !u.scheme().tls {
            extra.push(("tls", "true"));
        }
        let mut describe = u.describe(&extra);
        if tls.as_ref().is_some_and(Tls::insecure) {
            describe.push_str("#insecure");
        }
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
        let c = Config::parse("redis://127.0.0.1:6379?mode=rwlock").unwrap();
        assert_eq!(c.mode, Mode::RwLock);
        assert_eq!(c.describe, "redis://127.0.0.1:6379?mode=rwlock");
        let c = Config::parse("redis://127.0.0.1:6379").unwrap();
        assert_eq!(c.mode, Mode::Plain);
        assert_eq!(c.prefix, "");
        assert!(!connect::is_tls(&c.client));
    }

    /// TLS is on for `rediss://` and for `redis://…?tls=true`, and the description says so.
    #[test]
    fn tls_urls() {
        let c = Config::parse("rediss://u:secret@localhost:6380/1?prefix=p").unwrap();
        assert!(connect::is_tls(&c.client));
        assert_eq!(c.describe, "rediss://u@localhost:6380/1");
        let c = Config::parse("redis://localhost?tls=true").unwrap();
        assert!(connect::is_tls(&c.client));
        assert_eq!(c.describe, "redis://localhost:6379?tls=true");
        let c = Config::parse("rediss://localhost#insecure").unwrap();
        assert_eq!(c.describe, "rediss://localhost:6379#insecure");
    }

    /// A CA file that cannot be read is a configuration error naming the option and path.
    #[test]
    fn unreadable_tls_files_are_config_errors() {
        match Config::parse("rediss://u:secret@localhost?ca=/nonexistent/ca.pem") {
            Err(Error::Config { message, backend }) => {
                assert!(message.contains("ca=/nonexistent/ca.pem"), "{message}");
                assert!(!backend.contains("secret"), "{backend}");
            }
            other => panic!("{other:?}"),
        }
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
            "redis://u:pw@h:1/x",
            "redis://u:pw@h:1#insecure",
            "rediss://u:pw@h:1#verify",
            "rediss://u:pw@h:1?tls=false",
            "rediss://u:pw@h:1?cert=/c.pem",
        ] {
            match Config::parse(url) {
                Err(Error::InvalidUrl { url: shown, .. }) => assert!(!shown.contains("pw"), "{shown}"),
                other => panic!("{url}: {other:?}"),
            }
        }
    }
}
