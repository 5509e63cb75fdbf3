//! The fallback timer of a polling waiter, shared by every driver that polls (DESIGN.md §2.7):
//! jittered exponential backoff capped by the holder's remaining lease, so waiters retry soon
//! after an expiry without busy polling and without retrying in lock-step.

use std::time::Duration;

/// First delay.
const MIN: Duration = Duration::from_millis(5);
/// Largest delay.
const MAX: Duration = Duration::from_millis(200);

/// 5 ms doubling to 200 ms (or a larger cap), each delay ±20 %.
///
/// ```
/// use std::time::Duration;
/// let mut b = locksmith_core::Backoff::new();
/// assert!(b.delay(-1) <= Duration::from_millis(6));
/// // Never past the holder's remaining lease (+1 ms, to wake just after it ends).
/// assert!(b.delay(2) <= Duration::from_millis(3));
/// ```
#[derive(Debug)]
pub struct Backoff {
    next: Duration,
    max: Duration,
}

impl Backoff {
    /// Starts at 5 ms, caps at 200 ms.
    #[allow(clippy::new_without_default)]
    pub fn new() -> Self {
        Self { next: MIN, max: MAX }
    }

    /// With a larger cap, for waiters that also get pushed wake-ups.
    pub fn with_max(max: Duration) -> Self {
        Self { next: MIN, max: max.max(MIN) }
    }

    /// The next delay, capped by the holder's remaining time `pttl_ms` when it is known
    /// (negative: unknown).
    pub fn delay(&mut self, pttl_ms: i64) -> Duration {
        let base = self.next;
        self.next = (self.next * 2).min(self.max);
        let jittered = base.mul_f64(rand::random_range(0.8..1.2));
        match u64::try_from(pttl_ms) {
            // +1 ms: wake just after the key expired, not just before.
            Ok(ms) => jittered.min(Duration::from_millis(ms + 1)),
            Err(_) => jittered,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Delays grow to the cap, stay jittered within ±20 %, and never exceed the key's TTL.
    #[test]
    fn grows_caps_and_jitters() {
        let mut b = Backoff::new();
        let first = b.delay(-1);
        assert!(first >= Duration::from_millis(4) && first <= Duration::from_millis(6));
        for _ in 0..20 {
            b.delay(-1);
        }
        let d = b.delay(-1);
        assert!(d >= MAX.mul_f64(0.8) && d <= MAX.mul_f64(1.2), "{d:?}");
        assert!(b.delay(3) <= Duration::from_millis(4));
    }
}
