use locksmith_testkit::{RedisServer, TestCerts, TlsMode, REDIS_TLS_USER};
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probe() {
    locksmith_redis::connect::install_crypto_provider();
    let certs = TestCerts::generate();
    let s = RedisServer::start_tls(&certs, TlsMode::ServerOnly);
    let addr =
        redis::ConnectionAddr::TcpTls { host: "localhost".into(), port: s.port(), insecure: false, tls_params: None };
    let info = redis::IntoConnectionInfo::into_connection_info(addr).unwrap().set_redis_settings(
        redis::RedisConnectionInfo::default().set_username(REDIS_TLS_USER).set_password(s.password()),
    );
    let tls = redis::TlsCertificates { client_tls: None, root_cert: Some(std::fs::read(certs.ca()).unwrap()) };
    let c = redis::Client::build_with_tls(info, tls).unwrap();
    for _ in 0..5 {
        let t = std::time::Instant::now();
        let _conn = c.get_multiplexed_async_connection().await.unwrap();
        println!("tls connect {:?}", t.elapsed());
    }
    let t = std::time::Instant::now();
    let r = rustls_native_certs_probe();
    println!("native certs load: {r} certs, {:?}", t.elapsed());
    let plain = RedisServer::start();
    let pc = redis::Client::open(plain.url()).unwrap();
    for _ in 0..3 {
        let t = std::time::Instant::now();
        let _c = pc.get_multiplexed_async_connection().await.unwrap();
        println!("plain connect {:?}", t.elapsed());
    }
}
fn rustls_native_certs_probe() -> usize {
    std::fs::read_dir("/etc/ssl/certs").map(|d| d.count()).unwrap_or(0)
}
