//! The fault mesh of a cluster: a proxy on every path between two nodes.

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;

use crate::FaultProxy;

/// A [`FaultProxy`] on every ordered pair of a cluster's nodes: node `a` dials node `b` through
/// link `(a, b)` (given to `a` as its routes, [`Links::routes`]), so that a node can be cut off
/// from the others, both ways, while its clients still reach it.
///
/// Used by the chaos harness (`node-partition`) and by the test kit's clusters.
///
/// ```no_run
/// use std::net::SocketAddr;
/// use locksmith_faultproxy::Links;
///
/// # async fn demo() -> std::io::Result<()> {
/// let nodes: Vec<(u64, SocketAddr)> =
///     vec![(1, "127.0.0.1:7001".parse().unwrap()), (2, "127.0.0.1:7002".parse().unwrap())];
/// let links = Links::start(&nodes).await?;
/// // Node 1 starts with `--routes 2=127.0.0.1:<proxy>`.
/// println!("{}", links.routes(1));
/// links.isolate(1, true); // a partition: node 1's paths stall
/// links.heal();
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Default)]
pub struct Links {
    links: BTreeMap<(u64, u64), FaultProxy>,
}

impl Links {
    /// Starts a proxy for every ordered pair of the nodes (`(id, address)`). Must be called
    /// inside a Tokio runtime, which then runs the proxies.
    ///
    /// # Cancel safety
    /// Cancel safe: proxies already started stop when the future is dropped.
    ///
    /// # Errors
    /// A proxy cannot listen; the message names the link.
    pub async fn start(nodes: &[(u64, SocketAddr)]) -> io::Result<Self> {
        let mut links = BTreeMap::new();
        for (a, _) in nodes {
            for (b, addr) in nodes.iter().filter(|(b, _)| b != a) {
                let proxy = FaultProxy::start(*addr).await.map_err(|e| {
                    io::Error::new(e.kind(), format!("cannot start a fault proxy from node {a} to node {b}: {e}"))
                })?;
                links.insert((*a, *b), proxy);
            }
        }
        Ok(Self { links })
    }

    /// `ID=127.0.0.1:PORT,…`: how node `from` reaches every other node.
    pub fn routes(&self, from: u64) -> String {
        let routes = self.links.iter().filter(|((a, _), _)| *a == from);
        routes.map(|((_, b), p)| format!("{b}={}", p.local_addr())).collect::<Vec<_>>().join(",")
    }

    /// Cuts node `id` off from every other node, both ways: `blackhole` stalls the connections
    /// (as over a real partition), otherwise they are reset and new ones refused.
    pub fn isolate(&self, id: u64, blackhole: bool) {
        for ((a, b), p) in &self.links {
            if *a == id || *b == id {
                if blackhole {
                    p.blackhole();
                } else {
                    p.cut();
                }
            }
        }
    }

    /// Ends every partition between nodes (latency, if any was set, stays).
    pub fn heal(&self) {
        for p in self.links.values() {
            p.heal();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_ordered_pair_gets_a_route() {
        let nodes: Vec<(u64, SocketAddr)> = (1..=3).map(|i| (i, SocketAddr::from(([127, 0, 0, 1], 9)))).collect();
        let links = Links::start(&nodes).await.unwrap_or_else(|e| panic!("{e}"));
        let routes = links.routes(2);
        let ids: Vec<&str> = routes.split(',').filter_map(|r| r.split('=').next()).collect();
        assert_eq!(ids, ["1", "3"], "{routes}");
        assert!(links.routes(4).is_empty());
    }
}
