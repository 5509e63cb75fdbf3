//! Multi-lock: several names, all or nothing, taken in one canonical order (by name) so two
//! clients that want overlapping sets never deadlock. Written once in the engine from ordinary
//! acquisitions, so every backend offers it with its own guarantees per name.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use tokio::time::Instant;

use crate::{Client, Error, Guard, LockName, LockOptions, Result};

/// Proof of holding every lock of a [`Client::lock_all`], each with its own fencing token.
///
/// The holds are released with [`MultiGuard::unlock`] or on drop (in the background, best
/// effort, as for [`Guard`]). [`MultiGuard::lost`] resolves as soon as any of them may be lost.
#[must_use = "if unused the locks are released at once"]
#[derive(Debug)]
pub struct MultiGuard {
    /// In name order.
    guards: Vec<Guard>,
}

impl MultiGuard {
    /// The guards, in name order.
    pub fn guards(&self) -> &[Guard] {
        &self.guards
    }

    /// `(name, fencing token)` of each lock, in name order.
    pub fn tokens(&self) -> Vec<(&str, u64)> {
        self.guards.iter().map(|g| (g.name(), g.token())).collect()
    }

    /// The fencing token of lock `name`, if it is one of these.
    pub fn token(&self, name: &str) -> Option<u64> {
        self.guards.iter().find(|g| g.name() == name).map(Guard::token)
    }

    /// Whether every hold is still safe to act on.
    pub fn is_held(&self) -> bool {
        self.guards.iter().all(Guard::is_held)
    }

    /// The safe time left: the least of the holds'.
    pub fn remaining(&self) -> Duration {
        self.guards.iter().map(Guard::remaining).min().unwrap_or_default()
    }

    /// Resolves when any of the holds may have been lost.
    ///
    /// # Cancel safety
    /// Cancel safe: it only observes.
    pub async fn lost(&self) {
        let mut each: Vec<Pin<Box<dyn Future<Output = ()> + Send + '_>>> =
            self.guards.iter().map(|g| Box::pin(g.lost()) as Pin<Box<dyn Future<Output = ()> + Send + '_>>).collect();
        if each.is_empty() {
            return;
        }
        std::future::poll_fn(|cx| {
            if each.iter_mut().any(|f| f.as_mut().poll(cx).is_ready()) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await;
    }

    /// Releases every hold; `Ok(true)` when each was still ours until now.
    ///
    /// # Cancel safety
    /// Cancel safe: a release under way finishes (as [`Guard::unlock`]) and the holds not yet
    /// reached are released as dropped guards are.
    ///
    /// # Errors
    /// The first release that could not reach the backend (the others are still attempted).
    pub async fn unlock(self) -> Result<bool> {
        let mut all = true;
        let mut first_err = None;
        // The reverse of the acquisition order, as nested locks are left.
        for g in self.guards.into_iter().rev() {
            match g.unlock().await {
                Ok(ours) => all &= ours,
                Err(e) => {
                    all = false;
                    first_err.get_or_insert(e);
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(all),
        }
    }
}

impl Client {
    /// Acquires every lock of `names` or none, waiting for each in name order (duplicates count
    /// once). `opts` applies to each (mode, owner, lock-delay); its timeout bounds the whole
    /// acquisition.
    ///
    /// ```
    /// # async fn demo(client: locksmith_core::Client) -> locksmith_core::Result<()> {
    /// use std::time::Duration;
    /// use locksmith_core::LockOptions;
    /// let both = client.lock_all(&["account/17", "account/4"], LockOptions::new().timeout(Duration::from_secs(5))).await?;
    /// println!("tokens {:?}", both.tokens()); // [("account/17", …), ("account/4", …)]
    /// both.unlock().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future releases what it took and leaves no waiter behind.
    ///
    /// # Errors
    /// An invalid or empty list, [`Error::Timeout`] when the timeout passes first (everything
    /// taken so far is released), or what a single acquisition can fail with.
    pub async fn lock_all(&self, names: &[&str], opts: LockOptions) -> Result<MultiGuard> {
        let mut sorted = names.iter().map(|n| LockName::new(*n)).collect::<Result<Vec<_>>>()?;
        sorted.sort();
        sorted.dedup();
        if sorted.is_empty() {
            return Err(Error::InvalidArgument("lock_all needs at least one lock name".into()));
        }
        opts.validate()?;
        let deadline = opts.timeout.map(|t| Instant::now() + t);
        let mut guards = Vec::with_capacity(sorted.len());
        for name in sorted {
            let attempt = self.acquire(name, opts.clone(), true);
            let got = match deadline {
                Some(d) => tokio::time::timeout_at(d, attempt).await.unwrap_or(Err(Error::Timeout)),
                None => attempt.await,
            };
            match got {
                Ok(Some(g)) => guards.push(g),
                failed => {
                    for g in guards.into_iter().rev() {
                        let _ = g.unlock().await;
                    }
                    return match failed {
                        Err(e) => Err(e),
                        _ => Err(Error::Internal("the driver answered busy to a waiting acquisition".into())),
                    };
                }
            }
        }
        Ok(MultiGuard { guards })
    }
}
