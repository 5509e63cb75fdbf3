//! # locksmith-faultproxy
//!
//! A fault-injecting TCP proxy for the `locksmith chaos` harness (DESIGN §5): one
//! [`FaultProxy`] on `127.0.0.1` in front of each `host:port` of a backend, and a nemesis
//! that switches faults on it while lock clients run through it:
//!
//! - [`cut`](FaultProxy::cut): a partition that resets every connection and refuses new ones;
//! - [`blackhole`](FaultProxy::blackhole): a partition where connections stay open but nothing
//!   moves (bytes are held and delivered after heal, as TCP retransmission would);
//! - [`set_latency`](FaultProxy::set_latency): one-way delay on every chunk, order kept;
//! - [`heal`](FaultProxy::heal): ends the partition.
//!
//! [`hosts`] lists the `host:port`s of a backend URL and [`rewrite_hosts`] points the URL at
//! the proxies. [`Links`] is the fault mesh of a cluster: a proxy on every path between two
//! nodes.
//!
//! ```no_run
//! use std::collections::HashMap;
//! use std::time::Duration;
//! use locksmith_faultproxy::{hosts, rewrite_hosts, FaultProxy};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let url = "redlock://127.0.0.1:6379,127.0.0.1:6380,127.0.0.1:6381";
//! let mut proxies = HashMap::new();
//! for host in hosts(url)? {
//!     let proxy = FaultProxy::start(host.parse()?).await?;
//!     proxies.insert(host, proxy);
//! }
//! let proxied = rewrite_hosts(url, |h| match proxies.get(h) {
//!     Some(p) => Ok(p.local_addr().to_string()),
//!     None => Err(format!("no proxy for {h}")),
//! })?;
//! // … clients connect to `proxied`; the nemesis then:
//! let first = &proxies["127.0.0.1:6379"];
//! first.blackhole();
//! tokio::time::sleep(Duration::from_secs(2)).await;
//! first.heal();
//! first.set_latency(Duration::from_millis(50));
//! println!("{proxied}: {:?}", first.stats());
//! // Dropping the proxies ends every forwarded connection.
//! # Ok(())
//! # }
//! ```
//!
//! Loopback only: the listener binds `127.0.0.1`. The upstream may be any address.

mod conn;
mod faults;
mod links;
mod pipe;
mod proxy;
mod stats;
mod url;

pub use links::Links;
pub use proxy::FaultProxy;
pub use stats::ProxyStats;
pub use url::{hosts, rewrite_hosts, UrlError};
