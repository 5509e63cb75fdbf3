//! The server's metrics: every name in one place, recorded through the `metrics` facade with
//! one-line calls from the service task, the log writer and the transports. Nothing is recorded
//! anywhere until a recorder is installed (`locksmith serve --metrics-listen` installs the
//! Prometheus exporter), so the calls cost next to nothing without one.
//!
//! The event log at debug level (`LOCKSMITH_LOG=locksmith_server=debug`) is written next to
//! the counters where the service has no line of its own: sessions opened and closed, with
//! their principal.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use metrics::{counter, gauge, histogram};

use crate::machine::{AcquireOutcome, Effect, LimitKind, Record, Refusal, SessionId};

/// Grants, by `kind`: `immediate` (the lock was free) or `queued` (a waiter's turn came).
pub const GRANTS: &str = "locksmith_server_grants_total";
/// Holds released by their owner.
pub const RELEASES: &str = "locksmith_server_releases_total";
/// Sessions whose lease ran out.
pub const SESSION_EXPIRIES: &str = "locksmith_server_session_expiries_total";
/// Sessions opened, by `kind`: `new` or `resumed`.
pub const SESSIONS_OPENED: &str = "locksmith_server_sessions_opened_total";
/// Sessions closed by their client.
pub const SESSIONS_CLOSED: &str = "locksmith_server_sessions_closed_total";
/// Live sessions (gauge), restored ones included.
pub const SESSIONS: &str = "locksmith_server_sessions";
/// Acquires that had to wait in a lock's queue.
pub const WAITS_QUEUED: &str = "locksmith_server_waits_queued_total";
/// Seconds from an acquire being queued to its grant (histogram).
pub const WAIT_SECONDS: &str = "locksmith_server_wait_seconds";
/// Seconds answers waited for their records to be synced before they went out: the disk's share
/// of a grant's or a hand-off's latency (histogram).
pub const DURABLE_DELIVERY_SECONDS: &str = "locksmith_server_durable_delivery_seconds";
/// Requests or connections refused because a limit was reached, by `limit` (see [`Limit`]).
pub const LIMIT_HITS: &str = "locksmith_server_limit_hits_total";
/// Session streams ended because their client did not read them (a full outbox).
pub const OUTBOX_DISCONNECTS: &str = "locksmith_server_outbox_disconnects_total";
/// Session streams ended because a message could not be decoded.
pub const INVALID_MESSAGES: &str = "locksmith_server_invalid_messages_total";
/// Open client connections (gauge).
pub const CONNECTIONS: &str = "locksmith_server_connections";
/// Client connections accepted.
pub const CONNECTIONS_ACCEPTED: &str = "locksmith_server_connections_accepted_total";
/// Failed `accept` calls, by `kind`: `resources` (out of file descriptors or memory; the loop
/// backs off) or `other`.
pub const ACCEPT_ERRORS: &str = "locksmith_server_accept_errors_total";
/// Raft and membership calls refused because they did not come from a node of the cluster (or,
/// for membership changes, from an admin), by `call` and `reason` (`no_proof`, `bad_proof`,
/// `no_node_cert`, `bad_node_cert`, `not_a_member`, `wrong_sender`, `wrong_message`, `bad_term`,
/// `foreign_cluster`, `not_admin`).
pub const RAFT_REFUSED: &str = "locksmith_server_raft_refused_total";
/// Seconds one write-ahead log sync took (histogram).
pub const WAL_SYNC_SECONDS: &str = "locksmith_server_wal_sync_seconds";
/// Records made durable by one sync: how well group commit groups (histogram).
pub const WAL_SYNC_RECORDS: &str = "locksmith_server_wal_sync_records";

/// Histogram buckets for an exporter that needs them, per histogram name.
pub fn histogram_buckets() -> [(&'static str, &'static [f64]); 4] {
    const LATENCY: &[f64] =
        &[0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0];
    const WAIT: &[f64] = &[0.001, 0.01, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0];
    const RECORDS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0];
    [
        (WAIT_SECONDS, WAIT),
        (DURABLE_DELIVERY_SECONDS, LATENCY),
        (WAL_SYNC_SECONDS, LATENCY),
        (WAL_SYNC_RECORDS, RECORDS),
    ]
}

/// Whether a recorder was installed ([`describe`]): only then are the clocks read that the
/// histograms need (the time a wait began, when a batch was submitted, how long a sync took).
/// The counters cost next to nothing without a recorder; the clocks and the map of waits
/// would not.
static RECORDING: AtomicBool = AtomicBool::new(false);

/// Whether the histograms are recorded (see [`RECORDING`]).
pub(crate) fn recording() -> bool {
    RECORDING.load(Ordering::Relaxed)
}

/// Registers every metric's help text with the installed recorder, and from now on records
/// the histograms too (call it once a recorder is installed).
pub fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    RECORDING.store(true, Ordering::Relaxed);
    describe_counter!(GRANTS, "Locks granted, by kind: immediate (free) or queued (a waiter's turn came).");
    describe_counter!(RELEASES, "Holds released by their owner.");
    describe_counter!(SESSION_EXPIRIES, "Sessions whose lease ran out.");
    describe_counter!(SESSIONS_OPENED, "Sessions opened, by kind: new or resumed.");
    describe_counter!(SESSIONS_CLOSED, "Sessions closed by their client.");
    describe_gauge!(SESSIONS, "Live sessions, restored ones included.");
    describe_counter!(WAITS_QUEUED, "Acquires that waited in a lock's queue.");
    describe_histogram!(WAIT_SECONDS, Unit::Seconds, "Time from an acquire being queued to its grant.");
    describe_histogram!(
        DURABLE_DELIVERY_SECONDS,
        Unit::Seconds,
        "Time answers (grants, hand-offs) waited for their records to be synced."
    );
    describe_counter!(LIMIT_HITS, "Refusals because a limit was reached, by limit.");
    describe_counter!(OUTBOX_DISCONNECTS, "Session streams ended because the client did not read them.");
    describe_counter!(INVALID_MESSAGES, "Session streams ended because a message could not be decoded.");
    describe_gauge!(CONNECTIONS, "Open client connections.");
    describe_counter!(CONNECTIONS_ACCEPTED, "Client connections accepted.");
    describe_counter!(
        RAFT_REFUSED,
        "Raft and membership calls refused as not from a node (or an admin), by call and reason."
    );
    describe_counter!(ACCEPT_ERRORS, "Failed accept calls, by kind: resources (descriptors, memory) or other.");
    describe_histogram!(WAL_SYNC_SECONDS, Unit::Seconds, "Duration of one write-ahead log sync.");
    describe_histogram!(WAL_SYNC_RECORDS, Unit::Count, "Records made durable by one sync (group commit).");
}

/// A limit that refused something (the `limit` label of [`LIMIT_HITS`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Limit {
    /// `--max-connections`: a connection over it was closed at once.
    Connections,
    /// `--max-connections-per-address`: a connection from an address that holds that many
    /// already was closed at once.
    ConnectionsPerAddress,
    /// `--first-byte-timeout`: a connection sent nothing after it was accepted.
    FirstByte,
    /// A connection fell silent for longer than its keepalive allows (before the HTTP/2
    /// handshake, which answers pings, was done).
    Silence,
    /// `--open-timeout`: a session stream did not start with `open` in time.
    OpenTimeout,
    /// A call's incomplete message would take its address past its byte budget.
    PartialBytesPerAddress,
    /// The server's live session limit.
    Sessions,
    /// Live sessions of one client (principal, or connection without authentication).
    SessionsPerClient,
    /// A session ended to make room in a full session table for a client holding fewer.
    SessionEvicted,
    /// Holds and waits of one session.
    EntriesPerSession,
    /// Waiters on one lock.
    WaitersPerLock,
    /// Another limit of the lock machine.
    Other,
}

impl Limit {
    /// The label value.
    pub fn label(self) -> &'static str {
        match self {
            Limit::Connections => "connections",
            Limit::ConnectionsPerAddress => "connections_per_address",
            Limit::FirstByte => "first_byte_timeout",
            Limit::Silence => "silence",
            Limit::OpenTimeout => "open_timeout",
            Limit::PartialBytesPerAddress => "partial_bytes_per_address",
            Limit::Sessions => "sessions",
            Limit::SessionsPerClient => "sessions_per_client",
            Limit::SessionEvicted => "session_evicted",
            Limit::EntriesPerSession => "entries_per_session",
            Limit::WaitersPerLock => "waiters_per_lock",
            Limit::Other => "other",
        }
    }
}

/// Counts one refusal by `limit`.
pub(crate) fn limit_hit(limit: Limit) {
    counter!(LIMIT_HITS, "limit" => limit.label()).increment(1);
}

/// Counts a machine refusal when it is a limit.
pub(crate) fn refused(r: &Refusal) {
    if let Some(limit) = limit_of(r) {
        limit_hit(limit);
    }
}

/// Which limit refused `r` (`None`: not a limit).
fn limit_of(r: &Refusal) -> Option<Limit> {
    let Refusal::Limit(kind, _) = r else { return None };
    Some(match kind {
        LimitKind::Sessions => Limit::Sessions,
        LimitKind::SessionsPerClient => Limit::SessionsPerClient,
        LimitKind::EntriesPerSession => Limit::EntriesPerSession,
        LimitKind::WaitersPerLock => Limit::WaitersPerLock,
        _ => Limit::Other,
    })
}

/// A Raft or membership call refused as not from a node of the cluster.
#[cfg(feature = "cluster")]
pub(crate) fn raft_refused(call: &'static str, reason: &'static str) {
    counter!(RAFT_REFUSED, "call" => call, "reason" => reason).increment(1);
}

pub(crate) fn outbox_disconnect() {
    counter!(OUTBOX_DISCONNECTS).increment(1);
}

pub(crate) fn invalid_message() {
    counter!(INVALID_MESSAGES).increment(1);
}

#[cfg(feature = "cluster")]
pub(crate) fn connection_opened() {
    counter!(CONNECTIONS_ACCEPTED).increment(1);
    gauge!(CONNECTIONS).increment(1.0);
}

#[cfg(feature = "cluster")]
pub(crate) fn connection_closed() {
    gauge!(CONNECTIONS).decrement(1.0);
}

#[cfg(feature = "cluster")]
pub(crate) fn accept_error(resources: bool) {
    counter!(ACCEPT_ERRORS, "kind" => if resources { "resources" } else { "other" }).increment(1);
}

/// One write-ahead log sync of `records` records that took `seconds`.
pub(crate) fn wal_sync(seconds: f64, records: usize) {
    histogram!(WAL_SYNC_SECONDS).record(seconds);
    histogram!(WAL_SYNC_RECORDS).record(records as f64);
}

/// Answers that waited `seconds` for their records to be synced.
pub(crate) fn durable_delivery(seconds: f64) {
    histogram!(DURABLE_DELIVERY_SECONDS).record(seconds);
}

/// The sessions a restart brought back (in the snapshot the service starts from).
pub(crate) fn restored(snapshot: &[Record]) {
    let n = snapshot.iter().filter(|r| matches!(r, Record::Session { .. })).count();
    gauge!(SESSIONS).set(n as f64);
}

/// What the service task tracks for its metrics: when each queued acquire was queued. Entries
/// leave on grant, cancel and session end, so it holds no more than the machine's waiters.
#[derive(Debug)]
pub(crate) struct Telemetry {
    queued: HashMap<SessionId, HashMap<u64, Instant>>,
    /// Whether waits are timed: [`recording`] (tests choose).
    timed: fn() -> bool,
}

impl Default for Telemetry {
    fn default() -> Self {
        Self { queued: HashMap::new(), timed: recording }
    }
}

impl Telemetry {
    /// A session was opened (`resumed`: an existing one on a new stream).
    pub(crate) fn opened(&mut self, session: SessionId, open: &crate::pb_impl::Open) {
        let principal = open.principal.as_deref().unwrap_or("-");
        let peer = open.peer.map(|p| p.to_string());
        let peer = peer.as_deref().unwrap_or("-");
        if open.resume.is_some() {
            counter!(SESSIONS_OPENED, "kind" => "resumed").increment(1);
            tracing::debug!(session, principal, peer, "session resumed");
        } else {
            counter!(SESSIONS_OPENED, "kind" => "new").increment(1);
            gauge!(SESSIONS).increment(1.0);
            tracing::debug!(session, principal, peer, "session opened");
        }
    }

    /// The client is closing `session`, which has `ttl_left` (`None`: unknown). A session whose
    /// lease ran out already is ended as expired by the same call instead (counted there).
    pub(crate) fn closing(&mut self, session: SessionId, principal: Option<&str>, ttl_left: Option<Duration>) {
        if ttl_left.is_none_or(|left| left.is_zero()) {
            return;
        }
        counter!(SESSIONS_CLOSED).increment(1);
        gauge!(SESSIONS).decrement(1.0);
        self.queued.remove(&session);
        tracing::debug!(session, principal = principal.unwrap_or("-"), "session closed");
    }

    /// The answer to acquire `request` of `session`.
    pub(crate) fn acquired(&mut self, session: SessionId, request: u64, outcome: AcquireOutcome) {
        match outcome {
            AcquireOutcome::Granted(_) => counter!(GRANTS, "kind" => "immediate").increment(1),
            AcquireOutcome::Queued => {
                counter!(WAITS_QUEUED).increment(1);
                if (self.timed)() {
                    self.queued.entry(session).or_default().insert(request, Instant::now());
                }
            }
            _ => {}
        }
    }

    /// Something the machine did on its own: a waiter's grant, a lease's end.
    pub(crate) fn effect(&mut self, effect: &Effect) {
        match effect {
            Effect::Granted { session, request, .. } => {
                counter!(GRANTS, "kind" => "queued").increment(1);
                if !(self.timed)() {
                    return;
                }
                let since = self.queued.get_mut(session).and_then(|waits| waits.remove(request));
                if let Some(since) = since {
                    histogram!(WAIT_SECONDS).record(since.elapsed().as_secs_f64());
                }
            }
            Effect::Expired { session } => {
                counter!(SESSION_EXPIRIES).increment(1);
                gauge!(SESSIONS).decrement(1.0);
                self.queued.remove(session);
            }
        }
    }

    /// A release that freed a hold.
    pub(crate) fn released(&mut self) {
        counter!(RELEASES).increment(1);
    }

    /// A queued acquire withdrawn by its client.
    pub(crate) fn cancelled(&mut self, session: SessionId, request: u64) {
        if let Some(waits) = self.queued.get_mut(&session) {
            waits.remove(&request);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each limit is counted under its own label: the refusals are made by the real machine and
    /// client table, so a reworded message cannot slip into `other` unnoticed.
    #[test]
    fn machine_limits_are_told_apart_by_their_words() {
        use crate::machine::{Acquire, Limits, LockName, Machine, Owner};
        let t = std::time::Instant::now();
        let small =
            Limits { max_sessions: 2, max_waiters_per_lock: 1, max_entries_per_session: 2, ..Limits::default() };
        let mut m = Machine::new(small, 1);
        let ttl = std::time::Duration::from_secs(10);
        let a = m.open(t, ttl, None, [0; 32]).unwrap().0;
        let b = m.open(t, ttl, None, [0; 32]).unwrap().0;
        let full = m.open(t, ttl, None, [0; 32]).unwrap_err();
        let ask = |m: &mut Machine, s, req, name: &str| {
            m.acquire(t, Acquire::exclusive(s, req, LockName::new(name).unwrap(), Owner::new("o").unwrap(), true))
        };
        ask(&mut m, a, 1, "x").unwrap();
        ask(&mut m, b, 1, "x").unwrap();
        let queue = ask(&mut m, b, 2, "x").unwrap_err();
        ask(&mut m, a, 3, "y").unwrap();
        let entries = ask(&mut m, a, 4, "z").unwrap_err();
        let mut clients = crate::clients::Clients::new(1);
        let open = crate::pb_impl::Open { ttl, resume: None, secret: [0; 32], principal: Some("p".into()), peer: None };
        clients.add(9, &open);
        let per_client = clients.admit(&open).unwrap_err();
        assert_eq!(limit_of(&full), Some(Limit::Sessions), "{full}");
        assert_eq!(limit_of(&queue), Some(Limit::WaitersPerLock), "{queue}");
        assert_eq!(limit_of(&entries), Some(Limit::EntriesPerSession), "{entries}");
        assert_eq!(limit_of(&per_client), Some(Limit::SessionsPerClient), "{per_client}");
        assert_eq!(
            limit_of(&Refusal::Limit(LimitKind::Other, "the OS random number generator failed".into())),
            Some(Limit::Other)
        );
        assert_eq!(limit_of(&Refusal::SessionExpired), None);
    }

    /// Queued acquires are forgotten on grant, cancel and session end: the map never outgrows
    /// the machine's queues.
    #[test]
    fn queued_waits_are_forgotten_when_they_end() {
        let mut t = Telemetry { queued: HashMap::new(), timed: || true };
        t.acquired(1, 10, AcquireOutcome::Queued);
        t.acquired(1, 11, AcquireOutcome::Queued);
        t.acquired(2, 10, AcquireOutcome::Queued);
        t.effect(&Effect::Granted { session: 1, request: 10, token: 5 });
        t.cancelled(1, 11);
        assert!(t.queued.get(&1).is_none_or(HashMap::is_empty));
        t.effect(&Effect::Expired { session: 2 });
        assert!(!t.queued.contains_key(&2));
    }

    /// Without a recorder nobody reads the wait histogram: a queued acquire costs no clock read
    /// and no entry.
    #[test]
    fn waits_are_not_timed_without_a_recorder() {
        let mut t = Telemetry { queued: HashMap::new(), timed: || false };
        t.acquired(1, 10, AcquireOutcome::Queued);
        assert!(t.queued.is_empty());
        t.effect(&Effect::Granted { session: 1, request: 10, token: 5 });
        assert!(t.queued.is_empty());
    }
}
