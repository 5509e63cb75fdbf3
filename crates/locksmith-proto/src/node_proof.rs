//! Node authentication: the proof a cluster node (or an operator holding the cluster secret)
//! puts in the [`NODE_PROOF_HEADER`] metadata of every Raft call and of membership changes.
//!
//! A proof is an HMAC-SHA256, keyed with the cluster secret every node is given (`locksmith
//! serve --cluster-secret-file`), over the gRPC method, the sender's node id, the target node id,
//! the time it was made, the sender's cluster id (0 when it has none yet) and a SHA-256 digest
//! of the message. A receiver checks the MAC from the
//! metadata alone — before it reads the message — in constant time (ring's `hmac::verify`), then
//! checks that the message it decodes has the digest the proof names. Client credentials (bearer
//! tokens, client certificates) never stand in for it.
//!
//! ```
//! use locksmith_proto::node_proof::ClusterSecret;
//! let secret = ClusterSecret::new(b"a long random cluster secret\n")?;
//! let header = secret.prove("/locksmith.raft.v1.Raft/Vote", 1, 2, 7, b"payload");
//! let claim = secret.check("/locksmith.raft.v1.Raft/Vote", &header)?;
//! assert_eq!((claim.sender, claim.target, claim.cluster), (1, 2, 7));
//! assert!(claim.covers(b"payload") && !claim.covers(b"another payload"));
//! // Another method, another secret: refused.
//! assert!(secret.check("/locksmith.raft.v1.Raft/AppendEntries", &header).is_err());
//! assert!(ClusterSecret::new(b"another cluster's long secret")?.check("/locksmith.raft.v1.Raft/Vote", &header).is_err());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt::{self, Write as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ring::{digest, hmac};

/// The metadata key of a node proof.
pub const NODE_PROOF_HEADER: &str = "locksmith-node-proof";

/// The sender id of an operator's call (`locksmith cluster add|remove --cluster-secret-file`),
/// and the target id of a call meant for whichever node answers: node ids start at 1.
pub const OPERATOR: u64 = 0;

/// The gRPC path of `locksmith.v1.Cluster/AddNode`, which an operator's proof covers.
pub const ADD_NODE: &str = "/locksmith.v1.Cluster/AddNode";
/// The gRPC path of `locksmith.v1.Cluster/RemoveNode`.
pub const REMOVE_NODE: &str = "/locksmith.v1.Cluster/RemoveNode";

/// The shortest secret accepted, in bytes (after trailing whitespace is cut).
pub const MIN_SECRET_LEN: usize = 16;

const VERSION: &str = "v1";
const DOMAIN: &[u8] = b"locksmith-node-proof/v1\0";

/// The cluster secret, as an HMAC key. Neither `Debug` nor any error shows it.
#[derive(Clone)]
pub struct ClusterSecret {
    key: hmac::Key,
}

impl fmt::Debug for ClusterSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ClusterSecret(…)")
    }
}

/// Why a secret file is not used. Never shows the file's content.
#[derive(Debug)]
pub enum SecretError {
    /// The file cannot be read.
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Fewer than [`MIN_SECRET_LEN`] bytes.
    TooShort {
        /// The file, `None` for bytes given directly.
        path: Option<PathBuf>,
        /// How many bytes it has.
        len: usize,
    },
    /// Other users may read or write it.
    Permissions {
        /// The file.
        path: PathBuf,
        /// Its mode bits.
        mode: u32,
    },
}

impl fmt::Display for SecretError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Read { path, source } => write!(f, "cannot read the cluster secret {}: {source}", path.display()),
            Self::TooShort { path, len } => {
                let what = path.as_ref().map_or_else(|| "the cluster secret".to_string(), |p| p.display().to_string());
                write!(
                    f,
                    "{what} holds {len} bytes; a cluster secret needs at least {MIN_SECRET_LEN} (e.g. `head -c 32 \
                     /dev/urandom | base64 > FILE`)"
                )
            }
            Self::Permissions { path, mode } => write!(
                f,
                "{} may be read or written by other users (mode {mode:o}): `chmod 600 {}`",
                path.display(),
                path.display()
            ),
        }
    }
}

impl std::error::Error for SecretError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Read { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// Why a proof is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProofError {
    /// Not a proof of this version.
    Malformed,
    /// The MAC does not verify: another secret, another method, or altered fields.
    Forged,
}

impl fmt::Display for ProofError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Malformed => "the node proof is malformed",
            Self::Forged => "the node proof does not verify (another cluster secret?)",
        })
    }
}

impl std::error::Error for ProofError {}

/// What a verified proof says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The sender's node id ([`OPERATOR`] for an operator).
    pub sender: u64,
    /// The node it is meant for ([`OPERATOR`]: any).
    pub target: u64,
    /// When it was made, in seconds since the Unix epoch (the sender's clock).
    pub issued: u64,
    /// The sender's cluster id; 0: none yet (or an operator).
    pub cluster: u128,
    digest: [u8; 32],
}

impl Claim {
    /// Whether `message` is the message the proof was made for.
    pub fn covers(&self, message: &[u8]) -> bool {
        // Not secret (the digest travels in the clear); compared plainly.
        digest::digest(&digest::SHA256, message).as_ref() == self.digest
    }

    /// Whether it was made within `window` of this host's clock, either way.
    pub fn fresh(&self, window: Duration) -> bool {
        now().abs_diff(self.issued) <= window.as_secs()
    }
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl ClusterSecret {
    /// The secret `bytes` (trailing whitespace, such as a file's last newline, is not part of
    /// it).
    ///
    /// # Errors
    /// [`SecretError::TooShort`] below [`MIN_SECRET_LEN`] bytes.
    pub fn new(bytes: &[u8]) -> Result<Self, SecretError> {
        Self::from_trimmed(bytes, None)
    }

    fn from_trimmed(bytes: &[u8], path: Option<&Path>) -> Result<Self, SecretError> {
        let end = bytes.iter().rposition(|b| !b.is_ascii_whitespace()).map_or(0, |i| i + 1);
        let bytes = &bytes[..end];
        if bytes.len() < MIN_SECRET_LEN {
            return Err(SecretError::TooShort { path: path.map(Path::to_path_buf), len: bytes.len() });
        }
        Ok(Self { key: hmac::Key::new(hmac::HMAC_SHA256, bytes) })
    }

    /// Reads the secret from `path`, which other users may neither read nor write.
    ///
    /// # Errors
    /// [`SecretError`]: unreadable, too short, or open to other users.
    pub fn load(path: &Path) -> Result<Self, SecretError> {
        let read = |source| SecretError::Read { path: path.to_path_buf(), source };
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(path).map_err(read)?.permissions().mode();
            if mode & 0o007 != 0 {
                return Err(SecretError::Permissions { path: path.to_path_buf(), mode: mode & 0o777 });
            }
        }
        let bytes = std::fs::read(path).map_err(read)?;
        Self::from_trimmed(&bytes, Some(path))
    }

    /// The proof, as the [`NODE_PROOF_HEADER`] value, that node `sender` of cluster `cluster`
    /// (0: none yet) sends `message` to node `target` through gRPC method `call` (its path,
    /// `/package.Service/Method`), now.
    pub fn prove(&self, call: &str, sender: u64, target: u64, cluster: u128, message: &[u8]) -> String {
        let issued = now();
        let digest = digest::digest(&digest::SHA256, message);
        let mut d = [0u8; 32];
        d.copy_from_slice(digest.as_ref());
        let tag = hmac::sign(&self.key, &signed(call, [sender, target, issued], cluster, &d));
        // Sized once: three u64s, the cluster id, the digest and the tag in hex, six dots.
        let mut proof = String::with_capacity(VERSION.len() + 3 * 20 + 32 + 2 * (d.len() + tag.as_ref().len()) + 6);
        // Writing to a String cannot fail.
        let _ = write!(proof, "{VERSION}.{sender}.{target}.{issued}.{cluster:032x}.");
        push_hex(&mut proof, &d);
        proof.push('.');
        push_hex(&mut proof, tag.as_ref());
        proof
    }

    /// Verifies `header` (a [`NODE_PROOF_HEADER`] value) for gRPC method `call`, in constant
    /// time, and returns what it claims. The caller still checks the message against
    /// [`Claim::covers`], the ids against the message and its own id.
    ///
    /// # Errors
    /// [`ProofError`].
    pub fn check(&self, call: &str, header: &str) -> Result<Claim, ProofError> {
        let mut parts = header.split('.');
        let mut next = || parts.next().ok_or(ProofError::Malformed);
        if next()? != VERSION {
            return Err(ProofError::Malformed);
        }
        let number = |s: &str| s.parse::<u64>().map_err(|_| ProofError::Malformed);
        let (sender, target, issued) = (number(next()?)?, number(next()?)?, number(next()?)?);
        let cluster = next()?;
        if cluster.len() != 32 {
            return Err(ProofError::Malformed);
        }
        let cluster = u128::from_str_radix(cluster, 16).map_err(|_| ProofError::Malformed)?;
        let mut digest = [0u8; 32];
        if unhex(next()?, &mut digest) != Some(32) {
            return Err(ProofError::Malformed);
        }
        let mut tag = [0u8; 64];
        let tag_len = unhex(next()?, &mut tag).ok_or(ProofError::Malformed)?;
        let tag = &tag[..tag_len];
        if parts.next().is_some() {
            return Err(ProofError::Malformed);
        }
        hmac::verify(&self.key, &signed(call, [sender, target, issued], cluster, &digest), tag)
            .map_err(|_| ProofError::Forged)?;
        Ok(Claim { sender, target, issued, cluster, digest })
    }
}

/// The bytes a proof's MAC covers: every field, at fixed widths after the method.
fn signed(call: &str, numbers: [u64; 3], cluster: u128, digest: &[u8; 32]) -> Vec<u8> {
    let mut m = Vec::with_capacity(DOMAIN.len() + call.len() + 1 + 24 + 16 + 32);
    m.extend_from_slice(DOMAIN);
    m.extend_from_slice(call.as_bytes());
    m.push(0);
    for n in numbers {
        m.extend_from_slice(&n.to_be_bytes());
    }
    m.extend_from_slice(&cluster.to_be_bytes());
    m.extend_from_slice(digest);
    m
}

/// Appends `bytes` as lower-case hex. A proof is made for every Raft message: formatting each
/// byte with `format!` (an allocation each) cost more than the HMAC and the digest together.
fn push_hex(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for b in bytes {
        out.push(char::from(DIGITS[usize::from(b >> 4)]));
        out.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
}

/// Decodes hex `s` into the start of `out` and returns how many bytes it wrote; `None` when
/// `s` is not hex of at most `out.len()` bytes. Into the caller's buffer: a proof is checked
/// for every Raft message.
fn unhex(s: &str, out: &mut [u8]) -> Option<usize> {
    let s = s.as_bytes();
    if s.len() % 2 != 0 || s.len() / 2 > out.len() {
        return None;
    }
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    };
    for (byte, pair) in out.iter_mut().zip(s.chunks_exact(2)) {
        *byte = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(s.len() / 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CALL: &str = "/locksmith.raft.v1.Raft/AppendEntries";

    fn secret() -> ClusterSecret {
        ClusterSecret::new(b"0123456789abcdef0123456789abcdef\n").unwrap()
    }

    #[test]
    fn a_proof_names_its_sender_target_and_message() {
        let claim = secret().check(CALL, &secret().prove(CALL, 3, 1, 0, b"entries")).unwrap();
        assert_eq!((claim.sender, claim.target), (3, 1));
        assert!(claim.covers(b"entries"));
        assert!(!claim.covers(b"entries!"));
        assert!(claim.fresh(Duration::from_secs(5)));
    }

    #[test]
    fn an_altered_field_does_not_verify() {
        let header = secret().prove(CALL, 3, 1, 5, b"entries");
        let forged = header.replacen(".3.1.", ".99.1.", 1);
        assert_eq!(secret().check(CALL, &forged), Err(ProofError::Forged));
        let forged = header.replacen(&format!(".{:032x}.", 5), &format!(".{:032x}.", 6), 1);
        assert_eq!(secret().check(CALL, &forged), Err(ProofError::Forged));
        let mut bytes = header.clone().into_bytes();
        let last = bytes.len() - 1;
        bytes[last] = if bytes[last] == b'0' { b'1' } else { b'0' };
        assert_eq!(secret().check(CALL, std::str::from_utf8(&bytes).unwrap()), Err(ProofError::Forged));
        for junk in ["", "v1", "v2.1.2.3.00.00", "v1.1.2.3.zz.00", &format!("{header}.1")] {
            assert_eq!(secret().check(CALL, junk), Err(ProofError::Malformed), "{junk}");
        }
    }

    #[test]
    fn a_proof_is_lower_case_hex_at_fixed_widths() {
        let header = secret().prove(CALL, 3, 1, 0xab, b"entries");
        let parts: Vec<&str> = header.split('.').collect();
        assert_eq!(parts[..3], ["v1", "3", "1"]);
        assert_eq!(parts[4], format!("{:032x}", 0xab));
        let digest = digest::digest(&digest::SHA256, b"entries");
        let expected: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(parts[5], expected);
        assert_eq!(parts[6].len(), 64);
        assert!(parts[6].bytes().all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)));
        let mut out = [0u8; 4];
        assert_eq!(unhex("0aFf", &mut out), Some(2));
        assert_eq!(out[..2], [0x0a, 0xff]);
        assert_eq!(unhex("+1", &mut out), None);
        assert_eq!(unhex("0", &mut out), None);
        assert_eq!(unhex("0011223344", &mut out), None);
    }

    #[test]
    fn short_secrets_are_refused_without_showing_them() {
        let e = ClusterSecret::new(b"short    \n").unwrap_err();
        assert!(e.to_string().contains("holds 5 bytes"), "{e}");
        assert!(!e.to_string().contains("short"));
        assert_eq!(format!("{:?}", secret()), "ClusterSecret(…)");
    }
}
