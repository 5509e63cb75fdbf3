//! SQL databases' own named locks on one connection: PostgreSQL session advisory locks, MySQL and
//! MariaDB `GET_LOCK`.

use async_trait::async_trait;
use sqlx::Connection;

use super::{backend, driver_url, taken, Failure, Recipe};

/// What the PostgreSQL baseline row calls it.
pub(super) const POSTGRES_RECIPE: &str = "pg_try_advisory_lock; pg_advisory_unlock";
/// What the MySQL/MariaDB baseline row calls it.
pub(super) const MYSQL_RECIPE: &str = "GET_LOCK(name, 0); RELEASE_LOCK";

/// Advisory lock id of the PostgreSQL recipe (any constant: the bench is its only user).
const PG_LOCK_ID: i64 = 0x6c6f_636b;

/// PostgreSQL: one connection (advisory locks belong to it).
pub(super) struct Postgres {
    conn: sqlx::PgConnection,
}

impl Postgres {
    /// Connects to `url`.
    pub(super) async fn connect(url: &str) -> Result<Self, Failure> {
        let conn = sqlx::PgConnection::connect(&driver_url(url)?).await.map_err(backend("postgres"))?;
        Ok(Self { conn })
    }
}

#[async_trait]
impl Recipe for Postgres {
    async fn cycle(&mut self) -> Result<(), Failure> {
        let got: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
            .bind(PG_LOCK_ID)
            .fetch_one(&mut self.conn)
            .await
            .map_err(backend("postgres"))?;
        if !got {
            return Err(taken("pg_try_advisory_lock"));
        }
        sqlx::query_scalar::<_, bool>("SELECT pg_advisory_unlock($1)")
            .bind(PG_LOCK_ID)
            .fetch_one(&mut self.conn)
            .await
            .map_err(backend("postgres"))?;
        Ok(())
    }

    async fn close(self: Box<Self>) {
        let _ = self.conn.close().await;
    }
}

/// MySQL/MariaDB: one connection (named locks belong to it) and the lock's name.
pub(super) struct MySql {
    conn: sqlx::MySqlConnection,
    name: String,
}

impl MySql {
    /// Connects to `url`; the lock is `<name>-raw`.
    pub(super) async fn connect(url: &str, name: &str) -> Result<Self, Failure> {
        let conn = sqlx::MySqlConnection::connect(&driver_url(url)?).await.map_err(backend("mysql"))?;
        Ok(Self { conn, name: format!("{name}-raw") })
    }
}

#[async_trait]
impl Recipe for MySql {
    async fn cycle(&mut self) -> Result<(), Failure> {
        // CAST: GET_LOCK's integer type differs between MySQL and MariaDB.
        let got: Option<i64> = sqlx::query_scalar("SELECT CAST(GET_LOCK(?, 0) AS SIGNED)")
            .bind(&self.name)
            .fetch_one(&mut self.conn)
            .await
            .map_err(backend("mysql"))?;
        if got != Some(1) {
            return Err(taken("GET_LOCK"));
        }
        sqlx::query_scalar::<_, Option<i64>>("SELECT CAST(RELEASE_LOCK(?) AS SIGNED)")
            .bind(&self.name)
            .fetch_one(&mut self.conn)
            .await
            .map_err(backend("mysql"))?;
        Ok(())
    }

    async fn close(self: Box<Self>) {
        let _ = self.conn.close().await;
    }
}
