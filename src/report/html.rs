//! `report.html`: one self-contained file (inline CSS and SVG, no scripts, no external
//! requests). Every string that came from the user or a trial goes through `esc`.

use std::fmt::Write;

use super::markdown::{ratio_cell, throughput_cell};
use super::model::{Report, TrialReport};
use crate::runner::record::Status;

/// Escapes text for HTML element content and double- or single-quoted attributes.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const COLORS: &[&str] = &[
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac",
];

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1100px}\
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}\
td.n{text-align:right;font-variant-numeric:tabular-nums}.bad{color:#b00}.muted{color:#777}\
svg text{font-size:12px;font-family:system-ui,sans-serif}h2{margin-top:1.6em}";

const LABEL_W: f64 = 260.0;
const PLOT_W: f64 = 560.0;
const ROW_H: f64 = 24.0;

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n - 1).collect();
        t.push('…');
        t
    }
}

/// Horizontal bars of median samples/s with the 95% interval as an error bar.
fn throughput_chart(r: &Report) -> String {
    let max = r
        .trials
        .iter()
        .filter_map(|t| t.samples_per_s.map(|c| c.hi.max(c.median)))
        .fold(0.0, f64::max);
    if max <= 0.0 {
        return "<p class=\"muted\">No successful trial to chart.</p>".into();
    }
    let h = ROW_H * r.trials.len() as f64 + 30.0;
    let w = LABEL_W + PLOT_W + 120.0;
    let x = |v: f64| LABEL_W + PLOT_W * v / max;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" role=\"img\" aria-label=\"throughput per configuration\">"
    );
    for (i, t) in r.trials.iter().enumerate() {
        let y = ROW_H * i as f64 + 4.0;
        let _ = write!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\"><title>{}</title>{}</text>",
            LABEL_W - 6.0,
            y + 14.0,
            esc(&t.label),
            esc(&truncate(&t.label, 36))
        );
        match t.samples_per_s {
            Some(c) => {
                let color = if r.best.as_deref() == Some(t.id.as_str()) {
                    "#59a14f"
                } else {
                    "#4e79a7"
                };
                let _ = write!(
                    s,
                    "<rect x=\"{LABEL_W}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"{color}\"/>\
                     <line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#222\"/>\
                     <line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#222\"/>\
                     <line x1=\"{:.1}\" x2=\"{:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"#222\"/>\
                     <text x=\"{:.1}\" y=\"{:.1}\">{:.1}</text>",
                    (x(c.median) - LABEL_W).max(1.0),
                    ROW_H - 8.0,
                    x(c.lo),
                    x(c.hi),
                    y + 8.0,
                    y + 8.0,
                    x(c.lo),
                    x(c.lo),
                    y + 3.0,
                    y + 13.0,
                    x(c.hi),
                    x(c.hi),
                    y + 3.0,
                    y + 13.0,
                    x(c.hi) + 6.0,
                    y + 12.0,
                    c.median
                );
            }
            None => {
                let _ = write!(
                    s,
                    "<text x=\"{:.1}\" y=\"{:.1}\" fill=\"#b00\">{}</text>",
                    LABEL_W + 4.0,
                    y + 12.0,
                    esc(t.status.as_str())
                );
            }
        }
    }
    let axis_y = ROW_H * r.trials.len() as f64 + 8.0;
    let _ = write!(
        s,
        "<line x1=\"{LABEL_W}\" x2=\"{:.1}\" y1=\"{axis_y:.1}\" y2=\"{axis_y:.1}\" stroke=\"#999\"/>\
         <text x=\"{LABEL_W}\" y=\"{:.1}\">0</text><text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{max:.0} samples/s</text></svg>",
        LABEL_W + PLOT_W,
        axis_y + 16.0,
        LABEL_W + PLOT_W,
        axis_y + 16.0
    );
    s
}

fn phase_names(r: &Report) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for t in &r.trials {
        for k in t.phase_share.keys() {
            // `recompute` is inside `backward`; stacking it would count it twice.
            if k != "recompute" && !names.contains(k) {
                names.push(k.clone());
            }
        }
    }
    names
}

/// One stacked bar per configuration: share of the step in each phase.
fn phase_chart(r: &Report) -> String {
    let names = phase_names(r);
    let rows: Vec<&TrialReport> = r
        .trials
        .iter()
        .filter(|t| !t.phase_share.is_empty())
        .collect();
    if rows.is_empty() {
        return "<p class=\"muted\">No phase timings recorded.</p>".into();
    }
    let h = ROW_H * rows.len() as f64 + 40.0;
    let w = LABEL_W + PLOT_W + 20.0;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" role=\"img\" aria-label=\"step phase breakdown\">"
    );
    for (i, t) in rows.iter().enumerate() {
        let y = ROW_H * i as f64 + 4.0;
        let _ = write!(
            s,
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            LABEL_W - 6.0,
            y + 14.0,
            esc(&truncate(&t.label, 36))
        );
        let total: f64 = names.iter().filter_map(|n| t.phase_share.get(n)).sum();
        let mut x = LABEL_W;
        for (j, n) in names.iter().enumerate() {
            let Some(v) = t.phase_share.get(n) else {
                continue;
            };
            let width = PLOT_W * v / total.max(1e-12);
            let _ = write!(
                s,
                "<rect x=\"{x:.1}\" y=\"{y:.1}\" width=\"{width:.1}\" height=\"{:.1}\" fill=\"{}\"><title>{}: {:.1}%</title></rect>",
                ROW_H - 8.0,
                COLORS[j % COLORS.len()],
                esc(n),
                v * 100.0
            );
            x += width;
        }
    }
    let ly = ROW_H * rows.len() as f64 + 22.0;
    let mut lx = LABEL_W;
    for (j, n) in names.iter().enumerate() {
        let _ = write!(
            s,
            "<rect x=\"{lx:.1}\" y=\"{:.1}\" width=\"10\" height=\"10\" fill=\"{}\"/><text x=\"{:.1}\" y=\"{ly:.1}\">{}</text>",
            ly - 9.0,
            COLORS[j % COLORS.len()],
            lx + 13.0,
            esc(n)
        );
        lx += 18.0 + 7.0 * n.len() as f64;
    }
    s.push_str("</svg>");
    s
}

/// Loss per step of each configuration's first repeat.
fn loss_chart(r: &Report) -> String {
    let curves: Vec<(&TrialReport, &[f32])> = r
        .trials
        .iter()
        .filter_map(|t| Some((t, t.repeats.first()?.losses.as_slice())))
        .filter(|(_, l)| l.len() >= 2)
        .collect();
    if curves.is_empty() {
        return "<p class=\"muted\">No loss curves recorded.</p>".into();
    }
    let finite = |v: f32| v.is_finite() && v < f32::MAX;
    let max_len = curves.iter().map(|(_, l)| l.len()).max().unwrap_or(2);
    let max_loss = curves
        .iter()
        .flat_map(|(_, l)| l.iter().copied().filter(|v| finite(*v)))
        .fold(0.0f32, f32::max)
        .max(1e-6) as f64;
    let (w, h, pad) = (PLOT_W, 220.0, 40.0);
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{:.0}\" height=\"{:.0}\" role=\"img\" aria-label=\"loss curves\">\
         <line x1=\"{pad}\" y1=\"{h}\" x2=\"{:.0}\" y2=\"{h}\" stroke=\"#999\"/><line x1=\"{pad}\" y1=\"0\" x2=\"{pad}\" y2=\"{h}\" stroke=\"#999\"/>\
         <text x=\"2\" y=\"12\">{max_loss:.2}</text><text x=\"2\" y=\"{h}\">0</text>\
         <text x=\"{:.0}\" y=\"{:.0}\" text-anchor=\"end\">step {}</text>",
        w + pad + 260.0,
        h + 24.0,
        w + pad,
        w + pad,
        h + 18.0,
        max_len
    );
    for (i, (t, losses)) in curves.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let pts: Vec<String> = losses
            .iter()
            .enumerate()
            .filter(|(_, v)| finite(**v))
            .map(|(k, v)| {
                let x = pad + w * k as f64 / (max_len - 1).max(1) as f64;
                let y = h - h * (*v as f64 / max_loss).min(1.0);
                format!("{x:.1},{y:.1}")
            })
            .collect();
        let _ = write!(
            s,
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"1.5\" points=\"{}\"><title>{}</title></polyline>\
             <rect x=\"{:.0}\" y=\"{:.0}\" width=\"10\" height=\"10\" fill=\"{color}\"/><text x=\"{:.0}\" y=\"{:.0}\">{}</text>",
            pts.join(" "),
            esc(&t.label),
            w + pad + 10.0,
            6.0 + 16.0 * i as f64,
            w + pad + 24.0,
            15.0 + 16.0 * i as f64,
            esc(&truncate(&t.label, 32))
        );
    }
    s.push_str("</svg>");
    s
}

fn trials_table(r: &Report) -> String {
    let mut s = String::from(
        "<table><tr><th>trial</th><th>status</th><th>samples/s [95% CI]</th><th>vs baseline [95% CI]</th>\
         <th>peak MiB</th><th>accuracy</th><th>final loss</th><th>repeats</th><th>notes</th></tr>",
    );
    for t in &r.trials {
        let is_base = r.baseline.as_deref() == Some(t.id.as_str());
        let mut notes: Vec<String> = t
            .not_applicable
            .iter()
            .map(|(k, v)| format!("{k}: not applicable ({v})"))
            .collect();
        if let Some(e) = &t.error {
            notes.insert(0, e.clone());
        }
        let _ = write!(
            s,
            "<tr><td title=\"{}\">{}{}</td><td class=\"{}\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td></tr>",
            esc(&t.id),
            esc(&t.label),
            if r.best.as_deref() == Some(t.id.as_str()) { " <b>(best)</b>" } else { "" },
            if t.status == Status::Ok { "" } else { "bad" },
            esc(t.status.as_str()),
            esc(&throughput_cell(t)),
            esc(&ratio_cell(t, is_base)),
            t.peak_mib().map_or("–".into(), |m| format!("{m:.1}")),
            t.accuracy.map_or("–".into(), |a| format!("{:.1}%", a * 100.0)),
            t.final_loss.map_or("–".into(), |l| format!("{l:.4}")),
            t.repeats.len(),
            esc(&notes.join("; "))
        );
    }
    s.push_str("</table>");
    s
}

fn recommendations(r: &Report) -> String {
    if r.recommendations.is_empty() {
        return "<p class=\"muted\">No recommendations in this report.</p>".into();
    }
    let mut s = String::from(
        "<table><tr><th>recommendation</th><th>evidence</th><th>expected gain</th><th>confidence</th><th>tune</th><th>PyTorch</th></tr>",
    );
    for rec in &r.recommendations {
        let gain = rec.expected_gain.map_or("–".into(), |g| {
            format!("{:.2}× [{:.2}, {:.2}]", g.ratio, g.lo, g.hi)
        });
        let _ = write!(
            s,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td><code>{}</code></td><td><code>{}</code></td></tr>",
            esc(&rec.title),
            esc(&rec.evidence),
            esc(&gain),
            esc(&rec.confidence),
            esc(&rec.tune_flag),
            esc(&rec.pytorch)
        );
    }
    s.push_str("</table>");
    s
}

fn environment(r: &Report) -> String {
    let e = &r.environment;
    let rows = [
        ("host", e.host.clone()),
        ("CPU", e.cpu_model.clone()),
        ("cores", e.cores.to_string()),
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
    let mut s = String::from("<table>");
    for (k, v) in rows {
        let _ = write!(s, "<tr><th>{}</th><td>{}</td></tr>", esc(k), esc(&v));
    }
    s.push_str("</table>");
    s
}

pub fn render(r: &Report) -> String {
    let mut s = String::new();
    let title = format!("tune sweep: {}", r.spec.name);
    let _ = write!(
        s,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">\
         <title>{}</title><style>{STYLE}</style></head><body><h1>{}</h1>",
        esc(&title),
        esc(&title)
    );
    for n in &r.notes {
        let _ = write!(s, "<p class=\"bad\">{}</p>", esc(n));
    }
    let _ = write!(
        s,
        "<h2>Throughput per configuration</h2><p class=\"muted\">Median samples/s over steady-state steps, \
         with the 95% bootstrap interval.</p>{}\
         <h2>Where a step's time goes</h2>{}\
         <h2>Loss curves</h2>{}\
         <h2>Trials</h2>{}\
         <h2>Recommendations</h2>{}",
        throughput_chart(r),
        phase_chart(r),
        loss_chart(r),
        trials_table(r),
        recommendations(r)
    );
    if !r.skipped.is_empty() {
        s.push_str("<h2>Skipped combinations</h2><ul>");
        for k in &r.skipped {
            let _ = write!(s, "<li>{}: {}</li>", esc(&k.label), esc(&k.reason));
        }
        s.push_str("</ul>");
    }
    let _ = writeln!(s, "<h2>Environment</h2>{}</body></html>", environment(r));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn esc_covers_markup_and_quotes() {
        assert_eq!(
            esc(r#"<script>alert("x")</script> & 'y'"#),
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;y&#39;"
        );
    }
}
