//! The random value stored under a lock's key: it identifies one hold on every instance.

/// `session:nonce:owner`: the 128-bit random nonce makes the value unique per hold (the
/// Redlock requirement); session and owner only make `status` readable.
pub(crate) fn new_value(session: &str, owner: &str) -> String {
    format!("{session}:{:032x}:{owner}", locksmith_core::driver::identity::random_u128())
}

/// `(session, owner)` of a value written by [`new_value`]; a value written by another tool
/// (redis-py's random token, say) is reported as an owner with no session.
pub(crate) fn parse_value(value: &str) -> (String, String) {
    let mut parts = value.splitn(3, ':');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(session), Some(nonce), Some(owner)) if nonce.len() == 32 => (session.to_string(), owner.to_string()),
        _ => (String::new(), value.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_unique_and_readable() {
        let a = new_value("s1", "worker:1");
        assert_ne!(a, new_value("s1", "worker:1"));
        assert_eq!(parse_value(&a), ("s1".to_string(), "worker:1".to_string()));
        assert_eq!(parse_value("opaque-token"), (String::new(), "opaque-token".to_string()));
    }
}
