//! `summary.md`: a short markdown summary for CI step summaries and PR comments.

use std::collections::HashMap;
use std::fmt::Write;

use crate::advisor::{story, Story};
use crate::results::model::{RecKind, Report, TrialReport};
use crate::results::record::Status;

/// Untrusted text (names, a command's stderr, error messages) as one line of markdown
/// that renders as exactly that text: in a table cell, a list item or a heading. The
/// markdown counterpart of `html::esc`, and the one escaper for everything tune writes
/// as markdown (summary.md, `tune gate --md`, the watch report).
///
/// Raw HTML is entity-escaped (GitHub would render or strip it), markdown punctuation is
/// backslash-escaped (`|` would split a table row), newlines and tabs become spaces, other
/// control characters are shown as `\xNN`, and leading whitespace is dropped so nothing
/// becomes a heading, a list, a quote or a code block.
pub fn cell(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    for ch in s.trim_start().chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\\' | '|' | '`' | '*' | '[' | ']' | '#' | '~' => {
                out.push('\\');
                out.push(ch);
            }
            '\n' | '\r' | '\t' => out.push(' '),
            c if c.is_control() => {
                // `\\` renders as one backslash: the reader sees `\x1b`.
                let _ = write!(out, "\\\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    // A leading `-`, `+`, `=` or `1.` would start a list or underline a heading.
    match out.chars().next() {
        Some('-' | '+' | '=') => out.insert(0, '\\'),
        Some(c) if c.is_ascii_digit() => {
            let digits = out.chars().take_while(char::is_ascii_digit).count();
            if matches!(out[digits..].chars().next(), Some('.' | ')')) {
                out.insert(digits, '\\');
            }
        }
        _ => {}
    }
    out
}

/// Untrusted text as an inline code span (a flag, a command line). Backslash escapes do
/// not work inside code spans, so backticks become `'`; `|` is still escaped because a
/// table row is split before code spans are parsed; HTML is inert inside a code span.
pub fn code(s: &str) -> String {
    let mut out = String::from("`");
    for ch in s.chars() {
        match ch {
            '`' => out.push('\''),
            '|' => out.push_str("\\|"),
            '\n' | '\r' | '\t' => out.push(' '),
            c if c.is_control() => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('`');
    out
}

/// What a trial ran differently from what its knobs say, in words: the script's own
/// settings tune replaced (applied), and knobs that could not act in the job.
pub fn trial_notes(t: &TrialReport) -> Vec<String> {
    let overrides = t.overrides.values().map(|why| format!("override: {why}"));
    let na = t
        .not_applicable
        .iter()
        .map(|(k, why)| format!("{k} not applicable: {why}"));
    let hw = t
        .contamination
        .iter()
        .map(|c| format!("hardware: {}", c.note));
    let power = t
        .joules_per_sample
        .iter()
        .filter(|e| e.source == "power")
        .map(|_| {
            "energy integrated from power samples (the GPU has no energy counter)".to_string()
        });
    overrides.chain(na).chain(hw).chain(power).collect()
}

/// The energy column's title when any trial has energy figures, labelled when they are
/// the NVML stand-in's; None hides the column.
pub fn energy_header(trials: &[TrialReport]) -> Option<&'static str> {
    let e: Vec<_> = trials
        .iter()
        .filter_map(|t| t.joules_per_sample.as_ref())
        .collect();
    if e.is_empty() {
        None
    } else if e.iter().any(|e| e.stand_in) {
        Some("J/sample [95% CI] (stand-in, not a GPU)")
    } else {
        Some("J/sample [95% CI]")
    }
}

pub fn energy_cell(t: &TrialReport) -> String {
    match &t.joules_per_sample {
        Some(e) => format!("{} [{}, {}]", joules(e.median), joules(e.lo), joules(e.hi)),
        None => "–".into(),
    }
}

/// A sample costs millijoules on a small model, joules on a big one: four decimals, or
/// four significant figures below a hundredth.
pub fn joules(j: f64) -> String {
    if j >= 0.01 {
        format!("{j:.4}")
    } else {
        format!("{j:.3e}")
    }
}

/// The tokens/s column's header, when some trial's batch was token ids (#31).
pub fn tokens_header(trials: &[TrialReport]) -> Option<&'static str> {
    trials
        .iter()
        .any(|t| t.tokens_per_s.is_some())
        .then_some("tokens/s [95% CI]")
}

pub fn tokens_cell(t: &TrialReport) -> String {
    match t.tokens_per_s {
        Some(c) => format!("{:.0} [{:.0}, {:.0}]", c.median, c.lo, c.hi),
        None => "–".into(),
    }
}

pub fn throughput_cell(t: &TrialReport) -> String {
    match t.samples_per_s {
        Some(c) => format!("{:.1} [{:.1}, {:.1}]", c.median, c.lo, c.hi),
        None => "–".into(),
    }
}

pub fn ratio_cell(t: &TrialReport, is_baseline: bool) -> String {
    if is_baseline {
        return "1 (baseline)".into();
    }
    match t.ratio_vs_baseline {
        Some(r) => format!(
            "{:.3} [{:.3}, {:.3}]{}{}",
            r.ratio,
            r.lo,
            r.hi,
            if r.significant { "" } else { " (n.s.)" },
            // Settled side by side after the plan: the figure is the pairs' (#31).
            if t.settled.is_some() { " (pairs)" } else { "" }
        ),
        None => "–".into(),
    }
}

/// The story's loaded trials by id: looked up once per table row, a scan of the list
/// per row was quadratic in trials.
pub(super) fn loads(story: &Story) -> HashMap<&str, f64> {
    story
        .loaded
        .iter()
        .map(|(id, l)| (id.as_str(), *l))
        .collect()
}

pub fn render(r: &Report) -> String {
    let story = story(r);
    let loaded = loads(&story);
    let mut s = String::new();
    let _ = writeln!(s, "# tune sweep: {}\n", cell(&r.spec.name));
    let e = &r.environment;
    let _ = writeln!(
        s,
        "{} on {} ({} cores, {} backend), tune {}\n",
        cell(&e.host),
        cell(&e.cpu_model),
        e.cores,
        cell(&e.backend),
        cell(&e.tune_version)
    );
    let _ = writeln!(s, "**{}**\n", cell(&story.headline));
    let _ = writeln!(s, "Measured noise:\n");
    for n in &story.noise {
        let _ = writeln!(s, "- {}", cell(n));
    }
    let _ = writeln!(s);
    for n in &r.notes {
        let _ = writeln!(s, "> Note: {}\n", cell(n));
    }
    let energy = energy_header(&r.trials);
    let tokens = tokens_header(&r.trials);
    let _ = writeln!(
        s,
        "| trial | status | {} [95% CI] | vs baseline [95% CI] | peak MiB | accuracy |{}{}",
        r.throughput_unit(),
        energy.map_or(String::new(), |h| format!(" {h} |")),
        tokens.map_or(String::new(), |h| format!(" {h} |"))
    );
    let _ = writeln!(
        s,
        "|---|---|---:|---:|---:|---:|{}{}",
        if energy.is_some() { "---:|" } else { "" },
        if tokens.is_some() { "---:|" } else { "" }
    );
    for t in &r.trials {
        let is_base = r.baseline.as_deref() == Some(t.id.as_str());
        let best = if story.fastest.as_deref() == Some(t.id.as_str()) {
            " **(best)**"
        } else {
            ""
        };
        let load = loaded
            .get(t.id.as_str())
            .map_or(String::new(), |l| format!(" ⚠ under load ({l:.0}% CPU)"));
        let _ = writeln!(
            s,
            "| {}{} | {}{} | {} | {} | {} | {} |{}{}",
            cell(&t.label),
            best,
            t.status.as_str(),
            load,
            throughput_cell(t),
            ratio_cell(t, is_base),
            t.peak_mib().map_or("–".into(), |m| format!("{m:.1}")),
            t.accuracy
                .map_or("–".into(), |a| format!("{:.1}%", a * 100.0)),
            energy.map_or(String::new(), |_| format!(" {} |", energy_cell(t))),
            tokens.map_or(String::new(), |_| format!(" {} |", tokens_cell(t))),
        );
    }
    let noted: Vec<(&TrialReport, Vec<String>)> = r
        .trials
        .iter()
        .map(|t| (t, trial_notes(t)))
        .filter(|(_, n)| !n.is_empty())
        .collect();
    if !noted.is_empty() {
        let _ = writeln!(s, "\nWhat the trials ran besides their knobs:\n");
        for (t, notes) in noted {
            for n in notes {
                let _ = writeln!(s, "- {}: {}", cell(&t.label), cell(&n));
            }
        }
    }
    let _ = writeln!(
        s,
        "\nRatios are throughput relative to the baseline; (n.s.) marks an interval that \
         includes 1, i.e. no effect shown; ⚠ marks a trial measured while other processes \
         used the machine."
    );
    if r.trials.iter().any(|t| t.settled.is_some()) {
        let _ = writeln!(
            s,
            "(pairs) marks a change measured again side by side with the baseline, in \
             alternating pairs, because the machine's drift left its sweep run unsettled: the \
             ratio is the pairs'."
        );
    }
    let _ = writeln!(s, "\n## Recommendations ({})\n", r.recommendations.len());
    if !story.empty.is_empty() {
        let _ = writeln!(s, "No recommended change stands:\n");
        for why in &story.empty {
            let _ = writeln!(s, "- {}", cell(why));
        }
        let _ = writeln!(s);
    }
    if !r.recommendations.is_empty() {
        let _ = writeln!(s, "| | recommendation | verdict | tune | PyTorch |");
        let _ = writeln!(s, "|---|---|---|---|---|");
        for (rec, v) in r.recommendations.iter().zip(&story.recs) {
            let kind = match rec.kind {
                RecKind::Change => "change",
                RecKind::Warning => "**warning**",
            };
            let _ = writeln!(
                s,
                "| {kind} | {} | {} | {} | {} |",
                cell(&rec.finding.title),
                cell(&v.line()),
                code(&rec.tune_flag),
                code(&rec.pytorch),
            );
        }
        let _ = writeln!(s);
        for rec in &r.recommendations {
            let _ = writeln!(
                s,
                "- **{}**: {}",
                cell(&rec.finding.title),
                cell(&rec.finding.evidence)
            );
        }
    }
    if let Some(c) = &r.confirmation {
        let _ = writeln!(
            s,
            "\n**Confirmation ({})**: {}",
            cell(&c.verdict),
            cell(&c.summary)
        );
    }
    let failed: Vec<&TrialReport> = r.trials.iter().filter(|t| t.status != Status::Ok).collect();
    if !failed.is_empty() {
        let _ = writeln!(s, "\n## Trials that did not complete\n");
        for t in failed {
            let _ = writeln!(
                s,
                "- **{}** ({}): {}",
                cell(&t.label),
                t.status.as_str(),
                cell(&match (&t.error, &t.partial) {
                    (Some(e), Some(p)) => format!("{e}; {}", p.note),
                    (e, _) => e.as_deref().unwrap_or("no error text").to_string(),
                })
            );
        }
    }
    if r.trials.iter().any(|t| !t.nodes.is_empty()) {
        let _ = writeln!(s, "\n## Nodes\n");
        let _ = writeln!(s, "| trial | repeat | job | node | node type |");
        let _ = writeln!(s, "|---|---|---|---|---|");
        for t in &r.trials {
            for n in &t.nodes {
                let _ = writeln!(
                    s,
                    "| {} | {} | {} | {} | {} |",
                    cell(&t.label),
                    n.repeat + 1,
                    cell(&n.job_id),
                    cell(&n.node),
                    cell(&crate::results::nodes::node_type(n))
                );
            }
        }
    }
    if !r.skipped.is_empty() {
        let _ = writeln!(s, "\n## Skipped combinations\n");
        for k in &r.skipped {
            let _ = writeln!(s, "- {}: {}", cell(&k.label), cell(&k.reason));
        }
    }
    s
}
