//! Time arithmetic every driver needs: the waiters' backoff, the clock-drift margin, and
//! durations as protocol milliseconds.

use std::time::Duration;

/// How a [`Backoff`] spreads its delays.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum Jitter {
    /// Exactly the base delay (a reconnect loop that nobody else shares).
    None,
    /// Uniform in base × (1 − f, 1 + f): waiters polling one lock do not retry in lock-step.
    Around(f64),
    /// Uniform in [base / 2, base]: Redlock rounds, where contenders must not split the votes
    /// round after round.
    LowerHalf,
}

/// The fallback timer of a polling waiter (DESIGN.md §2.7): exponential backoff from a first
/// delay to a cap, jittered, and never past the holder's remaining lease when that is known,
/// so waiters retry soon after an expiry without busy polling.
///
/// The default is 5 ms doubling to 200 ms, ±20 %.
///
/// ```
/// use std::time::Duration;
/// let mut b = locksmith_core::Backoff::new();
/// assert!(b.delay(None) <= Duration::from_millis(6));
/// // Never past the holder's remaining lease (+1 ms, to wake just after it ends).
/// assert!(b.delay(Some(Duration::from_millis(2))) <= Duration::from_millis(3));
/// ```
#[derive(Debug, Clone)]
pub struct Backoff {
    next: Duration,
    first: Duration,
    max: Duration,
    jitter: Jitter,
}

impl Default for Backoff {
    fn default() -> Self {
        Self::new()
    }
}

impl Backoff {
    /// First delay of [`Backoff::new`].
    pub const FIRST: Duration = Duration::from_millis(5);
    /// Cap of [`Backoff::new`].
    pub const MAX: Duration = Duration::from_millis(200);

    /// Starts at 5 ms, caps at 200 ms, ±20 %.
    pub fn new() -> Self {
        Self::custom(Self::FIRST, Self::MAX, Jitter::Around(0.2))
    }

    /// With a larger cap, for waiters that also get pushed wake-ups.
    pub fn with_max(max: Duration) -> Self {
        Self::custom(Self::FIRST, max, Jitter::Around(0.2))
    }

    /// From `first` doubling to `max` (at least `first`), spread by `jitter`.
    pub fn custom(first: Duration, max: Duration, jitter: Jitter) -> Self {
        Self { next: first, first, max: max.max(first), jitter }
    }

    /// The next delay; with `holder_left` (the holder's remaining lease, when the backend tells
    /// it) never later than 1 ms after that lease ends.
    pub fn delay(&mut self, holder_left: Option<Duration>) -> Duration {
        let base = self.next;
        self.next = (self.next * 2).min(self.max);
        let d = match self.jitter {
            Jitter::None => base,
            Jitter::Around(f) => jittered(base, f),
            Jitter::LowerHalf => {
                let micros = u64::try_from(base.as_micros()).unwrap_or(u64::MAX);
                Duration::from_micros(rand::random_range(micros / 2..=micros))
            }
        };
        match holder_left {
            // +1 ms: wake just after the lease ended, not just before.
            Some(left) => d.min(left + Duration::from_millis(1)),
            None => d,
        }
    }

    /// Back to the first delay. Waiters deliberately do not reset on a pushed wake-up: every
    /// waiting client hears it and all but one find the lock taken again.
    pub fn reset(&mut self) {
        self.next = self.first;
    }
}

/// Margin subtracted from every lease for clock-rate differences between client and server:
/// TTL·1 % + 2 ms (DESIGN.md §2.5).
///
/// ```
/// use std::time::Duration;
/// assert_eq!(locksmith_core::driver::drift(Duration::from_secs(1)), Duration::from_millis(12));
/// ```
pub fn drift(ttl: Duration) -> Duration {
    ttl / 100 + Duration::from_millis(2)
}

/// `d` in whole milliseconds, saturating (protocol and script arguments).
///
/// ```
/// use std::time::Duration;
/// assert_eq!(locksmith_core::driver::millis(Duration::from_micros(1_500)), 1);
/// assert_eq!(locksmith_core::driver::millis(Duration::MAX), u64::MAX);
/// ```
pub fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// `d` spread uniformly by ±`frac` (e.g. 0.2 for ±20 %).
pub fn jittered(d: Duration, frac: f64) -> Duration {
    let frac = frac.clamp(0.0, 0.99);
    if frac == 0.0 {
        return d;
    }
    d.mul_f64(rand::random_range(1.0 - frac..1.0 + frac))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Delays grow to the cap, stay jittered within ±20 %, and never exceed the holder's lease.
    #[test]
    fn grows_caps_and_jitters() {
        let mut b = Backoff::new();
        let first = b.delay(None);
        assert!(first >= Duration::from_millis(4) && first <= Duration::from_millis(6));
        for _ in 0..20 {
            b.delay(None);
        }
        let d = b.delay(None);
        assert!(d >= Backoff::MAX.mul_f64(0.8) && d <= Backoff::MAX.mul_f64(1.2), "{d:?}");
        assert!(b.delay(Some(Duration::from_millis(3))) <= Duration::from_millis(4));
        b.reset();
        assert!(b.delay(None) <= Duration::from_millis(6));
    }

    #[test]
    fn lower_half_and_unjittered_backoffs_stay_in_range() {
        let mut b = Backoff::custom(Duration::from_millis(50), Duration::from_millis(200), Jitter::LowerHalf);
        let d: Vec<Duration> = (0..10).map(|_| b.delay(None)).collect();
        assert!(d[0] >= Duration::from_millis(25) && d[0] <= Duration::from_millis(50), "{d:?}");
        assert!(d.iter().all(|d| *d <= Duration::from_millis(200)));
        let mut exact = Backoff::custom(Duration::from_millis(5), Duration::from_millis(12), Jitter::None);
        let d: Vec<Duration> = (0..4).map(|_| exact.delay(None)).collect();
        assert_eq!(d, [5, 10, 12, 12].map(Duration::from_millis));
    }
}
