//! Gives `librdmalib.so` its soname, so programs linked with `-lrdmalib`
//! record `librdmalib.so` (found through `LD_LIBRARY_PATH` or an rpath).

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,librdmalib.so");
    println!("cargo:rerun-if-changed=build.rs");
}
