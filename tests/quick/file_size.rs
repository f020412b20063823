//! The project's rule that source files stay under 800 lines, held by a test rather than
//! by memory: a file that grows past it fails here by name, to be split by what it does.
//! The rule holds for the Python tune ships (the PyTorch hooks under src/bridge) and the
//! Python of its tests and scripts as well as for the Rust: tune_hook.py once reached 809
//! lines unseen, when this test read .rs files only.

use std::path::{Path, PathBuf};

const MAX_LINES: usize = 800;

fn source_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            source_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs" || e == "py") {
            out.push(path);
        }
    }
}

#[test]
fn no_source_file_reaches_800_lines() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["src", "probes/src", "tests", "scripts"] {
        source_files(&root.join(dir), &mut files);
    }
    assert!(files.len() > 50, "found only {} files", files.len());
    let long: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let n = std::fs::read_to_string(f).unwrap().lines().count();
            (n > MAX_LINES)
                .then(|| format!("{} ({n} lines)", f.strip_prefix(root).unwrap().display()))
        })
        .collect();
    assert!(
        long.is_empty(),
        "over {MAX_LINES} lines: {}",
        long.join(", ")
    );
}
