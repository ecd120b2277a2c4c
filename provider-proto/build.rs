//! Compiles the driver contract with protox (a pure-Rust protobuf compiler: no `protoc` needed).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
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
