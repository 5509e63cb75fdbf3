//! `redlock://[user:pass@]h1:p1,h2:p2,…[?prefix=P][&tls=true&ca=FILE&cert=FILE&key=FILE][#insecure]`:
//! parsed once, without network I/O (TLS files are read now).
//!
//! One URL has one scheme, so TLS and its files apply to **every** instance (`?tls=true`, or any
//! of `ca`, `cert`, `key`); a set that mixes TLS and plain instances, or needs other files or
//! credentials per instance, is built with `RedlockBackend::from_clients`.

use std::collections::HashSet;

use locksmith_core::driver::{BackendUrl, HostPort};
use locksmith_core::Result;
use locksmith_redis::connect::{self, Tls};

/// A parsed Redlock URL.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct RedlockUrl {
    pub(crate) instances: Vec<HostPort>,
    /// The URL as parsed: credentials applied to every instance; printed only redacted.
    url: BackendUrl,
    /// TLS for every instance, or none.
    tls: Option<Tls>,
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
        let tls = Tls::take_from(&mut u)?;
        u.refuse_other_options(&["prefix", "tls", "ca", "cert", "key"])?;
        u.refuse_extras(true, false, false)?;
        let keys = u.hosts().iter().map(|a| ((a.host.to_ascii_lowercase(), a.port), a.to_string()));
        check_instances(keys).map_err(|reason| u.invalid(reason))?;
        Ok(Self { instances: u.hosts().to_vec(), url: u, tls, prefix })
    }

    /// The URL without credentials.
    pub(crate) fn describe(&self) -> String {
        let mut extra = Vec::new();
        if !self.prefix.is_empty() {
            extra.push(("prefix", self.prefix.as_str()));
        }
        if self.tls.is_some() {
            extra.push(("tls", "true"));
        }
        let mut out = self.url.describe(&extra);
        if self.tls.as_ref().is_some_and(Tls::insecure) {
            out.push_str("#insecure");
        }
        out
    }

    /// The client of one instance: its address, the URL's credentials and TLS settings.
    pub(crate) fn instance_client(&self, addr: &HostPort) -> Result<redis::Client> {
        connect::client(&self.url, addr, 0, self.tls.as_ref())
    }
}

/// Refuses a set that Redlock cannot run on: fewer than 3 instances, an even count, or one
/// instance listed twice. `instances` yields a comparison key and a display name per instance.
pub(crate) fn check_instances<K: std::hash::Hash + Eq>(
    instances: impl Iterator<Item = (K, String)>,
) -> std::result::Result<(), String> {
    let mut seen = HashSet::new();
    let mut n: usize = 0;
    for (key, shown) in instances {
        if !seen.insert(key) {
            return Err(format!("instance {shown} is listed twice; Redlock needs independent instances"));
        }
        n += 1;
    }
    if n < 3 {
        return Err(format!(
            "Redlock needs at least 3 independent Redis masters, got {n}; use redis:// for a single instance"
        ));
    }
    if n.is_multiple_of(2) {
        return Err(format!(
            "Redlock needs an odd number of instances, got {n} (an even count tolerates no more failures than {})",
            n - 1
        ));
    }
    Ok(())
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
        assert!(reason("redlock://a:1,b:2,c:3#insecure").contains("TLS"));
        assert!(reason("redlock://a:1,b:2,c:3?tls=true#other").contains("fragment"));
    }

    /// `?tls=true` (or a CA file) makes every instance a TLS instance, and says so.
    #[test]
    fn tls_applies_to_every_instance() {
        let u = RedlockUrl::parse("redlock://u:pw@a:1,b:2,c:3?prefix=l:&tls=true").unwrap();
        assert_eq!(u.describe(), "redlock://u@a:1,b:2,c:3?prefix=l:&tls=true");
        for addr in &u.instances {
            assert!(locksmith_redis::connect::is_tls(&u.instance_client(addr).unwrap()));
        }
        let u = RedlockUrl::parse("redlock://a:1,b:2,c:3?tls=true#insecure").unwrap();
        assert_eq!(u.describe(), "redlock://a:1,b:2,c:3?tls=true#insecure");
        assert!(matches!(
            RedlockUrl::parse("redlock://u:pw@a:1,b:2,c:3?ca=/nonexistent.pem"),
            Err(Error::Config { message, .. }) if message.contains("/nonexistent.pem")
        ));
    }

    #[test]
    fn passwords_never_show() {
        let u = RedlockUrl::parse("redlock://user:s3cret@a:1,b:2,c:3").unwrap();
        assert!(!u.describe().contains("s3cret"));
        assert!(!format!("{u:?}").contains("s3cret"));
        let c = u.instance_client(&u.instances[0]).unwrap();
        assert_eq!(c.get_connection_info().redis_settings().password(), Some("s3cret"));
        assert_eq!(c.get_connection_info().redis_settings().username(), Some("user"));
        assert!(!format!("{c:?}").contains("s3cret"));
        let u = RedlockUrl::parse("redlock://:p%40ss@a:1,b:2,c:3").unwrap();
        let c = u.instance_client(&u.instances[1]).unwrap();
        assert_eq!(c.get_connection_info().redis_settings().password(), Some("p@ss"));
        assert_eq!(c.get_connection_info().addr().to_string(), "b:2");
        match RedlockUrl::parse("redlock://user:s3cret@a:1,b:2") {
            Err(Error::InvalidUrl { url, .. }) => assert!(!url.contains("s3cret"), "{url}"),
            other => panic!("{other:?}"),
        }
    }
}
