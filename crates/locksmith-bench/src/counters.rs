//! A minimal global `metrics` recorder that sums every counter by name, so the herd workload
//! can read the drivers' waiter wake-ups ([`locksmith::metrics::WAKEUPS`]) before and after.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};

/// Counters by name, labels ignored (one backend runs at a time).
#[derive(Debug, Default)]
struct Sums {
    counters: Mutex<HashMap<String, Arc<AtomicU64>>>,
}

impl Sums {
    fn get(&self, name: &str) -> Arc<AtomicU64> {
        // A poisoned map only means a panic elsewhere mid-insert; the counters stay usable.
        let mut map = self.counters.lock().unwrap_or_else(|p| p.into_inner());
        // Every `counter!` call lands here: no allocation once the name is known.
        if let Some(c) = map.get(name) {
            return c.clone();
        }
        map.entry(name.to_string()).or_default().clone()
    }
}

#[derive(Debug)]
struct SumRecorder(&'static Sums);

impl Recorder for SumRecorder {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}

    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.0.get(key.name()))
    }

    fn register_gauge(&self, _: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::noop()
    }

    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

/// The sums, once the recorder is installed; `None` if another recorder was there first.
static SUMS: OnceLock<Option<&'static Sums>> = OnceLock::new();

/// Installs the recorder (once per process) and reads the sum of counter `name`; `None` when
/// another global recorder was installed before ours. The bench calls it before the first
/// workload, so that every backend and round runs with the same recorder in place.
pub(crate) fn read(name: &str) -> Option<u64> {
    let sums = SUMS.get_or_init(|| {
        let sums: &'static Sums = Box::leak(Box::default());
        metrics::set_global_recorder(SumRecorder(sums)).ok().map(|()| sums)
    });
    sums.map(|s| s.get(name).load(Ordering::Relaxed))
}
