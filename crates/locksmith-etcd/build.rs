//! Compiles the project's own declaration of etcd's v3 API (`proto/etcd.proto`) with protox
//! (pure Rust): building needs no system `protoc`.
fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/etcd.proto");
    let fds = protox::compile(["proto/etcd.proto"], ["proto"])?;
    tonic_prost_build::configure().build_server(false).compile_fds(fds)?;
    Ok(())
}
