//! Helpers shared by the integration tests: a raw Redis connection that plays "the other
//! client" (redis-py, Redisson, an operator with redis-cli).
#![allow(dead_code)]

use redis::aio::MultiplexedConnection;

/// A plain connection to the test server, bypassing locksmith.
pub async fn raw(url: &str) -> MultiplexedConnection {
    redis::Client::open(url).unwrap().get_multiplexed_async_connection().await.unwrap()
}

/// A plain connection to a TLS test server, as its ACL user, trusting its CA; with `certs`,
/// presenting their client certificate.
pub async fn raw_tls(
    server: &locksmith_testkit::RedisServer,
    certs: Option<&locksmith_testkit::TestCerts>,
) -> MultiplexedConnection {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let addr = redis::ConnectionAddr::TcpTls {
        host: "localhost".into(),
        port: server.port(),
        insecure: false,
        tls_params: None,
    };
    let info = redis::IntoConnectionInfo::into_connection_info(addr).unwrap().set_redis_settings(
        redis::RedisConnectionInfo::default()
            .set_username(locksmith_testkit::REDIS_TLS_USER)
            .set_password(server.password()),
    );
    let client_tls = certs.map(|c| redis::ClientTlsConfig {
        client_cert: std::fs::read(c.client_cert()).unwrap(),
        client_key: std::fs::read(c.client_key()).unwrap(),
    });
    let certs = redis::TlsCertificates { client_tls, root_cert: Some(std::fs::read(server.ca()).unwrap()) };
    let client = redis::Client::build_with_tls(info, certs).unwrap();
    client.get_multiplexed_async_connection().await.unwrap()
}

/// Runs one command on `c` and converts its reply.
pub async fn cmd<T: redis::FromRedisValue>(c: &mut MultiplexedConnection, args: &[&str]) -> T {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query_async(c).await.unwrap()
}

/// A unique lock name per test run.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{:08x}", rand::random::<u32>())
}

/// Installs (once per test binary) a `metrics` recorder that counts the drivers' waiter
/// wake-ups, and reads the count so far.
pub fn wakeups() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::{Arc, OnceLock};

    use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};

    struct Wakeups(Arc<AtomicU64>);

    impl Recorder for Wakeups {
        fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
        fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
            match key.name() == locksmith_core::metrics::WAKEUPS {
                true => Counter::from_arc(self.0.clone()),
                false => Counter::noop(),
            }
        }
        fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
            Gauge::noop()
        }
        fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
            Histogram::noop()
        }
    }

    static COUNT: OnceLock<Arc<AtomicU64>> = OnceLock::new();
    let count = COUNT.get_or_init(|| {
        let count = Arc::new(AtomicU64::new(0));
        metrics::set_global_recorder(Wakeups(count.clone())).expect("another metrics recorder is installed");
        count
    });
    count.load(Ordering::Relaxed)
}

/// The number of live waiters `status` reports for `name`.
pub async fn waiters(client: &locksmith::Client, name: &str) -> u64 {
    client.status(Some(name)).await.unwrap().first().map(|s| s.waiters_or_zero()).unwrap_or(0)
}

/// Waits (up to 5 s) until `status` reports `n` waiters on `name`.
pub async fn until_waiters(client: &locksmith::Client, name: &str, n: u64) {
    for _ in 0..2500 {
        if waiters(client, name).await == n {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    panic!("{name}: status never showed {n} waiters (now {})", waiters(client, name).await);
}

/// The server's clock in ms, as the queue scripts read it.
pub async fn server_ms(c: &mut MultiplexedConnection) -> u64 {
    let (s, us): (u64, u64) = cmd(c, &["TIME"]).await;
    s * 1000 + us / 1000
}
