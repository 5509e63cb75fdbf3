//! Node certificates: over TLS a node proves which member it is by the certificate it presents,
//! signed by the cluster's peer CA (`locksmith serve --peer-ca`) and naming its node id in a SAN
//! URI of the exact form `locksmith-node://CLUSTER/ID` — `CLUSTER` any non-empty name without `/`
//! (informative: not compared), `ID` the node id in decimal.
//!
//! The TLS handshake of a server may accept more than the peer CA (its `--client-ca` too), so the
//! chain is checked again here against the peer CA alone: a client certificate is never a node's,
//! whatever names it carries.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use std::time::Instant;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::UnixTime;
use rustls::server::danger::ClientCertVerifier;
use rustls::server::WebPkiClientVerifier;
use rustls::RootCertStore;

use crate::types::NodeId;

/// The scheme of the SAN URI naming a node: `locksmith-node://CLUSTER/ID`.
pub const NODE_URI_SCHEME: &str = "locksmith-node";

/// The authority that signs node certificates, and the check of a peer's chain against it.
///
/// ```
/// # fn ca_pem() -> Vec<u8> { Vec::new() }
/// use locksmith_raft::PeerCa;
/// // The PEM of `locksmith serve --peer-ca`; one without a certificate is refused.
/// assert!(PeerCa::from_pem(&ca_pem()).is_err());
/// ```
#[derive(Clone)]
pub struct PeerCa {
    verifier: Arc<dyn ClientCertVerifier>,
    /// Chains verified lately (SHA-256 of the chain → node id, when): every Raft call of a
    /// connection presents the same chain, and a signature check per heartbeat and append would
    /// cost more CPU than the call.
    verified: Arc<Mutex<Verified>>,
}

/// SHA-256 of a chain → the node it names, and when it was verified.
type Verified = HashMap<[u8; 32], (NodeId, Instant)>;

/// How long a verified chain is taken without checking it again (its expiry included).
const VERIFIED_FOR: Duration = Duration::from_secs(60);
/// Chains remembered at most (a cluster has a few nodes); beyond, the memory starts afresh.
const MAX_VERIFIED: usize = 64;

impl fmt::Debug for PeerCa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PeerCa").finish_non_exhaustive()
    }
}

/// Why a peer's certificate names no node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PeerCertError {
    /// The peer presented no certificate (or the connection is not TLS).
    #[error("no node certificate presented")]
    Missing,
    /// The chain does not lead to the peer CA (or is expired, or lacks client usage).
    #[error("the certificate is not a node certificate signed by the peer CA: {0}")]
    NotSigned(String),
    /// A good chain whose certificate names no node (no `locksmith-node://CLUSTER/ID` SAN URI).
    #[error("the certificate signed by the peer CA names no node (no SAN URI locksmith-node://CLUSTER/ID)")]
    NoNodeId,
    /// The certificate names more than one node id.
    #[error("the certificate names more than one node (SAN URIs locksmith-node://…/{0} and …/{1})")]
    Ambiguous(NodeId, NodeId),
    /// The certificate could not be parsed.
    #[error("unparsable certificate: {0}")]
    Unparsable(String),
}

impl PeerCa {
    /// The peer CA from a PEM file's contents (one or more CA certificates).
    ///
    /// # Errors
    /// No certificate in `pem`, or one rustls cannot use as a trust anchor.
    pub fn from_pem(pem: &[u8]) -> Result<Self, String> {
        let mut roots = RootCertStore::empty();
        for cert in CertificateDer::pem_slice_iter(pem) {
            let cert = cert.map_err(|e| format!("not a PEM certificate: {e}"))?;
            roots.add(cert).map_err(|e| format!("not a usable CA certificate: {e}"))?;
        }
        if roots.is_empty() {
            return Err("no certificate in the file".into());
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map_err(|e| format!("unusable as a CA: {e}"))?;
        Ok(Self { verifier, verified: Arc::default() })
    }

    /// The node id `chain` (leaf first, as TLS presents it) proves: the leaf must chain to this
    /// CA, be valid now and for client use, and name exactly one node.
    ///
    /// # Errors
    /// See [`PeerCertError`].
    pub fn node_id(&self, chain: &[CertificateDer<'_>]) -> Result<NodeId, PeerCertError> {
        let (leaf, intermediates) = chain.split_first().ok_or(PeerCertError::Missing)?;
        let key = chain_digest(chain);
        let now = Instant::now();
        let mut verified = self.verified.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((id, at)) = verified.get(&key) {
            if now.duration_since(*at) < VERIFIED_FOR {
                return Ok(*id);
            }
        }
        self.verifier
            .verify_client_cert(leaf, intermediates, UnixTime::now())
            .map_err(|e| PeerCertError::NotSigned(e.to_string()))?;
        let id = node_id_of(leaf)?;
        if verified.len() >= MAX_VERIFIED {
            verified.clear();
        }
        verified.insert(key, (id, now));
        Ok(id)
    }

    /// [`PeerCa::node_id`] of a PEM certificate chain (a node checking its own `--tls-cert`).
    ///
    /// # Errors
    /// See [`PeerCertError`]; `Unparsable` when `pem` holds no PEM certificate.
    pub fn node_id_pem(&self, pem: &[u8]) -> Result<NodeId, PeerCertError> {
        let chain = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| PeerCertError::Unparsable(e.to_string()))?;
        self.node_id(&chain)
    }
}

/// SHA-256 over the chain's certificates, each preceded by its length.
fn chain_digest(chain: &[CertificateDer<'_>]) -> [u8; 32] {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    for cert in chain {
        ctx.update(&(cert.len() as u64).to_be_bytes());
        ctx.update(cert.as_ref());
    }
    let mut out = [0; 32];
    out.copy_from_slice(ctx.finish().as_ref());
    out
}

/// The node id a certificate's SAN URI names (its signature not checked: see [`PeerCa::node_id`]).
///
/// # Errors
/// [`PeerCertError::NoNodeId`], [`PeerCertError::Ambiguous`], [`PeerCertError::Unparsable`].
pub fn node_id_of(cert: &CertificateDer<'_>) -> Result<NodeId, PeerCertError> {
    use x509_parser::extensions::GeneralName;
    let (_, parsed) =
        x509_parser::parse_x509_certificate(cert.as_ref()).map_err(|e| PeerCertError::Unparsable(e.to_string()))?;
    let san = parsed.subject_alternative_name().map_err(|e| PeerCertError::Unparsable(e.to_string()))?;
    let mut found = None;
    for name in san.iter().flat_map(|s| s.value.general_names.iter()) {
        let GeneralName::URI(uri) = name else { continue };
        let Some(id) = parse_node_uri(uri) else { continue };
        match found {
            Some(other) if other != id => return Err(PeerCertError::Ambiguous(other, id)),
            _ => found = Some(id),
        }
    }
    found.ok_or(PeerCertError::NoNodeId)
}

/// `locksmith-node://CLUSTER/ID` → `ID`; anything else (another scheme, an empty cluster name, a
/// path with more parts, a non-decimal id) → `None`.
fn parse_node_uri(uri: &str) -> Option<NodeId> {
    let rest = uri.strip_prefix(NODE_URI_SCHEME)?.strip_prefix("://")?;
    let (cluster, id) = rest.split_once('/')?;
    if cluster.is_empty() || id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    id.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_exact_node_uri_names_a_node() {
        assert_eq!(parse_node_uri("locksmith-node://prod/3"), Some(3));
        assert_eq!(parse_node_uri("locksmith-node://any/18446744073709551615"), Some(u64::MAX));
        for bad in [
            "locksmith-node:///3",
            "locksmith-node://prod/",
            "locksmith-node://prod/3/4",
            "locksmith-node://prod/+3",
            "locksmith-node://prod/x",
            "https://prod/3",
            "locksmith-nodes://prod/3",
            "locksmith-node://prod/99999999999999999999",
        ] {
            assert_eq!(parse_node_uri(bad), None, "{bad}");
        }
    }
}
