//! A [`ZkBackend`](crate::ZkBackend) built in code: for credentials that do not belong in a URL
//! (a password from a vault or a secret store). Says what `zk://user:password@…/base?acl=` says.

use crate::url::{Digest, ExclusiveLayout, NodeAcl};

/// Settings of a ZooKeeper backend beyond its hosts. `Debug` never shows the password.
///
/// ```
/// use locksmith_zk::{NodeAcl, ZkBackend, ZkOptions};
/// use locksmith_core::Backend;
///
/// # fn password_from_the_vault() -> String { "s3cret".into() }
/// let options = ZkOptions::new()
///     .base("/app/locks")
///     .credentials("app", password_from_the_vault())
///     .acl(NodeAcl::CreatorWorldRead);
/// assert!(!format!("{options:?}").contains("s3cret"));
/// let backend = ZkBackend::with_options(["zk1:2181", "zk2:2181"], options)?;
/// assert_eq!(backend.describe(), "zk://app@zk1:2181,zk2:2181/app/locks?acl=creator-read");
/// # Ok::<(), locksmith_core::Error>(())
/// ```
#[derive(Clone, Default)]
pub struct ZkOptions {
    pub(crate) base: Option<String>,
    pub(crate) user: Option<String>,
    pub(crate) digest: Option<Digest>,
    pub(crate) acl: Option<NodeAcl>,
    pub(crate) exclusive: ExclusiveLayout,
}

impl ZkOptions {
    /// No credentials, world-writable nodes under `/locksmith`.
    pub fn new() -> Self {
        Self::default()
    }

    /// The base path under which lock directories live (default `/locksmith`).
    #[must_use]
    pub fn base(mut self, path: impl Into<String>) -> Self {
        self.base = Some(path.into());
        self
    }

    /// Authenticate with ZooKeeper's `digest` scheme as `user`. Nodes then default to
    /// [`NodeAcl::Creator`].
    #[must_use]
    pub fn credentials(mut self, user: impl Into<String>, password: impl AsRef<str>) -> Self {
        let user = user.into();
        self.digest = Some(Digest(format!("{user}:{}", password.as_ref())));
        self.user = Some(user);
        self
    }

    /// The ACL of every node the driver creates (default: [`NodeAcl::Creator`] with
    /// credentials, [`NodeAcl::Open`] without; a creator ACL needs credentials).
    #[must_use]
    pub fn acl(mut self, acl: NodeAcl) -> Self {
        self.acl = Some(acl);
        self
    }

    /// Which Curator recipe exclusive holds share (default [`ExclusiveLayout::Mutex`]; what
    /// `?exclusive=mutex|write-lock` says in a URL).
    #[must_use]
    pub fn exclusive(mut self, layout: ExclusiveLayout) -> Self {
        self.exclusive = layout;
        self
    }
}

impl std::fmt::Debug for ZkOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZkOptions")
            .field("base", &self.base)
            .field("user", &self.user)
            .field("acl", &self.acl)
            .field("exclusive", &self.exclusive)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ZkBackend;
    use locksmith_core::Backend;

    #[test]
    fn the_exclusive_layout_built_in_code_is_the_urls() {
        let b = ZkBackend::with_options(["h:1"], ZkOptions::new().exclusive(ExclusiveLayout::WriteLock)).unwrap();
        assert_eq!(b.describe(), "zk://h:1?exclusive=write-lock");
        assert_eq!(b.parsed.exclusive, ExclusiveLayout::WriteLock);
        let b = ZkBackend::with_options(["h:1"], ZkOptions::new()).unwrap();
        assert_eq!((b.describe().as_str(), b.parsed.exclusive), ("zk://h:1", ExclusiveLayout::Mutex));
    }
}
