//! Maps keyed by [`SessionId`](super::SessionId): the grant path looks sessions up several
//! times per request (the machine's session table, the service's streams and principals).
//!
//! Session ids are made by the server (`epoch << 32 | n`), never chosen by a client: a client
//! can only look one up. So nobody can fill a table with ids that collide, and the core's
//! multiplicative [`IdMap`](locksmith_core::driver::IdMap) is enough. Maps whose keys a client
//! chooses (request ids, lock names, owners) keep std's keyed SipHash.

/// A map keyed by server-made session ids.
pub(crate) type IdMap<V> = locksmith_core::driver::IdMap<V>;
