//! ZooKeeper: one ephemeral node, created and deleted.

use async_trait::async_trait;

use super::{backend, hosts, Failure, Recipe};

/// What the baseline row calls it.
pub(super) const RECIPE: &str = "create ephemeral node; delete";

/// The client (its session) and the node's path.
pub(super) struct Zk {
    client: zookeeper_client::Client,
    path: String,
}

/// Connects to the ensemble of `url`; the node is `/<name>-raw`.
pub(super) async fn connect(url: &str, name: &str) -> Result<Zk, Failure> {
    let client = zookeeper_client::Client::connect(&hosts(url)?).await.map_err(backend("zk"))?;
    Ok(Zk { client, path: format!("/{name}-raw") })
}

#[async_trait]
impl Recipe for Zk {
    async fn cycle(&mut self) -> Result<(), Failure> {
        let opts = zookeeper_client::CreateMode::Ephemeral.with_acls(zookeeper_client::Acls::anyone_all());
        self.client.create(&self.path, b"bench", &opts).await.map_err(backend("zk"))?;
        self.client.delete(&self.path, None).await.map_err(backend("zk"))?;
        Ok(())
    }

    async fn close(self: Box<Self>) {}
}
