//! A cluster's heartbeat and election timeout, checked against the bounds that keep a cluster
//! stable (`locksmith serve --heartbeat --election-timeout`).

use std::time::Duration;

/// The shortest heartbeat accepted. openraft 0.9 gives each AppendEntries the heartbeat interval
/// as its deadline, and a busy machine delays a task by tens of milliseconds: below this,
/// batches of entries time out and are split even on loopback.
pub const MIN_HEARTBEAT: Duration = Duration::from_millis(20);

/// The election timeout's minimum is at least this many heartbeats: a leader delayed for a
/// heartbeat or two (CPU starvation, a slow disk) is not deposed.
pub const ELECTION_HEARTBEATS: u32 = 3;

/// The longest election timeout accepted: sessions are extended by about twice it after a
/// fail-over ([`RaftNode::failover_time`](crate::RaftNode::failover_time)), and a cluster that
/// waits longer for a dead leader is not one anybody wants.
pub const MAX_ELECTION_TIMEOUT: Duration = Duration::from_secs(60);

/// How often a leader sends heartbeats and how long a follower waits without one before it
/// stands for election: the trade between a fast fail-over and spurious elections. Every node of
/// a cluster should use the same timings (a node with a shorter election timeout would stand
/// for election first each time; one with a longer heartbeat could let followers' timeouts run
/// out).
///
/// What each trades:
/// - `heartbeat`: also the deadline of each AppendEntries (openraft 0.9). Shorter detects a dead
///   leader sooner (a follower checks its timer every 1.5 heartbeats) but times out batches on
///   a loaded machine; at least [`MIN_HEARTBEAT`].
/// - `election_timeout_min .. election_timeout_max`: a follower that heard no leader for
///   `election_timeout_max` (openraft's leader lease) plus a random time in this range stands
///   for election, so a crashed leader is replaced after about 1.5–2 × `election_timeout_max`.
///   Shorter fails over sooner; a leader stalled for longer (a starved CPU, a long pause) is
///   deposed needlessly. The minimum is at least [`ELECTION_HEARTBEATS`] heartbeats and the
///   spread (`max − min`) at least one heartbeat, so that two followers rarely stand at once.
///   Sessions are extended by `2 × election_timeout_max + heartbeat` after a fail-over.
///
/// ```
/// use std::time::Duration;
/// use locksmith_raft::Timings;
/// let ms = Duration::from_millis;
/// let t = Timings::new(ms(50), ms(200), ms(400))?;
/// assert_eq!(t.heartbeat, ms(50));
/// let e = Timings::new(ms(50), ms(100), ms(400)).unwrap_err();
/// assert_eq!(e.option(), "election-timeout");
/// # Ok::<(), locksmith_raft::TimingError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Timings {
    /// How often the leader sends heartbeats, and the deadline of each AppendEntries.
    pub heartbeat: Duration,
    /// The shortest random election timeout.
    pub election_timeout_min: Duration,
    /// The longest random election timeout; also openraft's leader lease.
    pub election_timeout_max: Duration,
}

/// Timings outside the bounds of [`Timings`]. [`option`](Self::option) names the setting at
/// fault as `locksmith serve` spells it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TimingError {
    /// The heartbeat is below [`MIN_HEARTBEAT`].
    #[error("{heartbeat:?} is below the shortest heartbeat, {MIN_HEARTBEAT:?} (each AppendEntries must complete within one heartbeat)")]
    HeartbeatTooShort {
        /// The heartbeat given.
        heartbeat: Duration,
    },
    /// The election timeout's maximum is not above its minimum.
    #[error("the maximum {max:?} must be above the minimum {min:?} (write MIN..MAX)")]
    Range {
        /// The minimum given.
        min: Duration,
        /// The maximum given.
        max: Duration,
    },
    /// The election timeout's minimum is below [`ELECTION_HEARTBEATS`] heartbeats.
    #[error("the minimum {min:?} must be at least {ELECTION_HEARTBEATS} heartbeats ({heartbeat:?} each), or a leader delayed for a heartbeat or two is deposed")]
    BelowHeartbeats {
        /// The minimum given.
        min: Duration,
        /// The heartbeat.
        heartbeat: Duration,
    },
    /// The election timeout's spread is below one heartbeat.
    #[error("MAX − MIN ({min:?}..{max:?}) must be at least one heartbeat ({heartbeat:?}), or two followers often stand for election at once")]
    SpreadTooNarrow {
        /// The minimum given.
        min: Duration,
        /// The maximum given.
        max: Duration,
        /// The heartbeat.
        heartbeat: Duration,
    },
    /// The election timeout's maximum is above [`MAX_ELECTION_TIMEOUT`].
    #[error("the maximum {max:?} is above {MAX_ELECTION_TIMEOUT:?}")]
    TooLong {
        /// The maximum given.
        max: Duration,
    },
}

impl TimingError {
    /// The option at fault, as `locksmith serve` names it: `heartbeat` or `election-timeout`.
    pub fn option(&self) -> &'static str {
        match self {
            Self::HeartbeatTooShort { .. } => "heartbeat",
            _ => "election-timeout",
        }
    }
}

impl Default for Timings {
    /// Heartbeat 50 ms, election timeout 200–400 ms: a crashed leader is replaced within about
    /// 0.6–0.8 s of its last heartbeat (docs/benchmarks.md, "Fail-over (issue 27)"), while a
    /// leader has to be unheard of for at least 0.6 s (a dozen heartbeats) to be deposed.
    fn default() -> Self {
        Self {
            heartbeat: Duration::from_millis(50),
            election_timeout_min: Duration::from_millis(200),
            election_timeout_max: Duration::from_millis(400),
        }
    }
}

impl Timings {
    /// These timings, checked.
    ///
    /// # Errors
    /// The first bound of [`Timings`] they break.
    pub fn new(
        heartbeat: Duration,
        election_timeout_min: Duration,
        election_timeout_max: Duration,
    ) -> Result<Self, TimingError> {
        let t = Self { heartbeat, election_timeout_min, election_timeout_max };
        t.check()?;
        Ok(t)
    }

    /// The default timings with a heartbeat and/or an election timeout given; the rest as
    /// [`Timings::default`], checked together.
    ///
    /// # Errors
    /// The first bound of [`Timings`] they break.
    pub fn with(
        heartbeat: Option<Duration>,
        election_timeout: Option<(Duration, Duration)>,
    ) -> Result<Self, TimingError> {
        let d = Self::default();
        let (min, max) = election_timeout.unwrap_or((d.election_timeout_min, d.election_timeout_max));
        Self::new(heartbeat.unwrap_or(d.heartbeat), min, max)
    }

    /// Checks the bounds (see [`Timings`]).
    pub(crate) fn check(&self) -> Result<(), TimingError> {
        let (heartbeat, min, max) = (self.heartbeat, self.election_timeout_min, self.election_timeout_max);
        if heartbeat < MIN_HEARTBEAT {
            return Err(TimingError::HeartbeatTooShort { heartbeat });
        }
        if max <= min {
            return Err(TimingError::Range { min, max });
        }
        if max > MAX_ELECTION_TIMEOUT {
            return Err(TimingError::TooLong { max });
        }
        if min < heartbeat * ELECTION_HEARTBEATS {
            return Err(TimingError::BelowHeartbeats { min, heartbeat });
        }
        if max - min < heartbeat {
            return Err(TimingError::SpreadTooNarrow { min, max, heartbeat });
        }
        Ok(())
    }

    /// How long a cluster is typically without a serving leader after its leader fails, as
    /// [`RaftNode::failover_time`](crate::RaftNode::failover_time) explains:
    /// `2 × election_timeout_max + heartbeat`.
    pub fn failover_time(&self) -> Duration {
        2 * self.election_timeout_max + self.heartbeat
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// The defaults pass their own bounds.
    #[test]
    fn the_default_timings_are_within_the_bounds() {
        let d = Timings::default();
        assert_eq!(Timings::new(d.heartbeat, d.election_timeout_min, d.election_timeout_max), Ok(d));
        assert_eq!(Timings::with(None, None), Ok(d));
    }

    /// Each bound refuses what breaks it, naming the option at fault.
    #[test]
    fn timings_outside_the_bounds_are_refused_naming_the_option() {
        let cases = [
            (Timings::with(Some(ms(10)), None), "heartbeat"),
            (Timings::new(ms(50), ms(400), ms(400)), "election-timeout"),
            (Timings::new(ms(50), ms(100), ms(400)), "election-timeout"),
            (Timings::new(ms(50), ms(200), ms(220)), "election-timeout"),
            (Timings::new(ms(50), ms(200), Duration::from_secs(61)), "election-timeout"),
        ];
        for (r, option) in cases {
            assert_eq!(r.map_err(|e| e.option()), Err(option));
        }
        assert!(matches!(Timings::with(Some(ms(100)), None), Err(TimingError::BelowHeartbeats { .. })));
        assert_eq!(Timings::new(ms(20), ms(60), ms(80)).map(|t| t.failover_time()), Ok(ms(180)));
    }
}
