//! Headless Chromium for tests, driven over the W3C WebDriver protocol through Debian's
//! `chromedriver`: the few commands a page test needs (open a page, run a script, take a
//! screenshot), as JSON over plain HTTP/1.1 on loopback — like `scrape.rs` reads `/metrics`.
//! The driver (and the browser it starts) are ended by PID on drop.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// What to install when the browser or its driver is missing.
pub const BROWSER_SETUP: &str = "bash scripts/setup.sh (installs Debian's chromium and chromium-driver)";

/// A browser session: a `chromedriver` process and one headless Chromium window.
pub struct Browser {
    port: u16,
    session: String,
    /// The browser's PID, to end it should the session not close it (a panicking test).
    browser_pid: Option<i32>,
    // Dropped last: the session is deleted first, which closes the browser.
    _driver: locksmith_testkit::ChildProcess,
}

impl Browser {
    /// Starts `chromedriver` and a headless Chromium of `width`×`height`.
    ///
    /// # Panics
    /// When either is missing or does not start; the message names the setup command.
    pub fn start(width: u32, height: u32) -> Self {
        for path in ["/usr/bin/chromedriver", "/usr/bin/chromium"] {
            assert!(std::path::Path::new(path).exists(), "{path} is missing; install it with: {BROWSER_SETUP}");
        }
        let port = locksmith_testkit::free_port();
        let mut cmd = Command::new("/usr/bin/chromedriver");
        cmd.arg(format!("--port={port}")).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        let driver = locksmith_testkit::spawn("chromedriver", &mut cmd);
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "chromedriver did not listen within 20 s ({BROWSER_SETUP})");
            std::thread::sleep(Duration::from_millis(50));
        }
        // As root, Chromium runs only without its sandbox.
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-crash-reporter", "--disable-breakpad",
                         format!("--window-size={width},{height}")],
            },
        }}});
        let answer = call(port, "POST", "/session", Some(&caps));
        let session = answer["sessionId"].as_str().unwrap_or_else(|| panic!("no session: {answer}")).to_string();
        let browser_pid = answer["capabilities"]["goog:processID"].as_i64().and_then(|p| i32::try_from(p).ok());
        Self { port, session, browser_pid, _driver: driver }
    }

    fn command(&self, method: &str, path: &str, body: Option<&Value>) -> Value {
        call(self.port, method, &format!("/session/{}{path}", self.session), body)
    }

    /// Opens `url` and waits for it to load.
    pub fn open(&self, url: &str) {
        self.command("POST", "/url", Some(&json!({ "url": url })));
    }

    /// The value of the script `body` (a function body: `return …;`) run in the page.
    pub fn eval(&self, body: &str) -> Value {
        self.command("POST", "/execute/sync", Some(&json!({ "script": body, "args": [] })))
    }

    /// Runs `body` until it returns something other than `null`/`false`, for up to `timeout`;
    /// returns the value and how long it took.
    ///
    /// # Panics
    /// When it never did; the message names `what` and shows the page's text.
    pub fn wait_for(&self, what: &str, timeout: Duration, body: &str) -> (Value, Duration) {
        let start = Instant::now();
        loop {
            let v = self.eval(body);
            if !(v.is_null() || v == Value::Bool(false)) {
                return (v, start.elapsed());
            }
            if start.elapsed() > timeout {
                let text = self.eval("return document.body.innerText;");
                panic!("{what}: not on the page within {timeout:?}; the page:\n{}", text.as_str().unwrap_or_default());
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    /// A PNG of the window.
    pub fn screenshot(&self) -> Vec<u8> {
        use base64::Engine;
        let v = self.command("GET", "/screenshot", None);
        let b64 = v.as_str().unwrap_or_else(|| panic!("no screenshot: {v}"));
        base64::engine::general_purpose::STANDARD.decode(b64).expect("the screenshot is base64")
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Closes the browser; the driver is then ended by PID, and the browser too when the
        // session could not close it (chromedriver does not end it when it is killed).
        let closed = std::panic::catch_unwind(|| self.command("DELETE", "", None)).is_ok();
        if let (false, Some(pid)) = (closed, self.browser_pid) {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGTERM);
        }
    }
}

/// One WebDriver call: `method path` with a JSON body; the answer's `value`.
fn call(port: u16, method: &str, path: &str, body: Option<&Value>) -> Value {
    let body = body.map(Value::to_string).unwrap_or_default();
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to chromedriver");
    s.set_read_timeout(Some(Duration::from_secs(60))).expect("a read timeout");
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(request.as_bytes()).expect("send to chromedriver");
    // chromedriver keeps the connection open: read the head, then Content-Length bytes.
    let mut response = Vec::new();
    let mut byte = [0u8; 1];
    while !response.ends_with(b"\r\n\r\n") {
        let n = s.read(&mut byte).expect("read chromedriver's answer");
        assert!(n == 1, "chromedriver closed the connection: {}", String::from_utf8_lossy(&response));
        response.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&response).into_owned();
    let length = head
        .lines()
        .find_map(|l| l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case("content-length")))
        .and_then(|(_, v)| v.trim().parse::<usize>().ok())
        .unwrap_or_else(|| panic!("no Content-Length in chromedriver's answer: {head}"));
    let mut body = vec![0u8; length];
    s.read_exact(&mut body).expect("read chromedriver's answer");
    let body = String::from_utf8_lossy(&body);
    let v: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("chromedriver answered {head}: {e}: {body}"));
    assert!(head.starts_with("HTTP/1.1 200"), "{method} {path}: {head}\n{body}");
    v["value"].clone()
}
