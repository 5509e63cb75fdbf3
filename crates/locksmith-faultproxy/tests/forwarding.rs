//! Without faults the proxy is transparent; with latency it delays each direction, in order.

mod common;

use std::time::{Duration, Instant};

use common::{round_trip, Echo, SOON};
use locksmith_faultproxy::FaultProxy;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Bytes pass both ways unchanged, including a 1 MiB transfer, and are counted.
#[tokio::test]
async fn bytes_pass_both_ways_unchanged() {
    let echo = Echo::start().await;
    let proxy = FaultProxy::start(echo.addr).await.unwrap();
    let mut stream = TcpStream::connect(proxy.local_addr()).await.unwrap();
    assert_eq!(round_trip(&mut stream, b"hello").await, b"hello");

    // Every byte value, in a pattern that a reordered or dropped chunk would break.
    let big: Vec<u8> = (0..1024 * 1024u32).map(|i| (i * 7 + i / 4096) as u8).collect();
    let (mut r, mut w) = stream.into_split();
    let sent = big.clone();
    let writer = tokio::spawn(async move {
        w.write_all(&sent).await.unwrap();
        // Half-close passes through: the echo server answers with EOF after the data.
        w.shutdown().await.unwrap();
    });
    let mut back = Vec::new();
    tokio::time::timeout(SOON * 4, r.read_to_end(&mut back)).await.unwrap().unwrap();
    writer.await.unwrap();
    assert!(back == big, "1 MiB came back altered ({} bytes)", back.len());

    let stats = proxy.stats();
    assert_eq!(stats.accepted, 1);
    assert_eq!(stats.bytes_to_upstream, 5 + big.len() as u64);
    assert_eq!(stats.bytes_to_client, 5 + big.len() as u64);
}

/// A latency of 50 ms makes a round trip take at least 100 ms, keeps byte order, and zero
/// removes it.
#[tokio::test]
async fn latency_delays_each_direction_in_order() {
    let echo = Echo::start().await;
    let proxy = FaultProxy::start(echo.addr).await.unwrap();
    let mut stream = TcpStream::connect(proxy.local_addr()).await.unwrap();
    assert_eq!(round_trip(&mut stream, b"warm").await, b"warm");

    proxy.set_latency(Duration::from_millis(50));
    let start = Instant::now();
    assert_eq!(round_trip(&mut stream, b"ping").await, b"ping");
    let rtt = start.elapsed();
    assert!(rtt >= Duration::from_millis(100), "round trip took {rtt:?} with 50 ms each way");

    // Separate writes become separate chunks, each with its own release time.
    let mut expected = Vec::new();
    for i in 0..10u8 {
        let msg = [b'a' + i; 3];
        stream.write_all(&msg).await.unwrap();
        expected.extend_from_slice(&msg);
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let mut back = vec![0; expected.len()];
    tokio::time::timeout(SOON, stream.read_exact(&mut back)).await.unwrap().unwrap();
    assert_eq!(back, expected);

    proxy.set_latency(Duration::ZERO);
    let start = Instant::now();
    assert_eq!(round_trip(&mut stream, b"fast").await, b"fast");
    let rtt = start.elapsed();
    assert!(rtt < Duration::from_millis(100), "round trip took {rtt:?} after the latency was removed");
}
