//! ZooKeeper digest authentication: with `zk://user:password@…` every node the driver creates
//! carries a creator-only ACL (optionally world-readable), strangers cannot delete or join, and the
//! whole contract holds for the authenticated client.

use std::sync::OnceLock;
use std::time::Duration;

use locksmith_core::conformance::UrlTarget;
use locksmith_testkit::ZkServer;
use zookeeper_client as zk;

static SERVER: OnceLock<ZkServer> = OnceLock::new();

fn server() -> &'static ZkServer {
    SERVER.get_or_init(ZkServer::start)
}

/// `zk://app:s3cret@host:port/auth` (the contract suite's target).
fn url(creds: &str, extra: &str) -> String {
    format!("zk://{creds}@{}/auth{extra}", server().addr())
}

fn authed() -> UrlTarget {
    UrlTarget::new(url("app:s3cret", ""), locksmith::backend)
}

locksmith_core::conformance_suite!(authed());

async fn raw(digest: Option<&str>) -> zk::Client {
    let mut c = zk::Client::connector();
    if let Some(d) = digest {
        c = c.with_auth("digest", d.as_bytes());
    }
    c.connect(&server().addr()).await.unwrap()
}

/// Our lock node and its directory carry `auth` (creator) ALL and nothing for the world; a client
/// without the credentials can neither delete our node nor list the lock, and a client with other
/// credentials cannot join the lock — told so as an authentication error, not a server error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_carry_the_creators_acl_and_strangers_cannot_touch_them() {
    let c = locksmith::connect_with_ttl(&url("app:s3cret", ""), Duration::from_secs(4)).await.unwrap();
    let g = c.lock("guarded").await.unwrap();
    let ours = raw(Some("app:s3cret")).await;
    let nodes = ours.list_children("/auth/guarded").await.unwrap();
    assert_eq!(nodes.len(), 1, "{nodes:?}");
    let node = format!("/auth/guarded/{}", nodes[0]);
    for path in [node.as_str(), "/auth/guarded"] {
        let (acls, _) = ours.get_acl(path).await.unwrap();
        assert_eq!(acls.len(), 1, "{path}: {acls:?}");
        assert_eq!((acls[0].scheme(), acls[0].permission()), ("digest", zk::Permission::ALL), "{path}: {acls:?}");
        assert!(acls[0].id().starts_with("app:"), "{path}: {acls:?}");
    }
    let stranger = raw(None).await;
    assert!(
        matches!(stranger.delete(&node, None).await, Err(zk::Error::NoAuth)),
        "an anonymous client deleted our node"
    );
    assert!(matches!(stranger.list_children("/auth/guarded").await, Err(zk::Error::NoAuth)));
    let other = locksmith::connect_with_ttl(&url("mallory:guess", ""), Duration::from_secs(4)).await.unwrap();
    let r = other.try_lock("guarded").await;
    assert!(matches!(r, Err(locksmith::Error::Auth { .. })), "{r:?}");
    assert!(!format!("{r:?}").contains("guess"), "{r:?}");
    assert!(g.is_held());
    assert!(g.unlock().await.unwrap());
}

/// `?acl=creator-read`: everyone may observe (list the queue, read holders) but not delete.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creator_read_lets_anyone_observe_but_not_delete() {
    let c = locksmith::connect_with_ttl(&url("app:s3cret", "?acl=creator-read"), Duration::from_secs(4)).await.unwrap();
    let g = c.lock("observed").await.unwrap();
    let stranger = raw(None).await;
    let nodes = stranger.list_children("/auth/observed").await.unwrap();
    assert_eq!(nodes.len(), 1);
    let node = format!("/auth/observed/{}", nodes[0]);
    let (acls, _) = stranger.get_acl(&node).await.unwrap();
    assert!(acls.iter().any(|a| a.scheme() == "world" && a.permission() == zk::Permission::READ), "{acls:?}");
    assert!(matches!(stranger.delete(&node, None).await, Err(zk::Error::NoAuth)));
    let anonymous =
        locksmith::connect_with_ttl(&format!("zk://{}/auth", server().addr()), Duration::from_secs(4)).await.unwrap();
    let s = anonymous.status(Some("observed")).await.unwrap();
    assert_eq!(s[0].holder.as_ref().map(|h| h.token), Some(g.token()), "{s:?}");
    assert!(g.unlock().await.unwrap());
}

/// A backend built in code with [`ZkOptions`] (a password that never was in a URL) holds locks
/// like the URL form: its nodes carry the creator's ACL, another client with the same options
/// waits behind it, and nothing it prints shows the password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn options_built_in_code_authenticate_like_the_url() {
    use locksmith_zk::{NodeAcl, ZkBackend, ZkOptions};
    let options = || ZkOptions::new().base("/coded").credentials("app", "s3cret").acl(NodeAcl::Creator);
    let backend = std::sync::Arc::new(ZkBackend::with_options([server().addr()], options()).unwrap());
    let shown = format!("{} {backend:?}", locksmith_core::Backend::describe(&*backend));
    assert!(!shown.contains("s3cret"), "{shown}");
    let c = locksmith::Client::new(backend, Duration::from_secs(4)).unwrap();
    let g = c.lock("coded").await.unwrap();
    let ours = raw(Some("app:s3cret")).await;
    let nodes = ours.list_children("/coded/coded").await.unwrap();
    let (acls, _) = ours.get_acl(&format!("/coded/coded/{}", nodes[0])).await.unwrap();
    assert_eq!((acls.len(), acls[0].scheme()), (1, "digest"), "{acls:?}");
    let other = locksmith::Client::new(
        std::sync::Arc::new(ZkBackend::with_options([server().addr()], options()).unwrap()),
        Duration::from_secs(4),
    )
    .unwrap();
    assert!(other.try_lock("coded").await.unwrap().is_none(), "two holders");
    assert!(g.unlock().await.unwrap());
    assert!(other.try_lock("coded").await.unwrap().is_some());
    // A creator ACL needs an identity; a base ZooKeeper refuses is refused here.
    assert!(matches!(
        ZkBackend::with_options([server().addr()], ZkOptions::new().acl(NodeAcl::Creator)),
        Err(locksmith::Error::InvalidArgument(_))
    ));
    assert!(matches!(
        ZkBackend::with_options([server().addr()], ZkOptions::new().base("/zookeeper/x")),
        Err(locksmith::Error::InvalidArgument(_))
    ));
}
