//! A principal and its rights: what the lock service and a stream check a caller against,
//! whoever authenticated it (the policy file of `locksmith serve --auth`, see `policy`).

/// One principal: a name for logs, and its rights.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The name in the policy file (shown in logs and refusals).
    pub name: String,
    pub(super) lock: Vec<String>,
    pub(super) observe: Vec<String>,
    pub(super) admin: bool,
}

impl Principal {
    /// Whether it may acquire (and release) lock `name`.
    pub fn may_lock(&self, name: &str) -> bool {
        self.admin || self.lock.iter().any(|p| name.starts_with(p.as_str()))
    }

    /// Whether it is an admin: it may lock and observe every name, and change a cluster's
    /// membership (`locksmith cluster add|remove`).
    pub fn is_admin(&self) -> bool {
        self.admin
    }

    /// Whether it may see lock `name` in status.
    pub fn may_observe(&self, name: &str) -> bool {
        self.admin || self.may_lock(name) || self.observe.iter().any(|p| name.starts_with(p.as_str()))
    }

    /// The prefixes of the names it may see in status; `None`: every name (an admin).
    pub fn observed_prefixes(&self) -> Option<Vec<&str>> {
        (!self.admin).then(|| self.lock.iter().chain(&self.observe).map(String::as_str).collect())
    }
}
