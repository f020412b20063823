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

const EXTREMES: &[f64] = &[
    f64::MAX,
    -f64::MAX,
    f64::MIN_POSITIVE,
    5e-324,
    -0.0,
    0.0,
    1e308,
    -1.0,
    1e15,
    9007199254740993.0,
];

const HOSTILE: &[&str] = &[
    "",
    "<script>alert(1)</script>",
    "| a | b |\n# heading",
    "\u{1b}[2J\u{0}\u{202e}",
    "`code` *em* [link](x)",
];

/// Every leaf of the JSON tree as a path of object keys and array indices.
fn leaves(v: &Value, path: &mut Vec<Value>, out: &mut Vec<Vec<Value>>) {
    match v {
        Value::Object(m) => {
            for (k, c) in m {
                path.push(Value::String(k.clone()));
                leaves(c, path, out);
                path.pop();
            }
        }
        Value::Array(a) => {
            out.push(path.clone());
            for (i, c) in a.iter().enumerate() {
                path.push(Value::from(i));
                leaves(c, path, out);
                path.pop();
            }
        }
        _ => out.push(path.clone()),
    }
}

fn at<'a>(v: &'a mut Value, path: &[Value]) -> Option<&'a mut Value> {
    path.iter().try_fold(v, |v, seg| match seg {
        Value::String(k) => v.get_mut(k.as_str()),
        Value::Number(i) => v.get_mut(i.as_u64()? as usize),
        _ => None,
    })
}

fn mutate(v: &mut Value, paths: &[Vec<Value>], (which, kind, pick): (usize, u8, usize)) {
    let Some(target) = at(v, &paths[which % paths.len()]) else {
        return;
    };
    *target = match (kind % 6, &*target) {
        (0 | 1, Value::Number(_)) => {
            let x = EXTREMES[pick % EXTREMES.len()];
            serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number)
        }
        (0 | 1, Value::String(s)) => Value::String(format!("{s}{}", HOSTILE[pick % HOSTILE.len()])),
        (2, Value::Array(a)) if !a.is_empty() => {
            let mut a = a.clone();
            a.remove(pick % a.len());
            Value::Array(a)
        }
        (3, Value::Array(a)) if !a.is_empty() => {
            let mut a = a.clone();
            a.push(a[pick % a.len()].clone());
            Value::Array(a)
        }
        (4, _) => Value::Null,
        (5, _) => Value::String("x".repeat(pick % 5000)),
        _ => return,
    };
}

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
