//! `redlock://[user:pass@]h1:p1,h2:p2,…[?prefix=P]`: parsed once, without I/O.

use std::collections::HashSet;

use locksmith_core::driver::{BackendUrl, HostPort};
use locksmith_core::Result;

/// One Redis master of the set.
pub(crate) type Addr = HostPort;

/// A parsed Redlock URL.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct RedlockUrl {
    pub(crate) instances: Vec<Addr>,
    /// The URL as parsed: credentials applied to every instance; printed only redacted.
    url: BackendUrl,
    /// Prepended to every lock name to form the Redis key (empty: key = name, like redis-py).
    pub(crate) prefix: String,
}

impl std::fmt::Debug for RedlockUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Through `describe`, so a password never reaches a log.
        f.write_str(&self.describe())
    }
}

impl RedlockUrl {
    /// Parses `url`.
    pub(crate) fn parse(url: &str) -> Result<Self> {
        let mut u = BackendUrl::parse(url)?;
        if u.scheme().name != "redlock" {
            return Err(u.invalid("expected redlock://host1:port1,host2:port2,host3:port3".into()));
        }
        let prefix = match u.take_option("prefix") {
            Some(p) if p.is_empty() || p.chars().any(char::is_control) => {
                return Err(u.invalid("prefix must be non-empty without control characters".into()))
            }
            p => p.unwrap_or_default(),
        };
        u.refuse_other_options(&["prefix"])?;
        u.refuse_extras(true, false, false)?;
        let mut seen = HashSet::new();
        for addr in u.hosts() {
            if !seen.insert((addr.host.to_ascii_lowercase(), addr.port)) {
                return Err(u.invalid(format!("instance {addr} is listed twice; Redlock needs independent instances")));
            }
        }
        let n = u.hosts().len();
        if n < 3 {
            return Err(u.invalid(format!(
                "Redlock needs at least 3 independent Redis masters, got {n}; use redis:// for a single instance"
            )));
        }
        if n.is_multiple_of(2) {
            return Err(u.invalid(format!(
                "Redlock needs an odd number of instances, got {n} (an even count tolerates no more failures than {})",
                n - 1
            )));
        }
        Ok(Self { instances: u.hosts().to_vec(), url: u, prefix })
    }

    /// The URL without credentials.
    pub(crate) fn describe(&self) -> String {
        match self.prefix.as_str() {
            "" => self.url.describe(&[]),
            p => self.url.describe(&[("prefix", p)]),
        }
    }

    /// The `redis://` URL of one instance, with the credentials, for the redis crate. A secret.
    pub(crate) fn instance_url(&self, addr: &Addr) -> String {
        let single = self.url.to_driver_url().replacen("redlock://", "redis://", 1);
        // Credentials are before the last '@' of the authority; the hosts after it.
        let creds = single
            .strip_prefix("redis://")
            .and_then(|rest| rest.split(['/', '?']).next())
            .and_then(|authority| authority.rsplit_once('@'))
            .map(|(userinfo, _)| format!("{userinfo}@"))
            .unwrap_or_default();
        format!("redis://{creds}{addr}/")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use locksmith_core::Error;

    fn reason(url: &str) -> String {
        match RedlockUrl::parse(url) {
            Err(Error::InvalidUrl { reason, .. }) => reason,
            other => panic!("{url}: expected InvalidUrl, got {other:?}"),
        }
    }

    #[test]
    fn three_or_five_distinct_instances_parse() {
        let u = RedlockUrl::parse("redlock://a:1,b:2,c:3").unwrap();
        assert_eq!(u.instances.len(), 3);
        assert_eq!(u.prefix, "");
        let u = RedlockUrl::parse("redlock://a:1,b:2,c:3,[::1]:4,e:5/?prefix=locks:").unwrap();
        assert_eq!(u.instances[3].to_string(), "[::1]:4");
        assert_eq!(u.prefix, "locks:");
        assert_eq!(u.describe(), "redlock://a:1,b:2,c:3,[::1]:4,e:5?prefix=locks:");
    }

    #[test]
    fn counts_duplicates_and_malformed_hosts_are_refused() {
        assert!(reason("redlock://a:1").contains("at least 3"));
        assert!(reason("redlock://a:1,b:2").contains("at least 3"));
        assert!(reason("redlock://a:1,b:2,c:3,d:4").contains("odd number"));
        assert!(reason("redlock://a:1,b:2,A:1").contains("listed twice"));
        assert_eq!(RedlockUrl::parse("redlock://a:1,b:2,c").unwrap().instances[2].port, 6379);
        assert!(reason("redlock://a:1,b:2,c:0").contains("port"));
        assert!(reason("redlock://a:1,b:2,c:x").contains("port"));
        assert!(reason("redlock://a:1,,c:3").contains("missing host"));
        assert!(reason("redis://a:1,b:2,c:3").contains("expected redlock://"));
        assert!(reason("redlock://a:1,b:2,c:3/x").contains("path"));
        assert!(reason("redlock://a:1,b:2,c:3?db=1").contains("unknown option"));
        assert!(reason("redlock://a:1,b:2,c:3?prefix=").contains("prefix"));
    }

    #[test]
    fn passwords_never_show() {
        let u = RedlockUrl::parse("redlock://user:s3cret@a:1,b:2,c:3").unwrap();
        assert!(!u.describe().contains("s3cret"));
        assert!(!format!("{u:?}").contains("s3cret"));
        assert_eq!(u.instance_url(&u.instances[0]), "redis://user:s3cret@a:1/");
        let u = RedlockUrl::parse("redlock://:p%40ss@a:1,b:2,c:3").unwrap();
        assert_eq!(u.instance_url(&u.instances[1]), "redis://:p%40ss@b:2/");
        match RedlockUrl::parse("redlock://user:s3cret@a:1,b:2") {
            Err(Error::InvalidUrl { url, .. }) => assert!(!url.contains("s3cret"), "{url}"),
            other => panic!("{other:?}"),
        }
    }
}
