//! The stage stack (issue #16): a module of `src/` may import only its own stage and the
//! stages below it. This reads every `.rs` file under `src/`, maps it to its stage by its
//! top-level module, and fails naming file:line for every `crate::<module>` reference
//! (`use crate::{a, b}` groups included) that reaches up the stack, for a top-level
//! module this list does not place, and for a crate path it cannot resolve.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Bottom to top. Modules in one row are one stage and may use each other.
const STAGES: &[&[&str]] = &[
    // base: shared utilities with no knowledge of training or sweeps
    &["error", "fsio", "limits", "knobs", "stats", "process"],
    &["engine"],
    // what to measure: the sweep spec and the plan of trials it expands to
    &["spec"],
    // what was measured: trial records and the report model
    &["results"],
    &["runner"],
    &["bridge"],
    &["executor"],
    &["advisor"],
    &["report"],
    &["gate"],
    &["tui"],
    &["watch"],
    // the only entrance (main.rs belongs here)
    &["commands"],
];

/// Paths under `src/` allowed to break the stack, with why. Keep it empty if you can.
const EXCEPTIONS: &[(&str, &str)] = &[];

fn rank_of(module: &str) -> Option<usize> {
    STAGES.iter().position(|row| row.contains(&module))
}

fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
}

/// The source with `//` comments blanked, so doc lines that mention a stage
/// (`crate::bridge` in prose) do not count; line breaks are kept for line numbers.
fn code_only(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// Every (byte offset, first path segment) after `crate::`, groups expanded.
fn crate_refs(code: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut from = 0;
    while let Some(i) = code[from..].find("crate::") {
        let at = from + i;
        from = at + "crate::".len();
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            // `tune_crate::` or similar: not this crate's root.
            continue;
        }
        let rest = &code[from..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 1usize;
            let mut item_start = true;
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    ',' if depth == 1 => item_start = true,
                    c if c.is_whitespace() => {}
                    _ if item_start && depth == 1 => {
                        item_start = false;
                        let name = ident_at(&group[j..]);
                        if !name.is_empty() {
                            out.push((from + 1 + j, name.to_string()));
                        }
                    }
                    _ => {}
                }
            }
        } else {
            let name = ident_at(rest);
            if !name.is_empty() {
                out.push((at, name.to_string()));
            }
        }
    }
    out
}

/// Root-level names that are not modules: `pub use` re-exports in lib.rs and
/// `#[macro_export]` macros, mapped to the module that defines them.
fn root_items(src: &Path, files: &[PathBuf]) -> BTreeMap<String, String> {
    let mut items = BTreeMap::new();
    let lib = code_only(&std::fs::read_to_string(src.join("lib.rs")).unwrap());
    for line in lib.lines() {
        let Some(rest) = line.trim().strip_prefix("pub use ") else {
            continue;
        };
        let module = ident_at(rest).to_string();
        let names = rest
            .split_once('{')
            .map_or_else(|| rest.rsplit("::").next().unwrap_or(""), |(_, g)| g);
        for n in names.split(',') {
            let n = ident_at(n.trim());
            if !n.is_empty() {
                items.insert(n.to_string(), module.clone());
            }
        }
    }
    for f in files {
        let text = std::fs::read_to_string(f).unwrap();
        let mut lines = text.lines();
        while let Some(l) = lines.next() {
            if l.trim() != "#[macro_export]" {
                continue;
            }
            if let Some(name) = lines
                .next()
                .and_then(|m| m.trim().strip_prefix("macro_rules!"))
            {
                items.insert(ident_at(name.trim()).to_string(), top_module(src, f));
            }
        }
    }
    items
}

fn top_module(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    let first = first.strip_suffix(".rs").unwrap_or(&first).to_string();
    if first == "main" {
        "commands".into()
    } else {
        first
    }
}

fn back_edges(src: &Path) -> Vec<String> {
    let mut files = Vec::new();
    rs_files(src, &mut files);
    let items = root_items(src, &files);
    let mut problems = Vec::new();
    for f in &files {
        let module = top_module(src, f);
        let shown = f.strip_prefix(src.parent().unwrap()).unwrap().display();
        if module == "lib" {
            continue;
        }
        let Some(rank) = rank_of(&module) else {
            problems.push(format!(
                "{shown}: top-level module `{module}` has no stage: add it to STAGES in tests/quick/stages.rs"
            ));
            continue;
        };
        let rel = f.strip_prefix(src).unwrap().to_string_lossy().into_owned();
        if EXCEPTIONS.iter().any(|(p, _)| *p == rel) {
            continue;
        }
        let code = code_only(&std::fs::read_to_string(f).unwrap());
        for (at, name) in crate_refs(&code) {
            let target = if rank_of(&name).is_some() {
                name.clone()
            } else if let Some(m) = items.get(&name) {
                m.clone()
            } else {
                let line = code[..at].matches('\n').count() + 1;
                problems.push(format!(
                    "{shown}:{line}: `crate::{name}` is neither a staged module nor a root re-export"
                ));
                continue;
            };
            let Some(to) = rank_of(&target) else {
                continue;
            };
            if to > rank {
                let line = code[..at].matches('\n').count() + 1;
                problems.push(format!(
                    "{shown}:{line}: `{module}` (stage {rank}) uses `crate::{name}` (stage {to}, above it): \
                     move what it needs down, or pass it in through a trait or a value"
                ));
            }
        }
    }
    problems
}

#[test]
fn no_stage_imports_a_stage_above_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let problems = back_edges(&src);
    assert!(
        problems.is_empty(),
        "{} back-edge(s) in the stage stack:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn every_staged_module_exists() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    for m in STAGES.iter().flat_map(|r| r.iter()) {
        assert!(
            src.join(format!("{m}.rs")).exists() || src.join(m).join("mod.rs").exists(),
            "STAGES names `{m}`, which is not a module under src/"
        );
    }
}

/// The checker itself, on a hand-made tree: an upward `use`, an upward path inside a
/// `use crate::{...}` group spanning lines, a mention in a comment (ignored) and an
/// unplaced module must all be found, or the stack test above could pass vacuously.
#[test]
fn the_checker_sees_back_edges_in_groups_and_ignores_comments() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("src");
    std::fs::create_dir_all(src.join("engine")).unwrap();
    std::fs::create_dir_all(src.join("report")).unwrap();
    std::fs::write(src.join("lib.rs"), "pub use error::{Error, Result};\n").unwrap();
    std::fs::write(
        src.join("engine/mod.rs"),
        "//! Talks about crate::report in prose only.\nuse crate::{\n    error::Error,\n    report::html,\n};\nuse crate::Result;\n",
    )
    .unwrap();
    std::fs::write(src.join("stats.rs"), "fn f() { crate::runner::go() }\n").unwrap();
    std::fs::write(src.join("report/mod.rs"), "use crate::engine::run;\n").unwrap();
    std::fs::write(src.join("unplaced.rs"), "").unwrap();
    let p = back_edges(&src);
    let has = |s: &str| p.iter().any(|x| x.contains(s));
    assert!(has("src/engine/mod.rs:4:"), "{p:?}");
    assert!(has("src/stats.rs:1:"), "{p:?}");
    assert!(has("`unplaced` has no stage"), "{p:?}");
    assert_eq!(p.len(), 3, "{p:?}");
}
