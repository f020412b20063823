//! `--resume`: which records of an existing journal count as finished trials of this
//! spec. Every trial line carries the fingerprint of the spec it was measured for
//! (`Spec::fingerprint`); a line measured for another workload or baseline is refused
//! with its line number rather than reported as a trial of this sweep.
//!
//! Journals written before trial lines were stamped stay resumable: their unstamped
//! lines belong to the spec in the journal's header (every journal starts with one),
//! so they are accepted exactly when that header's spec matches.

use std::path::Path;

use serde_json::Value;

use super::journal::Journal;
use crate::error::{shown, Error, Result};
use crate::results::record::{Record, Submission, TrialRecord};
use crate::spec::Spec;

/// The key of the spec fingerprint in a journal's trial lines.
pub const FINGERPRINT_KEY: &str = "spec_fingerprint";

/// A journal line for `rec`, stamped with the fingerprint of the spec it belongs to.
pub fn stamped(rec: &Record, spec: &Spec) -> Result<Value> {
    let mut v = serde_json::to_value(rec)
        .map_err(|e| Error::Runtime(format!("cannot encode a journal record: {e}")))?;
    if let Value::Object(map) = &mut v {
        map.insert(FINGERPRINT_KEY.into(), Value::String(spec.fingerprint()));
    }
    Ok(v)
}

/// What an existing journal holds: finished trials, runs handed to a scheduler, and
/// whether it has its header.
#[derive(Default)]
pub struct Existing {
    pub trials: Vec<TrialRecord>,
    /// Every submission journaled, finished or not; the runner keeps those whose trial
    /// has no record yet.
    pub submitted: Vec<Submission>,
    pub has_header: bool,
}

/// Journal records so far; an existing journal needs `--resume`.
pub fn existing_records(path: &Path, spec: &Spec, resume: bool) -> Result<Existing> {
    if !path.exists() {
        return Ok(Existing::default());
    }
    let dir = path.parent().unwrap_or(Path::new("."));
    if !resume {
        return Err(Error::Invalid(format!(
            "{} already has a sweep journal: pass --resume to continue it, or remove {} to start over",
            dir.display(),
            dir.display()
        )));
    }
    let (lines, torn) = Journal::read_numbered::<Value>(path)?;
    if let Some(t) = torn {
        eprintln!(
            "note: {}: ignoring a torn last line ({} bytes) from an interrupted run",
            path.display(),
            t.len
        );
    }
    let want = spec.fingerprint();
    let mut header: Option<String> = None;
    let mut trials = Vec::new();
    let mut submitted = Vec::new();
    for (line, v) in lines {
        let stamp = v
            .get(FINGERPRINT_KEY)
            .and_then(Value::as_str)
            .map(str::to_string);
        let rec: Record = serde_json::from_value(v).map_err(|e| {
            Error::format(
                path,
                format!("line {line}: invalid record: {}", shown(&e.to_string())),
            )
        })?;
        match rec {
            Record::Header { spec: old, .. } => {
                if old.fingerprint() != want {
                    return Err(Error::format(
                        path,
                        format!(
                            "line {line}: this journal was started for a different spec ({}): resume with that spec, or give another --out folder to start over",
                            difference(&old, spec)
                        ),
                    ));
                }
                header = Some(want.clone());
            }
            Record::Trial(t) => {
                let Some(fp) = stamp.or_else(|| header.clone()) else {
                    return Err(Error::format(
                        path,
                        format!(
                            "line {line}: trial '{}' comes before the journal's header and has no spec fingerprint: cannot tell which spec it was measured for; remove the line or start over",
                            shown(&t.label)
                        ),
                    ));
                };
                if fp != want {
                    return Err(Error::format(
                        path,
                        format!(
                            "line {line}: trial '{}' was measured for a different spec (spec fingerprint {}, this spec's is {want}: another workload or baseline): remove the line, or give another --out folder to start over",
                            shown(&t.label),
                            shown(&fp)
                        ),
                    ));
                }
                trials.push(t);
            }
            Record::Submitted(j) => submitted.push(j),
        }
    }
    Ok(Existing {
        trials,
        submitted,
        has_header: header.is_some(),
    })
}

/// The first setting that differs between the journal's spec and this one, as
/// `workload.steps is 60 in the journal, 100 in the spec`.
fn difference(old: &Spec, new: &Spec) -> String {
    let side = |s: &Spec| serde_json::json!({"workload": s.workload, "search.baseline": s.search.baseline});
    match first_difference(&side(old), &side(new), "") {
        Some((key, a, b)) => format!(
            "{key} is {} in the journal, {} in the spec",
            shown(&a),
            shown(&b)
        ),
        None => "its workload or baseline differs".into(),
    }
}

fn first_difference(a: &Value, b: &Value, at: &str) -> Option<(String, String, String)> {
    if a == b {
        return None;
    }
    if let (Value::Object(x), Value::Object(y)) = (a, b) {
        for key in x.keys().chain(y.keys()) {
            let path = if at.is_empty() {
                key.clone()
            } else {
                format!("{at}.{key}")
            };
            let (va, vb) = (
                x.get(key).unwrap_or(&Value::Null),
                y.get(key).unwrap_or(&Value::Null),
            );
            if let Some(d) = first_difference(va, vb, &path) {
                return Some(d);
            }
        }
    }
    Some((at.to_string(), a.to_string(), b.to_string()))
}
