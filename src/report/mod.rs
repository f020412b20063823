//! Reports: the `Report` type (= the report.json schema), building it from journal
//! records, and rendering it as self-contained HTML and as markdown.
//!
//! `tune report` re-renders from a report.json, or from a sweep folder: its report.json
//! when there is one, else its journal.jsonl, whose header line carries the spec.

pub mod build;
pub mod charts;
pub mod html;
pub mod markdown;
pub mod model;

use std::path::{Path, PathBuf};

pub use model::Report;

use crate::cli::ReportArgs;
use crate::error::{Error, Result};
use crate::runner::journal::{atomic_write, Journal};
use crate::runner::record::{Record, TrialRecord};
use crate::runner::spec::Spec;

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
        }
    }
    let spec = spec.ok_or_else(|| Error::format(path, "no header record with the spec"))?;
    Ok((spec, trials))
}

/// Writes report.json, report.html and summary.md into `dir`, each atomically.
pub fn write_all(dir: &Path, report: &Report) -> Result<[PathBuf; 3]> {
    let paths = [
        dir.join(REPORT_JSON),
        dir.join(REPORT_HTML),
        dir.join(SUMMARY_MD),
    ];
    atomic_write(&paths[0], report.to_json()?.as_bytes())?;
    atomic_write(&paths[1], html::render(report).as_bytes())?;
    atomic_write(&paths[2], markdown::render(report).as_bytes())?;
    Ok(paths)
}

pub fn main(args: &ReportArgs) -> Result<i32> {
    let input = &args.input;
    let (report, dir, rebuilt) = if input.is_dir() {
        let json = input.join(REPORT_JSON);
        if json.exists() {
            (Report::load(&json)?, input.clone(), false)
        } else {
            let journal = input.join(JOURNAL);
            if !journal.exists() {
                return Err(Error::Invalid(format!(
                    "{}: neither {REPORT_JSON} nor {JOURNAL} here; give a sweep folder or a report.json",
                    input.display()
                )));
            }
            let (spec, trials) = read_journal(&journal)?;
            (build::build(&spec, &trials), input.clone(), true)
        }
    } else {
        let dir = match input.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        (Report::load(input)?, dir, false)
    };
    let html_path = args.html.clone().unwrap_or_else(|| dir.join(REPORT_HTML));
    let md_path = args.md.clone().unwrap_or_else(|| dir.join(SUMMARY_MD));
    if rebuilt {
        let p = dir.join(REPORT_JSON);
        atomic_write(&p, report.to_json()?.as_bytes())?;
        println!("{}", p.display());
    }
    atomic_write(&html_path, html::render(&report).as_bytes())?;
    atomic_write(&md_path, markdown::render(&report).as_bytes())?;
    println!("{}\n{}", html_path.display(), md_path.display());
    Ok(0)
}
