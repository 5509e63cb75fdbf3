//! `memcached://host[:port][?prefix=P]`: parsed once, without network I/O.

use locksmith_core::driver::{BackendUrl, HostPort};
use locksmith_core::Result;

/// A parsed memcached URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MemcachedUrl {
    pub(crate) server: HostPort,
    /// Prepended to every lock name to form the key (empty: key = name).
    pub(crate) prefix: String,
    describe: String,
}

impl MemcachedUrl {
    pub(crate) fn parse(url: &str) -> Result<Self> {
        let mut u = BackendUrl::parse(url)?;
        if u.scheme().name != "memcached" {
            return Err(u.invalid("expected memcached://host[:port]".into()));
        }
        let prefix = match u.take_option("prefix") {
            Some(p) if p.is_empty() || p.bytes().any(|b| b.is_ascii_whitespace() || b.is_ascii_control()) => {
                return Err(u.invalid("prefix must be non-empty, without spaces or control characters".into()))
            }
            p => p.unwrap_or_default(),
        };
        u.refuse_other_options(&["prefix"])?;
        // memcached's text protocol has no authentication (SASL is binary-protocol only).
        u.refuse_extras(false, false, true)?;
        let server = match u.hosts() {
            [one] => one.clone(),
            many => {
                return Err(u.invalid(format!(
                    "one memcached server only, got {}: a lock on several independent servers needs a \
                     quorum, which is Redlock (redlock://); a lock spread over a sharded pool is not safe",
                    many.len()
                )))
            }
        };
        let extra: Vec<(&str, &str)> = if prefix.is_empty() { vec![] } else { vec![("prefix", prefix.as_str())] };
        let describe = u.describe(&extra);
        Ok(Self { server, prefix, describe })
    }

    /// The URL as messages show it.
    pub(crate) fn describe(&self) -> &str {
        &self.describe
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use locksmith_core::Error;

    fn reason(url: &str) -> String {
        match MemcachedUrl::parse(url) {
            Err(Error::InvalidUrl { reason, .. }) => reason,
            other => panic!("{url}: expected InvalidUrl, got {other:?}"),
        }
    }

    #[test]
    fn one_server_with_an_optional_prefix_parses() {
        let u = MemcachedUrl::parse("memcached://cache1").unwrap();
        assert_eq!((u.server.host.as_str(), u.server.port, u.prefix.as_str()), ("cache1", 11211, ""));
        assert_eq!(u.describe(), "memcached://cache1:11211");
        let u = MemcachedUrl::parse("memcached://[::1]:11311/?prefix=locks:").unwrap();
        assert_eq!(u.server.to_string(), "[::1]:11311");
        assert_eq!(u.prefix, "locks:");
        assert_eq!(u.describe(), "memcached://[::1]:11311?prefix=locks:");
    }

    #[test]
    fn several_servers_credentials_and_unknown_options_are_refused() {
        assert!(reason("memcached://a:1,b:2").contains("Redlock"));
        assert!(reason("memcached://u:pw@a:1").contains("credentials"));
        assert!(!reason("memcached://u:s3cret@a:1").contains("s3cret"));
        assert!(reason("memcached://a:1/x").contains("path"));
        assert!(reason("memcached://a:1?ttl=3").contains("unknown option"));
        assert!(reason("memcached://a:1?prefix=").contains("prefix"));
        assert!(reason("memcached://a:1?prefix=a%20b").contains("prefix"));
        assert!(reason("memcached://a:0").contains("port"));
        assert!(reason("redis://a:1").contains("expected memcached://"));
    }
}
