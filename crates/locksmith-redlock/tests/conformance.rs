//! The shared contract suite against Redlock over five real Redis masters, and the fencing
//! refusal that only the real backend shows.
//!
//! The suite runs through `UnfencedTarget` (locksmith-core's conformance module): the real
//! driver, with a test-only counter in place of the token 0 of every grant, so that every
//! exclusion, waiting, cancellation, reentrancy, release, loss and renewal property is checked
//! while the token assertions say nothing about Redlock (see that type's docs). The real
//! backend's behaviour (refusal without opt-in, `fencing_token() == None`, token 0) is asserted
//! separately below.

mod common;

use std::time::Duration;

use locksmith_core::conformance::UnfencedTarget;
use locksmith_core::Error;

fn redlock5() -> UnfencedTarget {
    let five = common::Five::start();
    UnfencedTarget::new(five.url(), locksmith::backend).keeping(five)
}

locksmith_core::conformance_suite!(redlock5());

/// The real backend refuses `lock`/`try_lock` without `allow_unfenced` (Error::Unfenced), and a
/// hold taken with it has token 0 and `fencing_token() == None`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_backend_refuses_to_lock_without_opting_in_to_no_fencing() {
    let five = common::Five::start();
    let client = locksmith::connect_with_ttl(&five.url(), Duration::from_secs(2)).await.unwrap();
    assert!(!client.backend().provides_fencing());
    let name = common::unique("unfenced");
    let r = client.lock(&name).await;
    assert!(matches!(r, Err(Error::Unfenced(_))), "lock without opt-in gave {r:?}");
    let r = client.try_lock(&name).await;
    assert!(matches!(r, Err(Error::Unfenced(_))), "try_lock without opt-in gave {r:?}");
    assert!(five.holding(&name).await.is_empty(), "a refused lock touched the instances");

    let g = client.lock_with(&name, common::unfenced()).await.unwrap();
    assert_eq!(g.fencing_token(), None);
    assert_eq!(g.token(), 0);
    assert!(g.is_held());
    assert!(g.unlock().await.unwrap());
    client.close().await;
}
