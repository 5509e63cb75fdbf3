//! Who may do what: principals, the bearer tokens and client certificates that identify them,
//! and the lock-name prefixes they may lock or observe. Pure data, parsed from a TOML file:
//!
//! ```toml
//! [principals.nightly]
//! tokens = ["<sha-256 of a token, hex>"]        # `locksmith token new` prints a pair
//! certificates = ["<sha-256 of a client certificate's DER, hex>"]
//! lock = ["jobs/"]                                # acquire and release names under these prefixes
//! observe = ["jobs/"]                             # see them in status
//!
//! [principals.ops]
//! tokens = ["…"]
//! admin = true                                    # lock and observe every name; change the cluster
//! ```
//!
//! Tokens are stored as hashes, so the file is not itself a secret; a token is compared by its
//! hash, never logged.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::Principal;

/// SHA-256 of a token or of a certificate's DER.
pub type Fingerprint = [u8; 32];

/// A parsed policy: principals by token and by certificate fingerprint.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    by_token: BTreeMap<Fingerprint, usize>,
    by_cert: BTreeMap<Fingerprint, usize>,
    principals: Vec<Principal>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    principals: BTreeMap<String, Entry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    #[serde(default)]
    tokens: Vec<String>,
    #[serde(default)]
    certificates: Vec<String>,
    #[serde(default)]
    lock: Vec<String>,
    #[serde(default)]
    observe: Vec<String>,
    #[serde(default)]
    admin: bool,
}

impl Policy {
    /// Parses a policy file's text.
    ///
    /// # Errors
    /// What is wrong and where: TOML syntax, an unknown key, a fingerprint that is not 64 hex
    /// digits, or one listed for two principals.
    pub fn parse(text: &str) -> Result<Self, String> {
        let file: File = toml::from_str(text).map_err(|e| e.to_string())?;
        let mut policy = Policy::default();
        for (name, e) in file.principals {
            let index = policy.principals.len();
            for (what, list, map) in
                [("tokens", &e.tokens, &mut policy.by_token), ("certificates", &e.certificates, &mut policy.by_cert)]
            {
                for hex in list {
                    let fp = parse_hex(hex).ok_or_else(|| {
                        format!("principals.{name}.{what}: {hex:?} is not a SHA-256 in hex (64 digits)")
                    })?;
                    if map.insert(fp, index).is_some() {
                        return Err(format!("principals.{name}.{what}: {hex} is listed for two principals"));
                    }
                }
            }
            policy.principals.push(Principal { name, lock: e.lock, observe: e.observe, admin: e.admin });
        }
        Ok(policy)
    }

    /// The principal presenting a token with this SHA-256.
    pub fn by_token(&self, fingerprint: &Fingerprint) -> Option<&Principal> {
        self.by_token.get(fingerprint).and_then(|i| self.principals.get(*i))
    }

    /// The principal presenting a client certificate with this SHA-256 (of its DER).
    pub fn by_certificate(&self, fingerprint: &Fingerprint) -> Option<&Principal> {
        self.by_cert.get(fingerprint).and_then(|i| self.principals.get(*i))
    }
}

fn parse_hex(s: &str) -> Option<Fingerprint> {
    let s = s.trim();
    if s.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// `bytes` as lower-case hex.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    const B: &str = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

    #[test]
    fn principals_get_their_prefixes() {
        let p = Policy::parse(&format!(
            "[principals.jobs]\ntokens = [\"{A}\"]\nlock = [\"jobs/\"]\nobserve = [\"db/\"]\n\
             [principals.ops]\ncertificates = [\"{B}\"]\nadmin = true\n"
        ))
        .unwrap_or_else(|e| panic!("{e}"));
        let jobs = p.by_token(&[0xaa; 32]).unwrap_or_else(|| panic!("no principal"));
        assert!(jobs.may_lock("jobs/nightly") && !jobs.may_lock("db/x") && !jobs.may_lock("jobsx"));
        assert!(jobs.may_observe("db/x") && jobs.may_observe("jobs/a") && !jobs.may_observe("other"));
        let ops = p.by_certificate(&[0xbb; 32]).unwrap_or_else(|| panic!("no principal"));
        assert!(ops.may_lock("anything") && ops.may_observe("anything"));
        assert!(p.by_token(&[0xbb; 32]).is_none(), "a certificate is not a token");
    }

    #[test]
    fn mistakes_are_named() {
        for (text, says) in [
            ("[principals.x]\ntokens = [\"abc\"]", "not a SHA-256"),
            ("[principals.x]\nlocks = []", "unknown field"),
            (&format!("[principals.x]\ntokens = [\"{A}\"]\n[principals.y]\ntokens = [\"{A}\"]"), "two principals"),
            ("[principals.x", "expected"),
        ] {
            let e = Policy::parse(text).map(|_| ()).unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
        }
    }
}
