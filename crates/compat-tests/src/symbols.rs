//! Parsers for what decides a library's exports: GNU ld version scripts and
//! `readelf --dyn-syms -W` output.
//!
//! Shared by the export tests here and by `cargo xtask compat`, which checks
//! the libraries it links. xtask is dependency-free on purpose, so it
//! includes this file with `#[path]` instead of depending on this crate:
//! keep it to `std` and free of other items of this crate.

use std::collections::BTreeMap;

/// A version script: `symbol -> node`, and the nodes in order with their parent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VersionScript {
    pub symbols: BTreeMap<String, String>,
    pub nodes: Vec<(String, Option<String>)>,
}

/// Parses a GNU ld version script of the simple form rdma-core uses.
pub fn parse_version_script(text: &str) -> VersionScript {
    let mut symbols = BTreeMap::new();
    let mut nodes = Vec::new();
    let mut current: Option<String> = None;
    let mut in_comment = false;
    for raw in text.lines() {
        let mut line = raw.trim();
        if in_comment {
            match line.find("*/") {
                Some(i) => {
                    in_comment = false;
                    line = line[i + 2..].trim();
                }
                None => continue,
            }
        }
        if line.starts_with("/*") {
            in_comment = !line.contains("*/");
            continue;
        }
        if let Some(name) = line.strip_suffix('{') {
            current = Some(name.trim().to_owned());
        } else if let Some(rest) = line.strip_prefix('}') {
            let parent = rest.trim().trim_end_matches(';').trim();
            if let Some(node) = current.take() {
                nodes.push((node, (!parent.is_empty()).then(|| parent.to_owned())));
            }
        } else if let Some(sym) = line.strip_suffix(';') {
            let sym = sym.trim();
            if !sym.is_empty()
                && !sym.contains(':')
                && !sym.contains('*')
                && let Some(node) = &current
            {
                symbols.insert(sym.to_owned(), node.clone());
            }
        }
    }
    VersionScript { symbols, nodes }
}

/// One defined dynamic symbol of a shared library (`readelf --dyn-syms`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DynSym {
    pub name: String,
    /// The version node, `None` if unversioned.
    pub version: Option<String>,
    /// `true` for `name@@node` (default version), `false` for hidden `name@node`.
    pub default_version: bool,
    /// `FUNC`, `OBJECT`, ...
    pub kind: String,
}

/// The defined, non-local symbols in the output of `readelf --dyn-syms -W`
/// (version-node marker symbols, which are `ABS`, excluded).
pub fn parse_dyn_syms(readelf_output: &str) -> Vec<DynSym> {
    let mut syms = Vec::new();
    for line in readelf_output.lines() {
        let cols: Vec<&str> = line.split_whitespace().collect();
        let is_entry = cols
            .first()
            .is_some_and(|c| c.trim_end_matches(':').parse::<u32>().is_ok());
        if !is_entry || cols.len() < 8 || cols[6] == "UND" || cols[6] == "ABS" || cols[4] == "LOCAL"
        {
            continue;
        }
        let (name, version, default_version) = if let Some((n, v)) = cols[7].split_once("@@") {
            (n, Some(v.to_owned()), true)
        } else if let Some((n, v)) = cols[7].split_once('@') {
            (n, Some(v.to_owned()), false)
        } else {
            (cols[7], None, false)
        };
        syms.push(DynSym {
            name: name.to_owned(),
            version,
            default_version,
            kind: cols[3].to_owned(),
        });
    }
    syms
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_script_parser() {
        let vs = parse_version_script(
            "/* x\n */\nA_1 {\n global:\n  f;\n local: *;\n};\nA_2 {\n global:\n  g;\n} A_1;\n",
        );
        assert_eq!(vs.symbols.len(), 2);
        assert_eq!(vs.symbols["g"], "A_2");
        assert_eq!(
            vs.nodes,
            vec![("A_1".into(), None), ("A_2".into(), Some("A_1".into()))]
        );
    }

    #[test]
    fn version_script_with_tabs_and_a_comment_ending_on_its_line() {
        let text = "/* c\n * more */\nA_1.0 {\n\tglobal:\n\t\tf;\n\t\tg;\n\tlocal: *;\n};\nA_1.1 {\n\tglobal:\n\t\th;\n} A_1.0;\n";
        let vs = parse_version_script(text);
        assert_eq!(vs.symbols.len(), 3);
        assert_eq!(vs.symbols["h"], "A_1.1");
        assert_eq!(vs.symbols["f"], "A_1.0");
        assert_eq!(
            vs.nodes,
            vec![
                ("A_1.0".to_owned(), None),
                ("A_1.1".to_owned(), Some("A_1.0".to_owned()))
            ]
        );
    }
}
