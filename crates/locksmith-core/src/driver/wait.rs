//! The wait loop of every polling or pushed-wake-up driver, written once: a driver says how to
//! try once and what wakes it ([`Attempt`]); [`WaitLoop`] does the rest — retrying a short
//! connection blip, the fallback timer (a jittered backoff capped by the holder's remaining
//! lease), racing that timer against the driver's wake-up source, and counting wake-ups.

use std::future::Future;
use std::time::Duration;

use crate::backend::Acquired;
use crate::driver::timing::Backoff;
#[cfg(test)]
use crate::error::Error;
use crate::error::Result;

/// Consecutive transient failures ([`Error::is_transient`](crate::Error::is_transient)) a waiting acquisition rides out
/// before it reports the last one.
pub const MAX_WAIT_FAILURES: u32 = 3;

/// What one attempt found.
#[derive(Debug, Clone, PartialEq)]
pub enum Try {
    /// The lock is ours, with this fencing token (0 on a backend without tokens). The attempt
    /// has registered the hold with its session before returning this.
    Granted(u64),
    /// Somebody else holds it: how to wait before the next attempt.
    Busy(Busy),
}

/// How a busy attempt wants to wait. The default: the fallback timer of the loop's backoff,
/// raced against [`Attempt::woken`].
///
/// ```
/// use std::time::Duration;
/// use locksmith_core::driver::Busy;
/// // The holder's lease ends in 30 ms: retry by then at the latest.
/// let b = Busy::left(Some(Duration::from_millis(30)));
/// assert_eq!(b.holder_left, Some(Duration::from_millis(30)));
/// // Just subscribed to a wake-up source: check again at once, so no release is missed.
/// assert!(Busy::again_now().again_now);
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct Busy {
    /// The holder's remaining lease, when the backend tells it: the fallback timer never runs
    /// past it.
    pub holder_left: Option<Duration>,
    /// Wait at most this long, whatever the backoff says (an announcement to refresh).
    pub at_most: Option<Duration>,
    /// Try again at once, without waiting and without counting a wake-up: the attempt has just
    /// subscribed to a wake-up source, and must look again so that no release between its
    /// attempt and its subscription is missed.
    pub again_now: bool,
    /// Not the next in line: wait this long (or for a wake-up) and then only refresh the
    /// waiter's place; the timer's end is not a wake-up and does not advance the backoff.
    pub refresh_after: Option<Duration>,
}

impl Busy {
    /// Busy; the holder's lease ends in `left` when known.
    pub fn left(left: Option<Duration>) -> Self {
        Self { holder_left: left, ..Self::default() }
    }

    /// Busy; look again at once (see [`Busy::again_now`](Busy#structfield.again_now)).
    pub fn again_now() -> Self {
        Self { again_now: true, ..Self::default() }
    }

    /// Busy behind other waiters: refresh the waiter's place after `after` unless woken.
    pub fn refresh_after(after: Duration) -> Self {
        Self { refresh_after: Some(after), ..Self::default() }
    }

    /// Caps the wait at `d`.
    #[must_use]
    pub fn at_most(mut self, d: Duration) -> Self {
        self.at_most = Some(d);
        self
    }
}

/// One acquisition as a driver writes it: try once, and what wakes me.
///
/// Each attempt keeps the cleanup of whatever it may leave on the backend in a
/// [`CancelGuard`](crate::driver::CancelGuard) of its own (or of the acquisition), so that a
/// dropped [`WaitLoop::run`] future leaves no waiter and no hold.
pub trait Attempt: Send {
    /// One try. An error ends the acquisition, except a transient one while waiting (see
    /// [`WaitLoop`]).
    fn try_once(&mut self) -> impl Future<Output = Result<Try>> + Send;

    /// Resolves when the backend pushes a wake-up (a pub/sub message, a NOTIFY, a watch
    /// event). Must be cancel safe: a wake-up that arrives while nobody listens is kept for the
    /// next call. The default never resolves (a polling driver).
    fn woken(&mut self) -> impl Future<Output = ()> + Send {
        std::future::pending()
    }

    /// After every wait, before the next attempt (e.g. re-subscribe a wake-up source lost with
    /// its connection). The default does nothing.
    fn after_wait(&mut self) -> impl Future<Output = ()> + Send {
        std::future::ready(())
    }

    /// After a transient failure, before the next attempt: e.g. give back a grant whose answer
    /// was lost, so that the retry does not find its own hold. The default does nothing (an
    /// attempt whose guard fires on error needs nothing more).
    fn recover(&mut self) -> impl Future<Output = ()> + Send {
        std::future::ready(())
    }
}

/// The wait loop: attempts until granted, refused, or (for a no-wait acquisition) busy.
///
/// - A transient error ([`Error::is_transient`](crate::Error::is_transient)) while waiting is ridden out up to
///   [`MAX_WAIT_FAILURES`] times in a row (a dropped connection is re-opened on the next
///   attempt), after [`Attempt::recover`] and one backoff delay; a no-wait acquisition and a
///   lasting outage report it.
/// - A busy attempt waits for [`Attempt::woken`] or the fallback timer: the backoff's next
///   delay, never past the holder's remaining lease. A pushed wake-up does not restart the
///   backoff: every waiting client hears it, and all but one find the lock taken again.
/// - Every look after a wait is counted as a wake-up ([`crate::metrics::wakeup`]) under the
///   loop's label, except the end of a refresh timer ([`Busy::refresh_after`]).
///
/// ```
/// use locksmith_core::driver::{Attempt, Busy, Try, WaitLoop};
/// use locksmith_core::{Acquired, Result};
///
/// /// Busy twice, then granted.
/// struct Third(u32);
/// impl Attempt for Third {
///     async fn try_once(&mut self) -> Result<Try> {
///         self.0 += 1;
///         Ok(if self.0 < 3 { Try::Busy(Busy::default()) } else { Try::Granted(7) })
///     }
/// }
///
/// # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
/// assert_eq!(WaitLoop::new("demo", true).run(&mut Third(0)).await?, Acquired::Granted { token: 7 });
/// assert_eq!(WaitLoop::new("demo", false).run(&mut Third(0)).await?, Acquired::Busy);
/// # Ok::<(), locksmith_core::Error>(())
/// # }).unwrap();
/// ```
#[derive(Debug)]
pub struct WaitLoop {
    label: &'static str,
    wait: bool,
    backoff: Backoff,
}

impl WaitLoop {
    /// A loop for a waiting (`wait`) or no-wait acquisition, on the default [`Backoff`];
    /// `label` names the backend in the wake-up metric.
    pub fn new(label: &'static str, wait: bool) -> Self {
        Self { label, wait, backoff: Backoff::new() }
    }

    /// With another fallback timer.
    #[must_use]
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// Runs `attempt` until it is granted ([`Acquired::Granted`]), refused (its error), or busy
    /// without waiting ([`Acquired::Busy`]).
    ///
    /// # Cancel safety
    /// The loop itself keeps nothing on the backend: dropping this future is as safe as
    /// dropping the attempt in the middle of [`Attempt::try_once`], [`Attempt::woken`] or
    /// [`Attempt::recover`] (each driver's cancel guards make that leave no waiter and no hold).
    ///
    /// # Errors
    /// The attempt's error (a transient one while waiting only after [`MAX_WAIT_FAILURES`]).
    pub async fn run<A: Attempt>(mut self, attempt: &mut A) -> Result<Acquired> {
        let mut failures = 0;
        loop {
            let busy = match attempt.try_once().await {
                Ok(Try::Granted(token)) => return Ok(Acquired::Granted { token }),
                Ok(Try::Busy(busy)) => busy,
                Err(e) if self.wait && e.is_transient() && failures < MAX_WAIT_FAILURES => {
                    failures += 1;
                    tracing::debug!(backend = self.label, error = %e, failures, "attempt failed; still waiting");
                    tokio::time::sleep(self.backoff.delay(None)).await;
                    attempt.recover().await;
                    continue;
                }
                Err(e) => return Err(e),
            };
            failures = 0;
            if !self.wait {
                return Ok(Acquired::Busy);
            }
            if busy.again_now {
                continue;
            }
            if self.wait_out(attempt, &busy).await {
                crate::metrics::wakeup(self.label);
            }
            attempt.after_wait().await;
        }
    }

    /// Waits as `busy` asks; says whether the wait ended in a wake-up (pushed, or the fallback
    /// timer of a waiter that is next in line).
    async fn wait_out<A: Attempt>(&mut self, attempt: &mut A, busy: &Busy) -> bool {
        let (timer, timer_wakes) = match busy.refresh_after {
            Some(refresh) => (refresh, false),
            None => (self.backoff.delay(busy.holder_left), true),
        };
        let timer = busy.at_most.map_or(timer, |cap| timer.min(cap));
        tokio::select! {
            () = attempt.woken() => true,
            () = tokio::time::sleep(timer) => timer_wakes,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    use super::*;

    /// Replays a script of answers; counts recoveries and waits.
    struct Script {
        answers: Vec<Result<Try>>,
        recovered: u32,
        waits: Arc<AtomicU32>,
        wake: Option<tokio::sync::mpsc::UnboundedReceiver<()>>,
    }

    impl Script {
        fn new(answers: Vec<Result<Try>>) -> Self {
            Self { answers, recovered: 0, waits: Arc::default(), wake: None }
        }
    }

    impl Attempt for Script {
        async fn try_once(&mut self) -> Result<Try> {
            if self.answers.is_empty() {
                return Err(Error::Internal("script ran out".into()));
            }
            self.answers.remove(0)
        }

        async fn woken(&mut self) {
            let woke = match &mut self.wake {
                Some(rx) => rx.recv().await.is_some(),
                None => false,
            };
            if !woke {
                std::future::pending::<()>().await;
            }
        }

        async fn after_wait(&mut self) {
            self.waits.fetch_add(1, Ordering::SeqCst);
        }

        async fn recover(&mut self) {
            self.recovered += 1;
        }
    }

    fn down() -> Result<Try> {
        Err(Error::Unavailable { backend: "test://".into(), message: "blip".into() })
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_rides_out_three_blips_but_not_four() {
        let mut s = Script::new(vec![down(), down(), down(), Ok(Try::Granted(5))]);
        assert_eq!(WaitLoop::new("test", true).run(&mut s).await.ok(), Some(Acquired::Granted { token: 5 }));
        assert_eq!(s.recovered, 3);
        let mut s = Script::new(vec![down(), down(), down(), down()]);
        assert!(matches!(WaitLoop::new("test", true).run(&mut s).await, Err(Error::Unavailable { .. })));
        // A busy answer in between starts the count again.
        let busy = || Ok(Try::Busy(Busy::default()));
        let mut s = Script::new(vec![down(), down(), down(), busy(), down(), down(), down(), Ok(Try::Granted(1))]);
        assert!(WaitLoop::new("test", true).run(&mut s).await.is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn a_no_wait_acquisition_reports_busy_and_blips_at_once() {
        let mut s = Script::new(vec![Ok(Try::Busy(Busy::default()))]);
        assert_eq!(WaitLoop::new("test", false).run(&mut s).await.ok(), Some(Acquired::Busy));
        let mut s = Script::new(vec![down()]);
        assert!(WaitLoop::new("test", false).run(&mut s).await.is_err());
        assert_eq!(s.recovered, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn the_fallback_timer_never_runs_past_the_holders_lease() {
        let long = Backoff::custom(Duration::from_secs(10), Duration::from_secs(10), crate::driver::Jitter::None);
        let left = Busy::left(Some(Duration::from_millis(40)));
        let mut s = Script::new(vec![Ok(Try::Busy(left)), Ok(Try::Granted(1))]);
        let started = tokio::time::Instant::now();
        WaitLoop::new("test", true).backoff(long).run(&mut s).await.ok();
        assert_eq!(started.elapsed(), Duration::from_millis(41));
    }

    #[tokio::test(start_paused = true)]
    async fn a_pushed_wake_up_ends_the_wait_and_again_now_does_not_wait() {
        let long = Backoff::custom(Duration::from_secs(10), Duration::from_secs(10), crate::driver::Jitter::None);
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let mut s =
            Script::new(vec![Ok(Try::Busy(Busy::again_now())), Ok(Try::Busy(Busy::default())), Ok(Try::Granted(1))]);
        s.wake = Some(rx);
        let waits = s.waits.clone();
        let _ = tx.send(());
        let started = tokio::time::Instant::now();
        assert!(WaitLoop::new("test", true).backoff(long).run(&mut s).await.is_ok());
        assert_eq!(started.elapsed(), Duration::ZERO, "waited for the timer despite a wake-up");
        assert_eq!(waits.load(Ordering::SeqCst), 1, "again_now must not count as a wait");
    }

    #[tokio::test(start_paused = true)]
    async fn a_refresh_timer_does_not_advance_the_backoff_and_a_cap_shortens_the_wait() {
        let mut s = Script::new(vec![
            Ok(Try::Busy(Busy::refresh_after(Duration::from_secs(1)))),
            Ok(Try::Busy(Busy::default())),
            Ok(Try::Busy(Busy::default().at_most(Duration::from_millis(3)))),
            Ok(Try::Granted(1)),
        ]);
        let started = tokio::time::Instant::now();
        let exact = Backoff::custom(Duration::from_millis(5), Duration::from_millis(50), crate::driver::Jitter::None);
        assert!(WaitLoop::new("test", true).backoff(exact).run(&mut s).await.is_ok());
        // 1 s of refresh, then the backoff's first delay (5 ms, not the second's 10), then its
        // second capped at 3 ms.
        assert_eq!(started.elapsed(), Duration::from_millis(1_008));
    }
}
