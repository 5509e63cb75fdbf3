//! Live sessions per client, so that one client cannot fill the server's session table and
//! lock everyone else out. A client is its principal when the server authenticates (a token or
//! certificate, wherever it connects from), otherwise its address (every process of one host
//! counts together, as ZooKeeper's `maxClientCnxns` does). In-process clients (`memory://`)
//! have neither and are not limited.

use std::collections::HashMap;

use crate::machine::{LimitKind, Refusal, SessionId};
use crate::pb_impl::Open;

#[derive(Debug)]
pub(crate) struct Clients {
    max: usize,
    live: HashMap<String, usize>,
    of: HashMap<SessionId, String>,
}

impl Clients {
    pub(crate) fn new(max: usize) -> Self {
        Self { max, live: HashMap::new(), of: HashMap::new() }
    }

    fn key(open: &Open) -> Option<String> {
        match (&open.principal, open.peer) {
            (Some(p), _) => Some(format!("principal {p}")),
            (None, Some(ip)) => Some(format!("address {ip}")),
            (None, None) => None,
        }
    }

    /// Whether `open` may open one more session.
    pub(crate) fn admit(&self, open: &Open) -> Result<(), Refusal> {
        let Some(key) = Self::key(open) else { return Ok(()) };
        if self.live.get(&key).copied().unwrap_or(0) >= self.max {
            return Err(Refusal::Limit(
                LimitKind::SessionsPerClient,
                format!(
                    "{} sessions of one client ({key}); close some, or ask the operator for --max-sessions-per-client",
                    self.max
                ),
            ));
        }
        Ok(())
    }

    /// Counts `session` for `open`'s client (a resumed session restored after a restart is
    /// counted when it comes back).
    pub(crate) fn add(&mut self, session: SessionId, open: &Open) {
        let Some(key) = Self::key(open) else { return };
        if self.of.contains_key(&session) {
            return;
        }
        *self.live.entry(key.clone()).or_default() += 1;
        self.of.insert(session, key);
    }

    /// Forgets `session` (closed or expired).
    pub(crate) fn remove(&mut self, session: SessionId) {
        let Some(key) = self.of.remove(&session) else { return };
        if let Some(n) = self.live.get_mut(&key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.live.remove(&key);
            }
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
    fn a_client_is_its_principal_or_else_its_address_and_each_is_bounded() {
        let mut c = Clients::new(2);
        let a = open(None, Some("10.0.0.1"));
        let jobs_here = open(Some("jobs"), Some("10.0.0.1"));
        let jobs_there = open(Some("jobs"), Some("10.0.0.2"));
        c.add(1, &a);
        c.add(2, &a);
        assert!(matches!(c.admit(&a), Err(Refusal::Limit(_, m)) if m.contains("address 10.0.0.1")));
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
}
