//! A watch report's files: report.json, report.html, summary.md and trace.json. Apart from
//! `report.rs` so the report's model does not import the pages drawn from it (`html`,
//! `timeline`), which import the model.

use std::path::{Path, PathBuf};

use super::report::WatchReport;
use super::{html, timeline};
use crate::error::Result;

impl WatchReport {
    /// Writes report.json, report.html and summary.md into `dir` as one set (all or
    /// nothing, as a sweep's), with trace.json where the hooks reported steps.
    pub fn write(&self, dir: &Path) -> Result<Vec<PathBuf>> {
        use crate::report::trace::TRACE_JSON;
        use crate::report::{write_set, REPORT_HTML, REPORT_JSON, SUMMARY_MD};
        let mut files = vec![
            (dir.join(REPORT_JSON), self.to_json()?.into_bytes()),
            (dir.join(REPORT_HTML), self.html().into_bytes()),
            (dir.join(SUMMARY_MD), self.markdown().into_bytes()),
        ];
        if !self.steps.is_empty() {
            files.push((dir.join(TRACE_JSON), timeline::trace(self).into_bytes()));
        }
        write_set(&files)?;
        Ok(files.into_iter().map(|(p, _)| p).collect())
    }

    pub fn html(&self) -> String {
        html::render_html(self)
    }
}
