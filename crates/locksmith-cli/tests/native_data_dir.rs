//! `locksmith serve --data-dir`: a directory it cannot use stops it before it listens, with the
//! path and the problem said, and an exit code of its own (README's table): 73 when it cannot
//! be created or opened, 75 while another server holds it (65, corrupt, is `native_damaged_log`).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use locksmith_testkit::NativeServer;

const BIN: &str = env!("CARGO_BIN_EXE_locksmith");

/// `serve --data-dir DIR` on a free port: its exit code and stderr (it must exit by itself).
fn serve_on(dir: &Path) -> (Option<i32>, String) {
    let mut cmd = Command::new(BIN);
    cmd.arg("serve")
        .arg("--listen")
        .arg(format!("127.0.0.1:{}", locksmith_testkit::free_port()))
        .arg("--data-dir")
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut p = locksmith_testkit::spawn("locksmith serve", &mut cmd);
    let status = p.wait_timeout(Duration::from_secs(20));
    let mut stderr = String::new();
    if let Some(mut e) = p.take_stderr() {
        let _ = std::io::Read::read_to_string(&mut e, &mut stderr);
    }
    (status.and_then(|s| s.code()), stderr)
}

/// A path that is a file: exit 73, naming the path and what is wrong.
#[test]
fn a_data_dir_that_cannot_be_created_exits_73_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("not-a-dir");
    std::fs::write(&file, b"x").unwrap();
    let (code, stderr) = serve_on(&file);
    assert_eq!(code, Some(73), "{stderr}");
    assert!(stderr.contains("cannot create or open the data directory"), "{stderr}");
    assert!(stderr.contains(&file.display().to_string()), "{stderr}");
    assert!(!stderr.contains("i/o error: i/o error"), "{stderr}");
}

/// A directory another server holds: exit 75 (try again once it stopped), naming it.
#[test]
fn a_data_dir_in_use_by_another_server_exits_75_naming_it() {
    let server = NativeServer::start(BIN.as_ref());
    let data = server.data_dir().join("data");
    let (code, stderr) = serve_on(&data);
    assert_eq!(code, Some(75), "{stderr}");
    assert!(stderr.contains("is in use by another locksmith server"), "{stderr}");
    assert!(stderr.contains(&data.display().to_string()), "{stderr}");
}
