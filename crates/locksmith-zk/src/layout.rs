//! Node names, ordering and error mapping.

use std::future::Future;
use std::time::Duration;

use locksmith_core::Error;
use zookeeper_client as zk;

/// One contender node in a lock directory.
#[derive(Debug, Clone)]
pub(crate) struct Contender {
    pub(crate) node: String,
    pub(crate) seq: u64,
}

/// The sequence of a contender node: after the last `-lock-` (Curator, us) or `__lock__`
/// (kazoo); `None` for other children.
pub(crate) fn sequence(node: &str) -> Option<u64> {
    let tail = match (node.rfind("-lock-"), node.rfind("__lock__")) {
        (Some(a), Some(b)) if a + 6 > b + 8 => &node[a + 6..],
        (Some(a), None) => &node[a + 6..],
        (_, Some(b)) => &node[b + 8..],
        (None, None) => return None,
    };
    if tail.is_empty() || !tail.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    tail.parse().ok()
}

pub(crate) fn is_contender(node: &str) -> bool {
    sequence(node).is_some()
}

/// Contenders sorted by sequence (the holder first).
pub(crate) fn contenders(children: Vec<String>) -> Vec<Contender> {
    let mut v: Vec<Contender> =
        children.into_iter().filter_map(|node| sequence(&node).map(|seq| Contender { node, seq })).collect();
    v.sort_by_key(|c| c.seq);
    v
}

/// Maps a client error: expiry is definite, connection trouble transient.
pub(crate) fn map_err(url: &str, e: zk::Error) -> Error {
    match e {
        zk::Error::SessionExpired => Error::SessionExpired,
        zk::Error::ConnectionLoss | zk::Error::Timeout | zk::Error::NoHosts | zk::Error::ClientClosed => {
            Error::Unavailable { backend: url.to_string(), message: e.to_string() }
        }
        zk::Error::AuthFailed => Error::Auth {
            backend: url.to_string(),
            message: "ZooKeeper refused the digest credentials (user:password@)".into(),
        },
        zk::Error::NoAuth => Error::Auth {
            backend: url.to_string(),
            message: "ZooKeeper denied the operation: the node's ACL does not grant it to these credentials".into(),
        },
        zk::Error::InvalidAcl => {
            Error::Config { backend: url.to_string(), message: "ZooKeeper refused the ACL".into() }
        }
        other => Error::Backend(format!("zookeeper {url}: {other}")),
    }
}

/// Retries `op` on connection loss (the client reconnects by itself) for up to about 5 s.
pub(crate) async fn retry<T, F, Fut>(mut op: F) -> Result<T, zk::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, zk::Error>>,
{
    let mut attempt = 0u32;
    loop {
        match op().await {
            Err(zk::Error::ConnectionLoss) if attempt < 100 => {
                attempt += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            r => return r,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequences() {
        assert_eq!(sequence("_c_0f1e-aa-lock-0000000012"), Some(12));
        assert_eq!(sequence("abcdef__lock__0000000003"), Some(3));
        assert_eq!(sequence("_c_x__lock__y-lock-0000000007"), Some(7));
        assert_eq!(sequence("child"), None);
        assert_eq!(sequence("x-lock-"), None);
        let c = contenders(vec!["a-lock-0000000005".into(), "b__lock__0000000002".into(), "sub".into()]);
        assert_eq!(c.iter().map(|c| c.seq).collect::<Vec<_>>(), vec![2, 5]);
    }
}
