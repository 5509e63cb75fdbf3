//! `hosts` and `rewrite_hosts` on every backend URL shape.

use locksmith_faultproxy::{hosts, rewrite_hosts, UrlError};

/// Maps `127.0.0.1:P` to `127.0.0.1:P+1000` and anything else to an error.
fn shift(host: &str) -> Result<String, String> {
    let (h, p) = host.rsplit_once(':').ok_or("no port")?;
    let p: u16 = p.parse().map_err(|_| "bad port")?;
    Ok(format!("{h}:{}", p + 1000))
}

#[test]
fn native_url_has_one_host() {
    assert_eq!(hosts("locksmith://127.0.0.1:7531").unwrap(), ["127.0.0.1:7531"]);
    assert_eq!(rewrite_hosts("locksmith://127.0.0.1:7531", shift).unwrap(), "locksmith://127.0.0.1:8531");
    assert_eq!(hosts("locksmith://localhost").unwrap(), ["127.0.0.1:7531"]);
}

#[test]
fn redis_url_keeps_credentials_db_and_query() {
    let url = "redis://user:p%40ss@localhost:6379/2?mode=reentrant&prefix=x";
    assert_eq!(hosts(url).unwrap(), ["127.0.0.1:6379"]);
    assert_eq!(rewrite_hosts(url, shift).unwrap(), "redis://user:p%40ss@127.0.0.1:7379/2?mode=reentrant&prefix=x");
    assert_eq!(rewrite_hosts("redis://127.0.0.1:6379", shift).unwrap(), "redis://127.0.0.1:7379");
    assert_eq!(
        rewrite_hosts("redis://:pw@127.0.0.1?mode=plain", shift).unwrap(),
        "redis://:pw@127.0.0.1:7379?mode=plain"
    );
}

#[test]
fn redlock_url_lists_every_instance_in_order() {
    let url = "redlock://:pw@127.0.0.1:6381,127.0.0.1:6379,127.0.0.1:6380?prefix=p";
    assert_eq!(hosts(url).unwrap(), ["127.0.0.1:6381", "127.0.0.1:6379", "127.0.0.1:6380"]);
    assert_eq!(
        rewrite_hosts(url, shift).unwrap(),
        "redlock://:pw@127.0.0.1:7381,127.0.0.1:7379,127.0.0.1:7380?prefix=p"
    );
}

#[test]
fn etcd_url_with_one_or_more_endpoints() {
    assert_eq!(hosts("etcd://127.0.0.1:2379").unwrap(), ["127.0.0.1:2379"]);
    assert_eq!(hosts("etcd://10.0.0.1,etcd-2:2380").unwrap(), ["10.0.0.1:2379", "etcd-2:2380"]);
    assert_eq!(
        rewrite_hosts("etcd://127.0.0.1:2379,127.0.0.1:2380", shift).unwrap(),
        "etcd://127.0.0.1:3379,127.0.0.1:3380"
    );
}

#[test]
fn zk_url_keeps_its_chroot() {
    let url = "zk://127.0.0.1:2181,localhost:2182/locks/app";
    assert_eq!(hosts(url).unwrap(), ["127.0.0.1:2181", "127.0.0.1:2182"]);
    assert_eq!(rewrite_hosts(url, shift).unwrap(), "zk://127.0.0.1:3181,127.0.0.1:3182/locks/app");
    assert_eq!(hosts("zk://127.0.0.1").unwrap(), ["127.0.0.1:2181"]);
}

#[test]
fn sql_urls_keep_user_database_and_query() {
    let pg = "postgresql://me:secret@localhost:5432/locks?mode=lease";
    assert_eq!(hosts(pg).unwrap(), ["127.0.0.1:5432"]);
    assert_eq!(rewrite_hosts(pg, shift).unwrap(), "postgresql://me:secret@127.0.0.1:6432/locks?mode=lease");
    assert_eq!(hosts("postgres://me@db.internal/locks").unwrap(), ["db.internal:5432"]);
    let my = "mysql://root@127.0.0.1:3306/locks";
    assert_eq!(hosts(my).unwrap(), ["127.0.0.1:3306"]);
    assert_eq!(rewrite_hosts(my, shift).unwrap(), "mysql://root@127.0.0.1:4306/locks");
}

#[test]
fn ipv6_literals_keep_their_brackets() {
    assert_eq!(hosts("etcd://[::1]:2379,[::1]").unwrap(), ["[::1]:2379", "[::1]:2379"]);
}

#[test]
fn urls_without_network_hosts_are_refused() {
    assert!(matches!(hosts("sqlite:///tmp/locks.db"), Err(UrlError::NoHosts { scheme }) if scheme == "sqlite"));
    assert!(matches!(hosts("memory://x"), Err(UrlError::NoHosts { .. })));
    assert!(matches!(rewrite_hosts("sqlite://locks.db", shift), Err(UrlError::NoHosts { .. })));
}

#[test]
fn malformed_urls_are_typed_errors() {
    assert!(matches!(hosts("127.0.0.1:7531"), Err(UrlError::Invalid(_))));
    assert!(hosts("gopher://h:1").is_err_and(|e| e.to_string().contains("unknown scheme \"gopher\"")));
    for bad in [
        "redlock://a:1,,c:3",
        "redis://:6379",
        "etcd://a:0",
        "etcd://a:x",
        "zk://a:70000",
        "etcd://[::1",
        "locksmith://",
    ] {
        assert!(matches!(hosts(bad), Err(UrlError::Invalid(_))), "{bad} was accepted");
    }
}

#[test]
fn map_errors_name_the_host_but_not_the_password() {
    let err = rewrite_hosts("redis://u:hunter2@127.0.0.1:6379", |_| Err("no proxy")).unwrap_err();
    assert!(matches!(err, UrlError::Map { ref host, .. } if host == "127.0.0.1:6379"));
    let shown = err.to_string();
    assert!(shown.contains("127.0.0.1:6379") && shown.contains("no proxy"), "{shown}");
    assert!(!shown.contains("hunter2"), "{shown}");
}
