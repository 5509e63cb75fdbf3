//! Live sessions per client, so that no client can fill the server's session table and lock
//! everyone else out.
//!
//! A *client* is its principal when the server authenticates (a token or certificate, wherever
//! it connects from), otherwise its connection (address and port: one `locksmith` process
//! uses one connection for all its sessions). Keying anonymous clients by address alone let one
//! local process lock every other process of the host out for a TTL, since all of them share
//! `127.0.0.1`. Each client may hold `--max-sessions-per-client` sessions.
//!
//! A connection is cheap to open again, so the session table (`--max-sessions`) is shared
//! fairly too: clients are grouped by principal, or without one by address, and when the table
//! is full a newcomer makes room by ending a session of the group holding the most — provided
//! its own group holds fewer — preferring a session that has no stream (its client is gone or
//! reconnecting), else one of the group's largest client, which must then hold more than the
//! newcomer's own. Whoever fills the table loses sessions to newcomers; a newcomer never loses
//! to it. In-process clients (`memory://`) have neither principal nor address and are neither
//! limited nor evicted.

use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::machine::{LimitKind, Refusal, SessionId};
use crate::pb_impl::Open;

#[derive(Debug)]
pub(crate) struct Clients {
    max: usize,
    groups: HashMap<String, Group>,
    of: HashMap<SessionId, Key>,
    /// When an eviction was last logged, and how many were not since: a client churning
    /// sessions in a full table must not flood the log.
    quiet: (Option<Instant>, u64),
}

/// Evictions are logged at most once per this.
const LOG_EVERY: Duration = Duration::from_secs(10);

/// The sessions of one principal, or of one address without authentication.
#[derive(Debug, Default)]
struct Group {
    total: usize,
    clients: HashMap<String, BTreeSet<SessionId>>,
    /// Its sessions with no stream now.
    detached: BTreeSet<SessionId>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Key {
    group: String,
    client: String,
}

impl Key {
    fn of(open: &Open) -> Option<Self> {
        match (&open.principal, open.peer) {
            (Some(p), _) => Some(Self { group: format!("principal {p}"), client: format!("principal {p}") }),
            (None, Some(peer)) => Some(Self { group: format!("address {}", peer.ip()), client: connection(peer) }),
            (None, None) => None,
        }
    }
}

fn connection(peer: SocketAddr) -> String {
    format!("connection {peer}")
}

impl Clients {
    pub(crate) fn new(max: usize) -> Self {
        Self { max, groups: HashMap::new(), of: HashMap::new(), quiet: (None, 0) }
    }

    fn count(&self, key: &Key) -> (usize, usize) {
        self.groups.get(&key.group).map_or((0, 0), |g| (g.total, g.clients.get(&key.client).map_or(0, BTreeSet::len)))
    }

    /// Whether `open` may open one more session.
    pub(crate) fn admit(&self, open: &Open) -> Result<(), Refusal> {
        let Some(key) = Key::of(open) else { return Ok(()) };
        if self.count(&key).1 >= self.max {
            return Err(Refusal::Limit(
                LimitKind::SessionsPerClient,
                format!(
                    "{} sessions of one client ({}); close some, or ask the operator for --max-sessions-per-client",
                    self.max, key.client
                ),
            ));
        }
        Ok(())
    }

    /// The session to end so that `open` gets a place in a full session table (see the module
    /// doc), if the table is shared unfairly enough to take one.
    pub(crate) fn make_room(&self, open: &Open) -> Option<SessionId> {
        let key = Key::of(open)?;
        let (mine, my_client) = self.count(&key);
        let (name, largest) = self.groups.iter().max_by_key(|(_, g)| g.total)?;
        let same = *name == key.group;
        if !same && mine + 1 >= largest.total {
            return None;
        }
        if let Some(s) = largest.detached.first() {
            return Some(*s);
        }
        let (client, sessions) = largest.clients.iter().max_by_key(|(_, s)| s.len())?;
        if same && (*client == key.client || my_client + 1 >= sessions.len()) {
            return None;
        }
        // Its newest: the one that filled the table last.
        sessions.last().copied()
    }

    /// Whether to log an eviction now: `Some(evictions not logged since the last line)`.
    pub(crate) fn log_eviction(&mut self) -> Option<u64> {
        let now = Instant::now();
        if self.quiet.0.is_some_and(|last| now.duration_since(last) < LOG_EVERY) {
            self.quiet.1 += 1;
            return None;
        }
        self.quiet.0 = Some(now);
        Some(std::mem::take(&mut self.quiet.1))
    }

    /// Counts `session` for `open`'s client (a resumed session restored after a restart is
    /// counted when it comes back), with a stream.
    pub(crate) fn add(&mut self, session: SessionId, open: &Open) {
        let Some(key) = Key::of(open) else { return };
        if self.of.contains_key(&session) {
            self.attach(session, true);
            return;
        }
        let group = self.groups.entry(key.group.clone()).or_default();
        group.total += 1;
        group.clients.entry(key.client.clone()).or_default().insert(session);
        self.of.insert(session, key);
    }

    /// Records whether `session` has a stream now.
    pub(crate) fn attach(&mut self, session: SessionId, attached: bool) {
        let Some(key) = self.of.get(&session) else { return };
        let Some(group) = self.groups.get_mut(&key.group) else { return };
        if attached {
            group.detached.remove(&session);
        } else {
            group.detached.insert(session);
        }
    }

    /// Forgets `session` (closed, expired or evicted).
    pub(crate) fn remove(&mut self, session: SessionId) {
        let Some(key) = self.of.remove(&session) else { return };
        let Some(group) = self.groups.get_mut(&key.group) else { return };
        group.total = group.total.saturating_sub(1);
        group.detached.remove(&session);
        if let Some(sessions) = group.clients.get_mut(&key.client) {
            sessions.remove(&session);
            if sessions.is_empty() {
                group.clients.remove(&key.client);
            }
        }
        if group.total == 0 {
            self.groups.remove(&key.group);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn open(principal: Option<&str>, peer: Option<&str>) -> Open {
        Open {
            ttl: Duration::from_secs(1),
            resume: None,
            secret: [0; 32],
            principal: principal.map(str::to_string),
            peer: peer.map(|p| p.parse().unwrap()),
        }
    }

    #[test]
    fn a_client_is_its_principal_or_else_its_connection_and_each_is_bounded() {
        let mut c = Clients::new(2);
        let a = open(None, Some("10.0.0.1:5000"));
        let a_again = open(None, Some("10.0.0.1:5001"));
        let jobs_here = open(Some("jobs"), Some("10.0.0.1:5000"));
        let jobs_there = open(Some("jobs"), Some("10.0.0.2:6000"));
        c.add(1, &a);
        c.add(2, &a);
        assert!(matches!(c.admit(&a), Err(Refusal::Limit(_, m)) if m.contains("connection 10.0.0.1:5000")));
        assert!(c.admit(&a_again).is_ok(), "another connection of the same address is another client");
        assert!(c.admit(&jobs_here).is_ok(), "a principal is counted apart from its address");
        c.add(3, &jobs_here);
        c.add(4, &jobs_there);
        assert!(c.admit(&jobs_here).is_err(), "a principal's sessions count wherever they connect from");
        c.remove(1);
        assert!(c.admit(&a).is_ok());
        assert!(c.admit(&open(None, None)).is_ok(), "in-process clients are not limited");
        c.add(2, &a);
        c.add(5, &a);
        assert!(c.admit(&a).is_err(), "adding a counted session again changes nothing");
    }

    /// A full table: newcomers take room from whoever holds the most, never the other way.
    #[test]
    fn a_full_table_makes_room_from_the_largest_holder_never_from_a_smaller_one() {
        let mut c = Clients::new(100);
        let abuser = open(None, Some("127.0.0.1:4000"));
        for s in 1..=6 {
            c.add(s, &abuser);
        }
        // A neighbour on the same address, on its own connection.
        let neighbour = open(None, Some("127.0.0.1:4001"));
        assert_eq!(c.make_room(&neighbour), Some(6), "the abuser's newest session goes");
        c.remove(6);
        c.add(7, &neighbour);
        // The abuser cannot take it back: the neighbour holds fewer.
        assert_eq!(c.make_room(&abuser), None);
        // Another host: from the largest group.
        assert_eq!(c.make_room(&open(None, Some("10.0.0.9:1"))), Some(5));
        // Sessions without a stream go first, whoever's they are.
        c.attach(7, false);
        assert_eq!(c.make_room(&open(Some("ops"), None)), Some(7));
        c.attach(7, true);
        // Equal groups: nobody is evicted for someone who already holds as much.
        let mut even = Clients::new(100);
        even.add(1, &open(Some("a"), None));
        even.add(2, &open(Some("b"), None));
        assert_eq!(even.make_room(&open(Some("a"), None)), None);
        assert_eq!(even.make_room(&open(None, None)), None, "in-process clients take no one's place");
    }
}
