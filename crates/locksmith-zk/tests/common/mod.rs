//! What the interop tests share: a log that both sides append to, and Curator's classpath.

// Each test binary uses a part of this module.
#![allow(dead_code)]

use std::io::Write;
use std::path::Path;
use std::time::Duration;

/// Appends one line (O_APPEND, one write: atomic for short lines, so the Java and the Rust
/// side can share the file and its order is the order of events).
pub fn log_line(file: &Path, line: &str) {
    let mut f = std::fs::OpenOptions::new().append(true).create(true).open(file).unwrap();
    f.write_all(format!("{line}\n").as_bytes()).unwrap();
}

/// Waits (up to 30 s) until `needle` shows in the log.
pub async fn wait_for(file: &Path, needle: &str) {
    for _ in 0..600 {
        if std::fs::read_to_string(file).map(|t| t.contains(needle)).unwrap_or(false) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{needle:?} never showed in {}:\n{}", file.display(), std::fs::read_to_string(file).unwrap_or_default());
}

/// The Curator 5.4 and ZooKeeper 3.8 jars Debian installs (`scripts/setup.sh`).
pub fn curator_classpath() -> String {
    let jars = [
        "curator-recipes",
        "curator-framework",
        "curator-client",
        "zookeeper",
        "zookeeper-jute",
        "guava",
        "slf4j-api",
        "slf4j-nop",
    ];
    jars.iter()
        .map(|j| {
            let p = format!("/usr/share/java/{j}.jar");
            assert!(Path::new(&p).exists(), "{p} is missing; run: bash scripts/setup.sh");
            p
        })
        .collect::<Vec<_>>()
        .join(":")
}
