//! Resume secrets: 32 bytes from the OS's random number generator, given to a session's client
//! once (in `Opened`) and required to resume the session. The server keeps only their SHA-256
//! ([`SecretDigest`]), in memory and in the log, so neither a `Status` answer nor a copy of the
//! data directory lets anyone act as another client's session.

use ring::digest::{digest as sha, SHA256};
use ring::rand::{SecureRandom, SystemRandom};

use crate::machine::SecretDigest;

/// A fresh secret and its digest; `None` if the OS has no randomness to give (the open is
/// then refused rather than served with a guessable secret).
pub(crate) fn fresh() -> Option<([u8; 32], SecretDigest)> {
    let mut secret = [0u8; 32];
    SystemRandom::new().fill(&mut secret).ok()?;
    Some((secret, digest(&secret)))
}

/// The digest a session is known by: its secret's, bound to the principal that opened it, so
/// only that principal can resume it (`None`: no auth policy, the secret's digest as is).
pub(crate) fn bind(digest: SecretDigest, principal: Option<&str>) -> SecretDigest {
    match principal {
        None => digest,
        Some(name) => {
            let mut input = Vec::with_capacity(32 + 1 + name.len());
            input.extend_from_slice(&digest);
            input.push(0);
            input.extend_from_slice(name.as_bytes());
            self::digest(&input)
        }
    }
}

/// SHA-256 of `secret`.
pub(crate) fn digest(secret: &[u8]) -> SecretDigest {
    let mut out = [0u8; 32];
    out.copy_from_slice(sha(&SHA256, secret).as_ref());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_differ_and_digests_are_sha256() {
        let (a, da) = fresh().unwrap_or_else(|| panic!("no randomness"));
        let (b, db) = fresh().unwrap_or_else(|| panic!("no randomness"));
        assert_ne!(a, b);
        assert_ne!(da, db);
        assert_eq!(digest(&a), da);
        // Bound to a principal, the digest is another principal's no more.
        assert_eq!(bind(da, None), da);
        assert_ne!(bind(da, Some("jobs")), da);
        assert_ne!(bind(da, Some("jobs")), bind(da, Some("ops")));
        assert_eq!(bind(da, Some("jobs")), bind(da, Some("jobs")));
        // SHA-256 of the empty string.
        assert_eq!(digest(b"")[..4], [0xe3, 0xb0, 0xc4, 0x42]);
    }
}
