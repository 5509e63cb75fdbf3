//! `locksmith run` on SQL backends: several OS processes sharing one SQLite file never overlap
//! and see strictly increasing tokens, and the process properties of the contract (kill -9,
//! SIGSTOP past the TTL, Ctrl-C while waiting, exit codes) on `sqlite://`.

use std::process::{Command, Stdio};

use locksmith_core::conformance::UrlTarget;
use locksmith_testkit::CliTarget;

const BIN: &str = env!("CARGO_BIN_EXE_locksmith");

fn sqlite() -> CliTarget {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("locks.db").display());
    CliTarget::new(BIN, UrlTarget::new(url, locksmith::backend).fifo(false).reports_waiters(false).keeping(dir))
}

locksmith_testkit::process_conformance_suite!(sqlite());

/// Eight `locksmith run` processes on one SQLite file, started together: the critical sections
/// strictly alternate (enter, exit, enter, exit…) and the tokens strictly increase.
#[test]
fn sqlite_processes_on_one_file_never_overlap() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("locks.db").display());
    let log = dir.path().join("log");
    let script = format!("echo \"enter $LOCKSMITH_TOKEN\" >> '{0}'; sleep 0.05; echo exit >> '{0}'", log.display());
    let children: Vec<_> = (0..8)
        .map(|_| {
            Command::new(BIN)
                .args(["run", "alternation", "--backend", &url, "--ttl", "5s", "--timeout", "30s", "--"])
                .args(["sh", "-c", &script])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "locksmith run failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 16, "{text}");
    let mut last = 0u64;
    for pair in lines.chunks(2) {
        let token: u64 = pair[0].strip_prefix("enter ").and_then(|t| t.parse().ok()).unwrap_or_else(|| {
            panic!("expected `enter TOKEN`, got {:?} in\n{text}", pair[0]);
        });
        assert_eq!(pair[1], "exit", "critical sections overlapped:\n{text}");
        assert!(token > last, "token {token} not above {last}:\n{text}");
        last = token;
    }
}

/// `locksmith ARGS…`, returning (exit code, stdout, stderr).
fn locksmith(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN).args(args).stdin(Stdio::null()).output().unwrap();
    let code = out.status.code().unwrap_or(-1);
    (code, String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// A client whose URL says `schema=external` fails on an un-initialised database with an error
/// naming `locksmith sql init`; `sql init` creates the tables (twice: idempotent) and the same
/// client then works, in the lease mode and (where the database has it) the row-lock mode.
async fn init_makes_an_external_schema_usable(url: &str, tables: &[&str]) {
    let sep = if url.contains('?') { '&' } else { '?' };
    let external = format!("{url}{sep}schema=external");
    let client = locksmith::connect(&external).await.unwrap();
    let err = client.try_lock("before-init").await.map(|_| ()).unwrap_err().to_string();
    assert!(err.contains("locksmith sql init"), "the error does not name `locksmith sql init`: {err}");
    assert!(err.contains("locksmith_locks"), "the error does not name the missing table: {err}");

    let (code, out, err) = locksmith(&["sql", "init", url]);
    assert_eq!(code, 0, "sql init: {err}");
    for t in tables {
        assert!(out.contains(&format!("created {t}")), "first init did not create {t}:\n{out}");
    }
    let (code, out, err) = locksmith(&["sql", "init", url]);
    assert_eq!(code, 0, "second sql init: {err}");
    assert!(!out.contains("created"), "second init created something:\n{out}");
    for t in tables {
        assert!(out.contains(&format!("exists  {t}")), "second init does not report {t}:\n{out}");
    }

    let g = client.try_lock("after-init").await.unwrap().expect("free lock after init");
    assert!(g.unlock().await.unwrap());
    client.close().await;
    if tables.contains(&"locksmith_rows") {
        let rows = locksmith::connect(&format!("{external}&mode=row_lock")).await.unwrap();
        let g = rows.try_lock("after-init").await.unwrap().expect("free row lock after init");
        assert!(g.unlock().await.unwrap());
        rows.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_init_on_postgres_is_idempotent_and_serves_schema_external() {
    let server = locksmith_testkit::PostgresServer::start();
    init_makes_an_external_schema_usable(&server.url(), &["locksmith_locks", "locksmith_fence", "locksmith_rows"])
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_init_on_mariadb_is_idempotent_and_serves_schema_external() {
    let server = locksmith_testkit::MySqlServer::start();
    init_makes_an_external_schema_usable(&server.url(), &["locksmith_locks", "locksmith_fence", "locksmith_rows"])
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_init_on_sqlite_is_idempotent_and_serves_schema_external() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("locks.db").display());
    init_makes_an_external_schema_usable(&url, &["locksmith_locks", "locksmith_fence"]).await;
}

/// `sql schema --db postgres` prints DDL that PostgreSQL's own client applies, after which a
/// `schema=external` client works: what a migration tool would do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_schema_prints_ddl_a_migration_tool_can_apply() {
    for (db, has_rows) in [("postgres", true), ("mysql", true), ("sqlite", false)] {
        let (code, out, err) = locksmith(&["sql", "schema", "--db", db]);
        assert_eq!(code, 0, "sql schema --db {db}: {err}");
        assert!(out.contains("CREATE TABLE IF NOT EXISTS locksmith_locks"), "{db}:\n{out}");
        assert!(out.contains("CREATE TABLE IF NOT EXISTS locksmith_fence"), "{db}:\n{out}");
        assert_eq!(out.contains("locksmith_rows"), has_rows, "{db}:\n{out}");
    }
    let server = locksmith_testkit::PostgresServer::start();
    let (_, ddl, _) = locksmith(&["sql", "schema", "--db", "postgres"]);
    let mut psql = Command::new("psql")
        .args([server.url().as_str(), "-v", "ON_ERROR_STOP=1", "-q", "-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("psql (scripts/setup.sh installs postgresql)");
    std::io::Write::write_all(&mut psql.stdin.take().unwrap(), ddl.as_bytes()).unwrap();
    let out = psql.wait_with_output().unwrap();
    assert!(out.status.success(), "psql refused the DDL: {}", String::from_utf8_lossy(&out.stderr));
    let client = locksmith::connect(&format!("{}?schema=external&mode=row_lock", server.url())).await.unwrap();
    let g = client.try_lock("migrated").await.unwrap().expect("free lock");
    assert!(g.unlock().await.unwrap());
    client.close().await;
}

#[test]
fn sql_commands_refuse_bad_input_with_the_usage_exit_code() {
    for args in [
        &["sql", "init", "redis://127.0.0.1:1"][..],
        &["sql", "init", "not a url"],
        &["sql", "init", "sqlite:///tmp/x.db?mode=row_lock"],
        &["sql", "schema", "--db", "oracle"],
    ] {
        let (code, _, err) = locksmith(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(!err.is_empty(), "{args:?}: no message");
    }
}

/// A database that refuses connections is "unreachable" (exit 69, naming the refusal), not a
/// lock wait that timed out (75), even with a short `--timeout`; nothing runs.
#[test]
fn a_refused_database_connection_exits_69_not_75() {
    for scheme in ["postgres", "mysql"] {
        let url = format!("{scheme}://locksmith@127.0.0.1:{}/locks", locksmith_testkit::free_port());
        let o = Command::new(BIN)
            .args(["run", "refused", "--backend", &url, "--timeout", "1s", "--", "echo", "ran"])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(69), "{scheme}: {err}");
        assert!(err.to_lowercase().contains("connection refused"), "{scheme}: {err}");
        assert_eq!(err.to_lowercase().matches("connection refused").count(), 1, "said more than once: {err}");
        assert!(o.stdout.is_empty(), "the command ran");
    }
}
