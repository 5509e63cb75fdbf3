//! The protobuf boundary: client messages decode into validated requests, and everything a
//! client can get wrong in one message is refused with a typed error before the machine sees it.

use locksmith_proto::client_message::Body;
use locksmith_proto::{Acquire, Cancel, ClientMessage, Close, KeepAlive, Open, Release};
use locksmith_server::machine::HoldMode;
use locksmith_server::pb_impl::{decode_open, decode_request, Invalid, Request};

fn msg(id: u64, body: Body) -> ClientMessage {
    ClientMessage { id, body: Some(body) }
}

fn acquire(name: &str, owner: &str) -> Body {
    Body::Acquire(Acquire {
        name: name.into(),
        owner: owner.into(),
        wait: true,
        lock_delay_ms: 250,
        ..Default::default()
    })
}

fn release(name: &str, owner: &str) -> Body {
    Body::Release(Release { name: name.into(), owner: owner.into(), token: 9 })
}

/// An open decodes with its TTL, and a non-zero session id asks to resume that session.
#[test]
fn open_decodes_ttl_and_resume() {
    let (id, open) = decode_open(msg(3, Body::Open(Open { ttl_ms: 1_500, resume_session: 0, ..Default::default() })));
    let open = open.unwrap();
    assert_eq!((id, open.ttl.as_millis(), open.resume), (3, 1_500, None));
    let (_, open) = decode_open(msg(4, Body::Open(Open { ttl_ms: 1_500, resume_session: 77, ..Default::default() })));
    assert_eq!(open.unwrap().resume, Some(77));
}

/// A stream must start with open; anything else (or nothing) is refused with the message id.
#[test]
fn the_first_message_must_be_open() {
    assert_eq!(decode_open(msg(5, Body::KeepAlive(KeepAlive {}))), (5, Err(Invalid::NotOpen)));
    assert_eq!(decode_open(ClientMessage { id: 6, body: None }), (6, Err(Invalid::NotOpen)));
    assert_eq!(Invalid::NotOpen.to_string(), "the first message must be open");
}

/// A later open, or a message without a body, is refused; the other kinds decode.
#[test]
fn later_messages_decode_by_kind() {
    assert_eq!(
        decode_request(msg(1, Body::Open(Open { ttl_ms: 1, resume_session: 0, ..Default::default() }))),
        (1, Err(Invalid::AlreadyOpen))
    );
    assert_eq!(decode_request(ClientMessage { id: 2, body: None }), (2, Err(Invalid::Empty)));
    assert_eq!(decode_request(msg(3, Body::KeepAlive(KeepAlive {}))), (3, Ok(Request::KeepAlive)));
    assert_eq!(decode_request(msg(4, Body::Cancel(Cancel { request: 3 }))), (4, Ok(Request::Cancel { request: 3 })));
    assert_eq!(decode_request(msg(5, Body::Close(Close {}))), (5, Ok(Request::Close)));
    assert_eq!(Invalid::AlreadyOpen.to_string(), "session already open on this stream");
    assert_eq!(Invalid::Empty.to_string(), "empty message");
}

/// An acquire carries the validated name and owner, and its wait flag and lock-delay.
#[test]
fn acquire_decodes_into_a_validated_request() {
    let (id, req) = decode_request(msg(7, acquire("jobs/ünïcode", "host/42/0badcafe-1")));
    assert_eq!(id, 7);
    match req.unwrap() {
        Request::Acquire { name, owner, wait, lock_delay, mode, value } => {
            assert_eq!((name.as_str(), owner.as_str()), ("jobs/ünïcode", "host/42/0badcafe-1"));
            assert!(wait);
            assert_eq!(lock_delay.as_millis(), 250);
            assert_eq!((mode, value), (HoldMode::Exclusive, None));
        }
        other => panic!("decoded as {other:?}"),
    }
    let (_, req) = decode_request(msg(8, release("jobs/nightly", "w")));
    assert!(matches!(req, Ok(Request::Release { token: 9, .. })), "{req:?}");
}

/// Names follow the lock-name rules of every backend: not empty, at most 256 bytes, no control
/// characters, in acquires and releases alike; the text says why, as it always did.
#[test]
fn bad_lock_names_are_refused() {
    for body in [acquire("", "o"), acquire("a\nb", "o"), acquire(&"x".repeat(257), "o"), release("", "o")] {
        let (_, req) = decode_request(msg(1, body));
        assert!(matches!(req, Err(Invalid::Name(_))), "{req:?}");
    }
    let (_, req) = decode_request(msg(1, acquire("", "o")));
    assert_eq!(req.unwrap_err().to_string(), "invalid lock name: lock name is empty");
    let (_, req) = decode_request(msg(1, acquire(&"x".repeat(256), "o")));
    assert!(req.is_ok(), "the longest name is accepted");
}

/// Owners get the character rules of names (not empty, no control characters); a name error
/// is reported before an owner error. The length is the machine's limit, not checked here.
#[test]
fn bad_owners_are_refused() {
    for body in [acquire("x", ""), acquire("x", "a\u{7f}b"), release("x", ""), release("x", "a\0b")] {
        let (_, req) = decode_request(msg(1, body));
        assert!(matches!(req, Err(Invalid::Owner(_))), "{req:?}");
    }
    let (_, req) = decode_request(msg(1, acquire("", "")));
    assert!(matches!(req, Err(Invalid::Name(_))), "{req:?}");
    let (_, req) = decode_request(msg(1, acquire("x", "")));
    assert_eq!(req.unwrap_err().to_string(), "owner id must not be empty or contain control characters");
}

/// The kind of hold decodes from `shared` and `permits`; both at once, too many permits and a
/// value that is too long are refused; a value travels with the acquire.
#[test]
fn hold_kinds_and_values_decode_and_are_checked() {
    let with = |shared: bool, permits: u32, value: &str| {
        let a =
            Acquire { name: "x".into(), owner: "o".into(), shared, permits, value: value.into(), ..Default::default() };
        decode_request(msg(1, Body::Acquire(a))).1
    };
    let mode = |r: Result<Request, Invalid>| match r {
        Ok(Request::Acquire { mode, value, .. }) => Ok((mode, value)),
        Ok(other) => panic!("{other:?}"),
        Err(e) => Err(e),
    };
    assert_eq!(mode(with(true, 0, "")), Ok((HoldMode::Shared, None)));
    assert_eq!(mode(with(false, 3, "")), Ok((HoldMode::Permit(3), None)));
    assert_eq!(mode(with(false, 0, "10.0.0.7:80")), Ok((HoldMode::Exclusive, Some("10.0.0.7:80".into()))));
    for bad in [with(true, 3, ""), with(false, 10_001, ""), with(false, 0, &"v".repeat(1025)), with(false, 0, "a\0b")] {
        assert!(matches!(bad, Err(Invalid::Hold(_))), "{bad:?}");
    }
}
