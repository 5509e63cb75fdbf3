//! The session-stream multiplexer (`mux.rs`) under stream faults: broken streams, refused
//! reconnections, held-back answers and requests, through a transport double ([`double`]) in
//! front of the real lock service running in this process.
//!
//! Every test runs on tokio's paused clock: nothing here crosses a socket, so time passes only
//! when every task waits for a timer, and TTL arithmetic is exact. Sessions under test use a
//! link with faults; the other party (`b`) uses its own link, which is never faulted.

mod double;

use std::time::Duration;

use double::{Event, Link, Server};
use futures_util::FutureExt;
use locksmith_core::{AcquireRequest, Acquired, Client, Error, LockName, Session};
use locksmith_proto::client_message::Body as In;
use locksmith_proto::server_message::Body as Out;
use tokio::time::{sleep, timeout, Instant};

/// Session TTL: keep-alives every second through the engine, a reconnect gives up after 3 s.
const TTL: Duration = Duration::from_secs(3);

fn req(name: &str, owner: &str, wait: bool) -> AcquireRequest {
    AcquireRequest::new(LockName::new(name).unwrap(), owner, wait)
}

fn name(n: &str) -> LockName {
    LockName::new(n).unwrap()
}

/// Takes `name` for `session` as `owner` at once and returns the token.
async fn take(session: &dyn Session, name: &str, owner: &str) -> u64 {
    match session.acquire(req(name, owner, false)).await.unwrap() {
        Acquired::Granted { token } => token,
        Acquired::Busy => panic!("{name} is busy"),
    }
}

fn session_no(session: &dyn Session) -> u64 {
    u64::from_str_radix(&session.id(), 16).unwrap()
}

/// Waits until `link` has had a refused connection attempt (it is in its reconnect loop).
async fn wait_refused(link: &Link) {
    link.wait("a refused connection", |log| log.iter().any(|e| matches!(e, Event::Connect { stream: None }))).await;
}

// ---------------------------------------------------------------------------------------------
// Resume.
// ---------------------------------------------------------------------------------------------

/// A broken stream is resumed on a new one: the guard stays held with the same session id and
/// token, and keep-alives carry on over the new stream for many TTLs.
#[tokio::test(start_paused = true)]
async fn a_session_survives_a_broken_stream_and_resumes() {
    let server = Server::start();
    let link = server.link();
    let client = Client::new(link.backend(), TTL).unwrap();
    let guard = client.lock("a").await.unwrap();
    let (session, token) = (guard.session_id(), guard.token());
    let holder = server.holder("a").await.unwrap();
    assert_eq!((format!("{:x}", holder.0), holder.2), (session.clone(), token));

    link.break_streams();
    link.wait_opened(2).await;
    let open = link.to_server().into_iter().find(|(s, _)| *s == 2).map(|(_, m)| m.body);
    assert!(
        matches!(&open, Some(Some(In::Open(o))) if format!("{:x}", o.resume_session) == session && o.resume_secret.len() == 32),
        "the new stream resumes the session with its secret: {open:?}"
    );
    assert!(guard.is_held());
    assert_eq!(guard.session_id(), session);
    assert_eq!(server.holder("a").await, Some(holder.clone()));

    // Three TTLs later the hold is still ours: the keeper renews over the new stream.
    sleep(TTL * 3).await;
    assert!(guard.is_held());
    assert_eq!(guard.token(), token);
    assert_eq!(server.holder("a").await, Some(holder));
    assert_eq!(link.streams(), 2, "one resume, no further reconnection");
    let renewals =
        link.to_client().iter().filter(|(s, m)| *s == 2 && matches!(m.body, Some(Out::KeepAlive(_)))).count();
    assert!(renewals >= 8, "keep-alives answered on the new stream: {renewals}");
    assert!(guard.unlock().await.unwrap());
    assert_eq!(server.holder("a").await, None);
}

// ---------------------------------------------------------------------------------------------
// Dropped acquisitions leave nothing behind.
// ---------------------------------------------------------------------------------------------

/// An acquisition dropped while queued is withdrawn: no waiter is left, and the lock's next
/// release grants nothing to the session that gave up.
#[tokio::test(start_paused = true)]
async fn a_dropped_queued_acquisition_leaves_no_waiter() {
    let server = Server::start();
    let b = server.link().open(TTL).await;
    let held = take(&*b, "x", "b").await;
    let a = server.link().open(TTL).await;

    let mut acq = Box::pin(a.acquire(req("x", "a", true)));
    assert!(acq.as_mut().now_or_never().is_none());
    server.wait_status("x", "a queued waiter", |v| v.is_some_and(|v| v.waiters == 1)).await;
    drop(acq);
    server.wait_status("x", "no waiter", |v| v.is_some_and(|v| v.waiters == 0)).await;

    assert!(b.release(&name("x"), "b", held).await.unwrap());
    assert_eq!(server.holder("x").await, None);
    assert_eq!(server.last_token("x").await, held, "nothing was granted to the dropped acquisition");
}

/// An acquisition dropped while its stream is down (the `Cancel` cannot go out) is withdrawn
/// once the session resumes: no waiter is left, and nothing is granted to it later.
#[tokio::test(start_paused = true)]
async fn a_queued_acquisition_dropped_during_a_break_leaves_no_waiter() {
    let server = Server::start();
    let b = server.link().open(TTL).await;
    let held = take(&*b, "x", "b").await;
    let link = server.link();
    let a = link.open(TTL).await;

    let mut acq = Box::pin(a.acquire(req("x", "a", true)));
    assert!(acq.as_mut().now_or_never().is_none());
    server.wait_status("x", "a queued waiter", |v| v.is_some_and(|v| v.waiters == 1)).await;
    link.refuse(true);
    link.break_streams();
    wait_refused(&link).await;
    drop(acq);
    link.refuse(false);
    link.wait_opened(2).await;
    server.wait_status("x", "no waiter", |v| v.is_some_and(|v| v.waiters == 0)).await;

    assert!(b.release(&name("x"), "b", held).await.unwrap());
    a.keep_alive().await.unwrap();
    assert_eq!(server.holder("x").await, None);
    assert_eq!(server.last_token("x").await, held, "nothing was granted to the dropped acquisition");
}

/// A `Cancel` lost in a break (sent, never delivered) is sent again on the resumed stream.
#[tokio::test(start_paused = true)]
async fn a_cancel_lost_in_a_break_is_sent_again_after_the_resume() {
    let server = Server::start();
    let b = server.link().open(TTL).await;
    let held = take(&*b, "x", "b").await;
    let link = server.link();
    let a = link.open(TTL).await;

    let mut acq = Box::pin(a.acquire(req("x", "a", true)));
    assert!(acq.as_mut().now_or_never().is_none());
    server.wait_status("x", "a queued waiter", |v| v.is_some_and(|v| v.waiters == 1)).await;
    link.hold_requests(true);
    drop(acq);
    link.break_streams();
    link.hold_requests(false);
    link.wait_opened(2).await;
    let cancels =
        |stream| link.to_server().iter().filter(|(s, m)| *s == stream && matches!(m.body, Some(In::Cancel(_)))).count();
    assert_eq!(cancels(1), 0, "the first Cancel was lost with its stream");
    server.wait_status("x", "no waiter", |v| v.is_some_and(|v| v.waiters == 0)).await;
    assert_eq!(cancels(2), 1);

    assert!(b.release(&name("x"), "b", held).await.unwrap());
    a.keep_alive().await.unwrap();
    assert_eq!(server.holder("x").await, None);
}

/// An acquisition made and dropped while the session was reconnecting never reached the server
/// and is simply forgotten: nothing is asked after the resume, nothing is granted.
#[tokio::test(start_paused = true)]
async fn an_acquisition_dropped_before_it_was_sent_is_forgotten() {
    let server = Server::start();
    let link = server.link();
    let a = link.open(TTL).await;

    link.refuse(true);
    link.break_streams();
    wait_refused(&link).await;
    let mut acq = Box::pin(a.acquire(req("x", "a", true)));
    assert!(acq.as_mut().now_or_never().is_none());
    drop(acq);
    link.refuse(false);
    link.wait_opened(2).await;
    a.keep_alive().await.unwrap();

    assert_eq!(link.acquire_id("x"), None, "no acquire of x reached the server");
    assert_eq!(server.last_token("x").await, 0);
}

// ---------------------------------------------------------------------------------------------
// Late grants of abandoned acquisitions are released.
// ---------------------------------------------------------------------------------------------

/// A grant that crosses the `Cancel` of a dropped acquisition is released when it arrives: the
/// lock is free afterwards and its next token is higher.
#[tokio::test(start_paused = true)]
async fn a_grant_for_an_abandoned_acquisition_is_released() {
    let server = Server::start();
    let b = server.link().open(TTL).await;
    let held = take(&*b, "x", "b").await;
    let link = server.link();
    let a = link.open(TTL).await;

    let mut acq = Box::pin(a.acquire(req("x", "a", true)));
    assert!(acq.as_mut().now_or_never().is_none());
    server.wait_status("x", "a queued waiter", |v| v.is_some_and(|v| v.waiters == 1)).await;
    let id = link.acquire_id("x").unwrap();
    link.hold_answers(true);
    assert!(b.release(&name("x"), "b", held).await.unwrap());
    let Out::Granted(g) = link.wait_from_server(1, id, |o| matches!(o, Out::Granted(_))).await else { unreachable!() };
    drop(acq); // the Cancel goes out while the grant is on its way back
    link.hold_answers(false);
    a.keep_alive().await.unwrap();
    a.keep_alive().await.unwrap(); // the Release sent on the grant's arrival has been handled

    assert_eq!(server.holder("x").await, None, "the late grant was released");
    assert_eq!(server.last_token("x").await, g.token);
    assert!(take(&*b, "x", "b").await > g.token);
}

/// A grant that reached the session just before its acquisition was dropped (answered, not yet
/// seen by the caller) is released, not lost with the dropped future.
#[tokio::test(start_paused = true)]
async fn a_grant_answered_to_a_dropped_acquisition_before_it_looked_is_released() {
    let server = Server::start();
    let b = server.link().open(TTL).await;
    let held = take(&*b, "x", "b").await;
    let a = server.link().open(TTL).await;

    let mut acq = Box::pin(a.acquire(req("x", "a", true)));
    assert!(acq.as_mut().now_or_never().is_none());
    server.wait_status("x", "a queued waiter", |v| v.is_some_and(|v| v.waiters == 1)).await;
    assert!(b.release(&name("x"), "b", held).await.unwrap());
    // Answered after the pushed grant on the same stream: the grant now waits in the
    // acquisition's answer slot, unseen.
    a.keep_alive().await.unwrap();
    let granted = server.holder("x").await.unwrap().2;
    drop(acq);
    a.keep_alive().await.unwrap();

    assert_eq!(server.holder("x").await, None, "the grant was lost with the dropped future");
    assert!(take(&*b, "x", "b").await > granted);
}

/// With an explicit owner (reentrancy), a retry of a dropped acquisition is answered with the
/// same hold the server granted to the dropped one (acquire is idempotent per owner): the late
/// grant is then the retry's, and is not released under it.
#[tokio::test(start_paused = true)]
async fn a_late_grant_shared_with_a_retry_of_the_same_owner_is_kept() {
    let server = Server::start();
    let b = server.link().open(TTL).await;
    let held = take(&*b, "x", "b").await;
    let link = server.link();
    let a = link.open(TTL).await;

    let mut first = Box::pin(a.acquire(req("x", "owner", true)));
    assert!(first.as_mut().now_or_never().is_none());
    server.wait_status("x", "a queued waiter", |v| v.is_some_and(|v| v.waiters == 1)).await;
    link.hold_answers(true);
    assert!(b.release(&name("x"), "b", held).await.unwrap());
    let id = link.acquire_id("x").unwrap();
    let Out::Granted(g) = link.wait_from_server(1, id, |o| matches!(o, Out::Granted(_))).await else { unreachable!() };
    drop(first); // timed out: the Cancel crosses the grant
    let mut retry = Box::pin(a.acquire(req("x", "owner", true)));
    assert!(retry.as_mut().now_or_never().is_none());
    link.hold_answers(false);

    let answer = timeout(TTL, retry).await.expect("the retry is answered").unwrap();
    assert_eq!(answer, Acquired::Granted { token: g.token });
    a.keep_alive().await.unwrap();
    a.keep_alive().await.unwrap();
    assert_eq!(
        server.holder("x").await,
        Some((session_no(&*a), "owner".to_string(), g.token)),
        "the retry's hold was released under it"
    );
}

/// The same across a break: an acquisition granted and dropped while the stream was down, and
/// retried by the same owner before the resume, leaves the retry its grant (the re-ask of the
/// dropped one comes first and finds the retry still waiting).
#[tokio::test(start_paused = true)]
async fn a_retry_of_the_same_owner_during_a_break_keeps_the_grant() {
    let server = Server::start();
    let b = server.link().open(TTL).await;
    let held = take(&*b, "x", "b").await;
    let link = server.link();
    let a = link.open(TTL).await;

    let mut first = Box::pin(a.acquire(req("x", "owner", true)));
    assert!(first.as_mut().now_or_never().is_none());
    server.wait_status("x", "a queued waiter", |v| v.is_some_and(|v| v.waiters == 1)).await;
    link.refuse(true);
    link.break_streams();
    wait_refused(&link).await;
    assert!(b.release(&name("x"), "b", held).await.unwrap()); // granted to `first`; lost
    let granted = server.holder("x").await.unwrap();
    drop(first);
    let mut retry = Box::pin(a.acquire(req("x", "owner", true)));
    assert!(retry.as_mut().now_or_never().is_none());
    link.refuse(false);

    let answer = timeout(TTL, retry).await.expect("the retry is answered").unwrap();
    assert_eq!(answer, Acquired::Granted { token: granted.2 });
    a.keep_alive().await.unwrap();
    a.keep_alive().await.unwrap();
    assert_eq!(server.holder("x").await, Some(granted), "the retry's hold was released under it");
}

/// A waiter granted while its stream was down, and dropped before the session resumed, has
/// its hold released after the resume: the lost grant is found by asking again.
#[tokio::test(start_paused = true)]
async fn a_grant_lost_in_a_break_for_an_abandoned_acquisition_is_released() {
    let server = Server::start();
    let b = server.link().open(TTL).await;
    let held = take(&*b, "x", "b").await;
    let link = server.link();
    let a = link.open(TTL).await;

    let mut acq = Box::pin(a.acquire(req("x", "a", true)));
    assert!(acq.as_mut().now_or_never().is_none());
    server.wait_status("x", "a queued waiter", |v| v.is_some_and(|v| v.waiters == 1)).await;
    link.refuse(true);
    link.break_streams();
    wait_refused(&link).await;
    assert!(b.release(&name("x"), "b", held).await.unwrap()); // hands x to `a`; the grant is lost
    let granted = server.holder("x").await.unwrap();
    assert_eq!(granted.0, session_no(&*a));
    drop(acq);
    link.refuse(false);
    link.wait_opened(2).await;
    server.wait_status("x", "x released", |v| v.is_some_and(|v| v.holder.is_none())).await;

    assert!(take(&*b, "x", "b").await > granted.2);
}

// ---------------------------------------------------------------------------------------------
// Calls in flight during a break.
// ---------------------------------------------------------------------------------------------

/// An acquisition whose answer is lost in a break is asked again on the resumed stream and
/// answered once, with the one grant the server made (no second hold, no second token); the
/// same for a release whose answer is lost.
#[tokio::test(start_paused = true)]
async fn an_answer_lost_in_a_break_is_asked_again_and_answered_once() {
    let server = Server::start();
    let link = server.link();
    let a = link.open(TTL).await;

    link.hold_answers(true);
    let mut acq = Box::pin(a.acquire(req("x", "a", false)));
    assert!(acq.as_mut().now_or_never().is_none());
    link.wait("the acquire at the server", |log| {
        log.iter().any(|e| matches!(e, Event::ToServer { msg, .. } if matches!(msg.body, Some(In::Acquire(_)))))
    })
    .await;
    let id = link.acquire_id("x").unwrap();
    let Out::Granted(g) = link.wait_from_server(1, id, |o| matches!(o, Out::Granted(_))).await else { unreachable!() };
    link.break_streams();
    link.hold_answers(false);

    let answer = timeout(TTL, acq).await.expect("answered after the resume").unwrap();
    assert_eq!(answer, Acquired::Granted { token: g.token });
    assert_eq!(server.holder("x").await, Some((session_no(&*a), "a".to_string(), g.token)));
    assert_eq!(server.last_token("x").await, g.token, "one grant");
    let sent: Vec<usize> = link.to_server().iter().filter(|(_, m)| m.id == id).map(|(s, _)| *s).collect();
    assert_eq!(sent, [1, 2], "asked once per stream");
    assert_eq!(link.to_client().iter().filter(|(_, m)| m.id == id).count(), 1, "answered once");

    // The release's answer is lost the same way; asked again, it leaves the lock free.
    link.hold_answers(true);
    let x = name("x");
    let mut rel = Box::pin(a.release(&x, "a", g.token));
    assert!(rel.as_mut().now_or_never().is_none());
    server.wait_status("x", "x released", |v| v.is_some_and(|v| v.holder.is_none())).await;
    link.break_streams();
    link.hold_answers(false);
    timeout(TTL, rel).await.expect("answered after the resume").unwrap();
    assert_eq!(server.holder("x").await, None);
    assert_eq!(server.last_token("x").await, g.token);
    a.keep_alive().await.unwrap();
}

/// A request lost in a break before it reached the server is sent again and answered once.
#[tokio::test(start_paused = true)]
async fn a_request_lost_in_a_break_is_sent_again() {
    let server = Server::start();
    let link = server.link();
    let a = link.open(TTL).await;

    link.hold_requests(true);
    let mut acq = Box::pin(a.acquire(req("x", "a", false)));
    assert!(acq.as_mut().now_or_never().is_none());
    link.break_streams();
    link.hold_requests(false);

    let answer = timeout(TTL, acq).await.expect("answered after the resume").unwrap();
    assert_eq!(answer, Acquired::Granted { token: 1 });
    assert_eq!(server.holder("x").await, Some((session_no(&*a), "a".to_string(), 1)));
    let acquires: Vec<usize> =
        link.to_server().iter().filter(|(_, m)| matches!(m.body, Some(In::Acquire(_)))).map(|(s, _)| *s).collect();
    assert_eq!(acquires, [2], "delivered once, on the new stream");
}

/// A queued acquisition granted while its stream was down gets that grant after the resume
/// (the re-sent request finds its own hold), not a second one.
#[tokio::test(start_paused = true)]
async fn a_waiter_granted_during_a_break_gets_its_grant_after_the_resume() {
    let server = Server::start();
    let b = server.link().open(TTL).await;
    let held = take(&*b, "x", "b").await;
    let link = server.link();
    let a = link.open(TTL).await;

    let mut acq = Box::pin(a.acquire(req("x", "a", true)));
    assert!(acq.as_mut().now_or_never().is_none());
    server.wait_status("x", "a queued waiter", |v| v.is_some_and(|v| v.waiters == 1)).await;
    link.refuse(true);
    link.break_streams();
    wait_refused(&link).await;
    assert!(b.release(&name("x"), "b", held).await.unwrap());
    let granted = server.holder("x").await.unwrap();
    link.refuse(false);

    let answer = timeout(TTL, acq).await.expect("answered after the resume").unwrap();
    assert_eq!(answer, Acquired::Granted { token: granted.2 });
    assert_eq!(server.holder("x").await, Some(granted.clone()));
    assert_eq!(server.last_token("x").await, granted.2, "one grant");
}

// ---------------------------------------------------------------------------------------------
// Giving up, and closing.
// ---------------------------------------------------------------------------------------------

/// When new connections are refused for longer than the TTL, the guard's `lost()` fires (by its
/// own deadline, first), pending calls then fail with `SessionExpired`, and the session stops
/// trying to reconnect.
#[tokio::test(start_paused = true)]
async fn refused_connections_past_the_ttl_expire_the_session() {
    let server = Server::start();
    let b = server.link().open(TTL).await;
    take(&*b, "b", "b").await;
    let link = server.link();
    let client = Client::new(link.backend(), TTL).unwrap();
    let guard = client.lock("a").await.unwrap();
    let waiting = tokio::spawn({
        let client = client.clone();
        async move { client.lock("b").await.map(|g| g.token()) }
    });
    server.wait_status("b", "a queued waiter", |v| v.is_some_and(|v| v.waiters == 1)).await;

    link.refuse(true);
    let broke = Instant::now();
    link.break_streams();
    timeout(TTL, guard.lost()).await.expect("lost() within a TTL of the break");
    let lost_at = Instant::now();
    assert!(!guard.is_held());
    let err = timeout(TTL, waiting).await.expect("the pending call ends").unwrap().unwrap_err();
    assert!(matches!(err, Error::SessionExpired), "{err:?}");
    let failed_at = Instant::now();
    assert!(lost_at <= failed_at, "the guard knew first");
    assert!(failed_at >= broke + TTL, "not given up before the server could have expired it");

    let attempts = link.connects();
    link.refuse(false);
    sleep(TTL).await;
    assert_eq!(link.connects(), attempts, "no reconnection after giving up");
    assert_eq!(server.holder("a").await, None);
    assert_eq!(server.waiters("b").await, 0);
}

/// `close()` while the session is reconnecting (connections refused) returns at once, fails
/// the pending calls with `SessionExpired`, and stops the reconnect loop; the lease frees the
/// holds on the server.
#[tokio::test(start_paused = true)]
async fn close_during_a_reconnect_ends_cleanly() {
    let server = Server::start();
    let b = server.link().open(TTL).await;
    take(&*b, "b", "b").await;
    let link = server.link();
    let a = link.open(TTL).await;
    take(&*a, "a", "a").await;
    let mut waiting = Box::pin(a.acquire(req("b", "a", true)));
    assert!(waiting.as_mut().now_or_never().is_none());
    server.wait_status("b", "a queued waiter", |v| v.is_some_and(|v| v.waiters == 1)).await;

    link.refuse(true);
    link.break_streams();
    wait_refused(&link).await;
    timeout(Duration::from_millis(1), a.close()).await.expect("close does not wait for the reconnect loop").unwrap();
    let err = waiting.await.unwrap_err();
    assert!(matches!(err, Error::SessionExpired), "{err:?}");

    let attempts = link.connects();
    link.refuse(false);
    sleep(TTL * 2).await;
    assert_eq!(link.connects(), attempts, "no reconnection after close");
    assert_eq!(server.holder("a").await, None, "the lease freed the hold");
    assert_eq!(server.waiters("b").await, 0);
}

/// `close()` while a resume is under way (the server has resumed the session, its answer is
/// still on the way) closes the resumed session: its holds are freed at once, not a TTL later,
/// and `close()` returns once the server has ended the stream.
#[tokio::test(start_paused = true)]
async fn close_during_a_resume_frees_the_holds() {
    let server = Server::start();
    let link = server.link();
    let a = link.open(TTL).await;
    take(&*a, "a", "a").await;

    link.hold_answers(true);
    link.break_streams();
    link.wait_from_server(2, 1, |o| matches!(o, Out::Opened(_))).await;
    let closed_at = Instant::now();
    let mut close = Box::pin(a.close());
    assert!(close.as_mut().now_or_never().is_none());
    link.hold_answers(false);
    timeout(Duration::from_millis(1), close).await.expect("close returns once the stream ends").unwrap();

    assert_eq!(server.holder("a").await, None);
    assert!(Instant::now() < closed_at + TTL / 10, "freed by Close, not by the lease");
    sleep(TTL).await;
    assert_eq!(link.streams(), 2, "no further stream");
}
