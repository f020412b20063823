//! Property test of the report reader and renderers (issue #15): random mutations of a
//! real report.json (extreme floats, hostile strings, dropped elements, wrong types).
//! Reading returns a report or one clear error; every report that reads renders to
//! HTML and markdown without a panic and within a deadline (a hang fails the test
//! instead of hanging it). Bounded case count so CI runs it in seconds.

use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

use proptest::prelude::*;
use serde_json::Value;
use tune::report::{html, markdown, Report};

use crate::mutate;
use mutate::{leaves, mutate};

/// Renders on a worker thread; a render that does not finish in time fails the test.
fn render_within(report: Report, limit: Duration) -> Result<(), TestCaseError> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let html = html::render(&report);
        let md = markdown::render(&report);
        let _ = tx.send((html.len(), md.len()));
    });
    match rx.recv_timeout(limit) {
        Ok((h, m)) => {
            prop_assert!(h > 0 && m > 0);
            Ok(())
        }
        Err(mpsc::RecvTimeoutError::Timeout) => Err(TestCaseError::fail(format!(
            "rendering did not finish within {limit:?}"
        ))),
        Err(mpsc::RecvTimeoutError::Disconnected) => Err(TestCaseError::fail("rendering panicked")),
    }
}

fn baseline() -> Value {
    read("reports/ci-baseline/report.json")
}

fn read(rel: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(rel);
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Mutates `v` and reads it back: a report that loads renders in bounded time, one that
/// does not is bad input with a one-line message naming the file.
fn mutated_reads_cleanly(mut v: Value, muts: Vec<(usize, u8, usize)>) -> Result<(), TestCaseError> {
    let mut paths = Vec::new();
    leaves(&v, &mut Vec::new(), &mut paths);
    for m in muts {
        mutate(&mut v, &paths, m);
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("report.json");
    std::fs::write(&file, serde_json::to_string(&v).unwrap()).unwrap();
    match Report::load(&file) {
        Ok(r) => render_within(r, Duration::from_secs(10))?,
        Err(e) => {
            let msg = e.to_string();
            prop_assert!(e.is_bad_input(), "{msg}");
            prop_assert!(msg.contains("report.json"), "{msg}");
            prop_assert!(!msg.contains('\n'), "{msg}");
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn mutated_reports_read_cleanly_and_render_in_bounded_time(
        muts in prop::collection::vec((any::<usize>(), any::<u8>(), any::<usize>()), 1..8)
    ) {
        mutated_reads_cleanly(baseline(), muts)?;
    }

    /// The same over a schema 2.0 report (the ci baseline above is 1.x, read through the
    /// converter), so both reading paths meet hostile input.
    #[test]
    fn mutated_2x_reports_read_cleanly_and_render_in_bounded_time(
        muts in prop::collection::vec((any::<usize>(), any::<u8>(), any::<usize>()), 1..8)
    ) {
        mutated_reads_cleanly(read("tests/corpus/report/ok-v2-dp-ddp.json"), muts)?;
    }
}

/// The case proptest found in CI: a 1.x report whose `schema_version` carries a line
/// break and a field of the wrong type; the message quoted the version verbatim.
#[test]
fn a_schema_version_with_a_line_break_stays_one_line() {
    let mut v = baseline();
    v["schema_version"] = Value::from("1.1| a | b |\n# heading");
    v["environment"]["backend"] = Value::Null;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("report.json");
    std::fs::write(&file, serde_json::to_string(&v).unwrap()).unwrap();
    let Err(e) = Report::load(&file) else {
        panic!("a null backend must not read")
    };
    let msg = e.to_string();
    assert!(!msg.contains('\n') && msg.contains("report.json"), "{msg}");
}
