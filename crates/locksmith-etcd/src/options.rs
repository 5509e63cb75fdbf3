//! How to reach a cluster beyond its addresses: TLS material and credentials, for library users
//! whose secrets do not belong in a URL (a password from a vault, a key read from a secret
//! store), and which key an exclusive hold writes.
//! [`EtcdBackend::from_url`](crate::EtcdBackend::from_url) builds the same record from
//! `etcds://user:password@…?ca=&cert=&key=&exclusive=`.

use locksmith_core::driver::TlsFiles;

use crate::ExclusiveLayout;

/// TLS and authentication settings of an etcd client.
///
/// ```
/// use locksmith_core::driver::TlsFiles;
/// use locksmith_etcd::{Credentials, EtcdBackend, EtcdOptions};
///
/// # fn ca_pem() -> Vec<u8> { Vec::new() }
/// let tls = TlsFiles { ca: Some(ca_pem()), identity: None, paths: Vec::new() };
/// let options = EtcdOptions::new().tls(tls).credentials(Credentials::new("locks", "from-the-vault"));
/// assert!(!format!("{options:?}").contains("from-the-vault"));
/// let backend = EtcdBackend::with_options(["etcd-1.internal:2379", "etcd-2.internal:2379"], options)?;
/// # Ok::<(), locksmith_core::Error>(())
/// ```
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct EtcdOptions {
    /// TLS (`https://` endpoints) with these authorities (none: the system's trust store) and,
    /// if given, this client certificate (mutual TLS); `None`: plain HTTP/2.
    pub tls: Option<TlsFiles>,
    /// A user to authenticate as (`Auth.Authenticate`); `None`: no token is sent.
    pub credentials: Option<Credentials>,
    /// The key an exclusive hold without a value writes: Go's `concurrency.Mutex` key (the
    /// default) or the `recipe.RWMutex` writer key (`?exclusive=write-lock`).
    pub exclusive: ExclusiveLayout,
}

impl EtcdOptions {
    /// Plain HTTP/2, no credentials.
    pub fn new() -> Self {
        Self::default()
    }

    /// Speak TLS with `tls`.
    #[must_use]
    pub fn tls(mut self, tls: TlsFiles) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Authenticate with `credentials`.
    #[must_use]
    pub fn credentials(mut self, credentials: Credentials) -> Self {
        self.credentials = Some(credentials);
        self
    }

    /// Write exclusive holds in `layout` (see [`ExclusiveLayout`]).
    #[must_use]
    pub fn exclusive(mut self, layout: ExclusiveLayout) -> Self {
        self.exclusive = layout;
        self
    }
}

impl std::fmt::Debug for EtcdOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // TlsFiles prints paths only, Credentials the user only.
        f.debug_struct("EtcdOptions")
            .field("tls", &self.tls)
            .field("credentials", &self.credentials)
            .field("exclusive", &self.exclusive)
            .finish()
    }
}

/// An etcd user name and password. The password leaves only through the `Authenticate` call:
/// `Debug` shows the user name alone.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    user: String,
    password: String,
}

impl Credentials {
    /// `user` with `password`.
    pub fn new(user: impl Into<String>, password: impl Into<String>) -> Self {
        Self { user: user.into(), password: password.into() }
    }

    /// The user name.
    pub fn user(&self) -> &str {
        &self.user
    }

    /// The password. A secret: never print it.
    pub(crate) fn password(&self) -> &str {
        &self.password
    }
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials").field("user", &self.user).field("password", &"***").finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_shows_the_user_and_paths_never_the_password_or_key() {
        let tls = TlsFiles {
            ca: None,
            identity: Some((b"CERT".to_vec(), b"KEY-BYTES".to_vec())),
            paths: vec!["/etc/locks/client.key".into()],
        };
        let o = EtcdOptions::new().tls(tls).credentials(Credentials::new("locks", "hunter2"));
        let debug = format!("{o:?}");
        assert!(debug.contains("locks") && debug.contains("client.key"), "{debug}");
        assert!(!debug.contains("hunter2") && !debug.contains("KEY-BYTES"), "{debug}");
    }
}
