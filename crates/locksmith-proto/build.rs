//! Compiles the .proto files with protox (pure Rust), so building needs no system `protoc`.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/locksmith.proto");
    println!("cargo:rerun-if-changed=proto/wal.proto");
    let fds = protox::compile(["proto/locksmith.proto", "proto/wal.proto"], ["proto"])?;
    tonic_prost_build::configure().compile_fds(fds)?;
    Ok(())
}
