//! Certificates for secured test servers, made by the test itself (rcgen, ring): a CA, a server
//! certificate for `localhost` and `127.0.0.1` signed by it (also usable as a client
//! certificate: a cluster node presents it when it dials its peers), a client certificate signed by it,
//! and a second, unrelated CA for "wrong CA" tests; with [`TestCerts::with_nodes`] also a peer CA
//! and its node certificates (SAN URI `locksmith-node://test/ID`, `locksmith serve --peer-ca`).
//! Written as PEM files into a temp dir that lives as long as the value.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose, SanType,
};

/// PEM files of one test PKI.
#[derive(Debug)]
pub struct TestCerts {
    dir: tempfile::TempDir,
}

impl TestCerts {
    /// Generates the CA, the server, node and client certificates, and an unrelated CA.
    ///
    /// # Panics
    /// When generating or writing fails (a test helper).
    pub fn generate() -> Self {
        Self::with_nodes(&[])
    }

    /// [`TestCerts::generate`], plus a peer CA (a CA of its own, apart from the clients') and a
    /// node certificate for each of `ids` signed by it ([`TestCerts::node_cert_of`]: SANs
    /// `localhost`, `127.0.0.1` and `locksmith-node://test/ID`, server and client usage), and a
    /// client certificate of the clients' CA that claims node 1 by the same SAN URI
    /// ([`TestCerts::client_as_node_cert`]).
    ///
    /// # Panics
    /// As [`TestCerts::generate`].
    pub fn with_nodes(ids: &[u64]) -> Self {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("temp dir for certificates: {e}"));
        let (ca, ca_key) = authority("locksmith test CA");
        let (other, _) = authority("an unrelated CA");
        // The server certificate serves only (tests rely on a server refusing it as a client's);
        // a cluster node's serves and also calls its peers over mutual TLS.
        let server =
            leaf("localhost", &["localhost", "127.0.0.1"], &[ExtendedKeyUsagePurpose::ServerAuth], &ca, &ca_key);
        let both = [ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth];
        let node = leaf("localhost", &["localhost", "127.0.0.1"], &both, &ca, &ca_key);
        let client = leaf("locksmith-test-client", &[], &[ExtendedKeyUsagePurpose::ClientAuth], &ca, &ca_key);
        let write = |name: &str, pem: &str| {
            std::fs::write(dir.path().join(name), pem).unwrap_or_else(|e| panic!("writing {name}: {e}"));
        };
        write("ca.pem", &ca.pem());
        write("ca.key", &ca_key.serialize_pem());
        write("other-ca.pem", &other.pem());
        write("server.pem", &server.0);
        write("server.key", &server.1);
        write("node.pem", &node.0);
        write("node.key", &node.1);
        write("client.pem", &client.0);
        write("client.key", &client.1);
        let digest = ring::digest::digest(&ring::digest::SHA256, &client.2);
        write("client.sha256", &digest.as_ref().iter().map(|b| format!("{b:02x}")).collect::<String>());
        if !ids.is_empty() {
            let (peer_ca, peer_key) = authority("locksmith test node CA");
            write("peer-ca.pem", &peer_ca.pem());
            for id in ids {
                let uri = node_uri(*id);
                let node =
                    leaf_with(&format!("node {id}"), &["localhost", "127.0.0.1"], &[uri], &both, &peer_ca, &peer_key);
                write(&format!("node-{id}.pem"), &node.0);
                write(&format!("node-{id}.key"), &node.1);
            }
            let usage = [ExtendedKeyUsagePurpose::ClientAuth];
            let fake = leaf_with("client claiming node 1", &[], &[node_uri(1)], &usage, &ca, &ca_key);
            write("client-as-node.pem", &fake.0);
            write("client-as-node.key", &fake.1);
        }
        Self { dir }
    }

    /// The directory holding the files.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The CA certificate that signed the server and client certificates.
    pub fn ca(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// A CA that signed nothing here: a client trusting only it must refuse the server.
    pub fn other_ca(&self) -> PathBuf {
        self.dir.path().join("other-ca.pem")
    }

    /// The server certificate (SANs `localhost`, `127.0.0.1`).
    pub fn server_cert(&self) -> PathBuf {
        self.dir.path().join("server.pem")
    }

    /// The server certificate's private key.
    pub fn server_key(&self) -> PathBuf {
        self.dir.path().join("server.key")
    }

    /// A cluster node's certificate (SANs `localhost`, `127.0.0.1`): server and client usage,
    /// for a node that serves and calls its peers over mutual TLS.
    pub fn node_cert(&self) -> PathBuf {
        self.dir.path().join("node.pem")
    }

    /// The node certificate's private key.
    pub fn node_key(&self) -> PathBuf {
        self.dir.path().join("node.key")
    }

    /// A client certificate signed by [`TestCerts::ca`] (mutual TLS).
    pub fn client_cert(&self) -> PathBuf {
        self.dir.path().join("client.pem")
    }

    /// The client certificate's private key.
    pub fn client_key(&self) -> PathBuf {
        self.dir.path().join("client.key")
    }

    /// The peer CA of [`TestCerts::with_nodes`] (`--peer-ca`).
    pub fn peer_ca(&self) -> PathBuf {
        self.dir.path().join("peer-ca.pem")
    }

    /// `(certificate, key)` of node `id`'s node certificate ([`TestCerts::with_nodes`]).
    pub fn node_cert_of(&self, id: u64) -> (PathBuf, PathBuf) {
        (self.dir.path().join(format!("node-{id}.pem")), self.dir.path().join(format!("node-{id}.key")))
    }

    /// `(certificate, key)` signed by the clients' CA whose SAN URI claims node 1
    /// ([`TestCerts::with_nodes`]): a client's certificate, whatever it names.
    pub fn client_as_node_cert(&self) -> (PathBuf, PathBuf) {
        (self.dir.path().join("client-as-node.pem"), self.dir.path().join("client-as-node.key"))
    }

    /// SHA-256 of the client certificate's DER, in hex (what a native server's policy lists).
    pub fn client_cert_sha256(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("client.sha256")).unwrap_or_default()
    }
}

fn authority(name: &str) -> (rcgen::Certificate, KeyPair) {
    let key = KeyPair::generate().unwrap_or_else(|e| panic!("CA key: {e}"));
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap_or_else(|e| panic!("CA params: {e}"));
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    let cert = params.self_signed(&key).unwrap_or_else(|e| panic!("CA certificate: {e}"));
    (cert, key)
}

/// `locksmith-node://test/ID`.
fn node_uri(id: u64) -> SanType {
    let uri = format!("locksmith-node://test/{id}");
    SanType::URI(uri.clone().try_into().unwrap_or_else(|e| panic!("{uri}: {e}")))
}

/// `(certificate PEM, key PEM, certificate DER)` of a leaf signed by `ca`.
fn leaf(
    name: &str,
    sans: &[&str],
    usages: &[ExtendedKeyUsagePurpose],
    ca: &rcgen::Certificate,
    ca_key: &KeyPair,
) -> (String, String, Vec<u8>) {
    leaf_with(name, sans, &[], usages, ca, ca_key)
}

/// [`leaf`] with more SANs (URIs).
fn leaf_with(
    name: &str,
    sans: &[&str],
    more: &[SanType],
    usages: &[ExtendedKeyUsagePurpose],
    ca: &rcgen::Certificate,
    ca_key: &KeyPair,
) -> (String, String, Vec<u8>) {
    let key = KeyPair::generate().unwrap_or_else(|e| panic!("{name} key: {e}"));
    let sans: Vec<String> = sans.iter().map(|s| s.to_string()).collect();
    let mut params = CertificateParams::new(sans).unwrap_or_else(|e| panic!("{name} params: {e}"));
    params.subject_alt_names.extend(more.iter().cloned());
    params.distinguished_name.push(DnType::CommonName, name);
    params.extended_key_usages = usages.to_vec();
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    let cert = params.signed_by(&key, ca, ca_key).unwrap_or_else(|e| panic!("{name} certificate: {e}"));
    (cert.pem(), key.serialize_pem(), cert.der().to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_is_pem() {
        let c = TestCerts::generate();
        for p in [c.ca(), c.other_ca(), c.server_cert(), c.server_key(), c.client_cert(), c.client_key()] {
            let s = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            assert!(s.starts_with("-----BEGIN "), "{}", p.display());
        }
    }
}
