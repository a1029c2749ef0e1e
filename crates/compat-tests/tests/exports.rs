//! The symbol interface of `target/compat/lib{ibverbs,rdmacm}.so.1` and
//! `libibumad.so.3`: every
//! symbol of our version scripts (= rdma-core 44's full default-version export
//! set) is exported at the right node, nothing else is, the node chaining is
//! rdma-core's, and the set equals what Debian's real libraries export.
//! The one addition, libibverbs' standalone `SOFTRDMA_PRIVATE_1` node (the
//! `__softrdma_rdma_*` and `__softrdma_umad_*` functions our librdmacm.so.1
//! and libibumad.so.3 forward to), is left out
//! of the comparisons with rdma-core and checked on its own.
//!
//! Needs `cargo xtask compat`, binutils and the Debian packages (for the real
//! libraries); fails (never skips) without them.

use std::collections::BTreeMap;
use std::path::Path;

use softrdma_compat_tests::*;

/// The version node of softrdma's private exports of libibverbs.so.1 (the
/// `rdma_*` implementations that our librdmacm.so.1 forwards to). It is not
/// rdma-core's, so the comparisons with the real libraries leave it out.
const SOFTRDMA_PRIVATE: &str = "SOFTRDMA_PRIVATE_1";
/// Every symbol at [`SOFTRDMA_PRIVATE`] has this prefix (no clash with any
/// rdma-core or application name).
const SOFTRDMA_PRIVATE_PREFIX: &str = "__softrdma_";

struct Lib {
    file: &'static str,
    map: &'static str,
    nodes: &'static [&'static str],
    /// Fewer symbols in the map than this would mean a truncated map.
    min_symbols: usize,
}

const LIBS: [Lib; 3] = [
    Lib {
        file: "libibverbs.so.1",
        map: "crates/capi/maps/libibverbs.map",
        nodes: &[
            "IBVERBS_1.0",
            "IBVERBS_1.1",
            "IBVERBS_1.5",
            "IBVERBS_1.6",
            "IBVERBS_1.7",
            "IBVERBS_1.8",
            "IBVERBS_1.9",
            "IBVERBS_1.10",
            "IBVERBS_1.11",
            "IBVERBS_1.12",
            "IBVERBS_1.13",
            "IBVERBS_1.14",
            "IBVERBS_PRIVATE_34",
            // softrdma's own entry points for its librdmacm.so.1; not rdma-core's.
            SOFTRDMA_PRIVATE,
        ],
        min_symbols: 150,
    },
    Lib {
        file: "librdmacm.so.1",
        map: "crates/capi-rdmacm/maps/librdmacm.map",
        nodes: &["RDMACM_1.0", "RDMACM_1.1", "RDMACM_1.2", "RDMACM_1.3"],
        min_symbols: 60,
    },
    Lib {
        file: "libibumad.so.3",
        map: "crates/capi-umad/maps/libibumad.map",
        nodes: &["IBUMAD_1.0", "IBUMAD_1.1", "IBUMAD_1.2"],
        min_symbols: 39,
    },
];

fn script(lib: &Lib) -> VersionScript {
    let path = repo_root().join(lib.map);
    parse_version_script(
        &std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())),
    )
}

/// `name -> (node, kind)` of the default-version exports.
fn default_exports(lib: &Path) -> BTreeMap<String, (String, String)> {
    defined_dynamic_symbols(lib)
        .into_iter()
        .filter(|s| s.default_version)
        .map(|s| (s.name, (s.version.unwrap(), s.kind)))
        .collect()
}

#[test]
fn every_map_symbol_is_exported_at_its_node_and_nothing_else() {
    let compat = require_compat_dir();
    for lib in &LIBS {
        let vs = script(lib);
        let syms = defined_dynamic_symbols(&compat.join(lib.file));
        let mut problems = Vec::new();
        for (name, node) in &vs.symbols {
            let found: Vec<_> = syms.iter().filter(|s| &s.name == name).collect();
            match found.as_slice() {
                [s] if s.default_version && s.version.as_deref() == Some(node) => {}
                other => problems.push(format!("{name}: expected {name}@@{node}, found {other:?}")),
            }
        }
        for s in &syms {
            if !vs.symbols.contains_key(&s.name) {
                problems.push(format!("unexpected export {s:?}"));
            }
        }
        assert!(
            problems.is_empty(),
            "{}:\n{}",
            lib.file,
            problems.join("\n")
        );
        assert!(
            vs.symbols.len() >= lib.min_symbols,
            "{}: suspiciously few symbols in {}",
            lib.file,
            lib.map
        );
    }
}

#[test]
fn version_nodes_chain_like_rdma_core() {
    let compat = require_compat_dir();
    for lib in &LIBS {
        // rdma-core: each numbered node's parent is the previous one; the
        // PRIVATE node stands alone.
        let mut expected = Vec::new();
        let mut prev: Option<&str> = None;
        for node in lib.nodes {
            if node.contains("PRIVATE") {
                expected.push((node.to_string(), None));
            } else {
                expected.push((node.to_string(), prev.map(str::to_owned)));
                prev = Some(node);
            }
        }
        assert_eq!(script(lib).nodes, expected, "{} chaining", lib.map);
        assert_eq!(
            version_definitions(&compat.join(lib.file)),
            expected,
            "{} readelf -V",
            lib.file
        );
    }
}

#[test]
fn export_set_equals_debians_real_libraries() {
    let compat = require_compat_dir();
    require_packages();
    for lib in &LIBS {
        let real = default_exports(&system_library(lib.file));
        let mut ours = default_exports(&compat.join(lib.file));
        ours.retain(|_, (node, _)| node != SOFTRDMA_PRIVATE);
        let mut problems = Vec::new();
        for (name, (node, kind)) in &real {
            match ours.get(name) {
                Some((n, k)) if n == node && k == kind => {}
                other => problems.push(format!("{name}@@{node} ({kind}): ours is {other:?}")),
            }
        }
        for name in ours.keys().filter(|n| !real.contains_key(*n)) {
            problems.push(format!("{name}: exported by us, not by rdma-core"));
        }
        assert!(
            problems.is_empty(),
            "{} vs the system's:\n{}",
            lib.file,
            problems.join("\n")
        );
        // The real library's version definitions too (besides ours).
        let mut defs = version_definitions(&compat.join(lib.file));
        defs.retain(|(node, _)| node != SOFTRDMA_PRIVATE);
        assert_eq!(
            defs,
            version_definitions(&system_library(lib.file)),
            "{} version nodes",
            lib.file
        );
    }
}

#[test]
fn sonames_and_librdmacm_and_libibumad_depend_on_our_libibverbs() {
    let compat = require_compat_dir();
    let (ib_needed, ib_soname) = dynamic_entries(&compat.join("libibverbs.so.1"));
    assert_eq!(ib_soname.as_deref(), Some("libibverbs.so.1"));
    assert!(
        !ib_needed.iter().any(|n| n.contains("rdmacm")),
        "{ib_needed:?}"
    );
    let (cm_needed, cm_soname) = dynamic_entries(&compat.join("librdmacm.so.1"));
    assert_eq!(cm_soname.as_deref(), Some("librdmacm.so.1"));
    assert!(
        cm_needed.iter().any(|n| n == "libibverbs.so.1"),
        "librdmacm.so.1 must need libibverbs.so.1: {cm_needed:?}"
    );
    let (umad_needed, umad_soname) = dynamic_entries(&compat.join("libibumad.so.3"));
    assert_eq!(umad_soname.as_deref(), Some("libibumad.so.3"));
    assert!(
        umad_needed.iter().any(|n| n == "libibverbs.so.1"),
        "libibumad.so.3 must need libibverbs.so.1: {umad_needed:?}"
    );
    // The development symlinks point at the versioned files.
    for (link, target) in [
        ("libibverbs.so", "libibverbs.so.1"),
        ("librdmacm.so", "librdmacm.so.1"),
        ("libibumad.so", "libibumad.so.3"),
    ] {
        assert_eq!(
            std::fs::read_link(compat.join(link)).unwrap(),
            Path::new(target)
        );
    }
}

#[test]
fn provider_hooks_are_exported_with_the_right_kinds() {
    // libmlx5/libefa (loaded by perftest) import these; the flag is a data
    // symbol in rdma-core.
    let compat = require_compat_dir();
    let ours = default_exports(&compat.join("libibverbs.so.1"));
    let get = |n: &str| {
        ours.get(n)
            .cloned()
            .unwrap_or_else(|| panic!("{n} not exported"))
    };
    assert_eq!(
        get("verbs_register_driver_34"),
        ("IBVERBS_PRIVATE_34".into(), "FUNC".into())
    );
    assert_eq!(
        get("verbs_allow_disassociate_destroy"),
        ("IBVERBS_PRIVATE_34".into(), "OBJECT".into())
    );
    assert_eq!(
        get("ibv_qp_to_qp_ex"),
        ("IBVERBS_1.6".into(), "FUNC".into())
    );
    assert_eq!(
        get("ibv_create_comp_channel"),
        ("IBVERBS_1.0".into(), "FUNC".into())
    );
}

#[test]
fn softrdma_private_exports_are_prefixed_functions_librdmacm_uses() {
    let compat = require_compat_dir();
    let private: Vec<DynSym> = defined_dynamic_symbols(&compat.join("libibverbs.so.1"))
        .into_iter()
        .filter(|s| s.version.as_deref() == Some(SOFTRDMA_PRIVATE))
        .collect();
    assert!(!private.is_empty(), "no {SOFTRDMA_PRIVATE} exports");
    for s in &private {
        assert!(
            s.name.starts_with(SOFTRDMA_PRIVATE_PREFIX) && s.default_version && s.kind == "FUNC",
            "{s:?}: {SOFTRDMA_PRIVATE} must hold only default-version {SOFTRDMA_PRIVATE_PREFIX}* functions"
        );
    }
    // librdmacm.so.1 defines none of them itself (no second engine).
    let cm = defined_dynamic_symbols(&compat.join("librdmacm.so.1"));
    for s in &cm {
        assert!(
            !s.name.starts_with(SOFTRDMA_PRIVATE_PREFIX),
            "librdmacm.so.1 defines {s:?}"
        );
    }
}
