//! The `host:port` list of a backend URL, and the same URL with those hosts replaced (to point
//! a client at proxies).
//!
//! Only the authority is touched; credentials, path (`/db`, `/chroot`) and query are kept
//! byte for byte. Error messages name the scheme or the host, never the whole URL, since it
//! may carry a password.

use std::error::Error;

use locksmith_core::driver::{BackendUrl, HostPort};

/// A backend URL whose hosts cannot be listed or rewritten.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UrlError {
    /// Not a backend URL locksmith can parse (the message shows it without its password).
    #[error("{0}")]
    Invalid(#[from] locksmith_core::Error),
    /// A backend reached without the network (`sqlite://path`, `memory://`): nothing to proxy.
    #[error("{scheme}:// names no network host, so it cannot be put behind a proxy")]
    NoHosts {
        /// The scheme as written.
        scheme: String,
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

/// Every `host:port` of a backend URL, in the order written, as the shared URL parser reads it
/// ([`BackendUrl`]: a missing port becomes the scheme's default), except `localhost`, which
/// becomes `127.0.0.1` so the result can be parsed as a socket address.
///
/// ```
/// let hosts = locksmith_faultproxy::hosts("zk://localhost:2181,10.0.0.2/locks")?;
/// assert_eq!(hosts, ["127.0.0.1:2181", "10.0.0.2:2181"]);
/// # Ok::<(), locksmith_faultproxy::UrlError>(())
/// ```
///
/// # Errors
/// [`UrlError`] for a URL the shared parser refuses or a backend without hosts (`sqlite://`,
/// `memory://`).
pub fn hosts(url: &str) -> Result<Vec<String>, UrlError> {
    Ok(parse(url)?.hosts().iter().map(socket_address).collect())
}

/// The URL with every `host:port` replaced by `map(host_port)`, where `host_port` is as
/// [`hosts`] lists it and the result is written in its place verbatim. Everything else in
/// the URL (credentials, path, query) is kept byte for byte.
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
    let parsed = parse(url)?;
    // The parser accepted it: the authority ends at the first '/', '?' or '#' after "://", and
    // its hosts begin after its last '@'.
    let start = url.find("://").map_or(0, |i| i + 3);
    let rest = &url[start..];
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let hosts_at = rest[..end].rfind('@').map_or(0, |i| i + 1);
    let mut out = String::with_capacity(url.len());
    out.push_str(&url[..start + hosts_at]);
    for (i, h) in parsed.hosts().iter().enumerate() {
        let host = socket_address(h);
        let replacement = map(&host).map_err(|e| UrlError::Map { host, source: e.into() })?;
        if i > 0 {
            out.push(',');
        }
        out.push_str(&replacement);
    }
    out.push_str(&rest[end..]);
    Ok(out)
}

fn parse(url: &str) -> Result<BackendUrl, UrlError> {
    let u = BackendUrl::parse(url)?;
    if !u.scheme().networked {
        return Err(UrlError::NoHosts { scheme: u.scheme().name.to_string() });
    }
    Ok(u)
}

/// `host:port`, with `localhost` as `127.0.0.1`.
fn socket_address(h: &HostPort) -> String {
    let host = if h.host.eq_ignore_ascii_case("localhost") { "127.0.0.1" } else { &h.host };
    format!("{host}:{}", h.port)
}
