//! One SQL acquisition as the toolkit's [`WaitLoop`](locksmith_core::driver::WaitLoop) runs it:
//! one short transaction per attempt, woken by NOTIFY on PostgreSQL (elsewhere the fallback
//! timer alone), with the writer's announcement kept fresh between attempts.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use locksmith_core::driver::{Attempt, Busy, CancelGuard, Try};
use locksmith_core::{AcquireRequest, Error, HoldMode, Result};

use crate::db::Db;
use crate::lease::{self, Ask, Table, ANNOUNCEMENT_REFRESH};
use crate::notify::Registration;
use crate::session::SqlSession;

type RowRef = (Arc<Db>, Table, String, String);

/// Armed while a row of ours may be left behind: deletes `owner`'s row of `name` in `table`
/// (owner-checked, so it can never hit someone else's) if the guard is dropped armed. `what`
/// names the row in the cancel guard, and a failed delete is logged at `level` with `failed`:
/// nothing is lost by it, since the row's lease ends it anyway.
fn delete_row_on_drop(
    what: &'static str,
    failed: &'static str,
    level: tracing::Level,
    row: RowRef,
) -> CancelGuard<RowRef> {
    CancelGuard::new(what, row, move |(db, table, name, owner)| {
        Some(async move {
            if let Err(e) = db.delete_owner(table, &name, &owner).await {
                if level == tracing::Level::WARN {
                    tracing::warn!(%name, error = %e, "{failed}");
                } else {
                    tracing::debug!(%name, error = %e, "{failed}");
                }
            }
        })
    })
}

/// Armed while one attempt's outcome is unknown (a dropped future, an error while the
/// transaction may have committed): deletes the attempt's row. The owner column is unique per
/// attempt, so the delete can never hit a later hold.
fn delete_on_drop(db: Arc<Db>, table: Table, name: String, owner: String) -> CancelGuard<RowRef> {
    delete_row_on_drop(
        "sql attempt",
        "cleanup of an unfinished acquisition failed; the lease expires it",
        tracing::Level::WARN,
        (db, table, name, owner),
    )
}

/// Armed from a waiting writer's first announcement until its acquisition ends: a writer that
/// gives up (a timeout, a dropped future, an error) deletes its announcement at once, so readers
/// need not wait for its lease (PostgreSQL also wakes them). A grant deletes it in the granting
/// transaction and disarms this.
fn withdraw_on_drop(db: Arc<Db>, name: String, owner: String) -> CancelGuard<RowRef> {
    delete_row_on_drop(
        "sql writer announcement",
        "withdrawing a writer's announcement failed; its lease ends it",
        tracing::Level::DEBUG,
        (db, Table::Holds, name, owner),
    )
}

/// The state of one acquisition between its attempts.
pub(crate) struct SqlAttempt<'a> {
    pub(crate) session: &'a SqlSession,
    pub(crate) req: &'a AcquireRequest,
    pub(crate) table: Table,
    /// PostgreSQL's NOTIFY registration of a waiter.
    pub(crate) waiting: Option<Registration>,
    /// This writer's announcement, once made: its owner column and what withdraws it.
    pub(crate) announced: Option<(String, CancelGuard<RowRef>)>,
}

impl SqlAttempt<'_> {
    /// Writer preference: a writer kept out by readers announces itself, and keeps the
    /// announcement fresh until it gets in, whatever is in its way meanwhile.
    async fn announce(&mut self) {
        let (db, req) = (&self.session.db, self.req);
        let owner = match &self.announced {
            Some((owner, _)) => owner.clone(),
            None => {
                let owner = self.session.column(&req.owner);
                let withdraw = withdraw_on_drop(db.clone(), req.name.to_string(), owner.clone());
                self.announced = Some((owner.clone(), withdraw));
                owner
            }
        };
        // Without it the writer only loses its preference; the grant path still works.
        if let Err(e) = db.announce_writer(req.name.as_str(), &owner).await {
            tracing::debug!(name = %req.name, error = %e, "a waiting writer could not announce itself");
        }
    }
}

impl Attempt for SqlAttempt<'_> {
    async fn try_once(&mut self) -> Result<Try> {
        let (session, req, table) = (self.session, self.req, self.table);
        let db = &session.db;
        let column = session.column(&req.owner);
        // A transient error may have come after the commit: the guard then deletes the row.
        let cleanup = delete_on_drop(db.clone(), table, req.name.to_string(), column.clone());
        let ask = Ask {
            name: req.name.as_str(),
            owner: &column,
            mode: req.mode,
            ttl_ms: session.ttl_ms,
            announced: self.announced.as_ref().map(|(owner, _)| owner.as_str()),
        };
        let (left, readers) = match db.try_acquire(ask).await? {
            lease::Attempt::Granted(token) => {
                cleanup.disarm();
                // The granting transaction deleted the announcement.
                if let Some((_, withdraw)) = self.announced.take() {
                    withdraw.disarm();
                }
                if session.closed.load(Ordering::SeqCst) {
                    db.release(table, req.name.as_str(), &column, token).await?;
                    return Err(Error::SessionExpired);
                }
                session.holds.insert(req.name.clone(), req.owner.clone(), token, (table, column));
                // One release may admit several readers or permit holders: the next local
                // waiter tries too.
                if let (Some(reg), false) = (&self.waiting, req.mode == HoldMode::Exclusive) {
                    reg.pass_on();
                }
                return Ok(Try::Granted(token));
            }
            lease::Attempt::Busy { left, readers } => {
                cleanup.disarm();
                (left, readers)
            }
            lease::Attempt::Refused(why) => {
                cleanup.disarm();
                return Err(Error::InvalidArgument(why));
            }
        };
        if req.wait && (readers || self.announced.is_some()) {
            self.announce().await;
        }
        let busy = Busy::left(left);
        Ok(Try::Busy(match self.announced {
            Some(_) => busy.at_most(ANNOUNCEMENT_REFRESH),
            None => busy,
        }))
    }

    async fn woken(&mut self) {
        // A NOTIFY does not restart the backoff (the loop never does): every waiting client
        // hears it, and all but one find the lock taken again.
        match &self.waiting {
            Some(reg) => reg.notified().await,
            None => std::future::pending().await,
        }
    }
}
