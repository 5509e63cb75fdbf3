//! Wire and server views → contract types.

use std::time::Duration;

use locksmith_core::{Error, HoldMode, HolderStatus, LockStatus, Result};
use locksmith_proto::{server_message, LockInfo, ServerMessage};

/// The kind of a holder in a server's status: lenient where the server would refuse the pair
/// (both set reads as shared, any number as permits), so a status from an odd or newer server
/// is still shown rather than failed.
fn mode(shared: bool, permits: u32) -> HoldMode {
    HoldMode::from_wire(shared, permits).unwrap_or(if shared { HoldMode::Shared } else { HoldMode::Permit(permits) })
}

/// The kinds of hold the server's own queue serves (exclusive, read locks, semaphores), for
/// both native backends' `supports`.
pub(crate) fn served(mode: HoldMode) -> bool {
    matches!(mode, HoldMode::Exclusive | HoldMode::Shared | HoldMode::Permit(_))
}

/// One message of an observe stream: the lock's status after a change; anything else is a
/// protocol error (what the caller does next is its own: stop or read on).
pub(crate) fn observed(m: ServerMessage) -> Result<LockStatus> {
    match m.body {
        Some(server_message::Body::Lock(info)) => Ok(from_wire(info)),
        other => Err(Error::Protocol(format!("unexpected message on an observe stream: {other:?}"))),
    }
}

pub(crate) fn from_wire(l: LockInfo) -> LockStatus {
    let delay = (l.lock_delay_left_ms > 0).then(|| Duration::from_millis(l.lock_delay_left_ms));
    let holders: Vec<HolderStatus> = if l.holders.is_empty() {
        // A server from before read locks and semaphores names only its one holder.
        l.held
            .then(|| {
                HolderStatus::new(
                    format!("{:x}", l.holder_session),
                    l.holder_owner,
                    l.token,
                    Duration::from_millis(l.ttl_left_ms),
                )
            })
            .into_iter()
            .collect()
    } else {
        l.holders
            .into_iter()
            .map(|h| {
                HolderStatus::new(format!("{:x}", h.session), h.owner, h.token, Duration::from_millis(h.ttl_left_ms))
                    .with_mode(mode(h.shared, h.permits), (!h.value.is_empty()).then_some(h.value))
            })
            .collect()
    };
    LockStatus::new(l.name, None, l.waiters, l.last_token)
        .with_holders(holders)
        .with_permits((l.permits > 0).then_some(l.permits))
        .with_lock_delay_left(delay)
}

#[cfg(feature = "memory")]
pub(crate) fn from_view(v: locksmith_server::machine::LockView) -> LockStatus {
    let holders = v
        .holders
        .into_iter()
        .map(|h| HolderStatus::new(format!("{:x}", h.session), h.owner, h.token, h.ttl_left).with_mode(h.mode, h.value))
        .collect();
    LockStatus::new(v.name, None, v.waiters, v.last_token)
        .with_holders(holders)
        .with_permits(v.permits)
        .with_lock_delay_left(v.delay_left)
}
