//! The terminal face of a report, printed by `tune sweep` and `tune report`: the trials
//! table, then the advisor's story (`advisor::story`) in its own words: the headline, the
//! measured noise, each recommendation's verdict, why none stands. Colour marks what
//! it helps to see at a glance (a trial's status, a significant ratio against an n.s.
//! one, an unconfirmed verdict); `console` turns it off under `NO_COLOR` and when
//! stdout is not a terminal.

use std::fmt::Write;

use console::Style;

use crate::advisor::story;
use crate::error::{inert, shown};
use crate::report::markdown;
use crate::results::model::{RecKind, Report, TrialReport};
use crate::results::Status;

/// Prints `r` to stdout, coloured when stdout takes colour.
pub fn print(r: &Report) {
    crate::fsio::print_out(&render(r, console::colors_enabled()));
}

/// Report text as at most one screenful: control characters escaped, cut past
/// `MAX_LINE` characters (a report's labels can be megabytes; the files keep them whole).
fn line(text: &str) -> String {
    const MAX_LINE: usize = 1000;
    match text.char_indices().nth(MAX_LINE) {
        Some((cut, _)) => format!("{}… ({} bytes)", inert(&text[..cut]), text.len()),
        None => inert(text),
    }
}

fn paint(style: Style, colour: bool, text: &str) -> String {
    style.force_styling(colour).apply_to(text).to_string()
}

fn ratio_style(t: &TrialReport, is_base: bool) -> Style {
    match t.ratio_vs_baseline {
        _ if is_base => Style::new(),
        Some(x) if x.significant && x.ratio > 1.0 => Style::new().green().bold(),
        Some(x) if x.significant => Style::new().red(),
        _ => Style::new().dim(),
    }
}

pub fn render(r: &Report, colour: bool) -> String {
    let story = story(r);
    let mut s = String::new();
    let label = |t: &TrialReport| {
        let best = if story.fastest.as_deref() == Some(t.id.as_str()) {
            " (best)"
        } else {
            ""
        };
        format!("{}{best}", shown(&t.label))
    };
    let w = r
        .trials
        .iter()
        .map(|t| label(t).chars().count())
        .max()
        .unwrap_or(5)
        .max(5);
    let energy = markdown::energy_header(&r.trials);
    let tokens = markdown::tokens_header(&r.trials);
    let _ = writeln!(
        s,
        "{:<w$}  {:<11}  {:>28}  {:>26}  {:>8}{}{}",
        "trial",
        "status",
        format!("{} [95% CI]", r.throughput_unit()),
        "vs baseline [95% CI]",
        "peak MiB",
        energy.map_or(String::new(), |h| format!("  {h}")),
        tokens.map_or(String::new(), |h| format!("  {h:>26}"))
    );
    for t in &r.trials {
        let is_base = r.baseline.as_deref() == Some(t.id.as_str());
        let status = match story.load_of(&t.id) {
            Some(_) => format!("{} ⚠", t.status.as_str()),
            None => t.status.as_str().to_string(),
        };
        let status_style = match (t.status, story.load_of(&t.id)) {
            (Status::Ok, None) => Style::new().green(),
            (Status::Ok, Some(_)) => Style::new().yellow(),
            _ => Style::new().red().bold(),
        };
        // Padded before painting: escape codes would count towards the width.
        let _ = writeln!(
            s,
            "{:<w$}  {}  {:>28}  {}  {:>8}{}{}",
            label(t),
            paint(status_style, colour, &format!("{status:<11}")),
            markdown::throughput_cell(t),
            paint(
                ratio_style(t, is_base),
                colour,
                &format!("{:>26}", markdown::ratio_cell(t, is_base))
            ),
            t.peak_mib().map_or("–".into(), |m| format!("{m:.1}")),
            energy.map_or(String::new(), |_| format!("  {}", markdown::energy_cell(t))),
            tokens.map_or(String::new(), |_| format!(
                "  {:>26}",
                markdown::tokens_cell(t)
            )),
        );
    }
    for t in &r.trials {
        for n in markdown::trial_notes(t) {
            let _ = writeln!(s, "  {}: {}", shown(&t.label), line(&n));
        }
    }
    if !story.loaded.is_empty() {
        let _ = writeln!(
            s,
            "{}",
            paint(
                Style::new().yellow(),
                colour,
                "⚠ measured while other processes used the machine"
            )
        );
    }
    let _ = writeln!(s);
    let head = if story.fastest.is_some() {
        Style::new().green().bold()
    } else {
        Style::new().bold()
    };
    let _ = writeln!(s, "{}", paint(head, colour, &line(&story.headline)));
    let _ = writeln!(s, "measured noise:");
    for n in &story.noise {
        let _ = writeln!(s, "  - {}", line(n));
    }
    for n in &r.notes {
        let _ = writeln!(s, "note: {}", line(n));
    }
    for (rec, v) in r.recommendations.iter().zip(&story.recs) {
        let kind = match rec.kind {
            RecKind::Change => paint(Style::new().green(), colour, "recommend"),
            RecKind::Warning => paint(Style::new().yellow(), colour, "warning"),
        };
        // A script's user changes their script: the PyTorch line, not `tune trial`'s
        // flags (a PyTorch sweep's fused optimizer was shown as `--optim-impl fused`).
        let script = matches!(r.spec.workload, crate::spec::Workload::Command(_));
        let flag = match (script && !rec.pytorch.is_empty(), rec.tune_flag.is_empty()) {
            (true, _) => format!(": {}", line(&rec.pytorch)),
            (false, false) => format!(": {}", line(&rec.tune_flag)),
            (false, true) => String::new(),
        };
        let _ = writeln!(s, "{kind}: {}{flag}", line(&rec.finding.title));
        let verdict = if v.unconfirmed() {
            Style::new().red()
        } else {
            Style::new().dim()
        };
        let _ = writeln!(s, "  {}", paint(verdict, colour, &line(&v.line())));
    }
    if !story.empty.is_empty() {
        let _ = writeln!(s, "no recommended change stands:");
        for why in &story.empty {
            let _ = writeln!(s, "  - {}", line(why));
        }
    }
    if let Some(c) = &r.confirmation {
        let _ = writeln!(
            s,
            "confirmation ({}): {}",
            line(&c.verdict),
            line(&c.summary)
        );
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::advisor::testkit::{report, spec, trial};

    #[test]
    fn colour_only_when_asked() {
        let s = spec("num_workers = [0, 2]", "");
        let r = report(
            &s,
            vec![
                trial(&s, &[], 0.010),
                trial(&s, &[("num_workers", "2")], 0.007),
            ],
        );
        let plain = render(&r, false);
        assert!(!plain.contains('\u{1b}'), "{plain}");
        let coloured = render(&r, true);
        assert!(coloured.contains("\u{1b}[32m"), "{coloured}");
        // The same words either way.
        assert_eq!(console::strip_ansi_codes(&coloured), plain);
        // The engine's user runs tune's flags.
        assert!(
            plain.contains("recommend: ") && plain.contains(": --num-workers 2"),
            "{plain}"
        );
    }

    /// A script's user is shown the line to put in their script, not `tune trial` flags.
    #[test]
    fn a_script_sweep_recommends_its_pytorch_line() {
        let s = crate::spec::Spec::parse(
            "[workload.python]\nrun = \"python t.py\"\n[knobs]\nnum_workers = [0, 2]\n",
            "t.toml",
        )
        .unwrap();
        let r = report(
            &s,
            vec![
                trial(&s, &[], 0.010),
                trial(&s, &[("num_workers", "2")], 0.007),
            ],
        );
        let plain = render(&r, false);
        let rec = plain
            .lines()
            .find(|l| l.starts_with("recommend: "))
            .unwrap_or_else(|| panic!("{plain}"));
        assert!(
            rec.contains("num_workers=2") && !rec.contains("--num-workers"),
            "{rec}"
        );
    }
}
