//! Fault proxies on every path of a cluster: one per ordered pair of nodes (node `a` dials node
//! `b` through link `(a, b)`, given to `a` as `--routes`) and one in front of each node for
//! clients. Partitions are built from them: a node isolated from the others, a client cut off
//! from a node.
//!
//! The proxies run on a runtime of their own, on a thread of their own, so that the cluster can
//! be made and dropped from synchronous code and from inside `#[tokio::test]` alike (a runtime
//! must not be dropped from async code).

use std::collections::BTreeMap;
use std::net::SocketAddr;

use locksmith_faultproxy::FaultProxy;

/// The proxies of a cluster's paths.
#[derive(Debug)]
pub(crate) struct Links {
    /// Node-to-node paths, `(from, to)`.
    links: BTreeMap<(u64, u64), FaultProxy>,
    /// The client-facing path of each node.
    fronts: BTreeMap<u64, FaultProxy>,
    /// Ends the proxies' runtime thread when dropped.
    _stop: std::sync::mpsc::Sender<()>,
}

impl Links {
    /// Proxies for the nodes listening on `ports` (id → port).
    ///
    /// # Panics
    /// When a proxy cannot bind a loopback port.
    pub(crate) fn start(ports: &BTreeMap<u64, u16>) -> Self {
        let (handles, stop) = run_proxies({
            let ports = ports.clone();
            move || async move {
                let upstream = |id: u64| SocketAddr::from(([127, 0, 0, 1], ports[&id]));
                let mut links = BTreeMap::new();
                let mut fronts = BTreeMap::new();
                for &a in ports.keys() {
                    fronts.insert(a, FaultProxy::start(upstream(a)).await?);
                    for &b in ports.keys().filter(|b| **b != a) {
                        links.insert((a, b), FaultProxy::start(upstream(b)).await?);
                    }
                }
                Ok((links, fronts))
            }
        });
        let (links, fronts) = handles;
        Self { links, fronts, _stop: stop }
    }

    /// `ID=127.0.0.1:PORT,…`: how node `from` reaches every other node.
    pub(crate) fn routes(&self, from: u64) -> String {
        self.links
            .iter()
            .filter(|((a, _), _)| *a == from)
            .map(|((_, b), p)| format!("{b}={}", p.local_addr()))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The client-facing address of node `id`.
    pub(crate) fn front(&self, id: u64) -> SocketAddr {
        self.fronts[&id].local_addr()
    }

    /// Cuts node `id` off from every other node, both ways (a blackhole: connections stall, as
    /// over a real partition), its clients' paths left alone.
    pub(crate) fn isolate(&self, id: u64) {
        for ((a, b), p) in &self.links {
            if *a == id || *b == id {
                p.blackhole();
            }
        }
    }

    /// Ends every partition.
    pub(crate) fn heal(&self) {
        for p in self.links.values().chain(self.fronts.values()) {
            p.heal();
        }
    }
}

type Proxies = (BTreeMap<(u64, u64), FaultProxy>, BTreeMap<u64, FaultProxy>);

/// Starts the proxies made by `make` on a new thread's runtime, which runs until the returned
/// sender is dropped.
fn run_proxies<F, Fut>(make: F) -> (Proxies, std::sync::mpsc::Sender<()>)
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = std::io::Result<Proxies>>,
{
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("build the proxies' runtime");
        let made = rt.block_on(make());
        let failed = made.is_err();
        let _ = ready_tx.send(made);
        if !failed {
            // The proxies run on the runtime's worker while this thread waits for the end.
            let _ = stop_rx.recv();
        }
        rt.shutdown_background();
    });
    let proxies = ready_rx
        .recv()
        .expect("the proxies' thread ended before starting them")
        .unwrap_or_else(|e| panic!("cannot start the cluster's fault proxies: {e}"));
    (proxies, stop_tx)
}
