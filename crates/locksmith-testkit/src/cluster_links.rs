//! Fault proxies on every path of a cluster: the fault mesh between its nodes
//! ([`locksmith_faultproxy::Links`], given to each node as `--routes`) and one proxy in front of
//! each node for clients. Partitions are built from them: a node isolated from the others, a
//! client cut off from a node.
//!
//! The proxies run on a runtime of their own, on a thread of their own, so that the cluster can
//! be made and dropped from synchronous code and from inside `#[tokio::test]` alike (a runtime
//! must not be dropped from async code).

use std::collections::BTreeMap;
use std::net::SocketAddr;

use locksmith_faultproxy::{FaultProxy, Links};

/// The proxies of a cluster's paths.
#[derive(Debug)]
pub(crate) struct Paths {
    /// Node-to-node paths.
    links: Links,
    /// The client-facing path of each node.
    fronts: BTreeMap<u64, FaultProxy>,
    /// Ends the proxies' runtime thread when dropped.
    _stop: std::sync::mpsc::Sender<()>,
}

impl Paths {
    /// Proxies for the nodes listening on `ports` (id → port).
    ///
    /// # Panics
    /// When a proxy cannot bind a loopback port.
    pub(crate) fn start(ports: &BTreeMap<u64, u16>) -> Self {
        let (handles, stop) = run_proxies({
            let ports = ports.clone();
            move || async move {
                let nodes: Vec<(u64, SocketAddr)> =
                    ports.iter().map(|(id, port)| (*id, SocketAddr::from(([127, 0, 0, 1], *port)))).collect();
                let mut fronts = BTreeMap::new();
                for (id, addr) in &nodes {
                    fronts.insert(*id, FaultProxy::start(*addr).await?);
                }
                Ok((Links::start(&nodes).await?, fronts))
            }
        });
        let (links, fronts) = handles;
        Self { links, fronts, _stop: stop }
    }

    /// `ID=127.0.0.1:PORT,…`: how node `from` reaches every other node.
    pub(crate) fn routes(&self, from: u64) -> String {
        self.links.routes(from)
    }

    /// The client-facing address of node `id`.
    pub(crate) fn front(&self, id: u64) -> SocketAddr {
        self.fronts[&id].local_addr()
    }

    /// Cuts node `id` off from every other node, both ways (a blackhole: connections stall, as
    /// over a real partition), its clients' paths left alone.
    pub(crate) fn isolate(&self, id: u64) {
        self.links.isolate(id, true);
    }

    /// Ends every partition.
    pub(crate) fn heal(&self) {
        self.links.heal();
        for p in self.fronts.values() {
            p.heal();
        }
    }
}

type Proxies = (Links, BTreeMap<u64, FaultProxy>);

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
