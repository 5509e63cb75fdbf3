//! Answers and effects → `ServerMessage`.

use std::time::Duration;

use locksmith_proto::server_message::Body;
use locksmith_proto::{error::Code, ServerMessage};

use super::Invalid;
use crate::machine::{AcquireOutcome, Effect, Refusal, SessionId};

/// What the service answers to one client message.
#[derive(Debug)]
pub(crate) enum Reply {
    /// `secret`: the resume secret of a new session (empty on a resume).
    Opened {
        session: SessionId,
        ttl: Duration,
        secret: Vec<u8>,
    },
    KeepAlive,
    Acquired(AcquireOutcome),
    Released {
        was_held: bool,
    },
    Cancelled {
        was_waiting: bool,
    },
    Refused(Refusal),
    Invalid(Invalid),
}

impl Reply {
    /// The answer to message `id`, if there is one now (a queued acquire is answered by its
    /// grant, later).
    pub(crate) fn into_message(self, id: u64) -> Option<ServerMessage> {
        let body = match self {
            Reply::Opened { session, ttl, secret } => {
                Body::Opened(locksmith_proto::Opened { session, ttl_ms: ms(ttl), resume_secret: secret })
            }
            Reply::KeepAlive => Body::KeepAlive(locksmith_proto::KeepAliveAck {}),
            Reply::Acquired(AcquireOutcome::Granted(token)) => {
                Body::Granted(locksmith_proto::Granted { token, queued: false })
            }
            Reply::Acquired(AcquireOutcome::Busy) => Body::Busy(locksmith_proto::Busy {}),
            Reply::Acquired(AcquireOutcome::Queued) => return None,
            Reply::Released { was_held } => Body::Released(locksmith_proto::Released { was_held }),
            Reply::Cancelled { was_waiting } => Body::Cancelled(locksmith_proto::Cancelled { was_waiting }),
            Reply::Refused(r) => {
                let code = match r {
                    Refusal::SessionExpired => Code::SessionExpired,
                    Refusal::Invalid(_) => Code::InvalidArgument,
                    Refusal::Limit(..) => Code::LimitExceeded,
                    Refusal::Denied(_) => Code::PermissionDenied,
                    Refusal::NotLeader(_) => Code::Unavailable,
                };
                return Some(error(id, code, r.to_string()));
            }
            Reply::Invalid(e) => {
                let code = match e {
                    Invalid::Forbidden(_) => Code::PermissionDenied,
                    _ => Code::InvalidArgument,
                };
                return Some(error(id, code, e.to_string()));
            }
        };
        Some(ServerMessage { id, body: Some(body) })
    }
}

/// The session an effect concerns and the message that tells it: a pushed grant (with the
/// queued acquire's id), or the end of an expired session (id 0: it answers no message).
pub(crate) fn effect_message(e: &Effect) -> (SessionId, ServerMessage) {
    match *e {
        Effect::Granted { session, request, token } => (
            session,
            ServerMessage { id: request, body: Some(Body::Granted(locksmith_proto::Granted { token, queued: true })) },
        ),
        Effect::Expired { session } => (session, error(0, Code::SessionExpired, Refusal::SessionExpired.to_string())),
    }
}

fn error(id: u64, code: Code, message: String) -> ServerMessage {
    ServerMessage { id, body: Some(Body::Error(locksmith_proto::Error { code: code as i32, message })) }
}

pub(super) use locksmith_core::driver::millis as ms;

#[cfg(test)]
mod tests {
    use super::*;

    fn body(m: Option<ServerMessage>, id: u64) -> Body {
        let m = m.unwrap();
        assert_eq!(m.id, id);
        m.body.unwrap()
    }

    fn error_of(b: Body) -> (Code, String) {
        match b {
            Body::Error(e) => (Code::try_from(e.code).unwrap(), e.message),
            other => panic!("not an error: {other:?}"),
        }
    }

    /// Each answer becomes its message under the request's id; a queued acquire has none yet.
    #[test]
    fn answers_become_messages_with_the_request_id() {
        let opened =
            Reply::Opened { session: 5, ttl: Duration::from_millis(1_500), secret: vec![9; 32] }.into_message(1);
        let want = locksmith_proto::Opened { session: 5, ttl_ms: 1_500, resume_secret: vec![9; 32] };
        assert_eq!(body(opened, 1), Body::Opened(want));
        let granted = Reply::Acquired(AcquireOutcome::Granted(8)).into_message(2);
        assert_eq!(body(granted, 2), Body::Granted(locksmith_proto::Granted { token: 8, queued: false }));
        assert_eq!(
            body(Reply::Acquired(AcquireOutcome::Busy).into_message(3), 3),
            Body::Busy(locksmith_proto::Busy {})
        );
        assert_eq!(Reply::Acquired(AcquireOutcome::Queued).into_message(4), None);
        let released = Reply::Released { was_held: true }.into_message(5);
        assert_eq!(body(released, 5), Body::Released(locksmith_proto::Released { was_held: true }));
        let cancelled = Reply::Cancelled { was_waiting: false }.into_message(6);
        assert_eq!(body(cancelled, 6), Body::Cancelled(locksmith_proto::Cancelled { was_waiting: false }));
        assert_eq!(body(Reply::KeepAlive.into_message(7), 7), Body::KeepAlive(locksmith_proto::KeepAliveAck {}));
    }

    /// Refusals and invalid messages carry the code a client classifies by, and the same text.
    #[test]
    fn refusals_carry_their_code_and_text() {
        let cases = [
            (Reply::Refused(Refusal::SessionExpired), Code::SessionExpired, "session expired"),
            (Reply::Refused(Refusal::Invalid("ttl".into())), Code::InvalidArgument, "invalid argument: ttl"),
            (
                Reply::Refused(Refusal::Limit(crate::machine::LimitKind::Sessions, "2 sessions".into())),
                Code::LimitExceeded,
                "limit exceeded: 2 sessions",
            ),
            (Reply::Invalid(Invalid::Empty), Code::InvalidArgument, "empty message"),
        ];
        for (reply, code, text) in cases {
            assert_eq!(error_of(body(reply.into_message(9), 9)), (code, text.to_string()));
        }
    }

    /// A hand-off is pushed under the queued acquire's id; an expiry under id 0.
    #[test]
    fn effects_become_pushed_messages() {
        let (session, m) = effect_message(&Effect::Granted { session: 4, request: 12, token: 3 });
        assert_eq!(session, 4);
        assert_eq!(body(Some(m), 12), Body::Granted(locksmith_proto::Granted { token: 3, queued: true }));
        let (session, m) = effect_message(&Effect::Expired { session: 4 });
        assert_eq!(session, 4);
        assert_eq!(error_of(body(Some(m), 0)), (Code::SessionExpired, "session expired".to_string()));
    }
}
