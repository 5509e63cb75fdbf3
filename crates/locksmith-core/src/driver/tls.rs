//! TLS settings from a backend URL, spelled the same for every driver that is not SQL (the SQL
//! drivers keep their databases' own `sslmode`, `sslrootcert`, `ssl-mode`, `ssl-ca`…):
//!
//! - TLS is on for a TLS scheme (`rediss://`, `etcds://`, `locksmiths://`) or with `?tls=true`;
//! - `?ca=FILE`: PEM certificates of the authorities to trust (default: Mozilla's public roots,
//!   compiled in);
//! - `?cert=FILE&key=FILE`: a PEM client certificate and its private key (mutual TLS);
//! - `ca`, `cert` or `key` alone also turn TLS on.
//!
//! The files are read once, when the URL is parsed, so a wrong path is a configuration error at
//! once rather than a connection failure later. Their contents never reach a message.

use std::path::{Path, PathBuf};

use super::url::BackendUrl;
use crate::{Error, Result};

/// PEM material for one backend's TLS connections.
#[derive(Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// Authorities to trust, PEM; `None`: the public roots the driver has compiled in.
    pub ca: Option<Vec<u8>>,
    /// Client certificate chain and private key, PEM (mutual TLS).
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
    /// Where the files came from, for messages.
    pub paths: Vec<PathBuf>,
}

impl std::fmt::Debug for TlsFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Paths only: a key's bytes are a secret.
        f.debug_struct("TlsFiles").field("paths", &self.paths).finish()
    }
}

impl TlsFiles {
    /// Takes `tls`, `ca`, `cert` and `key` out of `url`'s options and reads the files; `None`
    /// when TLS is not asked for (neither a TLS scheme, `tls_scheme`, nor any of the options).
    ///
    /// # Errors
    /// [`Error::InvalidUrl`] for `tls=` other than true/false, `tls=false` with files, or a
    /// certificate without its key (or the reverse); [`Error::Config`] for a file that cannot
    /// be read or holds no PEM block.
    pub fn take_from(url: &mut BackendUrl, tls_scheme: bool) -> Result<Option<Self>> {
        let tls = match url.take_option("tls").as_deref() {
            None => None,
            Some("true" | "1" | "yes") => Some(true),
            Some("false" | "0" | "no") => Some(false),
            Some(other) => return Err(url.invalid(format!("tls={other:?}: expected true or false"))),
        };
        let (ca, cert, key) = (url.take_option("ca"), url.take_option("cert"), url.take_option("key"));
        let files = ca.is_some() || cert.is_some() || key.is_some();
        if tls == Some(false) && (files || tls_scheme) {
            return Err(url.invalid("tls=false contradicts the TLS scheme or the ca/cert/key options".into()));
        }
        if !(tls_scheme || tls == Some(true) || files) {
            return Ok(None);
        }
        let backend = url.describe(&[]);
        let mut paths = Vec::new();
        let mut read = |option: &str, path: String| -> Result<Vec<u8>> {
            let pem = read_pem(&backend, option, Path::new(&path))?;
            paths.push(PathBuf::from(path));
            Ok(pem)
        };
        let ca = ca.map(|p| read("ca", p)).transpose()?;
        let identity = match (cert, key) {
            (Some(c), Some(k)) => Some((read("cert", c)?, read("key", k)?)),
            (None, None) => None,
            _ => return Err(url.invalid("a client certificate needs both cert=FILE and key=FILE".into())),
        };
        Ok(Some(Self { ca, identity, paths }))
    }
}

/// The file's bytes, if it holds at least one PEM block.
fn read_pem(backend: &str, option: &str, path: &Path) -> Result<Vec<u8>> {
    let config = |message: String| Error::Config { backend: backend.to_string(), message };
    let bytes = std::fs::read(path).map_err(|e| config(format!("cannot read {option}={}: {e}", path.display())))?;
    if !bytes.windows(11).any(|w| w == b"-----BEGIN ") {
        return Err(config(format!("{option}={} holds no PEM block", path.display())));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> BackendUrl {
        BackendUrl::parse(s).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn tls_is_off_unless_asked_for() {
        let mut u = url("redis://h:1?prefix=x");
        assert_eq!(TlsFiles::take_from(&mut u, false).ok(), Some(None));
        assert_eq!(u.option("prefix"), Some("x"), "other options stay");
        let mut u = url("redis://h:1?tls=true");
        let t = TlsFiles::take_from(&mut u, false).unwrap_or_else(|e| panic!("{e}"));
        assert!(t.is_some_and(|t| t.ca.is_none() && t.identity.is_none()));
        assert!(u.query().is_empty(), "tls is taken out");
    }

    #[test]
    fn files_are_read_now_and_errors_name_option_and_path_only() {
        let dir = std::env::temp_dir().join(format!("locksmith-tls-test-{}", std::process::id()));
        let _ = std::fs::create_dir_all(&dir);
        let ca = dir.join("ca.pem");
        let key = dir.join("key.pem");
        let _ = std::fs::write(&ca, "-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----\n");
        let _ = std::fs::write(&key, "-----BEGIN PRIVATE KEY-----\nc2VjcmV0\n-----END PRIVATE KEY-----\n");
        let mut u = url(&format!("redis://h:1?ca={}&cert={}&key={}", ca.display(), ca.display(), key.display()));
        let t = TlsFiles::take_from(&mut u, false).ok().flatten().unwrap_or_else(|| panic!("no TLS"));
        assert!(t.ca.is_some() && t.identity.is_some());
        assert!(!format!("{t:?}").contains("c2VjcmV0"), "key bytes in Debug");
        let mut u = url(&format!("redis://h:1?ca={}/missing.pem", dir.display()));
        let e = TlsFiles::take_from(&mut u, false).map(|_| ()).unwrap_err();
        assert!(
            matches!(&e, Error::Config { message, .. } if message.contains("ca=") && message.contains("missing.pem")),
            "{e}"
        );
        let mut u = url(&format!("redis://h:1?cert={}", ca.display()));
        assert!(matches!(TlsFiles::take_from(&mut u, false), Err(Error::InvalidUrl { .. })));
        let mut u = url(&format!("redis://h:1?key={}", ca.display()));
        let e = TlsFiles::take_from(&mut u, false).map(|_| ()).unwrap_err();
        assert!(matches!(e, Error::InvalidUrl { .. }));
        let mut u = url("redis://h:1?tls=maybe");
        assert!(matches!(TlsFiles::take_from(&mut u, false), Err(Error::InvalidUrl { .. })));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
