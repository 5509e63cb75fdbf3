//! An administrator's release of a stuck lock on the native server (`locksmith admin
//! release`): the server revokes the session of each holder, as if its lease had run out.

use locksmith_core::{LockName, Result};
use locksmith_proto::locksmith_client::LocksmithClient;
use locksmith_proto::AdminReleaseRequest;

use crate::grpc::CONNECT_TIMEOUT;
use crate::NativeBackend;

/// A hold that [`NativeBackend::admin_release`] revoked.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RevokedHold {
    /// The holder's session (revoked: every hold and wait of it ended).
    pub session: u64,
    /// The holder's owner id.
    pub owner: String,
    /// The hold's fencing token.
    pub token: u64,
}

impl NativeBackend {
    /// Releases the stuck lock `name` by revoking the session of each holder (only session
    /// `session`'s, when given), as if its lease had run out but without lock-delay: every hold
    /// and wait of that session ends, the next waiters are granted with greater tokens, and the
    /// holder's client learns at its next renewal that its session expired (`locksmith run`
    /// stops its command and exits 76). Only an admin principal may, on a server with an auth
    /// policy; the server logs each release at warn. Returns the holds revoked (none: no holder
    /// matched, nothing changed).
    ///
    /// A retry without `session` may release the next holder too: pass the session shown by
    /// `locksmith status` to release only that one.
    ///
    /// ```no_run
    /// # async fn stuck() -> locksmith_core::Result<()> {
    /// let admin = locksmith_native::NativeBackend::from_url("locksmith://locks:7531?token_file=admin.token")?;
    /// let name = locksmith_core::LockName::new("jobs/nightly")?;
    /// for h in admin.admin_release(&name, None).await? {
    ///     println!("revoked session {:x} ({}), token {}", h.session, h.owner, h.token);
    /// }
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`Error::Auth`](locksmith_core::Error::Auth) for a principal that is not an admin, [`Error::Unavailable`](locksmith_core::Error::Unavailable) when no
    /// node leads or answers.
    ///
    /// # Cancel safety
    /// Not cancel safe: the server may release the lock although the answer is dropped.
    pub async fn admin_release(&self, name: &LockName, session: Option<u64>) -> Result<Vec<RevokedHold>> {
        let inner = &self.inner;
        let req = AdminReleaseRequest { name: name.as_str().to_string(), session };
        let answer = inner
            .on_leader_checked(CONNECT_TIMEOUT * 2, |channel| {
                let request = inner.request(req.clone());
                async move { LocksmithClient::new(channel).admin_release(request).await }
            })
            .await?
            .into_inner();
        Ok(answer
            .revoked
            .into_iter()
            .map(|h| RevokedHold { session: h.session, owner: h.owner, token: h.token })
            .collect())
    }
}
