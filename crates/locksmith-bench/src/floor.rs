//! The floor (`--floor-dir`): what this machine's network and disk cost a lock cycle at best,
//! measured in the same run (once per round, under the same load) as the backends.
//!
//! - *RTT*: on a loopback host the bench opens its own TCP listener on that address and times
//!   16-byte ping-pongs over one connection (`TCP_NODELAY`, through the same tokio runtime the
//!   clients use): the round trip a request and its answer cannot beat. On any other host it
//!   times TCP connects to the backend's port (the SYN / SYN-ACK handshake is one round trip).
//! - *fdatasync*: a 64-byte append to a file in the directory, then `fdatasync` (std's
//!   `sync_data`), timed; the file is removed after.
//!
//! A single node's durable cycle (grant and release) needs at least two round trips and one
//! `fdatasync` (the grant's): its floor is `2 × RTT + fdatasync`.

use std::io::Write;
use std::net::IpAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::stats::median;

/// Ping-pongs (or connects) timed per host and round, after one unrecorded.
const RTT_SAMPLES: usize = 200;
/// Connects timed on a host that is not loopback (each one leaves a socket in TIME_WAIT).
const CONNECT_SAMPLES: usize = 20;
/// Appends synced per round, after one unrecorded.
pub(crate) const SYNC_SAMPLES: usize = 100;
/// Bytes of each append: a small log record.
pub(crate) const APPEND_BYTES: usize = 64;
/// Longest the RTT measurement of one host may take before it is given up.
const RTT_LIMIT: Duration = Duration::from_secs(5);

/// The floor of one backend's host in one round, or its medians over the rounds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Floor {
    /// TCP round trip to the backend's host, median, µs; `null` for a backend without a host
    /// (`memory://`, `sqlite://`) or when it could not be measured.
    pub rtt_p50_us: Option<f64>,
    /// `fdatasync` of a small append in `--floor-dir`, median, µs.
    pub fdatasync_p50_us: Option<f64>,
    /// `2 × RTT + fdatasync`: a single node's durable lock→unlock cycle at best, µs.
    pub single_node_cycle_us: Option<f64>,
}

impl Floor {
    /// A floor from its two measurements, with the derived single-node cycle.
    pub(crate) fn new(rtt_p50_us: Option<f64>, fdatasync_p50_us: Option<f64>) -> Self {
        let single_node_cycle_us = rtt_p50_us.zip(fdatasync_p50_us).map(|(rtt, sync)| 2.0 * rtt + sync);
        Self { rtt_p50_us, fdatasync_p50_us, single_node_cycle_us }
    }

    /// `cycle ÷ single_node_cycle_us`: how many floors a cycle takes.
    pub(crate) fn times(&self, cycle_us: Option<f64>) -> Option<f64> {
        cycle_us.zip(self.single_node_cycle_us).and_then(|(c, f)| (f > 0.0).then(|| c / f))
    }

    /// The medians of each measurement over the rounds (the derived floor from the medians).
    pub(crate) fn median<'a>(rounds: impl Iterator<Item = &'a Floor> + Clone) -> Self {
        Self::new(
            median(rounds.clone().filter_map(|f| f.rtt_p50_us)),
            median(rounds.filter_map(|f| f.fdatasync_p50_us)),
        )
    }
}

/// The host whose round trip bounds `url`'s requests: its first host; `None` when the backend
/// has no network address.
pub(crate) fn host_of(url: &str) -> Option<(String, u16)> {
    let parsed = locksmith::driver::BackendUrl::parse(url).ok()?;
    parsed.hosts().first().map(|h| (h.host.clone(), h.port))
}

/// Whether `url` is the native server (the rows given as × floor).
pub(crate) fn is_native(url: &str) -> bool {
    locksmith::driver::BackendUrl::parse(url).is_ok_and(|u| u.scheme().base == "locksmith")
}

/// The median TCP round trip to `host`, µs (see the module's documentation for how).
pub(crate) async fn rtt(host: &str, port: u16) -> Result<f64, String> {
    let loopback = match host.trim_start_matches('[').trim_end_matches(']') {
        "localhost" => Some(IpAddr::from([127, 0, 0, 1])),
        h => h.parse::<IpAddr>().ok().filter(IpAddr::is_loopback),
    };
    let measuring = async {
        match loopback {
            Some(ip) => echo_rtt(ip).await,
            None => connect_rtt(host, port).await,
        }
    };
    tokio::time::timeout(RTT_LIMIT, measuring)
        .await
        .map_err(|_| format!("no answer within {RTT_LIMIT:?}"))?
        .map_err(|e| e.to_string())
}

async fn echo_rtt(ip: IpAddr) -> std::io::Result<f64> {
    let listener = TcpListener::bind((ip, 0)).await?;
    let addr = listener.local_addr()?;
    let echo = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await?;
        s.set_nodelay(true)?;
        let mut buf = [0u8; 16];
        loop {
            match s.read_exact(&mut buf).await {
                Ok(_) => s.write_all(&buf).await?,
                // The measuring side closed: done.
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok::<(), std::io::Error>(()),
                Err(e) => return Err(e),
            }
        }
    });
    let mut client = TcpStream::connect(addr).await?;
    client.set_nodelay(true)?;
    let mut buf = [0u8; 16];
    let mut samples = Vec::with_capacity(RTT_SAMPLES);
    for i in 0..=RTT_SAMPLES {
        let start = Instant::now();
        client.write_all(&buf).await?;
        client.read_exact(&mut buf).await?;
        if i > 0 {
            samples.push(micros(start.elapsed()));
        }
    }
    drop(client);
    let _ = echo.await;
    Ok(median(samples.into_iter()).unwrap_or_default())
}

async fn connect_rtt(host: &str, port: u16) -> std::io::Result<f64> {
    let addr = tokio::net::lookup_host((host.trim_start_matches('[').trim_end_matches(']'), port))
        .await?
        .next()
        .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "the host has no address"))?;
    let mut samples = Vec::with_capacity(CONNECT_SAMPLES);
    for _ in 0..CONNECT_SAMPLES {
        let start = Instant::now();
        let s = TcpStream::connect(addr).await?;
        samples.push(micros(start.elapsed()));
        drop(s);
    }
    Ok(median(samples.into_iter()).unwrap_or_default())
}

/// The median `fdatasync` of a small append to a fresh file in `dir`, µs; the file is removed.
pub(crate) async fn fdatasync(dir: &Path) -> std::io::Result<f64> {
    let path = dir.join(format!("locksmith-bench-floor-{}.tmp", std::process::id()));
    tokio::task::spawn_blocking(move || {
        let result = sync_samples(&path);
        let removed = std::fs::remove_file(&path);
        let p50 = result?;
        removed.map(|()| p50)
    })
    .await
    .map_err(std::io::Error::other)?
}

fn sync_samples(path: &Path) -> std::io::Result<f64> {
    let mut file = std::fs::OpenOptions::new().create_new(true).append(true).open(path)?;
    let record = [0x5au8; APPEND_BYTES];
    let mut samples = Vec::with_capacity(SYNC_SAMPLES);
    for i in 0..=SYNC_SAMPLES {
        let start = Instant::now();
        file.write_all(&record)?;
        file.sync_data()?;
        // The first sync also creates the file's metadata: unrecorded.
        if i > 0 {
            samples.push(micros(start.elapsed()));
        }
    }
    Ok(median(samples.into_iter()).unwrap_or_default())
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// `×N.NN`, or `-` when there is no figure.
pub(crate) fn times_cell(times: Option<f64>) -> String {
    times.map_or_else(|| "-".into(), |t| format!("×{t:.2}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A single node's floor is two round trips and one fdatasync; a cycle is given as that
    /// many floors, and without a round trip there is no floor to divide by.
    #[test]
    fn single_node_floor_is_two_round_trips_and_one_fdatasync() {
        let floor = Floor::new(Some(30.0), Some(240.0));
        assert_eq!(floor.single_node_cycle_us, Some(300.0));
        assert_eq!(floor.times(Some(660.0)), Some(2.2));
        assert_eq!(times_cell(floor.times(Some(660.0))), "×2.20");
        assert_eq!(floor.times(None), None);
        let no_host = Floor::new(None, Some(240.0));
        assert_eq!((no_host.single_node_cycle_us, no_host.times(Some(660.0))), (None, None));
        assert_eq!(times_cell(None), "-");
    }

    /// Over rounds, each measurement is its median and the floor is derived from the medians.
    #[test]
    fn floor_over_rounds_is_the_medians() {
        let rounds =
            [Floor::new(Some(30.0), Some(200.0)), Floor::new(Some(50.0), Some(300.0)), Floor::new(None, Some(250.0))];
        let m = Floor::median(rounds.iter());
        assert_eq!((m.rtt_p50_us, m.fdatasync_p50_us, m.single_node_cycle_us), (Some(40.0), Some(250.0), Some(330.0)));
    }

    /// The fdatasync probe gives a positive median and leaves nothing in the directory.
    #[tokio::test]
    async fn fdatasync_probe_removes_its_file() {
        let dir = tempfile::tempdir().unwrap();
        assert!(fdatasync(dir.path()).await.unwrap() > 0.0);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    /// The loopback round trip is measured over the bench's own echo listener.
    #[tokio::test]
    async fn loopback_round_trip_is_measured_on_an_echo_of_its_own() {
        assert!(rtt("127.0.0.1", 1).await.unwrap() > 0.0);
    }
}
