//! Certificates for secured test servers, made by the test itself (rcgen, ring): a CA, a server
//! certificate for `localhost` and `127.0.0.1` signed by it (also usable as a client
//! certificate: a cluster node presents it when it dials its peers), a client certificate signed by it,
//! and a second, unrelated CA for "wrong CA" tests. Written as PEM files into a temp dir that
//! lives as long as the value.

use std::path::{Path, PathBuf};

use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair, KeyUsagePurpose};

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

/// `(certificate PEM, key PEM, certificate DER)` of a leaf signed by `ca`.
fn leaf(
    name: &str,
    sans: &[&str],
    usages: &[ExtendedKeyUsagePurpose],
    ca: &rcgen::Certificate,
    ca_key: &KeyPair,
) -> (String, String, Vec<u8>) {
    let key = KeyPair::generate().unwrap_or_else(|e| panic!("{name} key: {e}"));
    let sans: Vec<String> = sans.iter().map(|s| s.to_string()).collect();
    let mut params = CertificateParams::new(sans).unwrap_or_else(|e| panic!("{name} params: {e}"));
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
