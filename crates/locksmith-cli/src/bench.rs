//! `locksmith bench`: latency and throughput of a backend (being written).

use std::process::ExitCode;

use clap::Args;

/// Arguments of `locksmith bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Backend URL.
    #[arg(long, env = "LOCKSMITH_BACKEND", default_value = crate::DEFAULT_BACKEND)]
    pub backend: String,
}

/// Runs the benchmark.
pub async fn bench(_args: BenchArgs) -> ExitCode {
    eprintln!("locksmith bench: not implemented yet");
    ExitCode::from(crate::exit::SOFTWARE)
}
