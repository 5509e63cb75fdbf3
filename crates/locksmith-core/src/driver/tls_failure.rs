//! What a failed TLS handshake means, said once for every driver that speaks TLS through
//! rustls: which side is misconfigured, and whether it is a configuration error (exit 78) or
//! refused credentials (exit 77). Neither is ever retried as "unreachable".

use rustls::{AlertDescription, CertificateError};

/// A TLS failure found in an error's source chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFailure {
    /// The server refused the client certificate we presented (our credentials): an
    /// [`Error::Auth`](crate::Error::Auth). Otherwise an [`Error::Config`](crate::Error::Config).
    pub auth: bool,
    /// What is wrong and what to change, without the backend's name or any secret.
    pub message: String,
}

impl TlsFailure {
    /// The failure for a client that presented **no** certificate: a server that refuses "our
    /// certificate" (Go answers a missing one with `bad_certificate`) wants one, which is a
    /// configuration error, not refused credentials.
    #[must_use]
    pub fn without_client_cert(self) -> Self {
        match self.auth {
            true => Self {
                auth: false,
                message: "TLS: the server requires a client certificate: add cert=FILE&key=FILE".into(),
            },
            false => self,
        }
    }

    /// The error for `backend`.
    pub fn into_error(self, backend: impl Into<String>) -> crate::Error {
        let backend = backend.into();
        match self.auth {
            true => crate::Error::Auth { backend, message: self.message },
            false => crate::Error::Config { backend, message: self.message },
        }
    }
}

/// Whether a transport error's text says the peer dropped the connection (closed, reset, an
/// alert, or a TLS record read as an HTTP/2 frame) rather than refused it: what a TLS/plain
/// mismatch or a refused client certificate looks like from gRPC, so worth a TLS probe or a
/// hint about the scheme.
pub fn connection_dropped(message: &str) -> bool {
    let lower = message.to_ascii_lowercase();
    !lower.contains("refused")
        && ["closed", "reset", "broken pipe", "alert", "invalid size"].iter().any(|w| lower.contains(w))
}

/// The TLS failure behind `e` (itself or anywhere in its source chain, also inside an
/// `io::Error`, which is how tokio-rustls reports one), if there is one. `plain_scheme` is the
/// URL scheme to suggest when the server does not speak TLS at all (`redis`, `etcd`,
/// `locksmith`).
pub fn tls_failure(e: &(dyn std::error::Error + 'static), plain_scheme: &str) -> Option<TlsFailure> {
    let mut next = Some(e);
    while let Some(err) = next {
        if let Some(t) = err.downcast_ref::<rustls::Error>() {
            return Some(classify(t, plain_scheme));
        }
        if let Some(t) = err
            .downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        {
            return Some(classify(t, plain_scheme));
        }
        next = err.source();
    }
    None
}

fn classify(t: &rustls::Error, plain_scheme: &str) -> TlsFailure {
    use rustls::Error as T;
    let config = |message: String| TlsFailure { auth: false, message };
    match t {
        T::InvalidCertificate(CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. }) => {
            config(format!("TLS: the server's certificate is not valid for this host name ({t})"))
        }
        T::InvalidCertificate(_) => {
            config(format!("TLS: the server's certificate is not trusted ({t}); is ca= the CA that signed it?"))
        }
        // TLS 1.3 says so; TLS 1.2 servers answer a missing certificate with a handshake failure.
        T::AlertReceived(AlertDescription::CertificateRequired | AlertDescription::NoCertificate) => {
            config("TLS: the server requires a client certificate: add cert=FILE&key=FILE".into())
        }
        // The server checked the certificate we presented and refused it: our credentials.
        T::AlertReceived(
            a @ (AlertDescription::BadCertificate
            | AlertDescription::UnsupportedCertificate
            | AlertDescription::CertificateRevoked
            | AlertDescription::CertificateExpired
            | AlertDescription::CertificateUnknown
            | AlertDescription::UnknownCA
            | AlertDescription::AccessDenied),
        ) => TlsFailure { auth: true, message: format!("TLS: the server refused our client certificate ({a:?})") },
        T::AlertReceived(AlertDescription::HandshakeFailure) => config(format!(
            "TLS: the server refused the handshake ({t}): no common protocol or cipher, or a client \
             certificate it requires is missing"
        )),
        T::InvalidMessage(_) | T::InappropriateMessage { .. } | T::InappropriateHandshakeMessage { .. } => {
            config(format!("TLS: the server does not speak TLS on this port ({t}): use {plain_scheme}://?"))
        }
        other => config(format!("TLS handshake failed: {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_found_in_the_chain_and_classified() {
        let io = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer),
        );
        let f = tls_failure(&io, "redis").unwrap_or_else(|| panic!("not found"));
        assert!(!f.auth && f.message.contains("not trusted"), "{f:?}");
        let refused = rustls::Error::AlertReceived(AlertDescription::BadCertificate);
        assert!(tls_failure(&refused, "etcd").is_some_and(|f| f.auth));
        let required = rustls::Error::AlertReceived(AlertDescription::CertificateRequired);
        assert!(tls_failure(&required, "etcd").is_some_and(|f| !f.auth && f.message.contains("cert=FILE")));
        let plain = rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType);
        assert!(tls_failure(&plain, "locksmith").is_some_and(|f| f.message.contains("use locksmith://")));
        assert!(tls_failure(&std::io::Error::other("connection refused"), "redis").is_none());
    }
}
