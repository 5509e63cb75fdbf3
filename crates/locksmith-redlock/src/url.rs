//! `redlock://[user:pass@]h1:p1,h2:p2,…[?prefix=P]`: parsed once, without I/O.

use std::collections::HashSet;

use locksmith_core::{Error, Result};

/// One Redis master of the set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Addr {
    /// Host as written (IPv6 keeps its brackets).
    pub(crate) host: String,
    pub(crate) port: u16,
}

impl std::fmt::Display for Addr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// A parsed Redlock URL.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct RedlockUrl {
    pub(crate) instances: Vec<Addr>,
    /// `user:pass` applied to every instance; never shown.
    pub(crate) userinfo: Option<String>,
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
        let bad = |reason: String| Error::InvalidUrl { url: redact(url), reason };
        let rest = url
            .strip_prefix("redlock://")
            .ok_or_else(|| bad("expected redlock://host1:port1,host2:port2,host3:port3".into()))?;
        let (authority, query) = match rest.split_once('?') {
            Some((a, q)) => (a, Some(q)),
            None => (rest, None),
        };
        let authority = authority.strip_suffix('/').unwrap_or(authority);
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u.to_string()), h),
            None => (None, authority),
        };
        let mut instances = Vec::new();
        let mut seen = HashSet::new();
        for part in hosts.split(',') {
            let addr = parse_addr(part).map_err(&bad)?;
            if !seen.insert((addr.host.to_ascii_lowercase(), addr.port)) {
                return Err(bad(format!("instance {addr} is listed twice; Redlock needs independent instances")));
            }
            instances.push(addr);
        }
        let n = instances.len();
        if n < 3 {
            return Err(bad(format!(
                "Redlock needs at least 3 independent Redis masters, got {n}; use redis:// for a single instance"
            )));
        }
        if n.is_multiple_of(2) {
            return Err(bad(format!(
                "Redlock needs an odd number of instances, got {n} (an even count tolerates no more failures than {})",
                n - 1
            )));
        }
        let mut prefix = String::new();
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("prefix", v)) if !v.is_empty() && !v.chars().any(char::is_control) => prefix = v.to_string(),
                Some(("prefix", _)) => return Err(bad("prefix must be non-empty without control characters".into())),
                _ => return Err(bad(format!("unknown option {pair:?}; known: prefix=P"))),
            }
        }
        Ok(Self { instances, userinfo, prefix })
    }

    /// The URL without credentials.
    pub(crate) fn describe(&self) -> String {
        let hosts: Vec<String> = self.instances.iter().map(Addr::to_string).collect();
        let mut s = format!("redlock://{}", hosts.join(","));
        if !self.prefix.is_empty() {
            s.push_str("?prefix=");
            s.push_str(&self.prefix);
        }
        s
    }

    /// The `redis://` URL of one instance, with credentials, for the redis crate.
    pub(crate) fn instance_url(&self, addr: &Addr) -> String {
        match &self.userinfo {
            Some(u) => format!("redis://{u}@{addr}/"),
            None => format!("redis://{addr}/"),
        }
    }
}

fn parse_addr(part: &str) -> std::result::Result<Addr, String> {
    let expected = || format!("{part:?} is not host:port");
    let (host, port) = if let Some(v6) = part.strip_prefix('[') {
        let (h, p) = v6.split_once("]:").ok_or_else(expected)?;
        (format!("[{h}]"), p)
    } else {
        let (h, p) = part.rsplit_once(':').ok_or_else(expected)?;
        (h.to_string(), p)
    };
    let valid_host = |h: &str| !h.is_empty() && !h.contains(|c: char| c.is_whitespace() || "/@?#,:".contains(c));
    if host.is_empty() || (!host.starts_with('[') && !valid_host(&host)) {
        return Err(expected());
    }
    let port: u16 = port.parse().map_err(|_| format!("{part:?}: port must be a number in 1..=65535"))?;
    if port == 0 {
        return Err(format!("{part:?}: port must be a number in 1..=65535"));
    }
    Ok(Addr { host, port })
}

/// The URL with any `user:pass@` removed, for error messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}://{}", &url[..s], &url[at + 1..]),
        _ => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert!(reason("redlock://a:1,b:2,c").contains("not host:port"));
        assert!(reason("redlock://a:1,b:2,c:0").contains("port"));
        assert!(reason("redlock://a:1,b:2,c:x").contains("port"));
        assert!(reason("redlock://a:1,,c:3").contains("not host:port"));
        assert!(reason("redis://a:1,b:2,c:3").contains("expected redlock://"));
        assert!(reason("redlock://a:1,b:2,c:3?db=1").contains("unknown option"));
        assert!(reason("redlock://a:1,b:2,c:3?prefix=").contains("prefix"));
    }

    #[test]
    fn passwords_never_show() {
        let u = RedlockUrl::parse("redlock://user:s3cret@a:1,b:2,c:3").unwrap();
        assert!(!u.describe().contains("s3cret"));
        assert!(!format!("{u:?}").contains("s3cret"));
        assert_eq!(u.instance_url(&u.instances[0]), "redis://user:s3cret@a:1/");
        match RedlockUrl::parse("redlock://user:s3cret@a:1,b:2") {
            Err(Error::InvalidUrl { url, .. }) => assert!(!url.contains("s3cret"), "{url}"),
            other => panic!("{other:?}"),
        }
    }
}
