//! The engine's floors (issue #29): inside `src/engine/`, a file may import only files of
//! its own floor and the floors below it, and no files import each other in a circle of
//! more than two. This reads every `.rs` file under `src/engine/`, resolves every
//! `crate::engine::…`, `super::…`, `self::…` and child-module path (`use` groups
//! included) to the file that defines it, and fails naming file:line for each import up
//! a floor, each file no floor places, and each circle of three files or more.
//!
//! What is checked is the code the binary is built from: `#[cfg(test)]` modules are
//! left out (a unit test may drive its file from above, as `caps.rs` runs a whole
//! training), and so is prose in `//` comments.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Bottom to top, each floor as path prefixes under `src/engine/` (a folder ends in
/// `/`; the longest matching prefix places a file). docs/architecture.md draws these.
const FLOORS: &[(&str, &[&str])] = &[
    (
        "base types",
        &[
            "rng.rs",
            "data/",
            "tensor.rs",
            "amp.rs",
            "device.rs",
            "clock.rs",
            "geom.rs",
            "host.rs",
            "collective.rs",
            "autotune.rs",
        ],
    ),
    // knows no layer, loop or model
    ("cuda runtime", &["cuda/"]),
    // each op's CPU and CUDA layers, and the layer contract (layer.rs, layer_cuda.rs)
    ("ops", &["ops/"]),
    ("nn", &["nn/", "optim.rs"]),
    (
        "run vocabulary",
        &["vocab.rs", "parallel/summary.rs", "parallel/launch.rs"],
    ),
    (
        "step loop, caps, launcher",
        &["step.rs", "caps.rs", "probe.rs", "launcher.rs"],
    ),
    ("executors", &["cpu.rs", "cuda/train.rs"]),
    (
        "parallel",
        &["parallel/", "cuda/dp.rs", "cuda/ddp.rs", "cuda/ddp/"],
    ),
    (
        "dispatch",
        &["train.rs", "mod.rs", "gradcheck.rs", "testing.rs"],
    ),
];

/// The floor of `rel` (a path under `src/engine/`), by its longest matching prefix.
fn floor_of(rel: &str) -> Option<usize> {
    let mut best: Option<(usize, usize)> = None;
    for (i, (_, prefixes)) in FLOORS.iter().enumerate() {
        for p in *prefixes {
            let hit = rel == *p || (p.ends_with('/') && rel.starts_with(p));
            if hit && best.is_none_or(|(_, len)| p.len() > len) {
                best = Some((i, p.len()));
            }
        }
    }
    best.map(|(i, _)| i)
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

/// The source with `//` comments and `#[cfg(test)] mod … { … }` blocks blanked; line
/// breaks are kept so line numbers stay true.
fn code_only(text: &str) -> String {
    let lines: Vec<&str> = text
        .lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect();
    let mut out: Vec<&str> = Vec::with_capacity(lines.len());
    let mut i = 0;
    while i < lines.len() {
        if lines[i].trim() == "#[cfg(test)]" {
            // Attributes may sit between `#[cfg(test)]` and the `mod`.
            let mut j = i + 1;
            while j < lines.len() && lines[j].trim_start().starts_with("#[") {
                j += 1;
            }
            if j < lines.len() && is_mod_block(lines[j]) {
                let mut depth = 0i64;
                let mut k = j;
                loop {
                    depth += lines[k].matches('{').count() as i64;
                    depth -= lines[k].matches('}').count() as i64;
                    if depth <= 0 || k + 1 == lines.len() {
                        break;
                    }
                    k += 1;
                }
                out.extend(std::iter::repeat_n("", k + 1 - i));
                i = k + 1;
                continue;
            }
        }
        out.push(lines[i]);
        i += 1;
    }
    out.join("\n")
}

fn is_mod_block(line: &str) -> bool {
    let t = line.trim_start();
    let t = t.strip_prefix("pub ").unwrap_or(t);
    t.starts_with("mod ") && t.contains('{')
}

fn ident_at(s: &str) -> &str {
    let end = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..end]
}

/// The module path of a file under `src/engine/`: `ops/conv2d.rs` -> [ops, conv2d],
/// `cuda/mod.rs` -> [cuda], `mod.rs` -> [].
fn module_of(rel: &str) -> Vec<String> {
    let stem = rel.strip_suffix(".rs").unwrap_or(rel);
    let mut segs: Vec<String> = stem.split('/').map(String::from).collect();
    if segs.last().is_some_and(|s| s == "mod") {
        segs.pop();
    }
    segs
}

/// Splits a `use` tree (`a::{b, c::{d, e}}`) into its leaf paths.
fn expand(tree: &str, prefix: &[String], out: &mut Vec<Vec<String>>) {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        let mut p = prefix.to_vec();
        p.extend(
            tree.split("::")
                .map(|s| ident_at(s.trim()).to_string())
                .filter(|s| !s.is_empty()),
        );
        out.push(p);
        return;
    };
    let mut p = prefix.to_vec();
    p.extend(
        tree[..open]
            .split("::")
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty()),
    );
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                expand(&inner[start..i], &p, out);
                start = i + 1;
            }
            _ => {}
        }
    }
    if !inner[start..].trim().is_empty() {
        expand(&inner[start..], &p, out);
    }
}

/// Whether `tree` reads as a `use` tree (`a::b`, `a::{b, c::{d}}`), not prose or a format
/// string that happens to follow the word "use".
fn is_use_tree(tree: &str) -> bool {
    let (mut depth, mut closed) = (0i64, false);
    for c in tree.chars() {
        // Nothing follows a `use` tree's outer group.
        if closed && !c.is_whitespace() {
            return false;
        }
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                closed = depth == 0;
            }
            c if c.is_ascii_alphanumeric() || "_:,* \n\t\r".contains(c) => {}
            _ => return false,
        }
        if depth < 0 {
            return false;
        }
    }
    depth == 0
        && tree
            .trim_start()
            .starts_with(|c: char| c.is_ascii_alphabetic() || c == '{')
}

/// Every engine path the code names, as (byte offset, path from the engine root, whether
/// it is a `pub use`).
fn paths_in(
    code: &str,
    stage: &str,
    me: &[String],
    children: &BTreeSet<String>,
) -> Vec<(usize, Vec<String>, bool)> {
    let mut out = Vec::new();
    let mut uses = Vec::new();
    // `use` statements, groups expanded; relative paths may start at a child module.
    let mut from = 0;
    while let Some(i) = code[from..].find("use ") {
        let at = from + i;
        from = at + 4;
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let Some(end) = code[from..].find(';') else {
            break;
        };
        let tree = &code[from..from + end];
        // "use " inside a string or a doc line is no `use` tree.
        if !is_use_tree(tree) {
            continue;
        }
        uses.push(at..from + end);
        let line_start = code[..at].rfind('\n').map_or(0, |i| i + 1);
        let public = code[line_start..at].trim_start().starts_with("pub");
        let mut leaves = Vec::new();
        expand(tree, &[], &mut leaves);
        for leaf in leaves {
            if let Some(p) = absolute(&leaf, stage, me, children) {
                out.push((at, p, public));
            }
        }
    }
    // Paths written inline in code: `crate::engine::…`, `super::…`, `self::…`.
    for root in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(i) = code[from..].find(root) {
            let at = from + i;
            from = at + root.len();
            let before = code[..at].chars().next_back();
            if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
                || uses.iter().any(|u| u.contains(&at))
            {
                continue;
            }
            let rest = &code[at..];
            let len = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(rest.len());
            let segs: Vec<String> = rest[..len]
                .split("::")
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect();
            if let Some(p) = absolute(&segs, stage, me, children) {
                out.push((at, p, false));
            }
        }
    }
    out
}

/// `segs` as a path from the stage's root (`crate::STAGE`), or None for a path outside it.
fn absolute(
    segs: &[String],
    stage: &str,
    me: &[String],
    children: &BTreeSet<String>,
) -> Option<Vec<String>> {
    let first = segs.first()?;
    match first.as_str() {
        "crate" => (segs.get(1)? == stage).then(|| segs[2..].to_vec()),
        "super" => {
            let mut base = me.to_vec();
            let mut rest = segs;
            while rest.first().is_some_and(|s| s == "super") {
                base.pop();
                rest = &rest[1..];
            }
            base.extend(rest.iter().cloned());
            Some(base)
        }
        "self" => {
            let mut p = me.to_vec();
            p.extend(segs[1..].iter().cloned());
            Some(p)
        }
        s if children.contains(s) => {
            let mut p = me.to_vec();
            p.extend(segs.iter().cloned());
            Some(p)
        }
        _ => None,
    }
}

struct Graph {
    /// file -> (imported file -> first line that imports it)
    edges: BTreeMap<String, BTreeMap<String, usize>>,
    problems: Vec<String>,
}

/// Reads `engine` (a `src/engine` folder) into a file graph and the floor problems.
fn read(engine: &Path) -> Graph {
    read_stage(engine, "engine", true)
}

/// Reads the folder of stage `stage` (`src/STAGE`) into a file graph and its problems:
/// circles of three files or more, and with `floored` (the engine) imports up a floor
/// and files no floor places.
fn read_stage(engine: &Path, stage: &str, floored: bool) -> Graph {
    let mut files = Vec::new();
    rs_files(engine, &mut files);
    let rels: Vec<String> = files
        .iter()
        .map(|f| {
            f.strip_prefix(engine)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/")
        })
        .collect();
    let by_module: BTreeMap<Vec<String>, String> =
        rels.iter().map(|r| (module_of(r), r.clone())).collect();
    let mut g = Graph {
        edges: BTreeMap::new(),
        problems: Vec::new(),
    };
    let children_of = |me: &[String]| -> BTreeSet<String> {
        by_module
            .keys()
            .filter(|m| m.len() == me.len() + 1 && m.starts_with(me))
            .map(|m| m[me.len()].clone())
            .collect()
    };
    let module_file = |path: &[String]| -> Option<String> {
        (0..=path.len())
            .rev()
            .find_map(|n| by_module.get(&path[..n]))
            .cloned()
    };
    // A folder's `mod.rs` that hands on its own files' items (`pub use loader::Loader`)
    // is the folder's face, not an import: `data::Loader` resolves to `data/loader.rs`.
    let mut handed_on: BTreeMap<Vec<String>, String> = BTreeMap::new();
    for (f, rel) in files.iter().zip(&rels) {
        if !rel.ends_with("mod.rs") {
            continue;
        }
        let me = module_of(rel);
        let code = code_only(&std::fs::read_to_string(f).unwrap());
        for (_, path, public) in paths_in(&code, stage, &me, &children_of(&me)) {
            if public && path.len() > me.len() + 1 && path.starts_with(&me) {
                if let (Some(name), Some(file)) = (path.last(), module_file(&path)) {
                    let mut key = me.clone();
                    key.push(name.clone());
                    handed_on.insert(key, file);
                }
            }
        }
    }
    for (f, rel) in files.iter().zip(&rels) {
        let shown = format!("src/{stage}/{rel}");
        let floor = if floored { floor_of(rel) } else { Some(0) };
        let Some(floor) = floor else {
            g.problems.push(format!(
                "{shown}: no floor places it: add it to FLOORS in tests/quick/engine_floors.rs"
            ));
            continue;
        };
        // `super` from `ops/conv2d.rs` ([ops, conv2d]) or `ops/mod.rs` ([ops]) pops one
        // segment either way, since `module_of` drops `mod`.
        let me = module_of(rel);
        let children = children_of(&me);
        let code = code_only(&std::fs::read_to_string(f).unwrap());
        for (at, path, public) in paths_in(&code, stage, &me, &children) {
            let face = rel.ends_with("mod.rs") && public && path.starts_with(&me);
            if face && path.len() > me.len() + 1 {
                continue;
            }
            let target = (1..=path.len())
                .rev()
                .find_map(|n| handed_on.get(&path[..n]).cloned())
                .or_else(|| module_file(&path));
            let Some(target) = target else { continue };
            if &target == rel {
                continue;
            }
            let line = code[..at].matches('\n').count() + 1;
            let seen = g.edges.entry(rel.clone()).or_default();
            let first = !seen.contains_key(&target);
            seen.entry(target.clone()).or_insert(line);
            match floor_of(&target).filter(|_| floored) {
                Some(to) if first && to > floor => g.problems.push(format!(
                    "{shown}:{line}: floor `{}` imports src/engine/{target} (floor `{}`, above it): \
                     move what it needs down, or hand it in as a value or a trait",
                    FLOORS[floor].0, FLOORS[to].0
                )),
                _ => {}
            }
        }
    }
    for circle in circles(&g.edges) {
        if circle.len() > 2 {
            let ties: Vec<String> = circle
                .iter()
                .flat_map(|a| {
                    let edges = &g.edges;
                    circle.iter().filter_map(move |b| {
                        edges
                            .get(a)
                            .and_then(|e| e.get(b))
                            .map(|line| format!("src/{stage}/{a}:{line} -> {b}"))
                    })
                })
                .collect();
            g.problems.push(format!(
                "a circle of {} files: {}",
                circle.len(),
                ties.join(", ")
            ));
        }
    }
    g
}

/// The strongly connected components of more than one file (Tarjan).
fn circles(edges: &BTreeMap<String, BTreeMap<String, usize>>) -> Vec<Vec<String>> {
    struct T<'a> {
        edges: &'a BTreeMap<String, BTreeMap<String, usize>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        let n = t.index.len();
        t.index.insert(v, n);
        t.low.insert(v, n);
        t.stack.push(v);
        t.on.insert(v);
        if let Some(next) = t.edges.get(v) {
            for w in next.keys() {
                let w = w.as_str();
                if !t.index.contains_key(w) {
                    visit(t, w);
                    let lw = t.low[w];
                    let lv = t.low.get_mut(v).unwrap();
                    *lv = (*lv).min(lw);
                } else if t.on.contains(w) {
                    let iw = t.index[w];
                    let lv = t.low.get_mut(v).unwrap();
                    *lv = (*lv).min(iw);
                }
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                t.out.push(comp);
            }
        }
    }
    let mut t = T {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !t.index.contains_key(v.as_str()) {
            visit(&mut t, v);
        }
    }
    t.out
}

#[test]
fn no_engine_file_imports_a_floor_above_it_or_sits_in_a_circle_of_three() {
    let engine = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/engine");
    let g = read(&engine);
    assert!(
        g.problems.is_empty(),
        "{} problem(s) in the engine's floors:\n{}",
        g.problems.len(),
        g.problems.join("\n")
    );
    // The reader must see the engine's real imports, or the test above passes vacuously.
    let has = |a: &str, b: &str| g.edges.get(a).is_some_and(|e| e.contains_key(b));
    assert!(
        has("step.rs", "vocab.rs"),
        "the reader missed step.rs -> vocab.rs"
    );
    assert!(
        has("cpu.rs", "step.rs"),
        "the reader missed cpu.rs -> step.rs"
    );
    assert!(
        has("parallel/tcp.rs", "parallel/tcp/guard.rs"),
        "the reader missed a child-module `use`"
    );
}

/// The stages above the engine hold no circle of three files either (#29: `report`'s
/// html -> charts -> chart_key, `results`' model -> record -> upgrade and `watch`'s
/// html <-> report were undone); each stage is read as the engine is, without floors.
#[test]
fn no_stage_folder_holds_a_circle_of_three() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut problems = Vec::new();
    let mut read_any = 0;
    for e in std::fs::read_dir(&src).unwrap() {
        let dir = e.unwrap().path();
        let Some(stage) = dir.file_name().and_then(|n| n.to_str()).map(String::from) else {
            continue;
        };
        if !dir.is_dir() || stage == "engine" {
            continue;
        }
        let g = read_stage(&dir, &stage, false);
        read_any += g.edges.len();
        problems.extend(g.problems);
    }
    assert!(
        problems.is_empty(),
        "{} circle(s) in the stages:\n{}",
        problems.len(),
        problems.join("\n")
    );
    // The reader must see these stages' imports, or the test passes vacuously.
    let report = read_stage(&src.join("report"), "report", false);
    assert!(
        report
            .edges
            .get("html.rs")
            .is_some_and(|e| e.contains_key("charts.rs")),
        "the reader missed report/html.rs -> charts.rs: {:#?}",
        report.edges
    );
    assert!(read_any > 20, "only {read_any} files with imports read");
}

#[test]
fn every_floor_prefix_names_something() {
    let engine = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/engine");
    for (floor, prefixes) in FLOORS {
        for p in *prefixes {
            assert!(
                engine.join(p).exists(),
                "floor `{floor}` names src/engine/{p}, which does not exist"
            );
        }
    }
}

/// The checker on a hand-made engine: an upward import inside a multi-line `use` group,
/// an upward `super::` path, a mention in a comment and an import in a `#[cfg(test)]`
/// module (both ignored), a circle of three files and an unplaced file must all be
/// found as exactly these problems.
#[test]
fn the_checker_sees_upward_imports_circles_and_unplaced_files() {
    let d = tempfile::tempdir().unwrap();
    let e = d.path().join("engine");
    for dir in ["ops", "nn", "parallel", "cuda"] {
        std::fs::create_dir_all(e.join(dir)).unwrap();
    }
    let w = |p: &str, s: &str| std::fs::write(e.join(p), s).unwrap();
    w("mod.rs", "pub mod tensor;\n");
    // base imports the step loop through a group: up.
    w(
        "tensor.rs",
        "// crate::engine::train in prose\nuse crate::engine::{\n    device::Device,\n    step::Exec,\n};\n",
    );
    w("device.rs", "");
    w("step.rs", "use crate::engine::vocab::Workload;\n#[cfg(test)]\n#[allow(dead_code)]\nmod tests {\n    use crate::engine::train::run;\n}\n");
    w("vocab.rs", "");
    w("train.rs", "use crate::engine::step;\n");
    // ops -> nn by `super::`: up.
    w(
        "ops/conv2d.rs",
        "fn f() { super::super::nn::zoo::build() }\n",
    );
    w("nn/zoo.rs", "use crate::engine::ops::conv2d::Conv2d;\n");
    // a circle of three inside one floor
    w("parallel/a.rs", "use crate::engine::parallel::b::B;\n");
    w("parallel/b.rs", "use super::c::C;\n");
    w("parallel/c.rs", "use crate::engine::parallel::a::A;\n");
    w("parallel/mod.rs", "pub mod a;\npub mod b;\npub mod c;\n");
    w("stray.rs", "");
    // A folder's face handing on its files' items is no import: no circle here, and
    // `data::Loader` leads to data/loader.rs.
    std::fs::create_dir_all(e.join("data")).unwrap();
    w(
        "data/mod.rs",
        "pub mod augment;\npub mod loader;\npub use loader::Loader;\npub struct Rng;\n",
    );
    w(
        "data/loader.rs",
        "use super::augment::flip;\nuse super::Rng;\n",
    );
    w("data/augment.rs", "use super::Rng;\n");
    w("rng.rs", "pub use crate::engine::data::Loader;\n");
    let g = read(&e);
    assert!(
        g.edges
            .get("rng.rs")
            .is_some_and(|t| t.contains_key("data/loader.rs")),
        "{:#?}",
        g.edges
    );
    let p = g.problems;
    let has = |s: &str| p.iter().any(|x| x.contains(s));
    assert!(
        has("src/engine/tensor.rs:2: floor `base types` imports src/engine/step.rs"),
        "{p:#?}"
    );
    assert!(
        has("src/engine/ops/conv2d.rs:1: floor `ops` imports src/engine/nn/zoo.rs"),
        "{p:#?}"
    );
    assert!(has("a circle of 3 files"), "{p:#?}");
    assert!(has("src/engine/stray.rs: no floor places it"), "{p:#?}");
    assert_eq!(p.len(), 4, "{p:#?}");
}
