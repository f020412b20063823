//! Rendering: a `Report` (the model lives in `crate::results`) as self-contained HTML and
//! as markdown, `trace.json` (Perfetto) of the steps, the report files written as one
//! set, and a sweep journal read back.

pub(crate) mod axis;
mod chart_key;
pub(crate) mod charts;
mod charts_xy;
pub(crate) mod escape;
pub mod html;
pub mod lines;
pub mod markdown;
mod shown;
mod steps_chart;
pub mod trace;

use std::path::{Path, PathBuf};

pub use crate::results::model::Report;

use crate::error::{Error, Result};
use crate::fsio;
use crate::results::record::{Record, TrialRecord};
use crate::runner::journal::Journal;
use crate::spec::Spec;

pub const REPORT_JSON: &str = "report.json";
pub const REPORT_HTML: &str = "report.html";
pub const SUMMARY_MD: &str = "summary.md";
pub const JOURNAL: &str = "journal.jsonl";

/// Reads a sweep journal: the spec from its header and every trial record.
pub fn read_journal(path: &Path) -> Result<(Spec, Vec<TrialRecord>)> {
    let (records, _torn) = Journal::read_all::<Record>(path)?;
    let mut spec = None;
    let mut trials = Vec::new();
    for r in records {
        match r {
            Record::Header { spec: s, .. } => spec = spec.or(Some(s)),
            Record::Trial(t) => trials.push(t),
            // A job still queued or running, or a finished repeat of a trial that had more
            // to run, when the journal was read: not a result yet.
            Record::Submitted(_) | Record::Repeat(_) => {}
        }
    }
    crate::results::record::last_of_each(&mut trials);
    let spec = spec.ok_or_else(|| Error::format(path, "no header record with the spec"))?;
    Ok((spec, trials))
}

/// Writes report.json, report.html, summary.md and trace.json into `dir` as one set: all
/// rendered before anything is written, then all or nothing (see [`write_set`]).
pub fn write_all(dir: &Path, report: &Report) -> Result<[PathBuf; 4]> {
    let paths = [
        dir.join(REPORT_JSON),
        dir.join(REPORT_HTML),
        dir.join(SUMMARY_MD),
        dir.join(trace::TRACE_JSON),
    ];
    let [json, html, md, trace] = paths.clone();
    write_set(&[
        (json, report.to_json()?.into_bytes()),
        (html, html::render(report).into_bytes()),
        (md, markdown::render(report).into_bytes()),
        (trace, trace::sweep(report).into_bytes()),
    ])?;
    Ok(paths)
}

/// Refuses an output path that names a folder, or whose folder does not exist, before
/// anything is written: that is the user's input (exit 2), named by its flag.
pub fn check_output(flag: &str, path: &Path) -> Result<()> {
    let why = if path.is_dir() {
        "is a folder"
    } else if !fsio::parent_dir(path).is_dir() {
        "is in a folder that does not exist"
    } else {
        return Ok(());
    };
    Err(Error::Invalid(format!(
        "{flag} {}: {why}; give a file path in an existing folder",
        crate::error::shown(&path.display().to_string())
    )))
}

/// Writes files that belong together (a report and its renderings, the gate's outputs)
/// all or nothing: every file goes to a temp beside its target first; only when all
/// are written are they renamed into place. On a failure (full disk, file too large,
/// read-only folder) the temps are removed and the previous files stay as they were.
/// Stale temps of these files, left by a run that crashed, are removed first.
pub fn write_set(files: &[(PathBuf, Vec<u8>)]) -> Result<()> {
    for (path, _) in files {
        remove_stale_temps(path);
        if path.is_dir() {
            return Err(Error::write(
                path,
                std::io::Error::other("a folder is in the way of this file"),
            ));
        }
    }
    let mut temps = Vec::with_capacity(files.len());
    let discard = |temps: &[PathBuf]| {
        for t in temps {
            // Best effort: the write error is what the caller needs.
            let _ = std::fs::remove_file(t);
        }
    };
    for (path, bytes) in files {
        match fsio::write_temp(path, bytes) {
            Ok(t) => temps.push(t),
            Err(e) => {
                discard(&temps);
                return Err(e);
            }
        }
    }
    for (i, ((path, _), tmp)) in files.iter().zip(&temps).enumerate() {
        if let Err(e) = std::fs::rename(tmp, path) {
            discard(&temps[i..]);
            return Err(Error::write(path, e));
        }
    }
    let mut dirs: Vec<&Path> = files.iter().map(|(p, _)| fsio::parent_dir(p)).collect();
    dirs.dedup();
    for d in dirs {
        fsio::sync_dir(d)?;
    }
    Ok(())
}

/// Removes `.NAME.PID.N.tmp` files beside `path` whose process is gone: what a run that
/// was killed mid-write left behind. A live process's temps are left alone.
fn remove_stale_temps(path: &Path) {
    let (Some(name), Ok(entries)) = (
        path.file_name().and_then(|n| n.to_str()),
        std::fs::read_dir(fsio::parent_dir(path)),
    ) else {
        return;
    };
    let prefix = format!(".{name}.");
    for entry in entries.flatten() {
        let file = entry.file_name();
        let Some(rest) = file
            .to_str()
            .and_then(|f| f.strip_prefix(&prefix))
            .and_then(|f| f.strip_suffix(".tmp"))
        else {
            continue;
        };
        let Some(pid) = rest.split('.').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if pid != std::process::id() && !process_alive(pid) {
            // Best effort: a temp that cannot be removed does no harm.
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

fn process_alive(pid: u32) -> bool {
    if cfg!(target_os = "linux") {
        Path::new("/proc").join(pid.to_string()).exists()
    } else {
        // Without /proc, keep them: removing a live writer's temp would fail its rename.
        true
    }
}
