//! `locksmith sql`: the SQL backends' schema, for teams that manage migrations themselves.
//! `init URL` creates the tables on a database (idempotent); `schema --db …` prints the DDL.
//! Both use the one DDL source, [`locksmith_sql::schema`].

use std::process::ExitCode;

use clap::{Args, Subcommand, ValueEnum};
use locksmith_sql::{Dialect, SqlBackend};

use crate::exit;

/// Arguments of `locksmith sql`.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  locksmith sql schema --db postgres > locksmith.sql  # the DDL, for a migration tool
  locksmith sql init postgres://app@db.internal/app    # create the missing tables now
  locksmith sql init sqlite:///var/lib/app/locks.db")]
pub struct SqlArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: SqlCommand,
}

/// The `sql` subcommands.
#[derive(Debug, Subcommand)]
pub enum SqlCommand {
    /// Create locksmith's tables on a database (idempotent; says which it created). Connect the
    /// clients with `?schema=external` afterwards to keep them from running DDL.
    Init {
        /// `postgres://…`, `mysql://…` or `sqlite://path`.
        url: String,
    },
    /// Print the DDL of locksmith's tables, for a migration tool.
    Schema {
        /// The database family.
        #[arg(long, value_enum)]
        db: Db,
    },
}

/// A database family, as `--db` spells it.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Db {
    /// PostgreSQL.
    Postgres,
    /// MySQL or MariaDB.
    Mysql,
    /// SQLite.
    Sqlite,
}

impl From<Db> for Dialect {
    fn from(db: Db) -> Self {
        match db {
            Db::Postgres => Dialect::Postgres,
            Db::Mysql => Dialect::MySql,
            Db::Sqlite => Dialect::Sqlite,
        }
    }
}

/// Runs a `sql` subcommand.
///
/// # Cancel safety
/// Cancel safe: the DDL is idempotent.
pub async fn sql(args: SqlArgs) -> ExitCode {
    match args.command {
        SqlCommand::Init { url } => init(&url).await,
        SqlCommand::Schema { db } => {
            for ddl in locksmith_sql::schema(db.into()) {
                println!("{ddl};");
            }
            ExitCode::SUCCESS
        }
    }
}

async fn init(url: &str) -> ExitCode {
    let backend = match SqlBackend::from_url(url) {
        Ok(b) => b,
        Err(e) => return exit::report("sql init", &e),
    };
    let report = match backend.init_schema().await {
        Ok(r) => r,
        Err(e) => return exit::report("sql init", &e),
    };
    let target = locksmith::Backend::describe(&backend);
    for table in &report.created {
        println!("created {table}");
    }
    for table in &report.existing {
        println!("exists  {table}");
    }
    println!("schema ready on {target}");
    ExitCode::SUCCESS
}
