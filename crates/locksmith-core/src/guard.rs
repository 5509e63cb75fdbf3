//! The guard: what a successful acquisition returns.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::client::{Client, Slot};
use crate::keeper::SessionCtx;
use crate::{LockName, Result};

/// Proof of holding a lock, with its fencing token.
///
/// The hold is kept alive by the client's session until [`Guard::unlock`] or drop. Dropping the
/// guard releases in the background (best effort; the lease is the backstop). Check
/// [`Guard::is_held`] or await [`Guard::lost`] before acting on the protected resource, and pass
/// [`Guard::token`] to it so it can reject a stale holder.
///
/// ```
/// # async fn demo(client: locksmith_core::Client) -> locksmith_core::Result<()> {
/// let guard = client.lock("stock-counter").await?;
/// tokio::select! {
///     _ = guard.lost() => eprintln!("lock lost, stopping"),
///     _ = do_work(guard.token()) => {}
/// }
/// guard.unlock().await?;
/// # Ok(()) }
/// # async fn do_work(_token: u64) {}
/// ```
#[must_use = "if unused the lock is released at once"]
#[clippy::has_significant_drop]
pub struct Guard {
    client: Client,
    name: LockName,
    owner: String,
    token: u64,
    lost: Arc<watch::Sender<bool>>,
    ctx: Arc<SessionCtx>,
    slot: Option<Arc<Slot>>,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard")
            .field("name", &self.name)
            .field("owner", &self.owner)
            .field("token", &self.token)
            .field("held", &self.is_held())
            .finish()
    }
}

impl Guard {
    pub(crate) fn new(
        client: Client,
        name: LockName,
        owner: String,
        token: u64,
        lost: Arc<watch::Sender<bool>>,
        ctx: Arc<SessionCtx>,
        slot: Arc<Slot>,
    ) -> Self {
        Self { client, name, owner, token, lost, ctx, slot: Some(slot) }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        self.name.as_str()
    }

    /// The fencing token: strictly greater than every token issued before for this lock on this
    /// backend. Reentrant guards of one owner share one token. On a backend without fencing
    /// tokens (only reachable with [`LockOptions::allow_unfenced`](crate::LockOptions::allow_unfenced))
    /// this is 0; generic code should use [`Guard::fencing_token`].
    pub fn token(&self) -> u64 {
        self.token
    }

    /// The fencing token, or `None` on a backend that cannot give a safe one (Redlock).
    pub fn fencing_token(&self) -> Option<u64> {
        self.client.backend().provides_fencing().then_some(self.token)
    }

    /// The owner id this hold was taken as.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// The id of the session (lease) that keeps this hold alive.
    pub fn session_id(&self) -> String {
        self.ctx.session.id()
    }

    /// True while the hold is certainly ours: not released, not reported gone, and the local
    /// deadline (last renewal sent + TTL − drift) not passed.
    pub fn is_held(&self) -> bool {
        self.ctx.is_alive() && !*self.lost.borrow()
    }

    /// Time the hold is certainly still ours if no further renewal succeeds.
    pub fn remaining(&self) -> Duration {
        if *self.lost.borrow() {
            return Duration::ZERO;
        }
        self.ctx.remaining()
    }

    /// The wall-clock instant until which the hold is certainly ours unless a renewal extends it
    /// (for logs and for comparing with other processes). Still answers after the hold was lost:
    /// then it tells when it stopped being safe.
    pub fn valid_until(&self) -> std::time::SystemTime {
        let deadline = self.ctx.deadline();
        let now = tokio::time::Instant::now();
        let wall = std::time::SystemTime::now();
        if deadline >= now {
            wall + (deadline - now)
        } else {
            wall - (now - deadline)
        }
    }

    /// Resolves when the hold may have been lost: the local deadline passed, the session
    /// expired, or the backend reported the hold gone. This happens before the backend can give
    /// the lock to anyone else.
    ///
    /// # Cancel safety
    /// Cancel safe: it only observes.
    pub async fn lost(&self) {
        let mut rx = self.lost.subscribe();
        tokio::select! {
            _ = self.ctx.dead() => {}
            _ = rx.wait_for(|lost| *lost) => {}
        }
    }

    /// Releases the hold and tells whether it was still ours until now (`false` when it had
    /// been lost; nothing of anyone else's is touched either way). A reentrant guard only drops
    /// one count; the lock is freed with the last one.
    ///
    /// # Cancel safety
    /// Cancel safe: the release is started at the first poll and runs to its end on the runtime
    /// even if this future is dropped (only its answer is lost). A release cut short after the
    /// hold was forgotten here would leave it on a session-based backend (native, etcd,
    /// ZooKeeper) for as long as the session lives.
    ///
    /// # Errors
    /// The backend could not be reached; the lease frees the lock after the TTL.
    pub async fn unlock(mut self) -> Result<bool> {
        let Some(slot) = self.slot.take() else { return Ok(false) };
        let (client, name, token) = (self.client.clone(), self.name.clone(), self.token);
        let owner = std::mem::take(&mut self.owner);
        let release = async move { client.release(&name, &owner, token, slot).await };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => runtime
                .spawn(release)
                .await
                .unwrap_or_else(|e| Err(crate::Error::Internal(format!("the release task failed: {e}")))),
            // Not on a tokio runtime: nowhere to finish it, so it is done here.
            Err(_) => release.await,
        }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let Some(slot) = self.slot.take() else { return };
        let client = self.client.clone();
        let name = self.name.clone();
        let owner = std::mem::take(&mut self.owner);
        let token = self.token;
        crate::driver::spawn_detached("release of a dropped guard", async move {
            if let Err(e) = client.release(&name, &owner, token, slot).await {
                tracing::debug!(lock = %name, error = %e, "release on drop failed; the lease will free it");
            }
        });
    }
}
