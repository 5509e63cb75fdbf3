//! The accept loop when the process is out of file descriptors: `accept` fails with EMFILE for
//! as long as connections wait in the backlog, and a loop that retries at once spins a core
//! (that is what `locksmith serve` did with 1,100 stalled connections). It backs off instead,
//! and accepts the waiting connections once descriptors are free again.
//!
//! One test in its own binary: it lowers this process's open-file limit.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use nix::sys::resource::{getrlimit, getrusage, setrlimit, Resource, UsageWho};

fn open_fds() -> u64 {
    std::fs::read_dir("/proc/self/fd").map(|d| d.count() as u64).unwrap_or(0)
}

fn cpu_time() -> Duration {
    let u = getrusage(UsageWho::RUSAGE_SELF).unwrap();
    let t = |tv: nix::sys::time::TimeVal| Duration::new(tv.tv_sec() as u64, tv.tv_usec() as u32 * 1000);
    t(u.user_time()) + t(u.system_time())
}

/// Whether an HTTP/2 server answers on `tcp`: its first frame is SETTINGS (type 4).
fn speaks_http2(tcp: &mut std::net::TcpStream) -> bool {
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";
    let mut head = [0u8; 9];
    tcp.write_all(preface).is_ok() && tcp.read_exact(&mut head).is_ok() && head[3] == 4
}

#[test]
fn out_of_file_descriptors_the_accept_loop_backs_off_and_recovers() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut net = locksmith_server::NetLimits::default();
    net.max_connections = 100_000;
    net.first_byte_timeout = Duration::from_secs(60);
    let opts = locksmith_server::ServeOptions::new(dir.path().join("data")).net_limits(net);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = rt.spawn(locksmith_server::serve(listener, opts, async {
        let _ = stopped.await;
    }));
    let until = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < until, "the server never listened");
        std::thread::sleep(Duration::from_millis(20));
    }

    // Sockets made now, connected after the limit is lowered: connecting takes no descriptor.
    let sockets: Vec<socket2::Socket> =
        (0..50).map(|_| socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap()).collect();
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
    setrlimit(Resource::RLIMIT_NOFILE, open_fds() + 5, hard).unwrap();
    for s in &sockets {
        s.connect(&addr.into()).unwrap();
    }
    // The server takes a few, then every accept fails with EMFILE while 40-odd wait.
    std::thread::sleep(Duration::from_millis(300));
    let before = cpu_time();
    std::thread::sleep(Duration::from_secs(2));
    let used = cpu_time() - before;
    setrlimit(Resource::RLIMIT_NOFILE, soft, hard).unwrap();
    assert!(
        used < Duration::from_millis(300),
        "{used:?} of CPU in 2 s while out of descriptors: the accept loop spins"
    );

    // Descriptors are free again: the waiting connections are accepted and served (the back-off
    // is at most a second).
    let mut last: std::net::TcpStream = sockets.into_iter().last().unwrap().into();
    assert!(
        speaks_http2(&mut last),
        "a connection that waited in the backlog was not served after the limit was raised"
    );

    let _ = stop.send(());
    rt.block_on(server).unwrap().unwrap();
}
