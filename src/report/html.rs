//! `report.html`: one self-contained file (inline CSS and SVG, no scripts, no external
//! requests; a Content-Security-Policy forbids both). Every string that came from the
//! user or a trial goes through `esc`; chart text is escaped by plotters' SVG backend.

use std::fmt::Write;

use super::charts;
use super::markdown::{loads, ratio_cell, throughput_cell};
use super::shown::Shown;
use crate::advisor::{fmt_ratio, mib, story, Story};
use crate::results::model::{RecKind, Report};
use crate::results::record::Status;

pub use super::escape::esc;

const STYLE: &str = "\
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:0;color:#222;background:#fafafa}\
main{max-width:1020px;margin:0 auto;padding:1.5em 2em 3em;background:#fff}\
h1{font-size:1.6em;margin:.2em 0 .4em}h2{font-size:1.2em;margin:1.8em 0 .5em;border-bottom:1px solid #e5e5e5;padding-bottom:.2em}\
table{border-collapse:collapse;margin:.6em 0;font-size:.92em;width:100%}\
td,th{border:1px solid #ddd;padding:5px 8px;text-align:left;vertical-align:top}th{background:#f3f3f3}\
td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}\
.bad{color:#b00}.muted{color:#777}.ok{color:#2e7d32}\
code{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:.9em;background:#f5f5f5;padding:1px 3px;border-radius:3px;word-break:break-word}\
.headline{font-size:1.05em;background:#f2f7f2;border-left:4px solid #59a14f;padding:.6em 1em;margin:1em 0}\
.headline.flat{background:#f5f5f5;border-left-color:#999}\
#noise{font-size:.92em;background:#fffbea;border-left:4px solid #e0b400;padding:.3em 1em;margin:0 0 1em}#noise ul{margin:.2em 0;padding-left:1.2em}\
#no-recommendations{background:#f5f5f5;padding:.3em 1em;margin:.5em 0}\
.kind{display:inline-block;font-size:.75em;font-weight:600;text-transform:uppercase;padding:1px 6px;border-radius:3px}\
.kind.change{background:#e3efe3;color:#2e7d32}.kind.warning{background:#fbe9e7;color:#b00}\
tr.rec td{border-bottom:none}tr.how td{border-top:none;background:#fcfcfc;padding-bottom:8px}\
figure{margin:.4em 0 1em}figure svg{max-width:100%;height:auto;display:block}\
figcaption{color:#777;font-size:.88em;margin-top:.2em}\
.chart-legend{list-style:none;display:flex;flex-wrap:wrap;gap:2px 18px;padding:0;margin:.3em 0;font-size:.85em}\
figure .chart-legend svg{display:inline-block;width:28px;height:10px;margin-right:4px}\
.chart-bands{display:flex;flex-wrap:wrap;gap:2px 16px;padding:0;margin:.3em 0;font-size:.85em;color:#555;list-style:none}\
table.chart-key{width:auto;font-size:.85em}";

fn figure(id: &str, svg: String, caption: &str) -> String {
    format!(
        "<figure class=\"chart\" id=\"{id}\">{svg}<figcaption>{}</figcaption></figure>",
        esc(caption)
    )
}

fn headline(r: &Report, story: &Story) -> String {
    let class = if story.fastest.is_some() {
        "headline"
    } else {
        "headline flat"
    };
    let changes = r
        .recommendations
        .iter()
        .filter(|x| x.kind == RecKind::Change)
        .count();
    let unconfirmed = story.recs.iter().filter(|v| v.unconfirmed()).count();
    let warnings = r.recommendations.len() - changes;
    let mut count = format!(
        "{changes} recommendation{}",
        if changes == 1 { "" } else { "s" }
    );
    if unconfirmed > 0 {
        let _ = write!(count, " ({unconfirmed} unconfirmed)");
    }
    if warnings > 0 {
        let _ = write!(
            count,
            ", {warnings} warning{}",
            if warnings == 1 { "" } else { "s" }
        );
    }
    let mut s = format!(
        "<p class=\"{class}\" id=\"headline\">{} {}.</p><div id=\"noise\"><b>Measured noise</b><ul>",
        esc(&story.headline),
        esc(&count)
    );
    for n in &story.noise {
        let _ = write!(s, "<li>{}</li>", esc(n));
    }
    s.push_str("</ul></div>");
    s
}

fn recommendations(r: &Report, story: &Story) -> String {
    let mut s = String::new();
    if !story.empty.is_empty() {
        s.push_str("<div id=\"no-recommendations\"><p>No recommended change stands:</p><ul>");
        for why in &story.empty {
            let _ = write!(s, "<li>{}</li>", esc(why));
        }
        s.push_str("</ul></div>");
    }
    if r.recommendations.is_empty() {
        return s;
    }
    s.push_str(
        "<table id=\"recommendations\"><colgroup><col style=\"width:26%\"><col><col style=\"width:30%\">\
         </colgroup><tr><th>recommendation</th><th>evidence</th><th>verdict</th></tr>",
    );
    for (rec, v) in r.recommendations.iter().zip(&story.recs) {
        let (kind, class) = match rec.kind {
            RecKind::Change => ("change", "change"),
            RecKind::Warning => ("warning", "warning"),
        };
        let _ = write!(
            s,
            "<tr class=\"rec\"><td><span class=\"kind {class}\">{kind}</span> <b>{}</b></td><td>{}</td>\
             <td class=\"verdict{}\">{}</td></tr>\
             <tr class=\"how\"><td colspan=\"3\">tune: <code>{}</code> &nbsp; PyTorch: <code>{}</code></td></tr>",
            esc(&rec.finding.title),
            esc(&rec.finding.evidence),
            if v.unconfirmed() { " bad" } else { "" },
            esc(&v.line()),
            esc(&rec.tune_flag),
            esc(&rec.pytorch)
        );
    }
    s.push_str("</table>");
    s
}

fn confirmation(r: &Report) -> String {
    let Some(c) = &r.confirmation else {
        return "<p class=\"muted\">No combination to confirm: no recommended change was measured.</p>"
            .into();
    };
    let class = match c.verdict.as_str() {
        "matches" | "better" => "ok",
        _ => "bad",
    };
    let pred = c.predicted.map_or("–".into(), |p| fmt_ratio(&p));
    let measured = c
        .trial
        .as_ref()
        .and_then(|t| t.ratio_vs_baseline)
        .map_or("–".into(), |m| fmt_ratio(&m));
    let caution = match c.verdict.as_str() {
        "worse" | "not_confirmed" => {
            " The gains above did not hold up when re-measured beside the baseline: the \
             machine's load may have changed during the sweep, or the effects do not add up. \
             Re-run with more repeats before relying on them."
        }
        _ => "",
    };
    // What the hardware did to the pairs (#28); in red when the verdict rests on it.
    let hardware = c.contamination.as_ref().map_or(String::new(), |x| {
        let class = if x.in_figures { "bad" } else { "muted" };
        format!(
            " <span class=\"{class}\">Hardware: {}.</span>",
            esc(&x.note)
        )
    });
    format!(
        "<p id=\"confirmation\">Confirmation: the recommended changes combined, <code>{}</code> \
         (rules: {}), measured alternately with a re-run of the baseline: {} against the \
         predicted {}, <b class=\"{class}\">{}</b>.{}{hardware}</p>",
        esc(&c.label),
        esc(&c.rules.join(", ")),
        esc(&measured),
        esc(&pred),
        esc(&c.verdict),
        esc(caution)
    )
}

fn trials_table(r: &Report, story: &Story) -> String {
    let mut s = format!(
        "<table><tr><th>trial</th><th>status</th><th>{} [95% CI]</th><th>vs baseline [95% CI]</th>\
         <th>peak MiB</th><th>accuracy</th><th>final loss</th><th>repeats</th><th>notes</th>",
        r.throughput_unit()
    );
    let energy = super::markdown::energy_header(&r.trials);
    if let Some(h) = energy {
        let _ = write!(s, "<th>{}</th>", esc(h));
    }
    s.push_str("</tr>");
    let confirm = r
        .confirmation
        .iter()
        .flat_map(|c| c.baseline_rerun.iter().chain(c.trial.iter()));
    let loaded = loads(story);
    for t in r.trials.iter().chain(confirm) {
        let is_base = r.baseline.as_deref() == Some(t.id.as_str());
        let mut notes: Vec<String> = super::markdown::trial_notes(t);
        if let Some(p) = &t.partial {
            notes.insert(0, p.note.clone());
        }
        if let Some(e) = &t.error {
            notes.insert(0, e.clone());
        }
        if let Some(l) = loaded.get(t.id.as_str()) {
            notes.insert(
                0,
                format!("⚠ measured under load: other processes used {l:.0}% of the CPU"),
            );
        }
        let _ = write!(
            s,
            "<tr><td title=\"{}\">{}{}</td><td class=\"{}\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td>{}</tr>",
            esc(&t.id),
            esc(&t.label),
            if story.fastest.as_deref() == Some(t.id.as_str()) { " <b>(best)</b>" } else { "" },
            if t.status == Status::Ok { "" } else { "bad" },
            esc(t.status.as_str()),
            esc(&throughput_cell(t)),
            esc(&ratio_cell(t, is_base)),
            t.peak_mib().map_or("–".into(), |m| format!("{m:.1}")),
            t.accuracy.map_or("–".into(), |a| format!("{:.1}%", a * 100.0)),
            t.final_loss.map_or("–".into(), |l| format!("{l:.4}")),
            t.repeats.len(),
            esc(&notes.join("; ")),
            energy.map_or(String::new(), |_| format!(
                "<td class=\"n\">{}</td>",
                esc(&super::markdown::energy_cell(t))
            ))
        );
    }
    s.push_str("</table>");
    s
}

fn environment(r: &Report) -> String {
    let e = &r.environment;
    let gpus = if e.gpus.is_empty() {
        format!(
            "none ({})",
            e.gpu_notice.as_deref().unwrap_or("no GPU facts recorded")
        )
    } else {
        e.gpus
            .iter()
            .map(|g| {
                format!(
                    "{}: {} ({:.1} GiB)",
                    g.index,
                    g.name,
                    g.memory_total_bytes as f64 / (1u64 << 30) as f64
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    let rows = [
        ("host", e.host.clone()),
        ("CPU", e.cpu_model.clone()),
        ("cores", e.cores.to_string()),
        (
            "host memory",
            e.host_memory_bytes
                .map_or("–".into(), |b| format!("{:.1} GiB", mib(b) / 1024.0)),
        ),
        ("GPUs", gpus),
        ("driver", e.driver.clone().unwrap_or_else(|| "–".into())),
        (
            "CUDA (driver)",
            e.cuda.clone().unwrap_or_else(|| "–".into()),
        ),
        ("backend", e.backend.clone()),
        ("OS", e.os.clone()),
        ("tune", e.tune_version.clone()),
        (
            "git commit",
            e.git_commit.clone().unwrap_or_else(|| "–".into()),
        ),
        ("spec", r.spec.path.display().to_string()),
        ("strategy", r.spec.search.strategy.to_string()),
        ("repeats", r.spec.search.repeats.to_string()),
        ("schema", r.schema_version.clone()),
    ];
    let mut s = String::from("<table id=\"environment\">");
    for (k, v) in rows {
        let _ = write!(s, "<tr><th>{}</th><td>{}</td></tr>", esc(k), esc(&v));
    }
    s.push_str("</table>");
    s
}

/// The ids of the chart figures, in page order (the browser test checks each).
pub const CHARTS: [&str; 6] = [
    "fig-throughput",
    "fig-phases",
    "fig-pareto",
    "fig-device-timeline",
    "fig-device-memory",
    "fig-loss",
];

pub fn render(r: &Report) -> String {
    let story = story(r);
    let shown = Shown::of(r, story.fastest.as_deref());
    let scale = shown.note().map_or(String::new(), |n| {
        format!("<p class=\"muted\" id=\"chart-scale\">{}</p>", esc(&n))
    });
    let mut s = String::new();
    let title = format!("tune sweep: {}", r.spec.name);
    let _ = write!(
        s,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">\
         <title>{}</title><style>{STYLE}</style></head><body><main><h1>{}</h1>{}",
        esc(&title),
        esc(&title),
        headline(r, &story)
    );
    for n in &r.notes {
        let _ = write!(s, "<p class=\"bad\">{}</p>", esc(n));
    }
    let _ = write!(
        s,
        "<h2>Recommendations</h2>{}{}\
         <h2>Throughput per configuration</h2>{scale}{}\
         <h2>Where a step's time goes</h2>{}\
         <h2>Throughput vs peak memory</h2>{}\
         <h2>Devices</h2>{}{}\
         <h2>Loss curves</h2>{}\
         <h2>Trials</h2>{}",
        recommendations(r, &story),
        confirmation(r),
        figure(
            CHARTS[0],
            charts::throughput(r, &shown, story.fastest.as_deref()),
            &format!(
                "Median {} over steady-state steps with the 95% bootstrap interval; green: significantly faster than the baseline (the headline's fastest), \
                 purple: the confirmation runs (after the sweep), grey rule: the baseline.",
                r.throughput_unit()
            )
        ),
        figure(
            CHARTS[1],
            charts::phases(&shown),
            "Mean share of a step in each phase; `other` is the untimed remainder."
        ),
        figure(
            CHARTS[2],
            charts::pareto(r, &shown) + &charts::pareto3(r),
            "Each successful configuration with its 95% interval; the green line joins the Pareto front \
             (no other configuration is both faster and smaller). With GPU energy, the table ranks \
             speed, memory and energy together."
        ),
        figure(
            CHARTS[3],
            charts::device_timeline(r),
            "Sampled while the sweep ran, trials end to end (shaded bands). CPU use of the trial processes \
             is a share of all cores."
        ),
        figure(
            CHARTS[4],
            charts::device_memory(&shown),
            "Peak memory and busy share per device per configuration: an imbalance between devices shows here."
        ),
        figure(
            CHARTS[5],
            charts::loss(&shown),
            "Training loss per step of each configuration's first repeat."
        ),
        trials_table(r, &story)
    );
    s.push_str(&super::steps_chart::figure(r, story.fastest.as_deref()));
    if r.trials.iter().any(|t| !t.nodes.is_empty()) {
        s.push_str("<h2>Nodes</h2><table><thead><tr><th>trial</th><th>repeat</th><th>job</th><th>node</th><th>node type</th></tr></thead><tbody>");
        for t in &r.trials {
            for n in &t.nodes {
                let _ = write!(
                    s,
                    "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                    esc(&t.label),
                    n.repeat + 1,
                    esc(&n.job_id),
                    esc(&n.node),
                    esc(&crate::results::nodes::node_type(n))
                );
            }
        }
        s.push_str("</tbody></table>");
    }
    if !r.skipped.is_empty() {
        s.push_str("<h2>Skipped combinations</h2><ul>");
        for k in &r.skipped {
            let _ = write!(s, "<li>{}: {}</li>", esc(&k.label), esc(&k.reason));
        }
        s.push_str("</ul>");
    }
    let _ = writeln!(
        s,
        "<h2>Environment</h2>{}</main></body></html>",
        environment(r)
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A script whose steps had no countable batch is measured in steps/s, and every
    /// table and headline says so; a counted batch stays samples/s (#31).
    #[test]
    fn a_sweep_with_no_countable_batch_says_steps_per_second() {
        use crate::advisor::testkit::{report, spec, trial};
        let sp = spec("amp = [\"off\", \"bf16\"]", "strategy = \"grid\"");
        let build = |unknown: bool| {
            let mut ts = vec![
                trial(&sp, &[], 0.010),
                trial(&sp, &[("amp", "bf16")], 0.005),
            ];
            for t in &mut ts {
                for r in &mut t.rec.repeats {
                    r.batch_unknown = unknown;
                }
            }
            report(&sp, ts)
        };
        let steps = build(true);
        let md = crate::report::markdown::render(&steps);
        assert!(md.contains("| steps/s [95% CI] |"), "{md}");
        assert!(!md.contains("samples/s [95% CI]"), "{md}");
        let html = render(&steps);
        assert!(html.contains("<th>steps/s [95% CI]</th>"));
        // Charts, their keys and captions too: one unit on the page.
        assert!(
            !html.contains("samples/s"),
            "{}",
            &html[html.find("samples/s").unwrap_or(0)..][..200]
        );
        let samples = build(false);
        assert!(crate::report::markdown::render(&samples).contains("| samples/s [95% CI] |"));
        assert!(render(&samples).contains("<th>samples/s [95% CI]</th>"));
    }

    #[test]
    fn esc_covers_markup_and_quotes() {
        assert_eq!(
            esc(r#"<script>alert("x")</script> & 'y'"#),
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;y&#39;"
        );
    }
}
