//! Redlock over TLS-only redis-servers with an ACL user: one URL's TLS settings and credentials
//! reach every instance; refusals that rule a quorum out fail a waiting `lock()` at once with
//! their own error class; a single refusing instance is only a missing vote; caller-built
//! clients can mix TLS and plain instances.

use std::time::{Duration, Instant};

use locksmith::{Error, LockOptions};
use locksmith_core::Backend;
use locksmith_redis::connect;
use locksmith_redlock::RedlockBackend;
use locksmith_testkit::{random_password, RedisServer, TestCerts, TlsMode, REDIS_TLS_USER};

const TTL: Duration = Duration::from_secs(5);

/// Refused credentials or certificates must end a waiting `lock()` long before its timeout.
const FAST: Duration = Duration::from_secs(2);

/// Three TLS-only servers sharing one CA and one password.
struct ThreeTls {
    certs: TestCerts,
    password: String,
    servers: Vec<RedisServer>,
}

impl ThreeTls {
    fn start(mode: TlsMode) -> Self {
        let (certs, password) = (TestCerts::generate(), random_password());
        let servers = (0..3).map(|_| RedisServer::start_tls_with_password(&certs, mode, &password)).collect();
        Self { certs, password, servers }
    }

    /// `redlock://locksmith:PW@localhost:P1,…?tls=true&ca=…` with `password` and `query` added.
    fn url(&self, password: &str, query: &str) -> String {
        let hosts: Vec<String> = self.servers.iter().map(|s| format!("localhost:{}", s.port())).collect();
        format!("redlock://{REDIS_TLS_USER}:{password}@{}?tls=true{query}", hosts.join(","))
    }

    /// The client of instance `i` with `password`, trusting the test CA.
    fn client(&self, i: usize, password: &str) -> redis::Client {
        tls_client(&self.servers[i], password, &self.certs)
    }
}

fn tls_client(server: &RedisServer, password: &str, certs: &TestCerts) -> redis::Client {
    let addr = redis::ConnectionAddr::TcpTls {
        host: "localhost".into(),
        port: server.port(),
        insecure: false,
        tls_params: None,
    };
    let info = redis::IntoConnectionInfo::into_connection_info(addr)
        .unwrap()
        .set_redis_settings(redis::RedisConnectionInfo::default().set_username(REDIS_TLS_USER).set_password(password));
    let tls = redis::TlsCertificates { client_tls: None, root_cert: Some(std::fs::read(certs.ca()).unwrap()) };
    redis::Client::build_with_tls(info, tls).unwrap()
}

fn unfenced() -> LockOptions {
    LockOptions::new().allow_unfenced().timeout(Duration::from_secs(10))
}

/// How many of `clients` hold `key`.
async fn holding(clients: &[redis::Client], key: &str) -> usize {
    connect::install_crypto_provider();
    let mut n = 0;
    for c in clients {
        let mut conn = c.get_multiplexed_async_connection().await.unwrap();
        let v: Option<String> = redis::cmd("GET").arg(key).query_async(&mut conn).await.unwrap();
        n += usize::from(v.is_some());
    }
    n
}

/// A waiting `lock()` on `url`: its error and how long it took.
async fn lock_error(url: &str) -> (Error, Duration) {
    let client = locksmith::connect_with_ttl(url, TTL).await.unwrap();
    let started = Instant::now();
    let e = client.lock_with("tls-job", unfenced()).await.map(|_| ()).unwrap_err();
    let took = started.elapsed();
    println!("{}: {e} (after {took:?})", locksmith_core::driver::redact(url));
    client.close().await;
    (e, took)
}

/// `?tls=true&ca=…` reaches every instance: the lock is set on all three over TLS, then freed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_over_three_tls_instances_locks() {
    let set = ThreeTls::start(TlsMode::ServerOnly);
    let url = set.url(&set.password, &format!("&ca={}&prefix=tls:", set.certs.ca().display()));
    let client = locksmith::connect_with_ttl(&url, TTL).await.unwrap();
    assert!(!client.backend().describe().contains(&set.password));
    let guard = client.lock_with("job", unfenced()).await.unwrap();
    let inspectors: Vec<redis::Client> = (0..3).map(|i| set.client(i, &set.password)).collect();
    assert_eq!(holding(&inspectors, "tls:job").await, 3);
    assert!(guard.unlock().await.unwrap());
    assert_eq!(holding(&inspectors, "tls:job").await, 0);
    client.close().await;
}

/// Mutual TLS on every instance with one `cert=`/`key=` pair.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_with_mutual_tls_locks() {
    let set = ThreeTls::start(TlsMode::ClientCert);
    let c = &set.certs;
    let query = format!("&ca={}&cert={}&key={}", c.ca().display(), c.client_cert().display(), c.client_key().display());
    let client = locksmith::connect_with_ttl(&set.url(&set.password, &query), TTL).await.unwrap();
    let guard = client.lock_with("job", unfenced()).await.unwrap();
    assert!(guard.unlock().await.unwrap());
    client.close().await;
}

/// A wrong password on every instance: a waiting `lock()` ends at once with `Error::Auth`,
/// never showing a password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_everywhere_is_an_auth_error_fast() {
    let set = ThreeTls::start(TlsMode::ServerOnly);
    let wrong = random_password();
    let (e, took) = lock_error(&set.url(&wrong, &format!("&ca={}", set.certs.ca().display()))).await;
    assert!(
        matches!(&e, Error::Auth { message, .. } if message.contains("3 of 3") && message.contains("WRONGPASS")),
        "{e}"
    );
    assert!(took < FAST, "took {took:?}");
    for secret in [&wrong, &set.password] {
        assert!(!e.to_string().contains(secret.as_str()) && !format!("{e:?}").contains(secret.as_str()), "{e:?}");
    }
}

/// A CA that signed none of the servers: `Error::Config` at once. A missing client certificate
/// on mutual-TLS servers is Config too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_refusals_are_config_errors_fast() {
    let set = ThreeTls::start(TlsMode::ClientCert);
    let (e, took) = lock_error(&set.url(&set.password, &format!("&ca={}", set.certs.other_ca().display()))).await;
    assert!(matches!(&e, Error::Config { message, .. } if message.contains("not trusted")), "{e}");
    assert!(took < FAST, "took {took:?}");
    let (e, took) = lock_error(&set.url(&set.password, &format!("&ca={}", set.certs.ca().display()))).await;
    assert!(matches!(&e, Error::Config { message, .. } if message.contains("cert=FILE&key=FILE")), "{e}");
    assert!(took < FAST, "took {took:?}");
}

/// One instance of three refusing our password is a missing vote, not an error: the other two
/// still make a quorum (Redlock tolerates one failed instance whatever the cause).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_refusing_instance_is_only_a_missing_vote() {
    let set = ThreeTls::start(TlsMode::ServerOnly);
    let clients = vec![set.client(0, &set.password), set.client(1, &set.password), set.client(2, "wrong")];
    let backend = RedlockBackend::from_clients(clients, "").unwrap();
    let client = locksmith::Client::new(std::sync::Arc::new(backend), TTL).unwrap();
    let guard = client.lock_with("job", unfenced()).await.unwrap();
    let inspectors: Vec<redis::Client> = (0..3).map(|i| set.client(i, &set.password)).collect();
    assert_eq!(holding(&inspectors, "job").await, 2);
    assert!(guard.unlock().await.unwrap());
    client.close().await;
}

/// Caller-built clients may mix TLS and plain instances (one URL cannot say that).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_clients_mixes_tls_and_plain_instances() {
    let set = ThreeTls::start(TlsMode::ServerOnly);
    let plain = RedisServer::start();
    let clients =
        vec![set.client(0, &set.password), set.client(1, &set.password), redis::Client::open(plain.url()).unwrap()];
    let backend = RedlockBackend::from_clients(clients, "mixed:").unwrap();
    let shown = backend.describe();
    assert!(
        shown.starts_with("redlock[rediss://locksmith@localhost:") && shown.contains(", redis://127.0.0.1:"),
        "{shown}"
    );
    assert!(!shown.contains(&set.password));
    let client = locksmith::Client::new(std::sync::Arc::new(backend), TTL).unwrap();
    let guard = client.lock_with("job", unfenced()).await.unwrap();
    let inspectors =
        vec![set.client(0, &set.password), set.client(1, &set.password), redis::Client::open(plain.url()).unwrap()];
    assert_eq!(holding(&inspectors, "mixed:job").await, 3);
    assert!(guard.unlock().await.unwrap());
    client.close().await;
}

/// `from_clients` refuses sets Redlock cannot run on.
#[test]
fn from_clients_checks_the_set() {
    let open = |u: &str| redis::Client::open(u).unwrap();
    let two = vec![open("redis://a:1"), open("redis://b:1")];
    assert!(
        matches!(RedlockBackend::from_clients(two, ""), Err(Error::InvalidArgument(m)) if m.contains("at least 3"))
    );
    let dup = vec![open("redis://a:1"), open("redis://b:1"), open("redis://a:1")];
    assert!(matches!(RedlockBackend::from_clients(dup, ""), Err(Error::InvalidArgument(m)) if m.contains("twice")));
}
