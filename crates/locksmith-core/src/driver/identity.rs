//! Identities — session ids, lock values, owner ids, waiter ids — drawn from the operating
//! system, never from a userspace generator.
//!
//! A userspace generator (rand's thread-local one) is copied by `fork()`: a forked child (a
//! gunicorn worker, a `multiprocessing` process, the Python binding's users) would draw the same
//! ids as its parent, and two processes would present one identity to the backend — each could
//! renew or release the other's hold. The OS generator (`getrandom(2)`) is not copied by a fork.
//! Every driver draws its identities here; jitter and backoff may keep using `rand`.

/// `N` random bytes from the operating system. Should the OS generator fail (it does not on any
/// supported system), the bytes are rand's mixed with the process id and the clock, so that a
/// forked child still differs from its parent.
pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    if getrandom::fill(&mut bytes).is_err() {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let salt = (u128::from(std::process::id()) << 96) ^ nanos;
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = rand::random::<u8>() ^ salt.to_le_bytes()[i % 16];
        }
    }
    bytes
}

/// A random `u32` from the OS ([`random_bytes`]).
pub fn random_u32() -> u32 {
    u32::from_le_bytes(random_bytes())
}

/// A random `u64` from the OS ([`random_bytes`]).
///
/// ```
/// use locksmith_core::driver::identity::random_u64;
/// assert_ne!(random_u64(), random_u64());
/// ```
pub fn random_u64() -> u64 {
    u64::from_le_bytes(random_bytes())
}

/// A random `u128` from the OS ([`random_bytes`]).
pub fn random_u128() -> u128 {
    u128::from_le_bytes(random_bytes())
}

/// A random version-4 UUID in its text form (`8-4-4-4-12` hex digits), as Redisson and Curator
/// use for client and node ids.
///
/// ```
/// let u = locksmith_core::driver::identity::random_uuid();
/// assert_eq!(u.len(), 36);
/// assert_eq!(&u[14..15], "4");
/// ```
pub fn random_uuid() -> String {
    let mut v = random_u128();
    v = (v & !(0xf << 76)) | (0x4 << 76); // version 4
    v = (v & !(0x3 << 62)) | (0x2 << 62); // RFC 4122 variant
    let h = format!("{v:032x}");
    format!("{}-{}-{}-{}-{}", &h[0..8], &h[8..12], &h[12..16], &h[16..20], &h[20..32])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};

    /// A forked child draws other identities than its parent: with rand's thread-local
    /// generator both drew the same ids after a fork (the binding's fork test found it).
    #[test]
    fn a_forked_child_draws_other_identities_than_its_parent() {
        // Warm up this thread's generators, as a long-running parent would have.
        let _ = (random_u128(), rand::random::<u128>());
        let (mut read, mut write) = std::io::pipe().expect("pipe");
        // SAFETY: the child only draws bytes, writes them to a pipe and `_exit`s: no lock
        // another thread could hold is taken, no destructor runs.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            let _ = write.write_all(&random_u128().to_le_bytes());
            // SAFETY: ends the forked child at once, as after any fork in a threaded program.
            unsafe { libc::_exit(0) };
        }
        drop(write);
        let parent = random_u128();
        let mut child = [0u8; 16];
        read.read_exact(&mut child).expect("the child's id");
        let mut status = 0;
        // SAFETY: waits for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        assert_ne!(u128::from_le_bytes(child), parent, "parent and child drew the same id");
    }
}
