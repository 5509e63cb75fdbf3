//! `ClientMessage` → [`Open`] / [`Request`]: decoding with validation.

use std::time::Duration;

use locksmith_proto::client_message::Body;
use locksmith_proto::ClientMessage;

use super::{Invalid, Open, Request};
use crate::machine::{LockName, Owner};

/// Decodes a stream's first message, which must be `open`. Returns the message id (the answer
/// carries it) with the result.
///
/// ```
/// use locksmith_proto::{client_message::Body, ClientMessage, KeepAlive, Open as OpenMsg};
/// use locksmith_server::pb_impl::{decode_open, Invalid};
/// let open = ClientMessage { id: 1, body: Some(Body::Open(OpenMsg { ttl_ms: 10_000, ..Default::default() })) };
/// let (id, decoded) = decode_open(open);
/// assert_eq!((id, decoded.map(|o| o.resume)), (1, Ok(None)));
/// let other = ClientMessage { id: 2, body: Some(Body::KeepAlive(KeepAlive {})) };
/// assert_eq!(decode_open(other), (2, Err(Invalid::NotOpen)));
/// ```
pub fn decode_open(msg: ClientMessage) -> (u64, Result<Open, Invalid>) {
    let open = match msg.body {
        Some(Body::Open(o)) => Ok(Open {
            ttl: Duration::from_millis(o.ttl_ms),
            resume: (o.resume_session != 0).then_some(o.resume_session),
            // Hashed at once: the secret itself goes no further than this function.
            secret: crate::secret::digest(&o.resume_secret),
            principal: None,
            peer: None,
        }),
        _ => Err(Invalid::NotOpen),
    };
    (msg.id, open)
}

/// Decodes a later message of an open stream. Returns the message id with the result.
///
/// ```
/// use locksmith_proto::{client_message::Body, Acquire, ClientMessage};
/// use locksmith_server::pb_impl::{decode_request, Invalid, Request};
/// let acquire = |name: &str, owner: &str| ClientMessage {
///     id: 7,
///     body: Some(Body::Acquire(Acquire { name: name.into(), owner: owner.into(), wait: true, ..Default::default() })),
/// };
/// assert!(matches!(decode_request(acquire("jobs/nightly", "worker-1")), (7, Ok(Request::Acquire { .. }))));
/// assert!(matches!(decode_request(acquire("", "worker-1")), (7, Err(Invalid::Name(_)))));
/// assert!(matches!(decode_request(acquire("jobs/nightly", "a\nb")), (7, Err(Invalid::Owner(_)))));
/// ```
pub fn decode_request(msg: ClientMessage) -> (u64, Result<Request, Invalid>) {
    let request = match msg.body {
        None => Err(Invalid::Empty),
        Some(Body::Open(_)) => Err(Invalid::AlreadyOpen),
        Some(Body::KeepAlive(_)) => Ok(Request::KeepAlive),
        Some(Body::Acquire(a)) => acquire(a),
        Some(Body::Release(r)) => release(r),
        Some(Body::Cancel(c)) => Ok(Request::Cancel { request: c.request }),
        Some(Body::Close(_)) => Ok(Request::Close),
    };
    (msg.id, request)
}

/// The name first, then the owner: the order in which errors were always reported.
fn acquire(a: locksmith_proto::Acquire) -> Result<Request, Invalid> {
    let name = lock_name(a.name)?;
    let owner = Owner::new(a.owner)?;
    let mode = super::mode_from_wire(a.shared, a.permits)?;
    if a.value.len() > locksmith_core::MAX_VALUE_LEN || a.value.contains('\0') {
        return Err(Invalid::Hold(format!(
            "a hold's value is at most {} bytes without NUL characters",
            locksmith_core::MAX_VALUE_LEN
        )));
    }
    let value = (!a.value.is_empty()).then_some(a.value);
    Ok(Request::Acquire { name, owner, wait: a.wait, lock_delay: Duration::from_millis(a.lock_delay_ms), mode, value })
}

fn release(r: locksmith_proto::Release) -> Result<Request, Invalid> {
    Ok(Request::Release { name: lock_name(r.name)?, owner: Owner::new(r.owner)?, token: r.token })
}

/// Validates a lock name without copying it.
pub(super) fn lock_name(name: String) -> Result<LockName, Invalid> {
    LockName::new(name).map_err(|e| match e {
        locksmith_core::Error::InvalidName(reason) => Invalid::Name(reason),
        other => Invalid::Name(other.to_string()),
    })
}
