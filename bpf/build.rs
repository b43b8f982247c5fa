//! Compiles `src/bpf/steer.bpf.c` with libbpf-cargo into `$OUT_DIR/steer.bpf.o`, which the
//! crate embeds and loads with libbpf-rs's object API (no generated skeleton: the crate stays
//! free of `unsafe`).
//!
//! Compiler: `clang` from PATH, or `BPF_CLANG`. Headers: the UAPI headers of linux-libc-dev
//! (asm/types.h lives in the Debian multiarch directory) and libbpf-sys's own bpf_helpers.h,
//! which libbpf-cargo passes to clang.

use std::env;
use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

const SRC: &str = "src/bpf/steer.bpf.c";

fn main() {
    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let obj = out_dir.join("steer.bpf.o");
    let clang = env::var("BPF_CLANG").unwrap_or_else(|_| "clang".to_owned());
    let multiarch = match env::var("CARGO_CFG_TARGET_ARCH").as_deref() {
        Ok("aarch64") => "/usr/include/aarch64-linux-gnu",
        _ => "/usr/include/x86_64-linux-gnu",
    };

    if let Err(e) = SkeletonBuilder::new()
        .source(SRC)
        .obj(&obj)
        .clang(&clang)
        .clang_args([format!("-I{multiarch}"), "-Wall".to_owned()])
        .build()
    {
        panic!(
            "building the XDP program {SRC} with `{clang}` failed: {e:#}\n\
             (needs clang and linux-libc-dev: `make deps`; set BPF_CLANG to pick a compiler)"
        );
    }

    println!("cargo:rerun-if-changed={SRC}");
    println!("cargo:rerun-if-env-changed=BPF_CLANG");
}
