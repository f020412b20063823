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
use crate::results::record::{Record, RepeatRecord, Submission, TrialRecord};
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
    /// Finished repeats journaled one by one; the runner keeps those whose trial has no
    /// record yet and goes on from the next repeat.
    pub repeats: Vec<RepeatRecord>,
    pub has_header: bool,
}

/// Journal records so far; an existing journal needs `--resume`.
pub fn existing_records(path: &Path, spec: &Spec, resume: bool) -> Result<Existing> {
    if std::fs::symlink_metadata(path).is_err() {
        return Ok(Existing::default());
    }
    // Read first: a file that is not tune's journal (or not a regular file) is refused
    // as such, whether or not --resume was given.
    let (lines, torn) = Journal::read_numbered::<Value>(path)?;
    let dir = path.parent().unwrap_or(Path::new("."));
    if !resume {
        return Err(Error::Invalid(format!(
            "{} already has a sweep journal: pass --resume to continue it, or remove {} to start over",
            dir.display(),
            dir.display()
        )));
    }
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
    let mut repeats = Vec::new();
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
            Record::Header {
                spec: old,
                tune_version,
            } => {
                if old.fingerprint() != want {
                    return Err(Error::format(
                        path,
                        format!(
                            "line {line}: this journal was started for a different spec ({}): resume with that spec, or give another --out folder to start over",
                            difference(&old, spec)
                        ),
                    ));
                }
                if header.is_none() {
                    note_differences(path, &tune_version, &old, spec);
                }
                header = Some(want.clone());
            }
            Record::Repeat(r) => {
                if stamp.as_deref() != Some(want.as_str()) {
                    return Err(Error::format(
                        path,
                        format!(
                            "line {line}: a repeat of trial '{}' was measured for a different spec: remove the line, or give another --out folder to start over",
                            shown(&r.id)
                        ),
                    ));
                }
                repeats.push(r);
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
    crate::results::record::last_of_each(&mut trials);
    Ok(Existing {
        trials,
        submitted,
        repeats,
        has_header: header.is_some(),
    })
}

/// One line each when the journal came from another tune version or was measured with
/// another number of repeats: the resumed sweep mixes them, and the user should know.
fn note_differences(path: &Path, version: &str, old: &Spec, spec: &Spec) {
    let this = env!("CARGO_PKG_VERSION");
    if version != this {
        eprintln!(
            "note: {} was written by tune {}; this is tune {this}: its finished trials are kept as they were measured",
            path.display(),
            shown(version)
        );
    }
    let (was, now) = (old.search.repeats, spec.search.repeats);
    if was != now {
        eprintln!(
            "note: repeats is {now} in the spec and was {was} when {} was started: finished trials keep their {was} repeat(s), the others get {now}",
            path.display()
        );
    }
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
