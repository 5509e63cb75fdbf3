//! The identity of a hold on a backend that keeps one string per lock and no token: Redlock and
//! memcached. The value is the only thing that tells "ours" from "someone else's", so it must
//! be unique per hold; session and owner are in it only to make `status` readable.

/// A session id: 16 random hex digits.
///
/// ```
/// let id = locksmith_core::driver::new_session_id();
/// assert_eq!(id.len(), 16);
/// assert_ne!(id, locksmith_core::driver::new_session_id());
/// ```
pub fn new_session_id() -> String {
    format!("{:016x}", super::identity::random_u64())
}

/// `session:nonce:owner`, with a 128-bit random nonce: unique per hold, so an owner-checked
/// renewal or release never touches another hold, not even one of the same session and owner.
///
/// ```
/// use locksmith_core::driver::{new_hold_value, parse_hold_value};
/// let v = new_hold_value("s1", "worker:1");
/// assert_ne!(v, new_hold_value("s1", "worker:1"));
/// assert_eq!(parse_hold_value(&v), ("s1".to_string(), "worker:1".to_string()));
/// ```
pub fn new_hold_value(session: &str, owner: &str) -> String {
    format!("{session}:{:032x}:{owner}", super::identity::random_u128())
}

/// `(session, owner)` of a value written by [`new_hold_value`]; a value written by another tool
/// (redis-py's random token, a cache recipe's `1`) is reported as an owner with no session.
///
/// ```
/// use locksmith_core::driver::parse_hold_value;
/// assert_eq!(parse_hold_value("opaque-token"), (String::new(), "opaque-token".to_string()));
/// ```
pub fn parse_hold_value(value: &str) -> (String, String) {
    let mut parts = value.splitn(3, ':');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(session), Some(nonce), Some(owner)) if nonce.len() == 32 => (session.to_string(), owner.to_string()),
        _ => (String::new(), value.to_string()),
    }
}
