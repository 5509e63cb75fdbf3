//! `locksmith`: a thin binary over the library (see `locksmith_cli::run`).
fn main() -> std::process::ExitCode {
    locksmith_cli::main()
}
