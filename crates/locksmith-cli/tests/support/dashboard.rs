//! `locksmith dashboard` as a process for tests and examples: on a free loopback port, ended by
//! PID on drop; and an open page's event stream read over a raw TCP connection.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use locksmith_testkit::{free_port, spawn, ChildProcess};

/// `bin dashboard --backend url --prefix prefix` listening on a free loopback port, and its
/// port.
///
/// # Panics
/// When it does not listen within 20 s.
pub fn start(bin: &str, url: &str, prefix: &str) -> (ChildProcess, u16) {
    start_with(bin, url, prefix, &[])
}

/// [`start`] with more arguments, e.g. `["--metrics", "127.0.0.1:9531"]`.
///
/// # Panics
/// As [`start`].
pub fn start_with(bin: &str, url: &str, prefix: &str, more: &[&str]) -> (ChildProcess, u16) {
    let port = free_port();
    let mut cmd = Command::new(bin);
    cmd.args(["dashboard", "--backend", url, "--listen", &format!("127.0.0.1:{port}"), "--prefix", prefix])
        .args(more)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let p = spawn("locksmith dashboard", &mut cmd);
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "the dashboard did not listen within 20 s");
        std::thread::sleep(Duration::from_millis(50));
    }
    (p, port)
}

/// An open page as the server sees it: `GET /events`, read on a thread until the stream is
/// shut down (through the returned `TcpStream`); the thread returns what it read.
pub fn open_events(port: u16) -> (TcpStream, std::thread::JoinHandle<Vec<u8>>) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to the dashboard");
    s.write_all(b"GET /events HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n").expect("request");
    let mut reader = s.try_clone().expect("clone the stream");
    let t = std::thread::spawn(move || {
        let mut all = Vec::new();
        let mut buf = vec![0u8; 1 << 16];
        while let Ok(n) = reader.read(&mut buf) {
            if n == 0 {
                break;
            }
            all.extend_from_slice(&buf[..n]);
        }
        all
    });
    (s, t)
}
