//! `tune gate --baseline A.json --current B.json`: loads both reports, judges them
//! (`crate::gate`), writes the requested outputs atomically and returns the exit code:
//! 0 pass, 1 regression, 2 bad input (as an `Error`).

use std::path::Path;

use crate::commands::cli::GateArgs;
use crate::error::{Error, Result};
use crate::gate::{self, render, Policy};
use crate::report::{check_output, write_set, Report, REPORT_JSON};

/// "5%" or "0.05" as a fraction. A bare number of 1 or more is refused: "5" is far more
/// likely to mean 5% than 500%.
pub fn parse_threshold(s: &str) -> Result<f64> {
    let t = s.trim();
    let bad = |why: &str| {
        Error::Invalid(format!(
            "invalid --max-regression '{s}': {why}; write a percentage like 5% or a fraction like 0.05"
        ))
    };
    let v = match t.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map_err(|_| bad("not a number"))? / 100.0,
        None => {
            let v = t.parse::<f64>().map_err(|_| bad("not a number"))?;
            if v >= 1.0 {
                return Err(bad("a bare number must be a fraction below 1"));
            }
            v
        }
    };
    if !v.is_finite() || v < 0.0 {
        return Err(bad("must be zero or more"));
    }
    Ok(v)
}

/// Loads a report (a report.json, or a sweep folder holding one), naming its role in any
/// error.
fn load(role: &str, path: &Path) -> Result<Report> {
    let file = if path.is_dir() {
        path.join(REPORT_JSON)
    } else {
        path.to_path_buf()
    };
    // A watch has no configurations to hold against a baseline's, and one watch's
    // samples say nothing about run-to-run noise: a verdict from two would be a guess.
    if super::compare::is_watch(&file) {
        return Err(Error::format(
            file,
            format!(
                "the {role} report is a tune watch report: tune gate judges sweep reports \
                 (configurations measured with repeats); use `tune compare A B` to see what \
                 changed between two watches"
            ),
        ));
    }
    Report::load(&file).map_err(|e| match e {
        Error::Io { path, source } => Error::Invalid(format!(
            "cannot read the {role} report {}: {source}",
            path.display()
        )),
        Error::Format { path, msg } => Error::Format {
            path,
            msg: format!("{role} report: {msg}"),
        },
        other => other,
    })
}

pub fn main(args: &GateArgs) -> Result<i32> {
    let policy = Policy {
        max_regression: parse_threshold(&args.max_regression)?,
        fail_on_contaminated: args.fail_on_contaminated,
        ..Policy::default()
    };
    let mut metrics = Vec::new();
    for m in &args.metric {
        if !metrics.contains(m) {
            metrics.push(*m);
        }
    }
    // Every input and output path is checked before anything is judged or written:
    // exit 2 leaves no output behind (docs/ci.md).
    if let Some(p) = &args.md {
        check_output("--md", p)?;
    }
    if let Some(p) = &args.junit {
        check_output("--junit", p)?;
    }
    let base = load("baseline", &args.baseline)?;
    let cur = load("current", &args.current)?;
    let (bp, cp) = (
        args.baseline.display().to_string(),
        args.current.display().to_string(),
    );
    let g = gate::gate((&bp, &base), (&cp, &cur), &metrics, &policy)?;
    let mut files = Vec::new();
    if let Some(p) = &args.md {
        files.push((p.clone(), render::markdown(&g).into_bytes()));
    }
    if let Some(p) = &args.junit {
        files.push((p.clone(), render::junit(&g).into_bytes()));
    }
    write_set(&files)?;
    if args.json {
        println!("{}", render::json(&g)?);
    } else {
        print!("{}", crate::error::inert(&render::table(&g)));
    }
    Ok(g.exit_code())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_parse_as_percent_or_fraction() {
        assert_eq!(parse_threshold("5%").unwrap(), 0.05);
        assert_eq!(parse_threshold(" 12.5 % ").unwrap(), 0.125);
        assert_eq!(parse_threshold("0.05").unwrap(), 0.05);
        assert_eq!(parse_threshold("0").unwrap(), 0.0);
        assert_eq!(parse_threshold("150%").unwrap(), 1.5);
        for bad in ["5", "-1%", "x%", "", "nan%"] {
            let e = parse_threshold(bad).unwrap_err();
            assert!(
                e.is_bad_input() && e.to_string().contains("--max-regression"),
                "{e}"
            );
        }
    }
}
