//! `zk://host:port[,host:port…][/chroot]` and lock-name ↔ znode-path mapping.

use locksmith_core::driver::BackendUrl;
use locksmith_core::{LockName, Result};

/// Base path used when the URL names none.
pub(crate) const DEFAULT_BASE: &str = "/locksmith";

/// A parsed URL: the connect string (hosts only) and the base path of lock directories.
#[derive(Debug, Clone)]
pub(crate) struct ZkUrl {
    pub(crate) hosts: String,
    pub(crate) base: String,
    /// `user:password` for ZooKeeper's `digest` scheme. A secret: `Debug` hides it.
    pub(crate) digest: Option<Digest>,
    /// The ACL every node this driver creates gets.
    pub(crate) acl: NodeAcl,
    /// Which Curator recipe an exclusive hold (without a value) shares.
    pub(crate) exclusive: ExclusiveLayout,
    /// The URL for messages and logs (no credentials).
    pub(crate) describe: String,
}

/// `user:password` for the `digest` scheme.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Digest(pub(crate) String);

impl std::fmt::Debug for Digest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Digest(***)")
    }
}

/// Which ACL every node the driver creates gets (`?acl=` in a URL).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeAcl {
    /// `world:anyone` may do anything (no credentials: ZooKeeper knows no one to restrict to).
    Open,
    /// Only the creating identity (the digest user) may do anything.
    Creator,
    /// The creating identity may do anything, everyone may read (status, Curator observers).
    CreatorWorldRead,
}

impl NodeAcl {
    /// The ACL list ZooKeeper stores on each node.
    pub(crate) fn acls(self) -> zookeeper_client::Acls<'static> {
        use zookeeper_client::{Acl, Acls, Permission};
        static CREATOR_ALL_WORLD_READ: [Acl; 2] =
            [Acl::new_const(Permission::ALL, "auth", ""), Acl::new_const(Permission::READ, "world", "anyone")];
        match self {
            NodeAcl::Open => Acls::anyone_all(),
            NodeAcl::Creator => Acls::creator_all(),
            NodeAcl::CreatorWorldRead => Acls::new(&CREATOR_ALL_WORLD_READ),
        }
    }
}

/// Which node an exclusive hold without a value creates (`?exclusive=` in a URL): Curator's
/// mutex and Curator's write lock cannot be one node name, and Curator's own recipes do not see
/// each other's nodes, so the Java side's recipe decides. locksmith clients respect both kinds
/// either way (and readers see both as writers).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExclusiveLayout {
    /// `_c_<uuid>-lock-<seq>`: Curator `InterProcessMutex` (and kazoo `Lock` with
    /// `extra_lock_patterns=["-lock-"]`) contend with locksmith's exclusive holds. Curator's
    /// read/write lock does not see these nodes: its readers would not wait for them.
    #[default]
    Mutex,
    /// `_c_<uuid>-__WRIT__<seq>`: the write lock of Curator `InterProcessReadWriteLock`, so that
    /// Curator's readers wait for locksmith's writers. Curator's `InterProcessMutex` does not see
    /// these nodes.
    WriteLock,
}

/// Parses `zk://[user:password@]host[:port][,host[:port]…][/base][?acl=creator|creator-read|open][&exclusive=mutex|write-lock]`
/// (port 2181 when omitted).
pub(crate) fn parse(url: &str) -> Result<ZkUrl> {
    let mut u = BackendUrl::parse(url)?;
    if u.scheme().name != "zk" {
        return Err(u.invalid("expected zk://[user:password@]host:port[,host:port…][/path]".into()));
    }
    let digest = match (u.username(), u.password()) {
        (None, None) => None,
        (Some(user), Some(pass)) => Some(Digest(format!("{user}:{pass}"))),
        _ => return Err(u.invalid("digest authentication needs user:password@".into())),
    };
    let acl = match u.take_option("acl").as_deref() {
        None => None,
        Some("creator") => Some(NodeAcl::Creator),
        Some("creator-read") => Some(NodeAcl::CreatorWorldRead),
        Some("open") => Some(NodeAcl::Open),
        Some(other) => return Err(u.invalid(format!("acl={other:?}: expected creator, creator-read or open"))),
    };
    let exclusive = match u.take_option("exclusive").as_deref() {
        None | Some("mutex") => ExclusiveLayout::Mutex,
        Some("write-lock") => ExclusiveLayout::WriteLock,
        Some(other) => return Err(u.invalid(format!("exclusive={other:?}: expected mutex or write-lock"))),
    };
    u.refuse_other_options(&["acl", "exclusive"])?;
    u.refuse_extras(true, true, false)?;
    let acl = resolve_acl(acl, digest.is_some()).map_err(|reason| u.invalid(reason))?;
    let base = check_base(u.path()).map_err(|reason| u.invalid(reason))?;
    let hosts: Vec<String> = u.hosts().iter().map(ToString::to_string).collect();
    let describe = describe(&u, acl, exclusive);
    Ok(ZkUrl { hosts: hosts.join(","), base, digest, acl, exclusive, describe })
}

/// The ACL for `asked` (none: the default), given whether there are credentials: creator-only
/// with credentials, open without; a creator ACL without credentials is refused.
pub(crate) fn resolve_acl(asked: Option<NodeAcl>, credentials: bool) -> std::result::Result<NodeAcl, String> {
    match (asked, credentials) {
        (None, true) => Ok(NodeAcl::Creator),
        (None, false) => Ok(NodeAcl::Open),
        (Some(NodeAcl::Creator | NodeAcl::CreatorWorldRead), false) => {
            Err("acl=creator needs credentials (zk://user:password@…): ZooKeeper has no identity to restrict the \
             nodes to"
                .into())
        }
        (Some(acl), _) => Ok(acl),
    }
}

/// The base path of lock directories: `path` without trailing slashes, [`DEFAULT_BASE`] when
/// empty; refused when ZooKeeper would refuse it or it is under `/zookeeper`.
pub(crate) fn check_base(path: &str) -> std::result::Result<String, String> {
    let trimmed = path.trim_end_matches('/');
    if trimmed.is_empty() {
        return Ok(DEFAULT_BASE.to_string());
    }
    let Some(rel) = trimmed.strip_prefix('/') else {
        return Err(format!("the base path {trimmed:?} must start with /"));
    };
    for seg in rel.split('/') {
        if seg.is_empty() || seg == "." || seg == ".." || seg.chars().any(forbidden) {
            return Err(format!("bad path segment {seg:?}"));
        }
    }
    if trimmed == "/zookeeper" || trimmed.starts_with("/zookeeper/") {
        return Err("/zookeeper is reserved by ZooKeeper".into());
    }
    Ok(trimmed.to_string())
}

/// The URL for messages: no credentials, the ACL when it is not what the URL implies anyway,
/// the exclusive layout when it is not the default.
pub(crate) fn describe(u: &BackendUrl, acl: NodeAcl, exclusive: ExclusiveLayout) -> String {
    let mut shown = Vec::new();
    if acl == NodeAcl::CreatorWorldRead {
        shown.push(("acl", "creator-read"));
    }
    if exclusive == ExclusiveLayout::WriteLock {
        shown.push(("exclusive", "write-lock"));
    }
    u.describe(&shown)
}

/// Characters ZooKeeper refuses in paths (besides `/`), and `%`, our escape character.
/// ZooKeeper checks paths as Java (UTF-16) strings: a character above U+FFFF is a surrogate pair
/// there, which it refuses, so those are escaped too.
fn forbidden(c: char) -> bool {
    matches!(
        c,
        '\u{0}'..='\u{1f}' | '\u{7f}'..='\u{9f}' | '\u{e000}'..='\u{f8ff}' | '\u{fff0}'..='\u{10ffff}' | '%'
    )
}

fn escape_segment(seg: &str) -> String {
    if seg.is_empty() {
        return "%".to_string();
    }
    let mut out = String::with_capacity(seg.len());
    for c in seg.chars() {
        if forbidden(c) {
            let mut buf = [0u8; 4];
            for b in c.encode_utf8(&mut buf).bytes() {
                out.push_str(&format!("%{b:02X}"));
            }
        } else {
            out.push(c);
        }
    }
    if out == "." || out == ".." {
        out = out.replace('.', "%2E");
    }
    out
}

fn unescape_segment(seg: &str) -> Option<String> {
    match seg {
        // An empty segment, which ZooKeeper refuses, is written as a lone '%'.
        "%" => Some(String::new()),
        _ => locksmith_core::driver::url::decode(seg),
    }
}

/// The lock directory of `name`: `<base>/<name>`, each `/`-separated segment of the name kept
/// as is unless ZooKeeper would refuse it (empty, `.`, `..`, `%` or characters ZooKeeper
/// forbids), which are %-escaped.
pub(crate) fn lock_dir(base: &str, name: &LockName) -> String {
    let segs: Vec<String> = name.as_str().split('/').map(escape_segment).collect();
    format!("{base}/{}", segs.join("/"))
}

/// The lock name of a lock directory (inverse of [`lock_dir`]).
pub(crate) fn name_of(base: &str, dir: &str) -> Option<String> {
    let rel = dir.strip_prefix(base)?.strip_prefix('/')?;
    let segs: Option<Vec<String>> = rel.split('/').map(unescape_segment).collect();
    segs.map(|s| s.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let u = parse("zk://127.0.0.1:2181").unwrap();
        assert_eq!((u.hosts.as_str(), u.base.as_str()), ("127.0.0.1:2181", "/locksmith"));
        let u = parse("zk://a:1,b:2/app/locks/").unwrap();
        assert_eq!((u.hosts.as_str(), u.base.as_str()), ("a:1,b:2", "/app/locks"));
        assert_eq!(parse("zk://host").map(|u| u.hosts).ok().as_deref(), Some("host:2181"));
        let u = parse("zk://app:s3cret@h:1/locks").unwrap();
        assert_eq!((u.acl, u.digest.as_ref().map(|d| d.0.as_str())), (NodeAcl::Creator, Some("app:s3cret")));
        assert!(!format!("{u:?}").contains("s3cret") && !u.describe.contains("s3cret"));
        assert_eq!(parse("zk://app:pw@h:1?acl=creator-read").unwrap().acl, NodeAcl::CreatorWorldRead);
        assert_eq!(parse("zk://h:1").unwrap().acl, NodeAcl::Open);
        assert_eq!(parse("zk://h:1?acl=open").unwrap().acl, NodeAcl::Open);
        assert_eq!(parse("zk://u:p@h:1?acl=open").unwrap().acl, NodeAcl::Open);
        assert_eq!(parse("zk://h:1").unwrap().exclusive, ExclusiveLayout::Mutex);
        assert_eq!(parse("zk://h:1?exclusive=mutex").unwrap().exclusive, ExclusiveLayout::Mutex);
        let u = parse("zk://h:1/b?exclusive=write-lock").unwrap();
        assert_eq!((u.exclusive, u.describe.as_str()), (ExclusiveLayout::WriteLock, "zk://h:1/b?exclusive=write-lock"));
        for bad in [
            "zk://",
            "zk://h:0",
            "zk://h:x",
            "redis://h:1",
            "zk://h:1/a//b",
            "zk://h:1/zookeeper",
            "zk://u@h:1",
            "zk://h:1?acl=creator",
            "zk://h:1?acl=creator-read",
            "zk://u:p@h:1?acl=all",
            "zk://h:1?exclusive=writer",
        ] {
            assert!(matches!(parse(bad), Err(locksmith_core::Error::InvalidUrl { .. })), "{bad}");
        }
    }

    #[test]
    fn names_round_trip() {
        for n in ["a", "a/b/c", "a//b", "/x/", ".", "..", "50%", "é", "lock-🔒", "𝄞/x"] {
            let name = LockName::new(n).unwrap();
            let dir = lock_dir("/base", &name);
            assert!(!dir.contains("//") && !dir.ends_with('/'), "{dir}");
            assert_eq!(name_of("/base", &dir).as_deref(), Some(n));
        }
    }
}
