//! How the Redis drivers connect, written once for this crate and `locksmith-redlock`: TLS
//! settings from a URL, a [`redis::Client`] built from them, the rustls crypto provider, and what
//! the `redis` crate's errors mean in locksmith's terms.
//!
//! ## TLS
//! rustls with the **ring** provider (no OpenSSL, no aws-lc-rs). TLS is on for `rediss://`, or
//! with `?tls=true`, or with any of `ca`, `cert`, `key` (see
//! [`TlsFiles`]):
//! - `ca=FILE`: trust exactly the certificates in FILE (PEM), nothing else; without it,
//!   Mozilla's root certificates compiled in (`webpki-roots`), as the SQL drivers do — the redis
//!   crate would otherwise read the system's store again on every TLS connect;
//! - `cert=FILE&key=FILE`: a client certificate (mutual TLS);
//! - `#insecure` (the redis crate's spelling): **no certificate verification at all** — any
//!   certificate for any name is accepted, so anyone on the path can impersonate the server and
//!   read the password. Only ever written explicitly, refused together with `ca=` (which it
//!   would silently ignore), and shown in `describe()`.
//!
//! The server's name is checked against its certificate (a DNS name or an IP address SAN).
//!
//! ## Errors
//! [`classify`] turns a [`RedisError`] into an [`Error`]: TLS verification or negotiation
//! failures and a missing client certificate are [`Error::Config`]; a refused password or
//! user, `NOAUTH`, `NOPERM` (also from inside a script) and a refused client certificate are
//! [`Error::Auth`]; connection trouble is [`Error::Unavailable`]. Config and Auth are never
//! retried. No message carries a password: the redis crate's authentication errors do not echo
//! it, and the texts built here name options and paths only.

use std::sync::Arc;

use locksmith_core::driver::{BackendUrl, HostPort, TlsFiles};
use locksmith_core::{Error, Result};
use redis::{ClientTlsConfig, ConnectionAddr, ErrorKind, IntoConnectionInfo, RedisError, TlsCertificates};

/// The TLS settings of one backend URL, files already read.
#[derive(Clone, PartialEq, Eq)]
pub struct Tls {
    files: TlsFiles,
    insecure: bool,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // TlsFiles' Debug shows paths only, never the key.
        f.debug_struct("Tls").field("files", &self.files).field("insecure", &self.insecure).finish()
    }
}

impl Tls {
    /// Takes `tls`, `ca`, `cert`, `key` and the `#insecure` fragment out of `url`; `None` when
    /// TLS is not asked for (then `url` keeps any fragment, for the caller to refuse).
    ///
    /// # Errors
    /// [`Error::InvalidUrl`] for `#insecure` without TLS or with `ca=`, and for anything
    /// [`TlsFiles::take_from`] refuses; [`Error::Config`] for unreadable files.
    pub fn take_from(url: &mut BackendUrl) -> Result<Option<Self>> {
        let Some(files) = TlsFiles::take_from(url, url.scheme().tls)? else {
            if url.fragment() == Some("insecure") {
                return Err(url.invalid("#insecure needs TLS (rediss://, or ?tls=true)".into()));
            }
            return Ok(None);
        };
        let insecure = match url.fragment() {
            None => false,
            Some("insecure") if files.ca.is_some() => {
                return Err(url.invalid(
                    "#insecure turns certificate verification off, so ca= would be ignored; drop one of them".into(),
                ))
            }
            Some("insecure") => true,
            Some(_) => return Err(url.invalid("the only fragment accepted is #insecure".into())),
        };
        url.take_fragment();
        Ok(Some(Self { files, insecure }))
    }

    /// Whether certificate verification is off (`#insecure`).
    pub fn insecure(&self) -> bool {
        self.insecure
    }

    /// The PEM material in the redis crate's form.
    fn certificates(&self) -> TlsCertificates {
        TlsCertificates {
            client_tls: self
                .files
                .identity
                .as_ref()
                .map(|(cert, key)| ClientTlsConfig { client_cert: cert.clone(), client_key: key.clone() }),
            root_cert: self.files.ca.clone(),
        }
    }
}

/// Builds the client for one server: `host` of `url`, with `url`'s credentials, database `db`
/// and `tls`. No I/O. Installs the ring crypto provider when TLS is on (see
/// [`install_crypto_provider`]).
///
/// # Errors
/// [`Error::Config`] when the certificate or key files hold no usable PEM (the message names
/// the files, never their contents); [`Error::InvalidUrl`] for what the redis crate refuses.
pub fn client(url: &BackendUrl, host: &HostPort, db: i64, tls: Option<&Tls>) -> Result<redis::Client> {
    // The redis crate wants an IPv6 address without its brackets (it adds none either).
    let name = host.host.trim_start_matches('[').trim_end_matches(']').to_string();
    let addr = match tls {
        None => ConnectionAddr::Tcp(name, host.port),
        Some(t) => ConnectionAddr::TcpTls { host: name, port: host.port, insecure: t.insecure, tls_params: None },
    };
    let mut settings = redis::RedisConnectionInfo::default().set_db(db);
    if let Some(user) = url.username() {
        settings = settings.set_username(user);
    }
    if let Some(password) = url.password() {
        settings = settings.set_password(password);
    }
    let info = addr.into_connection_info().map_err(|e| url.invalid(e.to_string()))?.set_redis_settings(settings);
    match tls {
        None => redis::Client::open(info).map_err(|e| url.invalid(e.to_string())),
        Some(t) => {
            install_crypto_provider();
            redis::Client::build_with_tls(info, t.certificates()).map_err(|e| Error::Config {
                backend: url.describe(&[]),
                message: format!("TLS files {:?} unusable: {e}", t.files.paths),
            })
        }
    }
}

/// Whether `client` connects with TLS.
pub fn is_tls(client: &redis::Client) -> bool {
    matches!(client.get_connection_info().addr(), ConnectionAddr::TcpTls { .. })
}

/// How `client` is named in messages: `redis://[user@]host:port[/db]` (`rediss://` with TLS,
/// `redis+unix://` for a socket), never the password.
pub fn describe(client: &redis::Client) -> String {
    let info = client.get_connection_info();
    let settings = info.redis_settings();
    let user = settings.username().map(|u| format!("{u}@")).unwrap_or_default();
    let db = match settings.db() {
        0 => String::new(),
        n => format!("/{n}"),
    };
    match info.addr() {
        ConnectionAddr::Tcp(host, port) => format!("redis://{user}{}:{port}{db}", bracket(host)),
        ConnectionAddr::TcpTls { host, port, insecure, .. } => {
            let insecure = if *insecure { "#insecure" } else { "" };
            format!("rediss://{user}{}:{port}{db}{insecure}", bracket(host))
        }
        ConnectionAddr::Unix(path) => format!("redis+unix://{}{db}", path.display()),
        // A kind of address newer than this code: its Display is host:port or a path.
        other => format!("redis://{user}{other}{db}"),
    }
}

fn bracket(host: &str) -> String {
    match host.contains(':') {
        true => format!("[{host}]"),
        false => host.to_string(),
    }
}

/// Makes ring the process's default rustls crypto provider, unless one is installed already
/// (the application's choice then stands). The redis crate builds its TLS configurations with
/// rustls' process default, which would panic if there were none; the drivers call this when
/// they build a TLS client, before any connection. Race-free: rustls sets the default once,
/// and a losing call changes nothing.
///
/// An application that installs its own provider should do so before it builds a TLS backend.
pub fn install_crypto_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Err means another thread installed one first: that one is used, which is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// What a `redis` error means for locksmith. `backend` names the server in the error (no
/// password); `tls` says whether the connection uses TLS (for the hints in messages).
pub fn classify(e: &RedisError, backend: &str, tls: bool) -> Error {
    let config = |message: String| Error::Config { backend: backend.to_string(), message };
    let auth = |message: String| Error::Auth { backend: backend.to_string(), message };
    let unavailable = |message: String| Error::Unavailable { backend: backend.to_string(), message };
    if let Some(f) = rustls_error(e).and_then(|t| locksmith_core::driver::tls_failure(t, "redis")) {
        return f.into_error(backend);
    }
    match e.kind() {
        // redis sends AUTH while connecting; a WRONGPASS answer becomes this kind, without the
        // server's text (which names neither user nor password anyway).
        ErrorKind::AuthenticationFailed => {
            return auth("WRONGPASS: wrong password, or the user does not exist or is disabled".into())
        }
        ErrorKind::InvalidClientConfig => return config(e.to_string()),
        _ => {}
    }
    // Server answers, also those inside a pipeline (the driver's PING and status go that way).
    for (code, detail) in e
        .clone()
        .into_server_errors()
        .iter()
        .flat_map(|items| items.iter())
        .map(|(_, s)| (s.code(), s.details().unwrap_or_default()))
    {
        match code {
            "WRONGPASS" => return auth(format!("WRONGPASS {detail}")),
            "NOAUTH" => {
                return auth(format!("NOAUTH {detail} (give user:password@ in the URL, or the client's credentials)"))
            }
            "NOPERM" => return auth(format!("NOPERM {detail}{PERMISSIONS_HINT}")),
            _ if permission_refused(detail) => return auth(format!("NOPERM {detail}{PERMISSIONS_HINT}")),
            _ => {}
        }
    }
    if io_inner::<rustls::pki_types::InvalidDnsNameError>(e).is_some() {
        return config(format!("the host is not a valid TLS server name: {e}"));
    }
    if e.is_io_error() || e.is_timeout() || e.is_connection_refusal() || e.is_connection_dropped() {
        let reset = io_error(e).is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionReset);
        let hint = match (tls, reset, e.is_timeout()) {
            // A TLS-only port resets a plain connection at its first bytes; so does a server
            // that is going away, so this stays Unavailable, with the likelier cause named.
            (false, true, _) => " (a TLS-only server resets plain connections: if it speaks TLS, use rediss://)",
            (true, _, true) => " (a server without TLS on this port never answers the handshake: use redis://?)",
            _ => "",
        };
        return unavailable(format!("{e}{hint}"));
    }
    Error::Backend(format!("redis ({backend}): {e}"))
}

const PERMISSIONS_HINT: &str = " (the ACL user needs the commands, keys and channels the driver uses)";

/// Whether a server's error text (also one a script caught with `redis.pcall`) says that the
/// ACL user may not run a command: Redis 7 says "The user executing the script can't run this
/// command or subcommand" inside scripts, other versions "no permissions".
pub fn permission_refused(text: &str) -> bool {
    text.contains("NOPERM") || text.contains("can't run this command") || text.contains("no permissions")
}

/// The rustls error behind `e`, if any: the redis crate wraps an `io::Error` (tokio-rustls's
/// way of reporting a handshake or record error) or a rustls error in an `Arc`.
fn rustls_error(e: &RedisError) -> Option<&rustls::Error> {
    io_inner::<rustls::Error>(e).or_else(|| arc_inner(e).and_then(|inner| inner.downcast_ref::<rustls::Error>()))
}

/// The `io::Error` inside `e`, if any.
fn io_error(e: &RedisError) -> Option<&std::io::Error> {
    arc_inner(e).and_then(|inner| inner.downcast_ref::<std::io::Error>())
}

/// The error of type `T` an `io::Error` inside `e` carries, if any.
fn io_inner<T: std::error::Error + 'static>(e: &RedisError) -> Option<&T> {
    if let Some(t) = io_error(e).and_then(|io| io.get_ref()).and_then(|inner| inner.downcast_ref::<T>()) {
        return Some(t);
    }
    arc_inner(e).and_then(|inner| inner.downcast_ref::<T>())
}

/// The error the redis crate keeps in an `Arc` (its `source()` is the `Arc` itself, and
/// `io::Error::source` would skip the error it wraps, so both are unwrapped by hand).
fn arc_inner(e: &RedisError) -> Option<&(dyn std::error::Error + Send + Sync + 'static)> {
    use std::error::Error as _;
    let source = e.source()?;
    source.downcast_ref::<Arc<dyn std::error::Error + Send + Sync>>().map(|arc| arc.as_ref())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::{AlertDescription, CertificateError};

    fn io(kind: std::io::ErrorKind, inner: impl std::error::Error + Send + Sync + 'static) -> RedisError {
        RedisError::from(std::io::Error::new(kind, inner))
    }

    /// TLS failures are found inside the redis crate's io errors and named by cause.
    #[test]
    fn tls_failures_are_config_or_auth() {
        let b = "rediss://h:1";
        let unknown =
            io(std::io::ErrorKind::InvalidData, rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer));
        assert!(matches!(classify(&unknown, b, true), Error::Config { message, .. } if message.contains("ca=")));
        let name =
            io(std::io::ErrorKind::InvalidData, rustls::Error::InvalidCertificate(CertificateError::NotValidForName));
        assert!(matches!(classify(&name, b, true), Error::Config { message, .. } if message.contains("host name")));
        let required =
            io(std::io::ErrorKind::InvalidData, rustls::Error::AlertReceived(AlertDescription::CertificateRequired));
        assert!(matches!(classify(&required, b, true), Error::Config { message, .. } if message.contains("cert=")));
        let refused = io(std::io::ErrorKind::InvalidData, rustls::Error::AlertReceived(AlertDescription::UnknownCA));
        assert!(matches!(classify(&refused, b, true), Error::Auth { .. }));
        let direct = RedisError::from(rustls::Error::InvalidCertificate(CertificateError::Expired));
        assert!(matches!(classify(&direct, b, true), Error::Config { .. }));
    }

    /// Refused credentials and permissions are Auth; connection trouble stays Unavailable.
    #[test]
    fn server_refusals_and_connection_trouble() {
        let b = "redis://h:1";
        let wrongpass = RedisError::from((ErrorKind::AuthenticationFailed, "Password authentication failed"));
        assert!(matches!(classify(&wrongpass, b, false), Error::Auth { .. }));
        let reset = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        match classify(&reset, b, false) {
            Error::Unavailable { message, .. } => assert!(message.contains("rediss://"), "{message}"),
            other => panic!("{other:?}"),
        }
        let refused = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert!(matches!(classify(&refused, b, true), Error::Unavailable { .. }));
        assert!(permission_refused("ERR The user executing the script can't run this command or subcommand"));
        let config = RedisError::from((ErrorKind::InvalidClientConfig, "bad"));
        assert!(matches!(classify(&config, b, true), Error::Config { .. }));
        assert!(!classify(&wrongpass, b, false).is_transient());
    }

    /// `#insecure` needs TLS and excludes `ca=`; other fragments are refused.
    #[test]
    fn insecure_is_explicit() {
        let take = |s: &str| Tls::take_from(&mut BackendUrl::parse(s).unwrap_or_else(|e| panic!("{e}")));
        assert!(take("rediss://h:1#insecure").is_ok_and(|t| t.is_some_and(|t| t.insecure())));
        assert!(take("rediss://h:1").is_ok_and(|t| t.is_some_and(|t| !t.insecure())));
        assert!(matches!(take("redis://h:1#insecure"), Err(Error::InvalidUrl { .. })));
        assert!(matches!(take("rediss://h:1#other"), Err(Error::InvalidUrl { .. })));
        assert!(take("redis://h:1").is_ok_and(|t| t.is_none()));
    }

    /// Descriptions name scheme, user, host, port and database, never the password.
    #[test]
    fn describe_hides_the_password() {
        let url = BackendUrl::parse("rediss://u:s3cret@[::1]:7000/3").unwrap_or_else(|e| panic!("{e}"));
        let tls = Tls { files: TlsFiles { ca: None, identity: None, paths: Vec::new() }, insecure: false };
        let c = client(&url, &url.hosts()[0], 3, Some(&tls)).unwrap_or_else(|e| panic!("{e}"));
        assert!(is_tls(&c));
        assert_eq!(describe(&c), "rediss://u@[::1]:7000/3");
        assert!(!format!("{c:?}").contains("s3cret"));
    }
}
