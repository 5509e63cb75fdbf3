//! Latency histograms, per-worker tallies and medians.

use std::time::Duration;

use hdrhistogram::Histogram;

/// Largest latency the histograms tell apart (one hour, in µs); longer ones count as this.
const MAX_MICROS: u64 = 3_600_000_000;

/// Why a workload stopped early.
#[derive(Debug)]
pub(crate) enum Failure {
    /// A backend call failed.
    Backend(locksmith::Error),
    /// The bench itself failed (a histogram, a worker task, a time limit).
    Internal(String),
}

impl From<locksmith::Error> for Failure {
    fn from(e: locksmith::Error) -> Self {
        Self::Backend(e)
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Backend(e) => write!(f, "{e}"),
            Self::Internal(m) => f.write_str(m),
        }
    }
}

/// What one worker did: its acquisitions and their latencies.
#[derive(Debug)]
pub(crate) struct Tally {
    pub(crate) acquisitions: u64,
    /// Wait for each acquisition, µs.
    pub(crate) wait: Histogram<u64>,
    /// Each whole lock→unlock cycle, µs.
    pub(crate) cycle: Histogram<u64>,
}

impl Tally {
    pub(crate) fn new() -> Result<Self, Failure> {
        Ok(Self { acquisitions: 0, wait: histogram()?, cycle: histogram()? })
    }
}

/// What all workers of one workload did together.
#[derive(Debug)]
pub(crate) struct Run {
    /// Acquisitions of each worker.
    pub(crate) acquisitions: Vec<u64>,
    pub(crate) wait: Histogram<u64>,
    pub(crate) cycle: Histogram<u64>,
    /// From the common start until the last worker stopped.
    pub(crate) elapsed: Duration,
}

impl Run {
    pub(crate) fn new() -> Result<Self, Failure> {
        Ok(Self { acquisitions: Vec::new(), wait: histogram()?, cycle: histogram()?, elapsed: Duration::ZERO })
    }

    pub(crate) fn add(&mut self, tally: Tally) -> Result<(), Failure> {
        let merge_failed = |e: hdrhistogram::AdditionError| Failure::Internal(format!("merging histograms: {e}"));
        self.wait.add(&tally.wait).map_err(merge_failed)?;
        self.cycle.add(&tally.cycle).map_err(merge_failed)?;
        self.acquisitions.push(tally.acquisitions);
        Ok(())
    }

    /// Acquisitions per second over all workers.
    pub(crate) fn rate(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 {
            self.acquisitions.iter().sum::<u64>() as f64 / secs
        } else {
            0.0
        }
    }

    /// Fewest ÷ most acquisitions of one worker.
    pub(crate) fn fairness(&self) -> f64 {
        let min = self.acquisitions.iter().copied().min().unwrap_or(0);
        let max = self.acquisitions.iter().copied().max().unwrap_or(0);
        if max > 0 {
            min as f64 / max as f64
        } else {
            0.0
        }
    }
}

pub(crate) fn histogram() -> Result<Histogram<u64>, Failure> {
    Histogram::new_with_bounds(1, MAX_MICROS, 3).map_err(|e| Failure::Internal(format!("creating a histogram: {e}")))
}

pub(crate) fn record(histogram: &mut Histogram<u64>, d: Duration) {
    histogram.saturating_record(u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
}

/// `(latency µs, fraction of samples at or below it)` at every recorded value, for a CDF.
pub(crate) fn cdf(histogram: &Histogram<u64>) -> Vec<(f64, f64)> {
    histogram
        .iter_recorded()
        .map(|v| (histogram.highest_equivalent(v.value_iterated_to()) as f64, v.quantile_iterated_to()))
        .collect()
}

/// Median of the values; `None` when there are none.
pub(crate) fn median(values: impl Iterator<Item = f64>) -> Option<f64> {
    let mut v: Vec<f64> = values.collect();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match (v.get(n / 2), n % 2) {
        (Some(&mid), 1) => Some(mid),
        (Some(&high), _) => Some(v.get(n / 2 - 1).map_or(high, |&low| (low + high) / 2.0)),
        (None, _) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The median of an odd count is the middle value, of an even count the mean of the two
    /// middle ones, of nothing `None`.
    #[test]
    fn median_of_odd_even_and_no_values() {
        assert_eq!(median([3.0, 1.0, 2.0].into_iter()), Some(2.0));
        assert_eq!(median([4.0, 1.0, 3.0, 2.0].into_iter()), Some(2.5));
        assert_eq!(median(std::iter::empty()), None);
    }

    /// Fairness is fewest ÷ most acquisitions of one worker; rate counts every worker.
    #[test]
    fn fairness_and_rate_over_workers() {
        let mut run = Run::new().unwrap();
        run.acquisitions = vec![50, 100, 80];
        run.elapsed = Duration::from_secs(2);
        assert_eq!(run.fairness(), 0.5);
        assert_eq!(run.rate(), 115.0);
    }
}
