//! Status: `StatusRequest` → the lock it names; [`LockView`] → `LockInfo`.

use locksmith_proto::{LockInfo, StatusRequest};

use super::impl_client_message::lock_name;
use super::impl_server_message::ms;
use super::Invalid;
use crate::machine::{LockName, LockView};

/// The lock a status request asks about; `None` (an empty name) for all of them.
pub(crate) fn status_name(r: StatusRequest) -> Result<Option<LockName>, Invalid> {
    if r.name.is_empty() {
        return Ok(None);
    }
    lock_name(r.name).map(Some)
}

impl From<LockView> for LockInfo {
    fn from(v: LockView) -> Self {
        let (held, holder_session, holder_owner, token, ttl_left_ms) = match v.holder {
            Some((s, o, t, left)) => (true, s, o, t, ms(left)),
            None => (false, 0, String::new(), 0, 0),
        };
        LockInfo {
            name: v.name,
            held,
            holder_session,
            holder_owner,
            token,
            ttl_left_ms,
            waiters: v.waiters,
            last_token: v.last_token,
            lock_delay_left_ms: v.delay_left.map(ms).unwrap_or(0),
        }
    }
}
