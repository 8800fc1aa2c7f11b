//! Build script: embeds an rpath to libtorch's `lib/` directory so the `ledger` binary,
//! tests and benches run without LD_LIBRARY_PATH.
//!
//! torch-sys finds libtorch from `LIBTORCH` (set by `.cargo/config.toml` to the link
//! that `tools/libtorch.sh` maintains, or by the user) or from python when
//! `LIBTORCH_USE_PYTORCH=1`; this script mirrors that choice for the rpath only.
use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=LIBTORCH");
    println!("cargo:rerun-if-env-changed=LIBTORCH_USE_PYTORCH");
    println!("cargo:rerun-if-changed=tools/build.rs");
    // A build without the trainer (`--no-default-features`) links no libtorch.
    if std::env::var_os("CARGO_FEATURE_TRAIN").is_none() {
        return;
    }
    let lib_dir = if std::env::var("LIBTORCH_USE_PYTORCH").as_deref() == Ok("1") {
        let out = Command::new("python3")
            .args([
                "-c",
                "import torch, pathlib; print(pathlib.Path(torch.__file__).parent / 'lib')",
            ])
            .output();
        match out {
            Ok(o) if o.status.success() => {
                Some(PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
            }
            _ => None,
        }
    } else {
        std::env::var_os("LIBTORCH").map(|p| PathBuf::from(p).join("lib"))
    };
    if let Some(dir) = lib_dir {
        // Resolve the `target/libtorch` link so the rpath survives `cargo clean`.
        let dir = dir.canonicalize().unwrap_or(dir);
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.display());
    }
}
