//! Wire and server views → contract types.

use std::time::Duration;

use locksmith_core::{HolderStatus, LockStatus};
use locksmith_proto::LockInfo;

fn holder(session: u64, owner: String, token: u64, ttl_left: Duration) -> HolderStatus {
    HolderStatus::new(format!("{session:x}"), owner, token, ttl_left)
}

pub(crate) fn from_wire(l: LockInfo) -> LockStatus {
    let h = l.held.then(|| holder(l.holder_session, l.holder_owner, l.token, Duration::from_millis(l.ttl_left_ms)));
    let delay = (l.lock_delay_left_ms > 0).then(|| Duration::from_millis(l.lock_delay_left_ms));
    LockStatus::new(l.name, h, l.waiters, l.last_token).with_lock_delay_left(delay)
}

#[cfg(feature = "memory")]
pub(crate) fn from_view(v: locksmith_server::machine::LockView) -> LockStatus {
    let h = v.holder.map(|(s, o, t, left)| holder(s, o, t, left));
    LockStatus::new(v.name, h, v.waiters, v.last_token).with_lock_delay_left(v.delay_left)
}
