//! One backend-URL type and one scheme table for every driver, the facade and the tools: scheme,
//! credentials, hosts with default ports, path, query — and one way to print a URL without its
//! secrets.
//!
//! Parsing follows the usual URL rules: the authority ends at the first `/`, `?` or `#`, and
//! credentials are what comes before its last `@` (reserved characters in a password are
//! percent-encoded: `%2F` for `/`, `%40` for `@`). Printing is stricter than parsing: [`redact`]
//! hides everything up to the last `@` before the query, so a password with an unencoded `/`
//! never shows either.

use std::fmt;

use crate::{Error, Result};

/// What locksmith knows about one URL scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Scheme {
    /// The scheme as written in URLs.
    pub name: &'static str,
    /// Port of a host given without one; `None`: a host needs an explicit port, or the scheme
    /// has no network address.
    pub default_port: Option<u16>,
    /// Whether the part after `://` is a network authority (`host:port,…`); otherwise it is an
    /// opaque name or file path (`memory://name`, `sqlite://path`).
    pub networked: bool,
    /// The cargo feature of the `locksmith` facade that builds its driver in.
    pub feature: &'static str,
    /// Whether the scheme itself asks for TLS (`rediss`, `etcds`).
    pub tls: bool,
    /// The scheme of the same backend without TLS (`redis` for `rediss`); itself otherwise.
    pub base: &'static str,
}

const fn scheme(name: &'static str, default_port: Option<u16>, networked: bool, feature: &'static str) -> Scheme {
    Scheme { name, default_port, networked, feature, tls: false, base: name }
}

const fn tls_scheme(name: &'static str, base: &'static str, default_port: u16, feature: &'static str) -> Scheme {
    Scheme { name, default_port: Some(default_port), networked: true, feature, tls: true, base }
}

/// Every scheme locksmith knows, built into a binary or not.
pub const SCHEMES: &[Scheme] = &[
    scheme("locksmith", Some(7531), true, "native"),
    tls_scheme("locksmiths", "locksmith", 7531, "native"),
    scheme("memory", None, false, "memory"),
    scheme("redis", Some(6379), true, "redis"),
    tls_scheme("rediss", "redis", 6379, "redis"),
    scheme("redlock", Some(6379), true, "redlock"),
    scheme("memcached", Some(11211), true, "memcached"),
    scheme("etcd", Some(2379), true, "etcd"),
    tls_scheme("etcds", "etcd", 2379, "etcd"),
    scheme("zk", Some(2181), true, "zk"),
    scheme("postgres", Some(5432), true, "sql"),
    scheme("postgresql", Some(5432), true, "sql"),
    scheme("mysql", Some(3306), true, "sql"),
    scheme("sqlite", None, false, "sql"),
];

/// The entry of `name` in [`SCHEMES`].
pub fn scheme_info(name: &str) -> Option<&'static Scheme> {
    SCHEMES.iter().find(|s| s.name == name)
}

/// The known scheme names, comma-separated, for messages.
pub fn known_schemes() -> String {
    SCHEMES.iter().map(|s| s.name).collect::<Vec<_>>().join(", ")
}

/// One `host:port` of a URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPort {
    /// The host as written (an IPv6 address keeps its brackets).
    pub host: String,
    /// The port given, or the scheme's default.
    pub port: u16,
}

impl fmt::Display for HostPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// A parsed backend URL. Its `Debug` and `Display` print [`BackendUrl::redacted`]: the password
/// leaves only through [`BackendUrl::password`] and [`BackendUrl::to_driver_url`], named so a
/// search finds every use.
///
/// ```
/// use locksmith_core::driver::BackendUrl;
///
/// let u = BackendUrl::parse("redis://app:s3cret@cache.internal/2?prefix=jobs%3A")?;
/// assert_eq!(u.scheme().name, "redis");
/// assert_eq!(u.hosts()[0].port, 6379); // the scheme's default
/// assert_eq!(u.path(), "/2");
/// assert_eq!(u.option("prefix"), Some("jobs:"));
/// assert_eq!(u.to_string(), "redis://app:***@cache.internal:6379/2?prefix=jobs:");
/// assert!(!format!("{u:?}").contains("s3cret"));
/// # Ok::<(), locksmith_core::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct BackendUrl {
    scheme: &'static Scheme,
    user: Option<String>,
    password: Option<String>,
    hosts: Vec<HostPort>,
    /// Networked: the path after the hosts (`/db`); opaque schemes: everything before the query.
    path: String,
    query: Vec<(String, String)>,
    fragment: Option<String>,
}

impl BackendUrl {
    /// Parses `url`. Every error is [`Error::InvalidUrl`] carrying the [`redact`]ed URL.
    ///
    /// # Errors
    /// No `scheme://`, an unknown scheme, a missing or malformed host or port, bad
    /// percent-encoding.
    pub fn parse(url: &str) -> Result<Self> {
        let bad = |reason: String| Error::InvalidUrl { url: redact(url), reason };
        let (name, rest) =
            url.split_once("://").ok_or_else(|| bad("expected scheme://…, e.g. locksmith://127.0.0.1:7531".into()))?;
        let scheme = scheme_info(name)
            .ok_or_else(|| bad(format!("unknown scheme {:?}; known: {}", redact(name), known_schemes())))?;
        // Networked: the authority ends at the first '/', '?' or '#'. An '@' after it can only
        // be a password with an unencoded reserved character: refused, so that no part of a
        // password ever lands in a path, an option or a message.
        let end = if scheme.networked { rest.find(['/', '?', '#']).unwrap_or(rest.len()) } else { 0 };
        let (authority, after) = rest.split_at(end);
        if scheme.networked && after.contains('@') {
            return Err(bad("an '@' after the host: percent-encode '/', '?', '#' and '@' in credentials \
                            (%2F, %3F, %23, %40)"
                .into()));
        }
        let (after, fragment) = match after.split_once('#') {
            Some((r, f)) => (r, Some(decode(f).ok_or_else(|| bad("bad percent-encoding in the fragment".into()))?)),
            None => (after, None),
        };
        let (path, query) = match after.split_once('?') {
            Some((r, q)) => (r, parse_query(q).ok_or_else(|| bad("bad percent-encoding in the query".into()))?),
            None => (after, Vec::new()),
        };
        let path = decode(path).ok_or_else(|| bad("bad percent-encoding in the path".into()))?;
        if !scheme.networked {
            return Ok(Self { scheme, user: None, password: None, hosts: Vec::new(), path, query, fragment });
        }
        let (userinfo, hostlist) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let (user, password) = match userinfo {
            None => (None, None),
            Some(u) => {
                let (user, pass) = match u.split_once(':') {
                    Some((user, pass)) => (user, Some(pass)),
                    None => (u, None),
                };
                let dec = |s: &str| decode(s).ok_or_else(|| bad("bad percent-encoding in the credentials".into()));
                let user = Some(dec(user)?).filter(|u| !u.is_empty());
                (user, pass.map(dec).transpose()?)
            }
        };
        let mut hosts = Vec::new();
        for hp in hostlist.split(',') {
            hosts.push(parse_host(hp, scheme).map_err(bad)?);
        }
        Ok(Self { scheme, user, password, hosts, path, query, fragment })
    }

    /// The scheme.
    pub fn scheme(&self) -> &'static Scheme {
        self.scheme
    }

    /// The user name, if given.
    pub fn username(&self) -> Option<&str> {
        self.user.as_deref()
    }

    /// The password, if given. A secret: never print it.
    pub fn password(&self) -> Option<&str> {
        self.password.as_deref()
    }

    /// The hosts, in order, each with a port.
    pub fn hosts(&self) -> &[HostPort] {
        &self.hosts
    }

    /// The path after the hosts (`/db`, `/base/path`, or empty); for opaque schemes the name
    /// or file path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The query options, percent-decoded, in order.
    pub fn query(&self) -> &[(String, String)] {
        &self.query
    }

    /// The fragment after `#`, if any.
    pub fn fragment(&self) -> Option<&str> {
        self.fragment.as_deref()
    }

    /// The value of query option `key` (the last one if repeated).
    pub fn option(&self, key: &str) -> Option<&str> {
        self.query.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// Takes query option `key` out (a driver's own option), so what remains can be refused as
    /// unknown or handed to a client library.
    pub fn take_option(&mut self, key: &str) -> Option<String> {
        let mut value = None;
        self.query.retain(|(k, v)| {
            if k == key {
                value = Some(v.clone());
                false
            } else {
                true
            }
        });
        value
    }

    /// Takes the `#fragment` out (a driver that gives it a meaning, such as the redis crate's
    /// `#insecure`), so that [`BackendUrl::refuse_extras`] accepts what remains.
    pub fn take_fragment(&mut self) -> Option<String> {
        self.fragment.take()
    }

    /// Refuses options still in the query, naming the `known` ones.
    ///
    /// # Errors
    /// [`Error::InvalidUrl`] naming the first unknown option.
    pub fn refuse_other_options(&self, known: &[&str]) -> Result<()> {
        match self.query.first() {
            None => Ok(()),
            Some((k, _)) if known.is_empty() => {
                Err(self.invalid(format!("unknown option {k:?}; this scheme takes none")))
            }
            Some((k, _)) => Err(self.invalid(format!("unknown option {k:?}; known: {}", known.join(", ")))),
        }
    }

    /// Refuses credentials, a path, options or a fragment where the scheme takes none.
    ///
    /// # Errors
    /// [`Error::InvalidUrl`] saying what is not supported.
    pub fn refuse_extras(&self, credentials: bool, path: bool, options: bool) -> Result<()> {
        if !credentials && (self.user.is_some() || self.password.is_some()) {
            return Err(self.invalid("credentials are not supported here".into()));
        }
        if !path && !self.path.trim_end_matches('/').is_empty() {
            return Err(self.invalid(format!("a path ({:?}) is not supported here", self.path)));
        }
        if !options && !self.query.is_empty() {
            self.refuse_other_options(&[])?;
        }
        if self.fragment.is_some() {
            return Err(self.invalid("a #fragment is not supported here".into()));
        }
        Ok(())
    }

    /// An [`Error::InvalidUrl`] about this URL (printed redacted).
    pub fn invalid(&self, reason: String) -> Error {
        Error::InvalidUrl { url: self.redacted(), reason }
    }

    /// The URL with the password replaced by `***` and the values of secret-looking options
    /// (`password`, `pass`, `secret`, `token`, `key`) masked.
    pub fn redacted(&self) -> String {
        self.render(Credentials::Masked, true, &self.query)
    }

    /// The URL as operators should see it in messages, logs and metric labels: scheme, user,
    /// hosts with ports and path, no password, and of the query only `extra`.
    pub fn describe(&self, extra: &[(&str, &str)]) -> String {
        let extra: Vec<(String, String)> = extra.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        self.render(Credentials::UserOnly, false, &extra)
    }

    /// The whole URL, credentials and remaining options included, for a client library to
    /// connect with. A secret: never print it.
    pub fn to_driver_url(&self) -> String {
        self.render(Credentials::Exposed, false, &self.query)
    }

    fn render(&self, credentials: Credentials, mask_options: bool, query: &[(String, String)]) -> String {
        let mut out = format!("{}://", self.scheme.name);
        if self.scheme.networked {
            let user = self.user.as_deref().map(encode).unwrap_or_default();
            match (&self.password, credentials) {
                (Some(_), Credentials::Masked) => out.push_str(&format!("{user}:***@")),
                (Some(p), Credentials::Exposed) => out.push_str(&format!("{user}:{}@", encode(p))),
                _ if !user.is_empty() => out.push_str(&format!("{user}@")),
                _ => {}
            }
            let hosts: Vec<String> = self.hosts.iter().map(HostPort::to_string).collect();
            out.push_str(&hosts.join(","));
            // A lone "/" says nothing.
            if self.path != "/" {
                out.push_str(&encode_path(&self.path));
            }
        } else {
            out.push_str(&encode_path(&self.path));
        }
        if !query.is_empty() {
            let pairs: Vec<String> = query
                .iter()
                .map(|(k, v)| {
                    let v = if mask_options && is_secret_option(k) { "***".to_string() } else { encode_value(v) };
                    format!("{}={v}", encode(k))
                })
                .collect();
            out.push('?');
            out.push_str(&pairs.join("&"));
        }
        if let Some(f) = &self.fragment {
            out.push('#');
            out.push_str(&encode(f));
        }
        out
    }
}

impl fmt::Display for BackendUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

impl fmt::Debug for BackendUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BackendUrl({})", self.redacted())
    }
}

/// How [`BackendUrl::render`] writes the credentials.
#[derive(Clone, Copy)]
enum Credentials {
    /// `user:***@`: printed, with a password hidden.
    Masked,
    /// `user@`: a description, no sign of a password.
    UserOnly,
    /// `user:password@`: for the client library. A secret.
    Exposed,
}

fn is_secret_option(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    ["password", "pass", "secret", "token", "key"].iter().any(|s| k.contains(s))
}

fn parse_host(hp: &str, scheme: &Scheme) -> std::result::Result<HostPort, String> {
    let (host, port) = if let Some(v6) = hp.strip_prefix('[') {
        let (addr, after) = v6.split_once(']').ok_or_else(|| format!("unclosed [ in host {hp:?}"))?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or_else(|| format!("expected :port after [{addr}]"))?),
        };
        (format!("[{addr}]"), port)
    } else {
        match hp.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (hp.to_string(), None),
        }
    };
    if host.is_empty() || host == "[]" {
        return Err("missing host".into());
    }
    if host.chars().any(|c| c.is_whitespace() || c.is_control() || matches!(c, '/' | '?' | '#' | '@')) {
        return Err(format!("bad host {host:?}"));
    }
    let port = match port {
        Some(p) => match p.parse::<u16>() {
            // The value is not quoted: in a mistyped URL it may be part of a password.
            Ok(0) | Err(_) => return Err(format!("bad port for host {host} (1-65535)")),
            Ok(n) => n,
        },
        None => scheme.default_port.ok_or_else(|| format!("host {host} needs a port"))?,
    };
    Ok(HostPort { host, port })
}

fn parse_query(q: &str) -> Option<Vec<(String, String)>> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            Some((decode(k)?, decode(v)?))
        })
        .collect()
}

/// Decodes `%XX` escapes; `None` when an escape is malformed or the result is not UTF-8.
pub fn decode(s: &str) -> Option<String> {
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

/// Percent-encodes everything but unreserved characters.
fn encode(s: &str) -> String {
    encode_except(s, "")
}

/// Percent-encodes an option value, keeping the characters that read well and are safe there.
fn encode_value(s: &str) -> String {
    encode_except(s, ":/,;")
}

/// Percent-encodes a path, keeping `/` and the other characters that are safe in one.
fn encode_path(s: &str) -> String {
    encode_except(s, "/@:+,;=!$&'()*")
}

fn encode_except(s: &str, keep: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if c.is_ascii_alphanumeric() || "-._~".contains(c) || keep.contains(c) || !c.is_ascii() {
            out.push(c);
        } else {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("%{b:02X}"));
            }
        }
    }
    out
}

/// Best-effort redaction of text that may not even parse as a URL: the credentials are
/// everything between `://` and the last `@` before the query (so an unencoded `/` or `@` in a
/// password is covered too) and become `***`, keeping a user name when one is visible; values of
/// secret-looking query options become `***`. An `@` after an empty authority (`sqlite:///a@b`)
/// is part of a path, not credentials.
///
/// ```
/// use locksmith_core::driver::redact;
/// assert_eq!(redact("postgres://app:pa/ss@db/x?password=p"), "postgres://app:***@db/x?password=***");
/// assert_eq!(redact("redis://:p@ss@h:1"), "redis://:***@h:1");
/// assert_eq!(redact("sqlite:///tmp/a@b/locks.db"), "sqlite:///tmp/a@b/locks.db");
/// ```
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        // Not a URL: hide whatever could be credentials.
        return match url.rsplit_once('@') {
            Some((_, after)) => format!("***@{after}"),
            None => url.to_string(),
        };
    };
    // Everything up to the last '@' may be credentials (a password may hold an unencoded '/',
    // '?', '#' or '@'); only an empty authority (`sqlite:///a@b`) makes it a path.
    let rest = match rest.rsplit_once('@') {
        Some((userinfo, after)) if !rest.starts_with('/') => match userinfo.split_once(':') {
            Some((user, _)) if !user.contains(['/', '?', '#']) => format!("{user}:***@{after}"),
            // A user name alone is no secret.
            None if !userinfo.contains(['/', '?', '#']) => format!("{userinfo}@{after}"),
            _ => format!(":***@{after}"),
        },
        _ => rest.to_string(),
    };
    match rest.split_once('?') {
        Some((head, q)) => {
            let (q, frag) = match q.split_once('#') {
                Some((q, f)) => (q, format!("#{f}")),
                None => (q, String::new()),
            };
            let pairs: Vec<String> = q
                .split('&')
                .map(|p| match p.split_once('=') {
                    Some((k, _)) if is_secret_option(k) => format!("{k}=***"),
                    _ => p.to_string(),
                })
                .collect();
            format!("{scheme}://{head}?{}{frag}", pairs.join("&"))
        }
        None => format!("{scheme}://{rest}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_get_default_ports_and_ipv6_keeps_brackets() {
        let u = BackendUrl::parse("etcd://a,b:1,[::1],[::1]:9").unwrap_or_else(|e| panic!("{e}"));
        let hosts: Vec<String> = u.hosts().iter().map(ToString::to_string).collect();
        assert_eq!(hosts, ["a:2379", "b:1", "[::1]:2379", "[::1]:9"]);
        assert!(BackendUrl::parse("zk://h").is_ok_and(|u| u.hosts()[0].port == 2181));
    }

    #[test]
    fn opaque_schemes_keep_their_path() {
        let u = BackendUrl::parse("sqlite:///tmp/a@b/locks.db?mode=lease").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((u.path(), u.option("mode")), ("/tmp/a@b/locks.db", Some("lease")));
        assert_eq!(u.to_string(), "sqlite:///tmp/a@b/locks.db?mode=lease");
        assert_eq!(BackendUrl::parse("memory://").map(|u| u.path().to_string()).ok(), Some(String::new()));
    }

    #[test]
    fn bad_urls_are_refused_without_their_secrets() {
        for bad in [
            "redis://u:secret@",
            "redis://u:secret@h:0",
            "redis://u:secret@h:x",
            "gopher://u:secret@h",
            "postgres:/u:secret@h/db",
            "redis://u:secret@h:1?x=%zz",
            "etcd://u:secret@[::1",
            "locksmith://u:sec/ret@h:1",
            "redis://u:1?secret@h:1",
            "redis://u:1#secret@h:1",
        ] {
            let e = BackendUrl::parse(bad).map(|u| u.redacted());
            let msg = match e {
                Err(e) => e.to_string(),
                Ok(ok) => ok,
            };
            assert!(!msg.contains("secret") && !msg.contains("sec/ret"), "{bad}: {msg}");
        }
    }

    #[test]
    fn the_driver_url_round_trips_credentials_and_options() {
        let mut u = BackendUrl::parse("postgres://app:p%40ss@db:5433/locks?mode=advisory&sslmode=require")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(u.password(), Some("p@ss"));
        assert_eq!(u.take_option("mode").as_deref(), Some("advisory"));
        assert_eq!(u.to_driver_url(), "postgres://app:p%40ss@db:5433/locks?sslmode=require");
        assert_eq!(u.describe(&[("mode", "advisory")]), "postgres://app@db:5433/locks?mode=advisory");
        assert!(u.refuse_other_options(&["mode"]).is_err());
        let u = BackendUrl::parse("redis://:pw@h").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((u.describe(&[]).as_str(), u.redacted().as_str()), ("redis://h:6379", "redis://:***@h:6379"));
        assert_eq!(u.to_driver_url(), "redis://:pw@h:6379");
    }

    #[test]
    fn redaction_masks_secret_options_and_odd_passwords() {
        assert_eq!(redact("postgres://u@h/db?sslpassword=x&a=1"), "postgres://u@h/db?sslpassword=***&a=1");
        assert_eq!(redact("redis://u:p?ss@h:1"), "redis://u:***@h:1");
        assert_eq!(redact("redis://u:p#s/s@h:1/2"), "redis://u:***@h:1/2");
        assert!(!redact("redlock://:pw@a:1,b:2").contains("pw"));
        assert_eq!(redact("not a url with pw@host"), "***@host");
    }
}
