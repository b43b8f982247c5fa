//! libmpaxdp's soname, and its header generated from the sources into `OUT_DIR/mpaxdp.h`: a
//! test compares it with the checked-in `include/mpaxdp.h` (docs/c-library.md).

fn main() {
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    // The ABI's major version: a change that breaks a C program built against the header
    // raises it (and the file name the linker records).
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libmpaxdp.so.0");
    let dir = std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    let config =
        cbindgen::Config::from_file(format!("{dir}/cbindgen.toml")).expect("capi/cbindgen.toml");
    match cbindgen::generate_with_config(&dir, config) {
        Ok(b) => {
            b.write_to_file(format!("{out}/mpaxdp.h"));
        }
        Err(e) => panic!("generating mpaxdp.h: {e}"),
    }
}
