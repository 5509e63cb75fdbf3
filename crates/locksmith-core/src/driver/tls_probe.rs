//! Why a TLS connection failed, when hyper only says "connection closed".
//!
//! In TLS 1.3 the client finishes its handshake before the server has checked the client's
//! certificate; a server that then refuses it (or wanted one) sends an alert that arrives after
//! hyper has started HTTP/2, which reports only a closed connection. One direct handshake with
//! the same settings, followed by a read, receives the alert itself. Only run after a failure;
//! used by the gRPC drivers (native, etcd).

use std::sync::Arc;
use std::time::Duration;

use super::{tls_failure, TlsFailure, TlsFiles};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::AsyncReadExt;

/// How long the probe may take in all.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// The TLS failure a handshake with `tls` to `host:port` runs into, if any (within 2 s).
/// `plain_scheme` is suggested when the server does not speak TLS.
///
/// # Cancel safety
/// Cancel safe: it only reads.
pub async fn tls_probe(host: &str, port: u16, tls: &TlsFiles, plain_scheme: &str) -> Option<TlsFailure> {
    let found = tokio::time::timeout(PROBE_TIMEOUT, probe(host, port, tls, plain_scheme)).await.ok().flatten();
    match tls.identity {
        Some(_) => found,
        None => found.map(TlsFailure::without_client_cert),
    }
}

async fn probe(host: &str, port: u16, tls: &TlsFiles, plain_scheme: &str) -> Option<TlsFailure> {
    let config = client_config(tls)?;
    let name = ServerName::try_from(host.to_string()).ok()?;
    let tcp = tokio::net::TcpStream::connect((host, port)).await.ok()?;
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let mut stream = match connector.connect(name, tcp).await {
        Ok(s) => s,
        Err(e) => return tls_failure(&e, plain_scheme),
    };
    // The server's verdict on our certificate comes as the first thing it sends.
    let mut byte = [0u8; 1];
    match stream.read(&mut byte).await {
        Err(e) => tls_failure(&e, plain_scheme),
        Ok(_) => None,
    }
}

/// The rustls configuration tonic builds from the same files: the CA (or the public roots)
/// and the client certificate.
fn client_config(tls: &TlsFiles) -> Option<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    match &tls.ca {
        Some(ca) => {
            for cert in CertificateDer::pem_slice_iter(ca) {
                roots.add(cert.ok()?).ok()?;
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .ok()?
        .with_root_certificates(roots);
    match &tls.identity {
        Some((cert, key)) => {
            let chain = CertificateDer::pem_slice_iter(cert).collect::<Result<Vec<_>, _>>().ok()?;
            builder.with_client_auth_cert(chain, PrivateKeyDer::from_pem_slice(key).ok()?).ok()
        }
        None => Some(builder.with_no_client_auth()),
    }
}
