//! Fault proxies (`locksmith-faultproxy`): in front of every host of the backend URL, for the
//! `partition` and `latency` faults ([`Proxies`]); the harness's own cluster has the fault mesh
//! of `locksmith-faultproxy` ([`Links`](locksmith_faultproxy::Links)) for `node-partition`.

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use locksmith_faultproxy::FaultProxy;

/// One proxy per backend host, in URL order, each with the name the report gives it.
#[derive(Debug, Default)]
pub struct Proxies {
    list: Vec<(String, FaultProxy)>,
}

impl Proxies {
    /// Starts a proxy in front of every `host:port` of `url` and returns the URL rewritten to go
    /// through them.
    ///
    /// # Cancel safety
    /// Cancel safe: proxies already started stop when the future is dropped.
    ///
    /// # Errors
    /// A host does not resolve to a loopback address, or a proxy cannot listen.
    pub async fn front(url: &str) -> Result<(String, Self), String> {
        let mut upstreams = Vec::new();
        for host in locksmith_faultproxy::hosts(url).map_err(|e| e.to_string())? {
            upstreams.push((host.clone(), resolve(&host)?));
        }
        let mut list = Vec::new();
        for (host, addr) in upstreams {
            let proxy =
                FaultProxy::start(addr).await.map_err(|e| format!("cannot start a fault proxy for {host}: {e}"))?;
            list.push((host, proxy));
        }
        let rewritten = locksmith_faultproxy::rewrite_hosts(url, |host| {
            list.iter()
                .find(|(h, _)| h == host)
                .map(|(_, p)| p.local_addr().to_string())
                .ok_or_else(|| format!("no proxy for {host}"))
        })
        .map_err(|e| e.to_string())?;
        let list = list.into_iter().map(|(host, p)| (format!("proxy {host}"), p)).collect();
        Ok((rewritten, Self { list }))
    }

    /// Starts a proxy in front of every node of a cluster (`(id, address)`, in id order), for
    /// the clients: returns `locksmith://<front 1>,<front 2>,…` and the proxies.
    ///
    /// # Cancel safety
    /// Cancel safe, as [`Proxies::front`].
    ///
    /// # Errors
    /// A proxy cannot listen.
    pub async fn nodes(nodes: &[(u64, SocketAddr)]) -> Result<(String, Self), String> {
        let mut list = Vec::new();
        for (id, addr) in nodes {
            let proxy =
                FaultProxy::start(*addr).await.map_err(|e| format!("cannot start a fault proxy for node {id}: {e}"))?;
            list.push((format!("front proxy of node {id}"), proxy));
        }
        let hosts: Vec<String> = list.iter().map(|(_, p)| p.local_addr().to_string()).collect();
        Ok((format!("locksmith://{}", hosts.join(",")), Self { list }))
    }

    /// The address of proxy `i` (what clients dial).
    pub fn addr(&self, i: usize) -> Option<SocketAddr> {
        self.list.get(i).map(|(_, p)| p.local_addr())
    }

    /// How many proxies (hosts).
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// What the report calls proxy `i`: `proxy 127.0.0.1:6379`, `front proxy of node 2`.
    pub fn name(&self, i: usize) -> &str {
        self.list.get(i).map(|(h, _)| h.as_str()).unwrap_or("proxy ?")
    }

    /// Partitions host `i`: `blackhole` stalls every connection (packets vanish), otherwise the
    /// connections are reset and new ones refused.
    pub fn partition(&self, i: usize, blackhole: bool) {
        if let Some((_, p)) = self.list.get(i) {
            if blackhole {
                p.blackhole();
            } else {
                p.cut();
            }
        }
    }

    /// Delays traffic through host `i` by `delay` in each direction (a round trip by twice that).
    pub fn latency(&self, i: usize, delay: Duration) {
        if let Some((_, p)) = self.list.get(i) {
            p.set_latency(delay);
        }
    }

    /// Heals every proxy: no partition, no added latency.
    pub fn heal_all(&self) {
        for (_, p) in &self.list {
            p.heal();
            p.set_latency(Duration::ZERO);
        }
    }
}

/// The loopback address of `host:port`; anything else is refused (the harness sends faults only
/// to this machine).
pub fn resolve(host: &str) -> Result<SocketAddr, String> {
    let addrs: Vec<SocketAddr> = host.to_socket_addrs().map_err(|e| format!("cannot resolve {host}: {e}"))?.collect();
    match addrs.iter().find(|a| a.ip().is_loopback()) {
        Some(a) if addrs.iter().all(|a| a.ip().is_loopback()) => Ok(*a),
        _ => Err(format!("{host} is not a loopback address; locksmith chaos only runs against this machine")),
    }
}
