//! etcd: a create-if-absent transaction on a key bound to a lease granted once, and a delete.

use std::time::Duration;

use async_trait::async_trait;
use locksmith_etcd::raw::pb::{Compare, RequestOp, TxnRequest};

use super::{backend, hosts, taken, Failure, Recipe};

/// What the baseline row calls it.
pub(super) const RECIPE: &str = "txn create_revision==0 → put with lease; delete";

/// The raw client (the driver's own), the key and the lease it is put with.
pub(super) struct Etcd {
    client: locksmith_etcd::raw::Client,
    key: String,
    lease: i64,
}

/// Connects to the endpoints of `url` and grants the lease; the key is `<name>-raw`.
pub(super) async fn connect(url: &str, name: &str, ttl: Duration) -> Result<Etcd, Failure> {
    let endpoints: Vec<String> = hosts(url)?.split(',').map(|h| format!("http://{h}")).collect();
    let mut client = locksmith_etcd::raw::Client::connect(&endpoints).await.map_err(backend("etcd"))?;
    let secs = i64::try_from(ttl.as_secs().max(1)).unwrap_or(i64::MAX);
    let lease = client.lease_grant(secs).await.map_err(backend("etcd"))?.id;
    Ok(Etcd { client, key: format!("{name}-raw"), lease })
}

#[async_trait]
impl Recipe for Etcd {
    async fn cycle(&mut self) -> Result<(), Failure> {
        let txn = TxnRequest {
            compare: vec![Compare::create_revision_is(self.key.as_str(), 0)],
            success: vec![RequestOp::put(self.key.as_str(), "bench", self.lease)],
            failure: Vec::new(),
        };
        if !self.client.txn(txn).await.map_err(backend("etcd"))?.succeeded {
            return Err(taken("the txn"));
        }
        self.client.delete(self.key.as_str()).await.map_err(backend("etcd"))?;
        Ok(())
    }

    async fn close(mut self: Box<Self>) {
        let _ = self.client.lease_revoke(self.lease).await;
    }
}
