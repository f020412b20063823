//! Property tests of the journal reader and the hook event reader (issue #27): random
//! mutations of a real journal (extreme floats, hostile strings, dropped or repeated
//! elements, nulls, torn and garbage lines) and of real hook event lines. Reading gives
//! records or one clear line; a journal that reads makes a report that tune reads back
//! (every figure finite, never `null` where a reader needs a number); the event reader
//! never panics, and what it summarises is finite and journals as a repeat that reads
//! back. Bounded case counts so CI runs them in seconds.

use std::path::Path;

use proptest::prelude::*;
use serde_json::Value;
use tune::bridge::Events;
use tune::engine::train::RunSummary;
use tune::report::{read_journal, Report};
use tune::spec::Spec;

use crate::mutate;
use mutate::{leaves, mutate, EXTREMES};

/// A journal of a real sweep (`tests/corpus/journal/README.md` says how it was made):
/// header, finished repeats, trials and the confirmation.
fn journal_lines() -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/journal/ok-v2.jsonl");
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// What a fuzz case does to the journal's text beyond mutating values.
#[derive(Clone, Debug)]
enum Damage {
    None,
    /// Cut the file at a byte offset (a torn last line).
    Cut(usize),
    /// Insert a garbage line before line N.
    Garbage(usize, Vec<u8>),
    /// Repeat line N at the end.
    Repeat(usize),
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        Just(Damage::None),
        any::<usize>().prop_map(Damage::Cut),
        (any::<usize>(), prop::collection::vec(any::<u8>(), 0..64))
            .prop_map(|(n, g)| Damage::Garbage(n, g)),
        any::<usize>().prop_map(Damage::Repeat),
    ]
}

fn journal_reads_cleanly(
    muts: Vec<(usize, usize, u8, usize)>,
    dmg: Damage,
) -> Result<(), TestCaseError> {
    let mut lines = journal_lines();
    for (line, which, kind, pick) in muts {
        let n = line % lines.len();
        let mut paths = Vec::new();
        leaves(&lines[n], &mut Vec::new(), &mut paths);
        mutate(&mut lines[n], &paths, (which, kind, pick));
    }
    let mut text: Vec<Vec<u8>> = lines
        .iter()
        .map(|l| serde_json::to_vec(l).unwrap())
        .collect();
    match &dmg {
        Damage::Garbage(n, g) => text.insert(n % (text.len() + 1), g.clone()),
        Damage::Repeat(n) => text.push(text[n % text.len()].clone()),
        _ => {}
    }
    let mut bytes = text.join(&b'\n');
    bytes.push(b'\n');
    if let Damage::Cut(at) = dmg {
        bytes.truncate(at % (bytes.len() + 1));
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("journal.jsonl");
    std::fs::write(&file, &bytes).unwrap();
    match read_journal(&file) {
        Ok((spec, trials)) => {
            // What tune writes from a journal it accepted, it must read back.
            let report = tune::advisor::build_report(&spec, &trials);
            let out = dir.path().join("report.json");
            std::fs::write(&out, report.to_json().unwrap()).unwrap();
            if let Err(e) = Report::load(&out) {
                return Err(TestCaseError::fail(format!(
                    "tune cannot read the report it built from an accepted journal: {e}"
                )));
            }
        }
        Err(e) => {
            let msg = e.to_string();
            prop_assert!(e.is_bad_input(), "{msg}");
            prop_assert!(msg.contains("journal.jsonl"), "{msg}");
            prop_assert!(!msg.contains('\n'), "{msg}");
        }
    }
    Ok(())
}

/// Real hook event lines, as the module writes them.
const EVENT_LINES: &[&str] = &[
    r#"{"ev":"hello","pid":1,"torch":"2.5.1","knobs":{}}"#,
    r#"{"ev":"step","step":1,"t":0.5,"dur":0.0125,"batch":32,"data_wait":0.002,"h2d":0.0001,"zero_grad":0.0002,"forward":0.004,"backward":0.005,"optimizer":0.0012}"#,
    r#"{"ev":"step","step":2,"t":0.51,"dur":0.0119,"batch":32,"data_wait":0.0015,"forward":0.004,"backward":0.005,"optimizer":0.001,"rank":1}"#,
    r#"{"ev":"override","knob":"num_workers","script":4,"applied":0}"#,
    r#"{"ev":"not_applicable","knob":"pin_memory","why":"no CUDA"}"#,
    r#"{"ev":"notice","message":"hooks installed"}"#,
    r#"{"ev":"error","message":"hook failed: x"}"#,
];

/// One event line: a real one mutated, or raw bytes.
fn event_line() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => (any::<usize>(), prop::collection::vec((any::<usize>(), any::<u8>(), any::<usize>()), 0..4))
            .prop_map(|(n, muts)| {
                let mut v: Value = serde_json::from_str(EVENT_LINES[n % EVENT_LINES.len()]).unwrap();
                let mut paths = Vec::new();
                leaves(&v, &mut Vec::new(), &mut paths);
                for m in muts {
                    mutate(&mut v, &paths, m);
                }
                v.to_string()
            }),
        1 => (any::<usize>(), any::<usize>()).prop_map(|(k, x)| {
            // Every phase, the duration or the batch at an extreme.
            let keys = ["dur", "data_wait", "h2d", "zero_grad", "forward", "backward", "optimizer"];
            let x = EXTREMES[x % EXTREMES.len()];
            format!(r#"{{"ev":"step","step":3,"dur":0.01,"batch":8,"{}":{x:e}}}"#, keys[k % keys.len()])
        }),
        1 => prop::collection::vec(any::<u8>(), 0..200)
            .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
    ]
}

fn python_spec() -> Spec {
    Spec::parse(
        "name = \"f\"\n[workload.python]\nrun = \"python t.py\"\n[knobs]\nnum_workers = [0, 2]\n",
        "/tmp/f.toml",
    )
    .unwrap()
}

fn events_stay_finite(lines: Vec<String>) -> Result<(), TestCaseError> {
    let mut e = Events::default();
    for l in &lines {
        e.push_line(l);
    }
    if let Some(s) = e.summary() {
        prop_assert!(s.median_step_ms.is_finite(), "{s:?}");
        prop_assert!(s.samples_per_s.is_none_or(f64::is_finite), "{s:?}");
        prop_assert!(s.phase_share.values().all(|v| v.is_finite()), "{s:?}");
        for r in &s.ranks {
            prop_assert!(r.median_step_ms.is_finite() && r.outside_backward_ms.is_finite());
        }
    }
    let spec = python_spec();
    if let Ok(rep) = tune::bridge::repeat(&e, &spec, &tune::Knobs::default(), 1.0) {
        // The repeat as the journal stores it reads back.
        let text = serde_json::to_string(&rep).unwrap();
        let back = serde_json::from_str::<RunSummary>(&text);
        prop_assert!(back.is_ok(), "{text}: {back:?}");
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn mutated_journals_read_cleanly_and_make_reports_tune_reads_back(
        muts in prop::collection::vec((any::<usize>(), any::<usize>(), any::<u8>(), any::<usize>()), 0..6),
        dmg in damage(),
    ) {
        journal_reads_cleanly(muts, dmg)?;
    }

    #[test]
    fn hook_event_lines_never_make_a_figure_that_is_not_finite(
        lines in prop::collection::vec(event_line(), 0..40),
    ) {
        events_stay_finite(lines)?;
    }
}
