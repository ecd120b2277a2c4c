//! Compiles the driver contract with protox (a pure-Rust protobuf compiler: no `protoc` needed),
//! only with the `grpc` feature: without it the crate has no generated code.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    if std::env::var_os("CARGO_FEATURE_GRPC").is_none() {
        return Ok(());
    }
    compile()
}

#[cfg(feature = "grpc")]
fn compile() -> Result<(), Box<dyn std::error::Error>> {
    let descriptors = protox::compile(
        ["mcm/driver/v1/driver.proto", "google/rpc/status.proto"],
        ["proto"],
    )?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(descriptors)?;
    Ok(())
}

#[cfg(not(feature = "grpc"))]
fn compile() -> Result<(), Box<dyn std::error::Error>> {
    Ok(())
}
