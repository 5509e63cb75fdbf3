//! Every duration the driver derives from the session TTL, in one place.

use std::time::Duration;

use locksmith_core::driver::{drift, Backoff, Jitter};

/// Longest wait for a TCP connection (and handshake) to one instance. Short on purpose: a dead
/// or frozen instance must cost a missing vote, never a stall of the others.
const CONNECT_CAP: Duration = Duration::from_millis(200);
/// Longest wait for one command's answer from one instance.
const COMMAND_CAP: Duration = Duration::from_millis(250);
/// Retry delays while waiting for a busy lock: first delay at most this…
const RETRY_FIRST_CAP: Duration = Duration::from_millis(50);
/// …doubling up to at most this.
const RETRY_MAX_CAP: Duration = Duration::from_millis(200);
const RETRY_FLOOR: Duration = Duration::from_millis(2);

/// Whether a round that took `elapsed` still leaves the hold valid for a while:
/// validity = TTL − elapsed − drift must be positive (the engine's clock-drift margin,
/// [`drift`]).
pub(crate) fn within_validity(ttl: Duration, elapsed: Duration) -> bool {
    elapsed + drift(ttl) < ttl
}

/// Per-instance time limits for one session.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    /// Connect: min(200 ms, TTL/5).
    pub(crate) connect: Duration,
    /// One command: min(250 ms, TTL/10). A round therefore ends well inside the validity.
    pub(crate) command: Duration,
}

impl Timeouts {
    pub(crate) fn for_ttl(ttl: Duration) -> Self {
        Self { connect: CONNECT_CAP.min(ttl / 5), command: COMMAND_CAP.min(ttl / 10) }
    }
}

/// The backoff between acquisition rounds of a waiting `lock()`: Redis has no queue, so waiters
/// poll. The first delay is drawn from [d/2, d] with d = clamp(TTL/50, 2 ms, 50 ms); d doubles
/// after every failed round up to clamp(TTL/10, d, 200 ms). The jitter keeps contenders from
/// splitting the votes round after round.
pub(crate) fn round_backoff(ttl: Duration) -> Backoff {
    let first = (ttl / 50).clamp(RETRY_FLOOR, RETRY_FIRST_CAP);
    Backoff::custom(first, (ttl / 10).clamp(first, RETRY_MAX_CAP), Jitter::LowerHalf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_stays_in_its_documented_range() {
        let mut b = round_backoff(Duration::from_secs(5));
        let delays: Vec<Duration> = (0..10).map(|_| b.delay(None)).collect();
        assert!(delays[0] >= Duration::from_millis(25) && delays[0] <= Duration::from_millis(50));
        assert!(delays.iter().all(|d| *d <= Duration::from_millis(200)));
        let mut tiny = round_backoff(Duration::from_millis(100));
        assert!(tiny.delay(None) <= Duration::from_millis(2));
    }

    #[test]
    fn timeouts_fit_inside_the_validity() {
        for ms in [100, 1000, 2000, 10_000, 3_600_000] {
            let ttl = Duration::from_millis(ms);
            let t = Timeouts::for_ttl(ttl);
            assert!(within_validity(ttl, t.connect + t.command), "ttl {ttl:?}");
        }
        assert_eq!(drift(Duration::from_secs(1)), Duration::from_millis(12));
    }
}
