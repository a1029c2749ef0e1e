//! Project automation, run as `cargo xtask <task>` (alias in `.cargo/config.toml`).
//!
//! Tasks:
//! - `compat`: build the C-ABI staticlibs in release and link them into
//!   `target/compat/libibverbs.so.1`, `target/compat/librdmacm.so.1` and
//!   `target/compat/libibumad.so.3`
//!   (see `crates/capi/README.md`); also `target/compat/librdmalib.so`
//!   (rdmalib's C API, `crates/rdmalib-capi`).
//! - `bench`: the same-host benchmark suite (perftest over target/compat, the
//!   Rust API, qperf TCP, UCX shared-memory and memcpy baselines from the
//!   same run); prints a table and updates BENCHMARKS.md (module `bench`).
//!
//! Dependency-free on purpose: it only runs `cargo`, `rustc`, `cc` and
//! `readelf` (and, for `bench`, perftest, qperf and `ucx_perftest`).

mod bench;
// The version-script and `readelf --dyn-syms` parsers of the compat tests'
// export checks: included, not a dependency, to keep xtask dependency-free.
// Its items are `pub` for that crate.
#[allow(unreachable_pub)]
#[path = "../../crates/compat-tests/src/symbols.rs"]
mod symbols;

use std::collections::BTreeMap;
use std::env;
use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

type Result<T> = std::result::Result<T, String>;

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("compat") => compat(&args[1..]),
        Some("bench") => bench::run(&args[1..]),
        Some("help" | "-h" | "--help") | None => {
            print_help();
            Ok(())
        }
        Some(other) => Err(format!("unknown task `{other}`\n\n{}", help_text())),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn help_text() -> &'static str {
    "usage: cargo xtask <task>\n\n\
     tasks:\n  \
     compat   build the C ABI (release) and link target/compat/libibverbs.so.1,\n           \
     target/compat/librdmacm.so.1 and libibumad.so.3 (needs a C compiler `cc` and binutils)\n  \
     bench    same-run benchmark suite: perftest over target/compat, the Rust API,\n           \
     qperf TCP, UCX shared-memory and memcpy baselines; prints a table,\n           \
     updates BENCHMARKS.md (`cargo xtask bench --help` for options)"
}

fn print_help() {
    println!("{}", help_text());
}

/// The workspace root (the parent of this crate's manifest directory).
pub(crate) fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lives in the workspace")
        .to_path_buf()
}

pub(crate) fn cargo() -> OsString {
    env::var_os("CARGO").unwrap_or_else(|| "cargo".into())
}

/// Runs a command, failing with its stderr if it does not succeed.
fn run(cmd: &mut Command, what: &str) -> Result<std::process::Output> {
    let out = cmd
        .output()
        .map_err(|e| format!("{what}: cannot run {:?}: {e}", cmd.get_program()))?;
    if !out.status.success() {
        return Err(format!(
            "{what} failed ({}):\n{:?}\n{}{}",
            out.status,
            cmd,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(out)
}

/// `cargo metadata`'s `target_directory` (honours `CARGO_TARGET_DIR` and config).
pub(crate) fn target_dir(root: &Path) -> Result<PathBuf> {
    let out = run(
        Command::new(cargo()).current_dir(root).args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
        ]),
        "cargo metadata",
    )?;
    let json = String::from_utf8_lossy(&out.stdout);
    json_string_field(&json, "target_directory")
        .map(PathBuf::from)
        .ok_or_else(|| "cargo metadata printed no target_directory".to_owned())
}

/// Extracts the string value of `"key":"..."` from a JSON text (enough for
/// cargo metadata; handles the usual escapes).
fn json_string_field(json: &str, key: &str) -> Option<String> {
    let start = json.find(&format!("\"{key}\":\""))? + key.len() + 4;
    let mut out = String::new();
    let mut chars = json[start..].chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => return Some(out),
            '\\' => match chars.next()? {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                'u' => {
                    let hex: String = chars.by_ref().take(4).collect();
                    out.push(char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?);
                }
                other => out.push(other),
            },
            c => out.push(c),
        }
    }
    None
}

fn check_tool(tool: &str, hint: &str) -> Result<()> {
    match Command::new(tool).arg("--version").output() {
        Ok(o) if o.status.success() => Ok(()),
        _ => Err(format!(
            "`{tool}` is required but was not found or does not run: {hint}"
        )),
    }
}

/// The native libraries a Rust staticlib needs (`rustc --print native-static-libs`),
/// probed once per rustc version with an empty crate: the C-ABI crates add no
/// `#[link]`s of their own (`--no-undefined` below catches it if one ever does).
fn native_static_libs(scratch: &Path) -> Result<Vec<String>> {
    let rustc = env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let version = run(Command::new(&rustc).arg("-vV"), "rustc -vV")?;
    let version = String::from_utf8_lossy(&version.stdout).into_owned();
    let cache = scratch.join("native-static-libs.txt");
    if let Ok(cached) = fs::read_to_string(&cache)
        && let Some((v, libs)) = cached.split_once("\n---\n")
        && v == version
    {
        return Ok(libs.split_whitespace().map(str::to_owned).collect());
    }
    let src = scratch.join("probe.rs");
    fs::write(&src, "pub fn probe() {}\n").map_err(|e| format!("write {}: {e}", src.display()))?;
    let out = run(
        Command::new(&rustc)
            .args([
                "--edition",
                "2021",
                "--crate-type",
                "staticlib",
                "--crate-name",
                "probe",
                "-O",
            ])
            .arg("--print=native-static-libs")
            .arg("--out-dir")
            .arg(scratch)
            .arg(&src),
        "rustc --print native-static-libs",
    )?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let libs = stderr
        .lines()
        .find_map(|l| {
            l.split_once("native-static-libs:")
                .map(|(_, libs)| libs.trim().to_owned())
        })
        .ok_or_else(|| format!("rustc printed no native-static-libs note:\n{stderr}"))?;
    let _ = fs::write(&cache, format!("{version}\n---\n{libs}"));
    Ok(libs.split_whitespace().map(str::to_owned).collect())
}

/// Checks with `readelf` that every symbol of the version script is defined
/// at its node and that nothing else is exported.
fn verify_exports(lib: &Path, map: &Path) -> Result<String> {
    let text = fs::read_to_string(map).map_err(|e| format!("read {}: {e}", map.display()))?;
    let symbols::VersionScript {
        symbols: expected,
        nodes,
    } = symbols::parse_version_script(&text);
    let out = run(
        Command::new("readelf").args(["--dyn-syms", "-W"]).arg(lib),
        "readelf --dyn-syms",
    )?;
    // Default-version and unversioned exports; hidden `name@node` ones are
    // not linkable, so they are not exports.
    let mut exported = BTreeMap::new();
    for sym in symbols::parse_dyn_syms(&String::from_utf8_lossy(&out.stdout)) {
        match (sym.version, sym.default_version) {
            (Some(node), true) => exported.insert(sym.name, node),
            (None, _) => exported.insert(sym.name, "(unversioned)".to_owned()),
            (Some(_), false) => None,
        };
    }
    let missing: Vec<String> = expected
        .iter()
        .filter(|(s, n)| exported.get(*s) != Some(n))
        .map(|(s, n)| format!("{s}@@{n} (got {:?})", exported.get(s)))
        .collect();
    let extra: Vec<&String> = exported
        .keys()
        .filter(|s| !expected.contains_key(*s))
        .collect();
    if !missing.is_empty() || !extra.is_empty() {
        return Err(format!(
            "{}: exports differ from {}:\n  missing or wrong node: {missing:?}\n  unexpected: {extra:?}",
            lib.display(),
            map.display()
        ));
    }
    Ok(format!(
        "{} symbols in {} version nodes",
        expected.len(),
        nodes.len()
    ))
}

fn symlink(target: &str, link: &Path) -> Result<()> {
    let _ = fs::remove_file(link);
    std::os::unix::fs::symlink(target, link).map_err(|e| format!("symlink {}: {e}", link.display()))
}

pub(crate) fn compat(args: &[String]) -> Result<()> {
    if let Some(a) = args.first() {
        return Err(format!("`compat` takes no arguments (got `{a}`)"));
    }
    check_tool("cc", "install a C compiler (Debian: apt-get install gcc)")?;
    let root = workspace_root();

    eprintln!(
        "xtask: cargo build --release -p softrdma-capi -p softrdma-capi-rdmacm -p softrdma-capi-umad -p softrdma-rdmalib-capi"
    );
    let status = Command::new(cargo())
        .current_dir(&root)
        .args([
            "build",
            "--release",
            "-p",
            "softrdma-capi",
            "-p",
            "softrdma-capi-rdmacm",
            "-p",
            "softrdma-capi-umad",
            "-p",
            "softrdma-rdmalib-capi",
        ])
        .status()
        .map_err(|e| format!("cannot run cargo: {e}"))?;
    if !status.success() {
        return Err(format!("cargo build failed ({status})"));
    }

    let target = target_dir(&root)?;
    let release = target.join("release");
    let compat = target.join("compat");
    let scratch = compat.join(".build");
    fs::create_dir_all(&scratch).map_err(|e| format!("create {}: {e}", scratch.display()))?;
    let native = native_static_libs(&scratch)?;

    let libs = [
        // (staticlib, version script, soname, extra link arguments)
        (
            "libibverbs.a",
            root.join("crates/capi/maps/libibverbs.map"),
            "libibverbs.so.1",
            vec![],
        ),
        (
            "librdmacm.a",
            root.join("crates/capi-rdmacm/maps/librdmacm.map"),
            "librdmacm.so.1",
            // DT_NEEDED on *our* libibverbs: librdmacm forwards into it.
            vec![
                "-L".to_owned(),
                compat.display().to_string(),
                "-Wl,--no-as-needed".to_owned(),
                "-l:libibverbs.so.1".to_owned(),
            ],
        ),
        (
            "libibumad.a",
            root.join("crates/capi-umad/maps/libibumad.map"),
            "libibumad.so.3",
            // DT_NEEDED on *our* libibverbs: MAD I/O and the CA's facts come from it.
            vec![
                "-L".to_owned(),
                compat.display().to_string(),
                "-Wl,--no-as-needed".to_owned(),
                "-l:libibverbs.so.1".to_owned(),
            ],
        ),
    ];
    let mut report = Vec::new();
    for (archive, map, soname, extra) in &libs {
        let archive = release.join(archive);
        if !archive.exists() {
            return Err(format!("{} was not built", archive.display()));
        }
        let out = compat.join(soname);
        // Link to a temporary name and rename, so a failed link never leaves a
        // half-written library that tests would pick up.
        let tmp = scratch.join(format!("{soname}.tmp"));
        let mut cc = Command::new("cc");
        cc.arg("-shared")
            .arg("-o")
            .arg(&tmp)
            .arg("-Wl,--whole-archive")
            .arg(&archive)
            .arg("-Wl,--no-whole-archive")
            .arg(format!("-Wl,--version-script={}", map.display()))
            .arg(format!("-Wl,-soname,{soname}"))
            .arg("-Wl,--no-undefined")
            // Exported symbols are GC roots; this drops the unused parts of std.
            .arg("-Wl,--gc-sections")
            .args(extra)
            .args(["-lpthread", "-ldl", "-lm"])
            .args(&native);
        eprintln!("xtask: {cc:?}");
        run(&mut cc, &format!("linking {soname}"))?;
        fs::rename(&tmp, &out).map_err(|e| format!("rename to {}: {e}", out.display()))?;
        // libfoo.so.N -> libfoo.so
        let dev_link = compat.join(soname.rsplit_once('.').map_or(*soname, |(base, _)| base));
        symlink(soname, &dev_link)?;
        let summary = match check_tool("readelf", "") {
            Ok(()) => verify_exports(&out, map)?,
            Err(_) => "exports not verified (readelf not found)".to_owned(),
        };
        report.push((out, dev_link, summary));
    }
    // rdmalib's C API is a cdylib already (soname from its build.rs): copy it.
    let rdmalib = compat.join("librdmalib.so");
    let tmp = scratch.join("librdmalib.so.tmp");
    fs::copy(release.join("librdmalib.so"), &tmp)
        .and_then(|_| fs::rename(&tmp, &rdmalib))
        .map_err(|e| format!("copy librdmalib.so to {}: {e}", rdmalib.display()))?;

    println!("target/compat is ready:");
    for (lib, link, summary) in &report {
        let size = fs::metadata(lib).map(|m| m.len()).unwrap_or(0);
        println!("  {} ({} KiB; {summary})", lib.display(), size / 1024);
        println!(
            "  {} -> {}",
            link.display(),
            lib.file_name().unwrap().to_string_lossy()
        );
    }
    println!(
        "  {} (rdmalib's C API: include/rdmalib.h, -lrdmalib)",
        rdmalib.display()
    );
    println!("use: LD_LIBRARY_PATH={} ibv_devices", compat.display());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extracts_json_strings() {
        let json = r#"{"packages":[],"target_directory":"/a/b \"c\"\\d","version":1}"#;
        assert_eq!(
            json_string_field(json, "target_directory").as_deref(),
            Some("/a/b \"c\"\\d")
        );
        assert_eq!(json_string_field(json, "missing"), None);
    }
}
