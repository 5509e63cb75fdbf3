//! `redis://[user:pass@]host:port[/db][?mode=plain|reentrant&prefix=P]`, parsed without I/O.
//!
//! Our own query options are taken off before the rest goes to the `redis` crate, which parses
//! credentials, host, port and database.

use locksmith_core::{Error, Result};

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
        let bad = |reason: String| Error::InvalidUrl { url: redact(url), reason };
        let rest = url
            .strip_prefix("redis://")
            .ok_or_else(|| bad("expected redis://[user:pass@]host:port[/db][?mode=plain|reentrant&prefix=P]".into()))?;
        let (base, query) = match rest.split_once('?') {
            Some((b, q)) => (b, Some(q)),
            None => (rest, None),
        };
        let authority = base.split('/').next().unwrap_or_default();
        let host_port = authority.rsplit('@').next().unwrap_or_default();
        if host_port.is_empty() || host_port.starts_with(':') {
            return Err(bad("missing host".into()));
        }
        let mut mode = Mode::Plain;
        let mut prefix = String::new();
        for pair in query.unwrap_or_default().split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let v = percent_decode(v).ok_or_else(|| bad(format!("bad percent-encoding in {k}")))?;
            match k {
                "mode" => {
                    mode = match v.as_str() {
                        "plain" => Mode::Plain,
                        "reentrant" => Mode::Reentrant,
                        other => return Err(bad(format!("unknown mode {other:?}; expected plain or reentrant"))),
                    }
                }
                "prefix" => prefix = v,
                other => return Err(bad(format!("unknown option {other:?}; known: mode, prefix"))),
            }
        }
        let client = redis::Client::open(format!("redis://{base}")).map_err(|e| bad(e.to_string()))?;
        let path = &base[authority.len()..];
        let mut describe = format!("redis://{host_port}{path}");
        if mode == Mode::Reentrant {
            describe.push_str("?mode=reentrant");
        }
        Ok(Self { client, describe, mode, prefix })
    }
}

/// `url` with any password replaced, so errors never echo a secret.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_string() };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    match rest[..end].rsplit_once('@') {
        Some((_, host)) => format!("{scheme}://***@{host}{}", &rest[end..]),
        None => url.to_string(),
    }
}

/// Decodes `%XX` escapes; `None` when an escape is malformed or the result is not UTF-8.
fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Options are parsed, the password never shows in `describe`.
    #[test]
    fn parses_options_and_hides_the_password() {
        let c = Config::parse("redis://u:secret@127.0.0.1:6380/2?mode=reentrant&prefix=app%3A").unwrap();
        assert_eq!(c.mode, Mode::Reentrant);
        assert_eq!(c.prefix, "app:");
        assert_eq!(c.describe, "redis://127.0.0.1:6380/2?mode=reentrant");
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
