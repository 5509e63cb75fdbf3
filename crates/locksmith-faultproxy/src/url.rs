//! The `host:port` list of a backend URL, and the same URL with those hosts replaced (to point
//! a client at proxies).
//!
//! Only the authority is touched; credentials, path (`/db`, `/chroot`) and query are kept
//! byte for byte. Error messages name the scheme or the host, never the whole URL, since it
//! may carry a password.

use std::error::Error;

/// A backend URL whose hosts cannot be listed or rewritten.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UrlError {
    /// No `scheme://`.
    #[error("expected scheme://host:port…, e.g. locksmith://127.0.0.1:7531")]
    NoScheme,
    /// A scheme this crate does not know.
    #[error("unknown scheme {scheme:?}; known: locksmith, redis, redlock, etcd, zk, postgres, postgresql, mysql")]
    UnknownScheme {
        /// The scheme as written.
        scheme: String,
    },
    /// A backend reached without the network (`sqlite://path`, `memory://`): nothing to proxy.
    #[error("{scheme}:// names no network host, so it cannot be put behind a proxy")]
    NoHosts {
        /// The scheme as written.
        scheme: String,
    },
    /// One entry of the host list is not `host[:port]`.
    #[error("{host:?} is not host:port: {reason}")]
    BadHost {
        /// The entry as written.
        host: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The caller's map refused a host.
    #[error("no replacement for {host}: {source}")]
    Map {
        /// The host, as [`hosts`] lists it.
        host: String,
        /// The map's error.
        source: Box<dyn Error + Send + Sync>,
    },
}

/// Every `host:port` of a backend URL, in the order written: `locksmith://h:p`,
/// `redis://[user:pass@]h:p[/db][?q]`, `redlock://h1:p1,h2:p2`, `etcd://h1:p1[,h2:p2]`,
/// `zk://h1:p1[,h2:p2][/chroot]`, `postgres(ql)://user:pass@h:p/db?q`, `mysql://…`.
///
/// Hosts are what the URL says (an IPv4 literal, a `[v6]` literal or a name), except
/// `localhost`, which becomes `127.0.0.1` so the result can be parsed as a socket address.
/// A missing port becomes the scheme's default (locksmith 7531, redis/redlock 6379,
/// etcd 2379, zk 2181, postgres 5432, mysql 3306).
///
/// ```
/// let hosts = locksmith_faultproxy::hosts("zk://localhost:2181,10.0.0.2/locks")?;
/// assert_eq!(hosts, ["127.0.0.1:2181", "10.0.0.2:2181"]);
/// # Ok::<(), locksmith_faultproxy::UrlError>(())
/// ```
///
/// # Errors
/// [`UrlError`] for a URL without scheme, an unknown scheme, a backend without hosts
/// (`sqlite://`, `memory://`) or a malformed host entry.
pub fn hosts(url: &str) -> Result<Vec<String>, UrlError> {
    let parts = Parts::split(url)?;
    parts.hosts.split(',').map(|h| normalise(h, parts.default_port)).collect()
}

/// The URL with every `host:port` replaced by `map(host_port)`, where `host_port` is as
/// [`hosts`] lists it and the result is written in its place verbatim. Everything else in
/// the URL is kept.
///
/// ```
/// let url = "postgres://me:secret@localhost:5432/locks?mode=lease";
/// let proxied = locksmith_faultproxy::rewrite_hosts(url, |hp| match hp {
///     "127.0.0.1:5432" => Ok("127.0.0.1:40001".to_string()),
///     other => Err(format!("no proxy for {other}")),
/// })?;
/// assert_eq!(proxied, "postgres://me:secret@127.0.0.1:40001/locks?mode=lease");
/// # Ok::<(), locksmith_faultproxy::UrlError>(())
/// ```
///
/// # Errors
/// As [`hosts`], and [`UrlError::Map`] with the first error `map` returns.
pub fn rewrite_hosts<E>(url: &str, mut map: impl FnMut(&str) -> Result<String, E>) -> Result<String, UrlError>
where
    E: Into<Box<dyn Error + Send + Sync>>,
{
    let parts = Parts::split(url)?;
    let mut out = String::with_capacity(url.len());
    out.push_str(parts.before);
    for (i, h) in parts.hosts.split(',').enumerate() {
        let host = normalise(h, parts.default_port)?;
        let replacement = map(&host).map_err(|e| UrlError::Map { host, source: e.into() })?;
        if i > 0 {
            out.push(',');
        }
        out.push_str(&replacement);
    }
    out.push_str(parts.after);
    Ok(out)
}

/// A URL cut around its host list.
struct Parts<'a> {
    /// `scheme://` and any `userinfo@`.
    before: &'a str,
    /// The comma-separated host list.
    hosts: &'a str,
    /// Path, query and fragment.
    after: &'a str,
    default_port: u16,
}

impl<'a> Parts<'a> {
    fn split(url: &'a str) -> Result<Parts<'a>, UrlError> {
        let (scheme, rest) = url.split_once("://").ok_or(UrlError::NoScheme)?;
        let default_port = match scheme {
            "locksmith" => 7531,
            "redis" | "redlock" => 6379,
            "etcd" => 2379,
            "zk" => 2181,
            "postgres" | "postgresql" => 5432,
            "mysql" => 3306,
            "sqlite" | "memory" => return Err(UrlError::NoHosts { scheme: scheme.to_string() }),
            other => return Err(UrlError::UnknownScheme { scheme: other.to_string() }),
        };
        // The authority ends at the first '/', '?' or '#' (RFC 3986); credentials end at its
        // last '@' (a password may contain '@' only percent-encoded, but be lenient).
        let authority_len = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, after) = rest.split_at(authority_len);
        let hosts_at = authority.rfind('@').map_or(0, |i| i + 1);
        let before_len = scheme.len() + "://".len() + hosts_at;
        Ok(Parts { before: &url[..before_len], hosts: &authority[hosts_at..], after, default_port })
    }
}

/// `host[:port]` → `host:port`, with `localhost` as `127.0.0.1` and the default port filled in.
fn normalise(entry: &str, default_port: u16) -> Result<String, UrlError> {
    let bad = |reason| UrlError::BadHost { host: entry.to_string(), reason };
    let (host, port) = if let Some(v6) = entry.strip_prefix('[') {
        let (inside, tail) = v6.split_once(']').ok_or_else(|| bad("'[' without ']'"))?;
        let port = match tail {
            "" => None,
            t => Some(t.strip_prefix(':').ok_or_else(|| bad("expected ':' after ']'"))?),
        };
        (&entry[..inside.len() + 2], port)
    } else {
        match entry.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (entry, None),
        }
    };
    if host.is_empty() || host == "[]" {
        return Err(bad("empty host"));
    }
    let port = match port {
        None => default_port,
        Some(p) => match p.parse::<u16>() {
            Ok(p) if p != 0 => p,
            _ => return Err(bad("port must be a number in 1..=65535")),
        },
    };
    let host = if host.eq_ignore_ascii_case("localhost") { "127.0.0.1" } else { host };
    Ok(format!("{host}:{port}"))
}
