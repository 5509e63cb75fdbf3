//! Free loopback ports.

use std::net::TcpListener;

/// A port that was free on 127.0.0.1 a moment ago (technically racy, like every such helper;
/// the kernel rarely hands the same ephemeral port out twice in a row).
///
/// # Panics
/// When no port can be bound at all (the test cannot run).
pub fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0 to find a free port");
    l.local_addr().expect("local_addr of a bound listener").port()
}

/// Waits until something accepts TCP connections on `127.0.0.1:port`.
pub fn wait_listening(port: u16, timeout: std::time::Duration) -> bool {
    let until = std::time::Instant::now() + timeout;
    while std::time::Instant::now() < until {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    false
}
