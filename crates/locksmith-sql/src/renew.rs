//! Lease-mode keep-alive: every hold of a session renewed in one statement per table (one short
//! transaction on MySQL/MariaDB), owner-checked row by row, with `expires_at = now + ttl` by the
//! database clock. A session with only exclusive holds (the mutex) sends one statement, as
//! before; read holds and permits (`locksmith_holds`) add one.

use std::collections::HashSet;

use locksmith_core::Result;

use crate::db::{Db, Pool};
use crate::lease::{on_table, Table};

/// Holds per statement: far below every database's placeholder limit (MySQL 65,535, SQLite
/// 32,766) at three placeholders a hold.
const BATCH: usize = 1000;

/// One hold to renew: `(name, owner column, token)`.
pub(crate) type Hold = (String, String, i64);

/// Each hold with the table its row is in.
pub(crate) type Placed = (Table, Hold);

impl Db {
    /// Renews `holds` (exact `(name, owner, token)` matches only, so a row left by an attempt
    /// whose cleanup failed is never kept alive). Returns the `(name, owner)` pairs renewed;
    /// a hold missing from the answer is gone or taken over.
    pub(crate) async fn renew_all(&self, holds: &[Placed], ttl_ms: i64) -> Result<HashSet<(String, String)>> {
        let pool = self.pool().await?;
        let mut renewed = HashSet::new();
        for table in [Table::Locks, Table::Holds] {
            let of_table: Vec<&Hold> = holds.iter().filter(|(t, _)| *t == table).map(|(_, h)| h).collect();
            for chunk in of_table.chunks(BATCH) {
                let rows = self.timed(move || renew_chunk(pool, table, chunk, ttl_ms)).await?;
                renewed.extend(rows);
            }
        }
        Ok(renewed)
    }
}

/// `(?, ?, ?), (?, ?, ?), …` for `n` holds (MySQL, SQLite: positional placeholders).
fn tuples(n: usize) -> String {
    vec!["(?, ?, ?)"; n].join(", ")
}

async fn renew_chunk(
    pool: &Pool,
    table: Table,
    holds: &[&Hold],
    ttl_ms: i64,
) -> Result<Vec<(String, String)>, sqlx::Error> {
    let name = table.name();
    match pool {
        Pool::Postgres(p) => {
            // Arrays keep the statement text fixed (one prepared statement for any batch).
            let (names, owners, tokens) = columns(holds);
            sqlx::query_as::<_, (String, String)>(on_table!(table,
                "UPDATE ";
                " l SET expires_at = ",
                pg_in_ms!("4"),
                " FROM unnest($1::text[], $2::text[], $3::bigint[]) AS h(name, owner, token) \
                 WHERE l.name = h.name AND l.owner = h.owner AND l.token = h.token RETURNING l.name, l.owner"
            ))
            .bind(names)
            .bind(owners)
            .bind(tokens)
            .bind(ttl_ms)
            .fetch_all(p)
            .await
        }
        Pool::MySql(p) => {
            // No RETURNING: update, then read back which of the rows are ours, in one
            // transaction so the answer describes exactly the rows the update touched.
            let set = tuples(holds.len());
            let update = format!(
                "UPDATE {name} SET expires_at = NOW(6) + INTERVAL ? MICROSECOND \
                 WHERE (name, owner, token) IN ({set})"
            );
            let select = format!("SELECT name, owner FROM {name} WHERE (name, owner, token) IN ({set})");
            let mut tx = p.begin().await?;
            let mut q = sqlx::query(sqlx::AssertSqlSafe(update)).bind(ttl_ms.saturating_mul(1000));
            for &(n, o, t) in holds {
                q = q.bind(n).bind(o).bind(t);
            }
            q.execute(&mut *tx).await?;
            let mut q = sqlx::query_as::<_, (String, String)>(sqlx::AssertSqlSafe(select));
            for &(n, o, t) in holds {
                q = q.bind(n).bind(o).bind(t);
            }
            let rows = q.fetch_all(&mut *tx).await?;
            tx.commit().await?;
            Ok(rows)
        }
        Pool::Sqlite(p) => {
            let update = format!(
                concat!(
                    "UPDATE {} SET expires_at = ",
                    sqlite_now_ms!(),
                    " + ? WHERE (name, owner, token) IN (VALUES {}) RETURNING name, owner"
                ),
                name,
                tuples(holds.len())
            );
            let mut q = sqlx::query_as::<_, (String, String)>(sqlx::AssertSqlSafe(update)).bind(ttl_ms);
            for &(n, o, t) in holds {
                q = q.bind(n).bind(o).bind(t);
            }
            q.fetch_all(p).await
        }
    }
}

/// The holds as three parallel arrays (PostgreSQL `unnest`).
fn columns(holds: &[&Hold]) -> (Vec<String>, Vec<String>, Vec<i64>) {
    let mut out = (Vec::with_capacity(holds.len()), Vec::with_capacity(holds.len()), Vec::with_capacity(holds.len()));
    for &(n, o, t) in holds {
        out.0.push(n.clone());
        out.1.push(o.clone());
        out.2.push(*t);
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn placeholder_tuples_match_the_batch() {
        assert_eq!(super::tuples(2), "(?, ?, ?), (?, ?, ?)");
    }
}
