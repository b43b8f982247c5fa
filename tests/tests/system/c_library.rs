//! libmpaxdp from C (docs/c-library.md): a C program built with the checked-in header
//! against the shared library calls every error path against a live datapath — bad handles
//! and arguments, another context's objects, connections that do not exist, malformed work
//! requests, a refusal that comes back as a completion, a panic inside the library — and
//! each returns its code with a message (`capi/tests/c/errors.c`).

use mpa_tests::{datapath, require_privileged, BedConfig, DatapathOptions, TestBed};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The workspace's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is in the workspace")
        .to_path_buf()
}

/// Compiles C program `source` against the checked-in header and libmpaxdp (its soname's
/// file made beside it, and found there at run time); the executable.
pub(crate) fn compile(source: &Path, name: &str) -> PathBuf {
    let lib = mpa_harness::c_library_dir();
    let dir = mpa_harness::temp_path(&format!("c-{name}"));
    std::fs::create_dir_all(&dir).unwrap();
    for file in ["libmpaxdp.so", "libmpaxdp.so.0"] {
        let to = dir.join(file);
        let _ = std::fs::remove_file(&to);
        std::fs::copy(lib.join("libmpaxdp.so"), &to).unwrap();
    }
    let exe = dir.join(name);
    let out = Command::new("cc")
        .args([
            "-std=c11",
            "-D_DEFAULT_SOURCE",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-o",
        ])
        .arg(&exe)
        .arg(source)
        .arg("-I")
        .arg(root().join("capi/include"))
        .arg("-L")
        .arg(&dir)
        .arg(format!("-Wl,-rpath,{}", dir.display()))
        .args(["-lmpaxdp", "-lm"])
        .output()
        .expect("cc");
    assert!(
        out.status.success(),
        "cc {}: {}",
        source.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

#[test]
fn every_error_path_returns_its_code_and_message_from_c() {
    if !require_privileged("the C library's error paths") {
        return;
    }
    let exe = compile(&root().join("capi/tests/c/errors.c"), "errors");
    let bed = TestBed::up(BedConfig::default()).unwrap();
    let (dp, socket) = datapath(&bed, &DatapathOptions::default());
    let out = Command::new(&exe).arg(&socket).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("passed: 0 failures"),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Every check ran: one line each.
    assert_eq!(
        text.lines().filter(|l| l.starts_with("ok ")).count(),
        42,
        "{text}"
    );
    assert_eq!(dp.failure(), None);
    dp.stop();
}
