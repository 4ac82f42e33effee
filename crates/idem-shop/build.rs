//! Generates the shop's protobuf and tonic code with nothing but cargo: `protox` (pure Rust)
//! compiles the `.proto` into a `FileDescriptorSet`, and `tonic-prost-build` turns that into Rust.
//! No system `protoc` is needed.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/shop.proto");
    let fds = protox::compile(["shop.proto"], ["proto"])?;
    tonic_prost_build::configure().compile_fds(fds)?;
    Ok(())
}
