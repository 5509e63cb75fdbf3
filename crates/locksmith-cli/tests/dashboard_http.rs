//! `locksmith dashboard` over HTTP without a browser: what the page is sent.

#[path = "support/dashboard.rs"]
mod dashboard;

use std::time::Duration;

use locksmith_testkit::NativeServer;

const BIN: &str = env!("CARGO_BIN_EXE_locksmith");

/// The native server allows 100 streams per connection by default; a dashboard observing a
/// stream per lock on a server with more locks than that once stalled: its listing waited for a
/// free stream forever, and the pages got no more states.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_keep_getting_states_on_a_server_with_more_locks_than_streams_per_connection() {
    let server = NativeServer::start(BIN.as_ref());
    let client = locksmith::connect(&server.url()).await.expect("connect");
    for i in 0..150 {
        client.lock(&format!("many-{i:03}")).await.expect("lock").unlock().await.expect("unlock");
    }
    let (_dashboard, port) = dashboard::start(BIN, &server.url(), "");
    let (stream, reader) = dashboard::open_events(port);
    tokio::time::sleep(Duration::from_secs(4)).await;
    let end_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
    let _ = stream.shutdown(std::net::Shutdown::Both);
    let text = String::from_utf8_lossy(&reader.join().expect("the reader")).into_owned();
    let states: Vec<serde_json::Value> = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).expect("a state is JSON"))
        .collect();
    let last = states.last().unwrap_or_else(|| panic!("no state sent: {text}"));
    // A listing every 500 ms: the last state is at most that old (a stalled feed's is seconds
    // old: its streams' first states came in a burst, then nothing).
    let age = end_ms.saturating_sub(last["at_ms"].as_u64().unwrap_or_default());
    assert!(age <= 1500, "the last state sent was read {age} ms before the page closed");
    assert_eq!(last["total"], 150, "{last}");
    assert_eq!(last["source"], "observe");
}
