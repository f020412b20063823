//! `tune report`: re-renders from a report.json, or from a sweep folder: its report.json
//! when there is one, else its journal.jsonl (whose header line carries the spec), judged
//! again by the advisor. A watch's report.json (or its folder) renders as a watch page:
//! the same file names, the timeline charts and the findings.

use std::path::PathBuf;

use super::cli::ReportArgs;
use crate::error::{Error, Result};
use crate::report::{
    check_output, html, markdown, read_journal, write_set, JOURNAL, REPORT_HTML, REPORT_JSON,
    SUMMARY_MD,
};
use crate::results::Report;

pub fn main(args: &ReportArgs) -> Result<i32> {
    let input = &args.input;
    let file = super::compare::report_file(input);
    if super::compare::is_watch(&file) {
        return watch(args, &file);
    }
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
            (
                crate::advisor::build_report(&spec, &trials),
                input.clone(),
                true,
            )
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
    check_output("--html", &html_path)?;
    check_output("--md", &md_path)?;
    let mut files = Vec::with_capacity(3);
    if rebuilt {
        files.push((dir.join(REPORT_JSON), report.to_json()?.into_bytes()));
    }
    files.push((html_path, html::render(&report).into_bytes()));
    files.push((md_path, markdown::render(&report).into_bytes()));
    write_set(&files)?;
    super::summary::print(&report);
    for (p, _) in &files {
        println!("{}", p.display());
    }
    Ok(0)
}

/// Re-renders a `tune watch` report: report.html and summary.md beside it (or where
/// `--html`/`--md` say), written as one set.
fn watch(args: &ReportArgs, file: &std::path::Path) -> Result<i32> {
    let report = crate::watch::report::WatchReport::load(file)?;
    let dir = crate::fsio::parent_dir(file).to_path_buf();
    let html_path = args.html.clone().unwrap_or_else(|| dir.join(REPORT_HTML));
    let md_path = args.md.clone().unwrap_or_else(|| dir.join(SUMMARY_MD));
    check_output("--html", &html_path)?;
    check_output("--md", &md_path)?;
    let files = [
        (html_path, report.html().into_bytes()),
        (md_path, report.markdown().into_bytes()),
    ];
    write_set(&files)?;
    for (p, _) in &files {
        println!("{}", p.display());
    }
    Ok(0)
}
