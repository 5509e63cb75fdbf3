//! A lease as memcached can keep it: whole seconds.
//!
//! memcached keeps time in whole seconds, read from a clock it ticks once a second, so an item
//! stored with `T<n>` may expire up to a second before `n` real seconds have passed. To keep a
//! hold at least the lease the engine counts on, a key is written with the lease rounded up to
//! whole seconds **plus one**: 1 s → `T2`, 1.5 s → `T3`. A crashed holder therefore keeps the
//! lock up to about two seconds longer than its TTL before someone else can take it.

use std::time::Duration;

/// The `T` of a key for a lease of `ttl`.
pub(crate) fn expiry_secs(ttl: Duration) -> u64 {
    ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0) + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_round_up_to_whole_seconds_plus_one() {
        assert_eq!(expiry_secs(Duration::from_millis(100)), 2);
        assert_eq!(expiry_secs(Duration::from_secs(1)), 2);
        assert_eq!(expiry_secs(Duration::from_millis(1500)), 3);
        assert_eq!(expiry_secs(Duration::from_secs(3600)), 3601);
    }
}
