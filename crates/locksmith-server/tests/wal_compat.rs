//! Data directories written by earlier releases still load: a server started on a log written
//! by the first release's encoder restores its holders, counters and lock-delays.

use std::time::Duration;

use locksmith_server::machine::Limits;
use locksmith_server::{Durability, Service};

/// A log written by the first release (`tests/fixtures/wal-locksmith-v1.log`) restores its
/// holder, tokens, counters and the quiet period its lease records call for.
#[tokio::test]
async fn a_data_dir_written_by_the_first_release_loads() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("wal"), include_bytes!("fixtures/wal-locksmith-v1.log")).unwrap();
    let (service, task) = Service::start_durable(dir.path(), Limits::default(), Durability::Grants).unwrap();
    let views = service.status(None).await.unwrap();
    let names: Vec<&str> = views.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names, ["jobs/nightly", "leased", "ünïcode/☃"]);

    let nightly = &views[0];
    let (session, owner, token, ttl_left) = nightly.holder.clone().unwrap();
    assert_eq!((session, owner.as_str(), token), ((3 << 32) | 2, "host/43/0badcafe-2", 8));
    assert!(ttl_left > Duration::from_secs(1) && ttl_left <= Duration::from_millis(2_500), "{ttl_left:?}");
    assert_eq!(nightly.last_token, 8);

    // Reserve and Horizon records mean a leases run wrote part of this log: tokens continue
    // above the reservation, and free locks wait out the longest TTL + lock-delay (35 s).
    let leased = &views[1];
    assert_eq!((leased.holder.is_none(), leased.last_token), (true, 2048));
    let unicode = &views[2];
    assert_eq!((unicode.holder.is_none(), unicode.last_token), (true, 41));
    for v in [leased, unicode] {
        let left = v.delay_left.unwrap();
        assert!(left > Duration::from_secs(30) && left <= Duration::from_secs(35), "{}: {left:?}", v.name);
    }

    service.shutdown();
    task.await.unwrap().unwrap();
    // The restored state was compacted into a new log that loads again.
    let (again, task) = Service::start_durable(dir.path(), Limits::default(), Durability::Grants).unwrap();
    let views2 = again.status(None).await.unwrap();
    assert_eq!(
        views2.iter().map(|v| (v.name.as_str(), v.last_token)).collect::<Vec<_>>(),
        [("jobs/nightly", 8), ("leased", 2048), ("ünïcode/☃", 41)]
    );
    again.shutdown();
    task.await.unwrap().unwrap();
}
