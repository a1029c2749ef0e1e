//! The C programs of `c/`, compiled by the tests that run them against the
//! installed rdma-core headers (and so its ABI), with warnings as errors.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, PoisonError};

use crate::PACKAGES_HINT;

/// A library a program links: its `cc` flag, and the header and Debian
/// package it needs (for the message when they are missing).
#[derive(Debug, Clone, Copy)]
pub struct CLib {
    pub flag: &'static str,
    pub header: &'static str,
    pub package: &'static str,
}

pub const LIBIBVERBS: CLib = CLib {
    flag: "-libverbs",
    header: "/usr/include/infiniband/verbs.h",
    package: "libibverbs-dev",
};

pub const LIBRDMACM: CLib = CLib {
    flag: "-lrdmacm",
    header: "/usr/include/rdma/rdma_cma.h",
    package: "librdmacm-dev",
};

pub const LIBIBUMAD: CLib = CLib {
    flag: "-libumad",
    header: "/usr/include/infiniband/umad.h",
    package: "libibumad-dev",
};

/// Compiles `c/<name>.c` into `<out_dir>/<name>`, linked with `libs` (in
/// this order), once per test process: the tests of one file share the
/// binary. Panics with the compiler's output, or with what to install.
///
/// `out_dir` is the test's `env!("CARGO_TARGET_TMPDIR")`, which only
/// integration tests get.
pub fn build_c_program(name: &str, out_dir: &Path, libs: &[CLib]) -> PathBuf {
    static BUILT: Mutex<BTreeMap<String, PathBuf>> = Mutex::new(BTreeMap::new());
    // Held while compiling, so concurrent tests wait for the one build. A
    // failed build leaves nothing behind: the next test tries again (and
    // fails with the same message rather than a poisoned lock).
    let mut built = BUILT.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(bin) = built.get(name) {
        return bin.clone();
    }
    for lib in libs {
        assert!(
            Path::new(lib.header).is_file(),
            "{} is missing: install {} ({PACKAGES_HINT})",
            lib.header,
            lib.package
        );
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("c")
        .join(format!("{name}.c"));
    let out = out_dir.join(name);
    let result = Command::new("cc")
        .args([
            "-std=gnu11",
            "-O1",
            "-g",
            "-Wall",
            "-Wextra",
            "-Werror",
            "-o",
        ])
        .arg(&out)
        .arg(&src)
        .args(libs.iter().map(|l| l.flag))
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap_or_else(|e| panic!("cannot run cc (apt-get install gcc): {e}"));
    assert!(
        result.status.success(),
        "compiling {} failed:\n{}{}",
        src.display(),
        String::from_utf8_lossy(&result.stdout),
        String::from_utf8_lossy(&result.stderr)
    );
    built.insert(name.to_owned(), out.clone());
    out
}
