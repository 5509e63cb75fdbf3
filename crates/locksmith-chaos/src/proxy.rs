//! Fault proxies in front of every host of the backend URL (`locksmith-faultproxy`), for the
//! `partition` and `latency` faults.

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use locksmith_faultproxy::FaultProxy;

/// One proxy per backend host, in URL order.
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
        Ok((rewritten, Self { list }))
    }

    /// How many proxies (hosts).
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// The host behind proxy `i`.
    pub fn host(&self, i: usize) -> &str {
        self.list.get(i).map(|(h, _)| h.as_str()).unwrap_or("?")
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
