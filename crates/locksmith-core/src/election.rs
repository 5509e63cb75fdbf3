//! Leader election, from the same engine as the mutex: a campaign is a waiting exclusive
//! acquisition that carries the candidate's proposal as the hold's value; the leader is the
//! holder, its term the hold's fencing token (strictly increasing per election), resigning is
//! releasing, and losing leadership is the guard's loss signal. Observers follow the holder
//! through the backend's change notifications (etcd's `concurrency.Election` is the same shape).

use tokio::sync::mpsc;

use crate::{Client, Error, Guard, LockName, LockOptions, LockStatus, Result};

/// Who leads an election.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// The leader's proposal.
    pub value: Option<String>,
    /// The term: the leader's fencing token, greater than every earlier leader's.
    pub term: u64,
    /// The leader's session id.
    pub session: String,
    /// The leader's owner id.
    pub owner: String,
}

impl Leader {
    fn of(status: &LockStatus) -> Option<Leader> {
        status.holder.as_ref().map(|h| Leader {
            value: h.value.clone(),
            term: h.token,
            session: h.session.clone(),
            owner: h.owner.clone(),
        })
    }
}

/// The changes of leader of one election ([`Client::observe`]).
#[derive(Debug)]
pub struct Observer {
    rx: mpsc::Receiver<Result<LockStatus>>,
    /// The term last reported (`Some(None)`: no leader was reported).
    last: Option<Option<u64>>,
}

impl Observer {
    /// The leader now (first call) or after the next change of leader: `Ok(None)` while nobody
    /// leads. `None` when the observation ended (the backend went away; observe again).
    ///
    /// # Cancel safety
    /// Cancel safe: a change not yet returned is returned by the next call.
    pub async fn next(&mut self) -> Option<Result<Option<Leader>>> {
        loop {
            let status = match self.rx.recv().await? {
                Ok(s) => s,
                Err(e) => return Some(Err(e)),
            };
            let leader = Leader::of(&status);
            let term = leader.as_ref().map(|l| l.term);
            if self.last != Some(term) {
                self.last = Some(term);
                return Some(Ok(leader));
            }
        }
    }
}

impl Client {
    /// Campaigns in election `name` with the proposal `value`: waits until this client leads,
    /// then returns the leadership as a guard whose token is the term. Resign with
    /// [`Guard::unlock`]; [`Guard::lost`] tells a leader that it may no longer lead, before
    /// anyone else can be elected.
    ///
    /// ```
    /// # async fn demo(client: locksmith_core::Client) -> locksmith_core::Result<()> {
    /// use locksmith_core::LockOptions;
    /// let leadership = client.campaign("scheduler", "10.0.0.7:8080", LockOptions::new()).await?;
    /// println!("leading in term {}", leadership.token());
    /// leadership.lost().await; // stop acting as the leader
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future withdraws the candidacy.
    ///
    /// # Errors
    /// [`Error::Unsupported`] on backends that cannot keep a proposal and tell observers, or what
    /// [`Client::lock_with`] fails with.
    pub async fn campaign(&self, name: &str, value: &str, opts: LockOptions) -> Result<Guard> {
        if !self.backend().supports_election() {
            return Err(Error::Unsupported(format!(
                "{} offers no leader election (it cannot keep a proposal and tell observers)",
                self.backend().describe()
            )));
        }
        self.lock_with(name, opts.value(value)).await
    }

    /// Follows election `name`: who leads now, then every change of leader.
    ///
    /// ```
    /// # async fn demo(client: locksmith_core::Client) -> locksmith_core::Result<()> {
    /// let mut leaders = client.observe("scheduler").await?;
    /// while let Some(leader) = leaders.next().await {
    ///     match leader? {
    ///         Some(l) => println!("term {}: {:?}", l.term, l.value),
    ///         None => println!("no leader"),
    ///     }
    /// }
    /// # Ok(()) }
    /// ```
    ///
    /// # Cancel safety
    /// Cancel safe: dropping the future (or the observer) ends the observation.
    ///
    /// # Errors
    /// An invalid name, [`Error::Unsupported`] on backends that cannot tell of changes, or an
    /// unreachable backend.
    pub async fn observe(&self, name: &str) -> Result<Observer> {
        let name = LockName::new(name)?;
        let rx = self.backend().observe(&name).await?;
        Ok(Observer { rx, last: None })
    }
}
