//! Memory per lock and restart time with many locks (issue 17's figures in docs/benchmarks.md).
//!
//! ```text
//! cargo run --release -p locksmith-server --example million_locks -- [LOCKS]   # default 1,000,000
//! ```
//!
//! 1. The pure machine: heap bytes per lock after LOCKS locks were granted and released once
//!    (each then remembered for its fencing counter), counted by a counting allocator.
//! 2. A durable service in a temp dir: LOCKS grants and releases through an in-process session
//!    stream, a clean stop, then a restart of the same directory timed (open, replay, compact,
//!    one status page), with the heap it then holds.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use locksmith_proto::{client_message::Body, server_message, Acquire, ClientMessage, Open, Release};
use locksmith_server::machine::{self, Limits, LockName, Machine, Owner};
use locksmith_server::pb_impl::StatusQuery;
use locksmith_server::{Durability, Service};

/// Bytes allocated and not yet freed, by the whole process.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new as isize - layout.size() as isize, Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

fn name(i: usize) -> String {
    // Names of the shape services use: a prefix and an id (24 bytes).
    format!("jobs/export/{i:012}")
}

fn machine_bytes_per_lock(n: usize) -> f64 {
    let t0 = Instant::now();
    let before = live();
    let mut m = Machine::new(Limits::default(), 1);
    let (s, _) = m.open(t0, Duration::from_secs(60), None, [0; 32]).expect("open");
    let owner = Owner::new("o").expect("owner");
    for i in 0..n {
        let lock = LockName::new(name(i)).expect("name");
        let cmd = machine::Acquire::exclusive(s, 0, lock.clone(), owner.clone(), false);
        let Ok(machine::AcquireOutcome::Granted(token)) = m.acquire(t0, cmd) else { panic!("not granted") };
        m.release(t0, machine::Release { session: s, name: lock, owner: owner.clone(), token });
        if i % 4096 == 0 {
            m.take_records();
        }
    }
    m.take_records();
    let bytes = (live() - before) as f64 / n as f64;
    drop(m);
    bytes
}

async fn fill(service: &Service, n: usize) {
    let (to_server, from_client) = tokio::sync::mpsc::unbounded_channel();
    let (to_client, mut from_server) = tokio::sync::mpsc::unbounded_channel();
    let inbound = tokio_stream::wrappers::UnboundedReceiverStream::new(from_client).map(Ok::<_, std::io::Error>);
    tokio::spawn(locksmith_server::serve_stream(service.clone(), inbound, to_client));
    let send = |id: u64, body: Body| to_server.send(ClientMessage { id, body: Some(body) }).expect("send");
    send(1, Body::Open(Open { ttl_ms: 60_000, ..Default::default() }));
    from_server.recv().await.expect("opened");
    const CHUNK: usize = 2_000;
    let mut id = 2;
    for start in (0..n).step_by(CHUNK) {
        let names: Vec<String> = (start..(start + CHUNK).min(n)).map(name).collect();
        for nm in &names {
            send(id, Body::Acquire(Acquire { name: nm.clone(), owner: "o".into(), ..Default::default() }));
            id += 1;
        }
        let mut tokens = Vec::with_capacity(names.len());
        for _ in &names {
            match from_server.recv().await.and_then(|m| m.body) {
                Some(server_message::Body::Granted(g)) => tokens.push(g.token),
                other => panic!("expected a grant, got {other:?}"),
            }
        }
        for (nm, token) in names.iter().zip(tokens) {
            send(id, Body::Release(Release { name: nm.clone(), owner: "o".into(), token }));
            id += 1;
        }
        for _ in &names {
            from_server.recv().await.expect("released");
        }
    }
    send(id, Body::Close(locksmith_proto::Close {}));
}

#[tokio::main]
async fn main() {
    let n: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(1_000_000);
    println!("locks: {n}");
    let per_lock = machine_bytes_per_lock(n);
    println!("machine heap per lock: {per_lock:.0} B");

    let dir = tempfile::tempdir().expect("temp dir");
    let (service, task) = Service::start_durable(dir.path(), Limits::default(), Durability::Grants).expect("start");
    let started = Instant::now();
    fill(&service, n).await;
    println!("filled in {:.1} s", started.elapsed().as_secs_f64());
    service.shutdown();
    task.await.expect("join").expect("service");
    let wal = std::fs::metadata(dir.path().join("wal")).map(|m| m.len()).unwrap_or(0);

    let heap0 = live();
    let t = Instant::now();
    let (service, task) = Service::start_durable(dir.path(), Limits::default(), Durability::Grants).expect("restart");
    let page = service.status_page(StatusQuery::Page { after: None, limit: 1_000 }, None).await.expect("status");
    let restart = t.elapsed();
    println!("restart (open, replay, compact, first status page): {:.2} s", restart.as_secs_f64());
    println!(
        "after restart: heap +{:.0} B per lock (the whole service; log file {} MiB with preallocation)",
        (live() - heap0) as f64 / n as f64,
        wal >> 20
    );
    assert_eq!(page.locks.len(), 1_000.min(n));
    service.shutdown();
    task.await.expect("join").expect("service");
}
