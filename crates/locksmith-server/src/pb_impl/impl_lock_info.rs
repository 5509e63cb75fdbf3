//! Status: `StatusRequest` → the lock it names; [`LockView`] → `LockInfo`.

use locksmith_proto::{Holder, LockInfo, StatusRequest, StatusResponse};

use super::impl_client_message::lock_name;
use super::impl_server_message::ms;
use super::Invalid;
use crate::machine::{LockName, LockView, StatusPage};

/// Locks in one status page when the request names no limit.
pub const DEFAULT_STATUS_PAGE: usize = 1_000;
/// Most locks in one status page, whatever the request asks: a page stays far below the
/// 4 MiB a gRPC client decodes by default, and quick to build on the service task.
pub const MAX_STATUS_PAGE: usize = 1_000;

/// What a status request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum StatusQuery {
    /// One lock.
    One(LockName),
    /// A page of every lock, in name order.
    Page {
        /// The page starts after this name (from the first lock when `None`).
        after: Option<String>,
        /// Most locks in the page, within 1..=[`MAX_STATUS_PAGE`].
        limit: usize,
    },
}

/// Decodes a status request: one lock when it names one, else a page.
///
/// ```
/// use locksmith_proto::StatusRequest;
/// use locksmith_server::pb_impl::{status_query, StatusQuery};
/// let all = StatusRequest { limit: 1_000_000, ..Default::default() };
/// assert_eq!(status_query(all), Ok(StatusQuery::Page { after: None, limit: 1_000 }));
/// let bad = StatusRequest { name: "a\nb".into(), ..Default::default() };
/// assert!(status_query(bad).is_err());
/// ```
///
/// # Errors
/// [`Invalid::Name`] for a name that breaks the lock-name rules.
pub fn status_query(r: StatusRequest) -> Result<StatusQuery, Invalid> {
    if !r.name.is_empty() {
        return lock_name(r.name).map(StatusQuery::One);
    }
    let limit = match r.limit {
        0 => DEFAULT_STATUS_PAGE,
        n => (n as usize).min(MAX_STATUS_PAGE),
    };
    Ok(StatusQuery::Page { after: (!r.after.is_empty()).then_some(r.after), limit })
}

impl From<StatusPage> for StatusResponse {
    fn from(page: StatusPage) -> Self {
        Self { locks: page.locks.into_iter().map(Into::into).collect(), next: page.next.unwrap_or_default() }
    }
}

impl From<LockView> for LockInfo {
    fn from(v: LockView) -> Self {
        let (held, holder_session, holder_owner, token, ttl_left_ms) = match v.holder {
            Some((s, o, t, left)) => (true, s, o, t, ms(left)),
            None => (false, 0, String::new(), 0, 0),
        };
        let holders = v
            .holders
            .into_iter()
            .map(|h| {
                let (shared, permits) = h.mode.to_wire();
                Holder {
                    session: h.session,
                    owner: h.owner,
                    token: h.token,
                    ttl_left_ms: ms(h.ttl_left),
                    shared,
                    permits,
                    value: h.value.unwrap_or_default(),
                }
            })
            .collect();
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
            holders,
            permits: v.permits.unwrap_or(0),
        }
    }
}
