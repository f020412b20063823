//! The gate's verdicts as a terminal table, markdown (CI step summaries, PR comments),
//! JUnit XML (one testcase per configuration and metric) and JSON.

use std::fmt::Write;

use super::verdict::fmt_p;
use super::{Check, GateReport, Overall};
use crate::error::{Error, Result};
use crate::report::markdown::cell as md_cell;

fn headline(g: &GateReport) -> String {
    match g.verdict {
        Overall::Pass => format!("PASS: no regression in {} check(s)", g.total()),
        Overall::Regression => format!(
            "REGRESSION: {} of {} check(s) failed",
            g.failures(),
            g.total()
        ),
    }
}

fn settings(g: &GateReport) -> String {
    let metrics: Vec<&str> = g.metrics.iter().map(|m| m.name()).collect();
    format!(
        "metrics {}; max regression {:.1}% (widened to the noise floor where larger); {} at alpha {}",
        metrics.join(", "),
        g.max_regression * 100.0,
        g.test,
        g.alpha
    )
}

fn source_line(name: &str, s: &super::Source) -> String {
    let e = &s.environment;
    format!(
        "{name}: {} (spec {}, {} on {}, commit {})",
        s.path,
        s.spec,
        e.host,
        e.cpu_model,
        e.git_commit
            .as_deref()
            // By characters: a byte slice of a hostile commit string could split one.
            .map_or("unknown".into(), |c| c.chars().take(12).collect::<String>())
    )
}

/// The cells of one row: configuration, metric, baseline, current, change, p, threshold,
/// verdict.
fn cells(c: &Check) -> [String; 8] {
    let dash = || "–".to_string();
    let (base, cur, change, p, thr) = match &c.outcome {
        Some(o) => (
            c.metric.show(o.baseline),
            c.metric.show(o.current),
            format!(
                "{:+.1}% [{:+.1}%, {:+.1}%]",
                (o.ratio - 1.0) * 100.0,
                (o.lo - 1.0) * 100.0,
                (o.hi - 1.0) * 100.0
            ),
            match (o.worse_by > 0.0, o.p_worse, o.p_better) {
                (true, Some(p), _) | (false, _, Some(p)) => {
                    fmt_p(p).trim_start_matches("p = ").replace("p ", "")
                }
                _ => dash(),
            },
            format!("{:.1}%", o.threshold * 100.0),
        ),
        None => (dash(), dash(), dash(), dash(), dash()),
    };
    [
        c.config.clone(),
        c.metric.name().to_string(),
        base,
        cur,
        change,
        p,
        thr,
        c.verdict.as_str().to_string(),
    ]
}

const HEADER: [&str; 8] = [
    "configuration",
    "metric",
    "baseline",
    "current",
    "change [95% CI]",
    "p",
    "threshold",
    "verdict",
];

fn unmatched(g: &GateReport) -> Vec<String> {
    let mut out = Vec::new();
    if !g.only_in_baseline.is_empty() {
        out.push(format!(
            "not in the current report, not judged: {}",
            g.only_in_baseline.join("; ")
        ));
    }
    if !g.only_in_current.is_empty() {
        out.push(format!(
            "not in the baseline, not judged: {}",
            g.only_in_current.join("; ")
        ));
    }
    out
}

/// The terminal table.
pub fn table(g: &GateReport) -> String {
    let rows: Vec<[String; 8]> = g.checks.iter().map(cells).collect();
    let mut w = HEADER.map(|h| h.chars().count());
    for r in &rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let line = |r: &[String; 8]| -> String {
        let mut s = String::new();
        for (i, c) in r.iter().enumerate() {
            let pad = w[i].saturating_sub(c.chars().count());
            // Text left, numbers right.
            if i < 2 || i == 7 {
                let _ = write!(s, "{c}{}", " ".repeat(pad));
            } else {
                let _ = write!(s, "{}{c}", " ".repeat(pad));
            }
            s.push_str(if i == 7 { "" } else { "  " });
        }
        s.trim_end().to_string() + "\n"
    };
    let mut s = format!(
        "tune gate: {}\n{}\n{}\n{}\n\n",
        headline(g),
        source_line("baseline", &g.baseline),
        source_line("current ", &g.current),
        settings(g)
    );
    s += &line(&HEADER.map(String::from));
    for r in &rows {
        s += &line(r);
    }
    s.push('\n');
    for c in &g.checks {
        let _ = writeln!(
            s,
            "{} {} [{}]: {}",
            c.config,
            c.metric.name(),
            c.verdict.as_str(),
            c.reason
        );
    }
    for c in &g.confirmations {
        let _ = writeln!(s, "{} [{}]: {}", c.subject(), c.verdict.as_str(), c.reason);
    }
    for n in unmatched(g).iter().chain(&g.notes) {
        let _ = writeln!(s, "note: {n}");
    }
    s
}

pub fn markdown(g: &GateReport) -> String {
    let mut s = format!("## tune gate: {}\n\n", md_cell(&headline(g)));
    for (name, src) in [("baseline", &g.baseline), ("current", &g.current)] {
        let _ = writeln!(s, "- {}", md_cell(&source_line(name, src)));
    }
    let _ = writeln!(s, "- {}\n", md_cell(&settings(g)));
    let _ = writeln!(s, "| {} |", HEADER.join(" | "));
    let _ = writeln!(s, "|---|---|---:|---:|---:|---:|---:|---|");
    for c in &g.checks {
        let mut r = cells(c).map(|x| md_cell(&x));
        if c.verdict.fails() {
            r[7] = format!("**{}**", r[7]);
        }
        let _ = writeln!(s, "| {} |", r.join(" | "));
    }
    s.push('\n');
    for c in &g.checks {
        let _ = writeln!(
            s,
            "- {} `{}` {}: {}",
            md_cell(&c.config),
            c.metric.name(),
            c.verdict.as_str(),
            md_cell(&c.reason)
        );
    }
    for c in &g.confirmations {
        let verdict = if c.verdict.fails() {
            format!("**{}**", c.verdict.as_str())
        } else {
            c.verdict.as_str().to_string()
        };
        let _ = writeln!(
            s,
            "- {} {verdict}: {}",
            md_cell(&c.subject()),
            md_cell(&c.reason)
        );
    }
    for n in unmatched(g).iter().chain(&g.notes) {
        let _ = writeln!(s, "- note: {}", md_cell(n));
    }
    s
}

/// Escapes text for XML 1.0 content and attributes, and drops the control characters
/// XML 1.0 cannot carry at all, even escaped.
pub fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\t' | '\n' | '\r' => out.push(ch),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => {}
            c => out.push(c),
        }
    }
    out
}

/// JUnit XML: one testsuite, one testcase per configuration and metric, and one per
/// contaminated confirmation. Regressions, failed runs and (under
/// `--fail-on-contaminated`) contaminated figures are `<failure>`, checks that could not
/// be made are `<skipped>`.
pub fn junit(g: &GateReport) -> String {
    let skipped = g
        .checks
        .iter()
        .filter(|c| c.verdict == super::Verdict::Skipped)
        .count();
    let suite = xml_escape(&format!("tune gate: {}", g.current.spec));
    let mut s = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        s,
        "<testsuites name=\"tune gate\" tests=\"{n}\" failures=\"{f}\" errors=\"0\" skipped=\"{skipped}\">\n  \
         <testsuite name=\"{suite}\" tests=\"{n}\" failures=\"{f}\" errors=\"0\" skipped=\"{skipped}\">",
        n = g.total(),
        f = g.failures(),
    );
    let _ = writeln!(
        s,
        "    <properties>\n      <property name=\"baseline\" value=\"{}\"/>\n      \
         <property name=\"current\" value=\"{}\"/>\n      <property name=\"settings\" value=\"{}\"/>\n    </properties>",
        xml_escape(&g.baseline.path),
        xml_escape(&g.current.path),
        xml_escape(&settings(g))
    );
    for c in &g.checks {
        let name = xml_escape(&format!("{} {}", c.config, c.metric.name()));
        let class = xml_escape(&format!("tune.gate.{}", g.current.spec));
        let row = cells(c);
        let detail = xml_escape(&format!(
            "baseline {}, current {}, change {}, p {}, threshold {}: {}",
            row[2], row[3], row[4], row[5], row[6], c.reason
        ));
        let _ = write!(
            s,
            "    <testcase classname=\"{class}\" name=\"{name}\" time=\"0\">"
        );
        if c.verdict.fails() {
            let kind = c.verdict.as_str().to_lowercase();
            let _ = write!(
                s,
                "\n      <failure message=\"{}\" type=\"{kind}\">{detail}</failure>\n    ",
                xml_escape(&c.reason)
            );
        } else if c.verdict == super::Verdict::Skipped {
            let _ = write!(
                s,
                "\n      <skipped message=\"{}\"/>\n    ",
                xml_escape(&c.reason)
            );
        } else {
            let _ = write!(s, "\n      <system-out>{detail}</system-out>\n    ");
        }
        s.push_str("</testcase>\n");
    }
    for c in &g.confirmations {
        let _ = write!(
            s,
            "    <testcase classname=\"{}\" name=\"{}\" time=\"0\">",
            xml_escape(&format!("tune.gate.{}", g.current.spec)),
            xml_escape(&c.subject())
        );
        let reason = xml_escape(&c.reason);
        if c.verdict.fails() {
            let _ = write!(
                s,
                "\n      <failure message=\"{reason}\" type=\"contaminated\">{reason}</failure>\n    "
            );
        } else {
            let _ = write!(s, "\n      <system-out>{reason}</system-out>\n    ");
        }
        s.push_str("</testcase>\n");
    }
    s.push_str("  </testsuite>\n</testsuites>\n");
    s
}

pub fn json(g: &GateReport) -> Result<String> {
    serde_json::to_string_pretty(g)
        .map_err(|e| Error::Runtime(format!("cannot encode the gate's verdict: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xml_escape_covers_markup_quotes_and_control_characters() {
        assert_eq!(
            xml_escape("a<b>&\"c\"'d'\u{1}\u{1b}[0m\tz"),
            "a&lt;b&gt;&amp;&quot;c&quot;&apos;d&apos;[0m\tz"
        );
        assert_eq!(md_cell("a|b\nc"), "a\\|b c");
    }
}
