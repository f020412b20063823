//! `report.html` of a watch: one self-contained page (inline CSS and SVG, no scripts,
//! the same Content-Security-Policy as a sweep's report) with what was watched, the
//! findings first, then the timeline charts, the per-device table, notes and the
//! sampling's own cost. Every string from the watched command or the machine goes
//! through `esc`.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::report::WatchReport;
use crate::report::escape::esc;
use crate::report::lines::{render, Line, LinesChart};

const STYLE: &str = "\
body{font-family:system-ui,-apple-system,'Segoe UI',sans-serif;margin:0;color:#222;background:#fafafa}\
main{max-width:1020px;margin:0 auto;padding:1.5em 2em 3em;background:#fff}\
h1{font-size:1.6em;margin:.2em 0 .4em;word-break:break-word}h2{font-size:1.2em;margin:1.8em 0 .5em;border-bottom:1px solid #e5e5e5;padding-bottom:.2em}h3{font-size:1.05em;margin:1.2em 0 .3em}\
table{border-collapse:collapse;margin:.6em 0;font-size:.92em;width:100%}\
td,th{border:1px solid #ddd;padding:5px 8px;text-align:left;vertical-align:top}th{background:#f3f3f3}\
td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}\
.muted{color:#777}.headline{font-size:1.05em;background:#f2f7f2;border-left:4px solid #59a14f;padding:.6em 1em;margin:1em 0}\
.finding{background:#fff6e5;border-left:4px solid #e8a33d;padding:.5em 1em;margin:.6em 0}\
code{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:.9em;background:#f5f5f5;padding:1px 3px;border-radius:3px;word-break:break-word}\
figure{margin:.4em 0 1em}figure svg{max-width:100%;height:auto;display:block}\
figcaption{color:#777;font-size:.88em;margin-top:.2em}\
ul.legend{list-style:none;padding:0;margin:.3em 0;display:flex;flex-wrap:wrap;gap:.3em 1.2em;font-size:.88em}\
ul.legend li{display:flex;align-items:center;gap:.4em}.swatch{display:inline-block;width:22px;height:0}";

/// The charts of a watch page, in order: (id, heading, caption).
pub const CHARTS: [&str; 3] = ["watch-cpu", "watch-memory", "watch-gpu"];

/// The timeline's series, grouped per chart: CPU as a share of the machine, memory in
/// MiB, GPU utilization. Per-core series are left out: they would bury the others.
fn series(r: &WatchReport) -> [Vec<Line>; 3] {
    let cores = r.environment.cores.max(1) as f64;
    let mut by: [BTreeMap<String, Vec<(f64, f64)>>; 3] = Default::default();
    for s in &r.timeline {
        let core = s.device.starts_with("cpu") && s.device[3..].parse::<u32>().is_ok();
        let (chart, name, v) = match s.metric.as_str() {
            "cpu_util_pct" if !core => (0, format!("{}: whole machine", s.device), s.value),
            "cpu_pct" => (
                0,
                format!("{}: watched processes", s.device),
                s.value / cores,
            ),
            "rss_bytes" => (
                1,
                format!("{}: resident memory", s.device),
                s.value / 1048576.0,
            ),
            "mem_used_bytes" => (1, format!("{}: memory used", s.device), s.value / 1048576.0),
            "used_bytes" => (1, format!("{}: memory", s.device), s.value / 1048576.0),
            "util_gpu_pct" => (2, format!("{}: utilization", s.device), s.value),
            "sm_pct" => (2, format!("{}: SM share", s.device), s.value),
            _ => continue,
        };
        by[chart].entry(name).or_default().push((s.t_s, v));
    }
    by.map(|m| {
        m.into_iter()
            .map(|(name, points)| Line { name, points })
            .collect()
    })
}

fn figure(
    id: &'static str,
    y_desc: &str,
    y_max: Option<f64>,
    lines: &[Line],
    caption: &str,
) -> String {
    format!(
        "<figure class=\"chart\" id=\"{id}\">{}<figcaption>{}</figcaption></figure>",
        render(&LinesChart {
            id,
            x_desc: "time since the watch began (s)",
            y_desc,
            y_max,
            lines
        }),
        esc(caption)
    )
}

/// Other work on the machine while watching: the host's mean CPU use minus the watched
/// tree's share of all cores, said when it is a quarter of the machine or more (the
/// watched job then competed for the CPU, and its timings are not those of a quiet
/// machine).
pub fn foreign_load(r: &WatchReport) -> Option<String> {
    let (host, tree, other) = cpu_load(r)?;
    (other >= super::dominant::FOREIGN_PCT).then(|| {
        format!(
            "Other processes used {other:.0}% of the machine's CPU while watching (host {host:.0}%, watched processes {tree:.0}%): the watched job competed for the CPU."
        )
    })
}

/// The machine's mean CPU use while watching, the watched tree's share of all cores, and
/// the rest (other processes), in % of the machine; None without host samples.
pub fn cpu_load(r: &WatchReport) -> Option<(f64, f64, f64)> {
    let mean = |device: &dyn Fn(&str) -> bool, metric: &str| {
        let v: Vec<f64> = r
            .timeline
            .iter()
            .filter(|s| s.metric == metric && device(&s.device))
            .map(|s| s.value)
            .collect();
        (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
    };
    let host = mean(&|d| d == "host", "cpu_util_pct")?;
    let cores = r.environment.cores.max(1) as f64;
    let tree = mean(&|d| d.starts_with("proc "), "cpu_pct").unwrap_or(0.0) / cores;
    Some((host, tree, (host - tree).max(0.0)))
}

fn what(r: &WatchReport) -> String {
    match &r.target.command {
        Some(c) => format!("<code>{}</code>", esc(&c.join(" "))),
        None => format!("pid {}", r.target.pid),
    }
}

pub fn render_html(r: &WatchReport) -> String {
    let mut b = String::new();
    let _ = write!(
        b,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>tune watch: {}</title><style>{STYLE}</style></head><body><main>",
        esc(&r.target.command.as_ref().map_or_else(|| format!("pid {}", r.target.pid), |c| c.join(" ")))
    );
    let _ = write!(b, "<h1>tune watch: {}</h1>", what(r));
    let e = &r.environment;
    let _ = write!(
        b,
        "<p class=\"headline\" id=\"headline\">Watched for {:.1} s, sampled every {:.0} ms ({} samples); the process {}. {} finding{}.</p>",
        r.duration_s,
        r.sampling.interval_ms,
        r.sampling.samples,
        esc(&r.target.ended),
        r.findings.len(),
        if r.findings.len() == 1 { "" } else { "s" }
    );
    if let Some(line) = foreign_load(r) {
        let _ = write!(
            b,
            "<p class=\"finding\" id=\"foreign-load\">{}</p>",
            esc(&line)
        );
    }
    b.push_str("<h2>Findings</h2><section id=\"findings\">");
    if r.findings.is_empty() {
        b.push_str(
            "<p>None: no imbalance, starvation, throttling or GPU sharing in the samples.</p>",
        );
    }
    for f in &r.findings {
        let _ = write!(
            b,
            "<div class=\"finding\"><b>{}</b> <span class=\"muted\">({})</span><br>{}<br>{}</div>",
            esc(&f.finding.title),
            esc(&f.device),
            esc(&f.finding.evidence),
            esc(&f.hint)
        );
    }
    b.push_str("</section>");
    b.push_str(&super::timeline::section(r));
    let [cpu, mem, gpu] = series(r);
    b.push_str("<h2>Timeline</h2>");
    b.push_str(&figure(
        CHARTS[0],
        "CPU (% of all cores)",
        Some(100.0),
        &cpu,
        &format!(
            "CPU use as a share of the machine's {} cores: the watched process tree, and everything running on the host (other work competes with it).",
            e.cores
        ),
    ));
    b.push_str(&figure(
        CHARTS[1],
        "memory (MiB)",
        None,
        &mem,
        "Resident memory of the watched process tree, and memory used on each GPU where NVML reports it.",
    ));
    b.push_str(&figure(
        CHARTS[2],
        "GPU utilization (%)",
        Some(100.0),
        &gpu,
        "GPU utilization, and each process's SM share where NVML gives it.",
    ));
    // The table's units are the charts': CPU as a share of all cores, memory in MiB.
    b.push_str(
        "<h2>Devices</h2><table id=\"devices\"><tr><th>device</th><th>samples</th>\
         <th>utilisation mean / max (%; CPU of all cores, as in the chart)</th><th>memory peak (MiB)</th></tr>",
    );
    let cores = e.cores.max(1) as f64;
    for d in &r.devices {
        let util = d.metrics.get(d.id.util_metric());
        let per = if d.id.source == tune_probes::Source::Tree {
            cores
        } else {
            1.0
        };
        let mem = d.id.mem_metric().and_then(|m| d.metrics.get(m));
        let count = d.metrics.values().map(|m| m.count).max().unwrap_or(0);
        let _ = write!(
            b,
            "<tr><td>{}</td><td class=\"n\">{count}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            esc(&d.device),
            util.map_or("–".into(), |u| format!("{:.0}% / {:.0}%", u.mean / per, u.max / per)),
            mem.map_or("–".into(), |m| format!("{:.0}", m.max / 1048576.0)),
        );
    }
    b.push_str("</table>");
    if !r.notes.is_empty() {
        b.push_str("<h2>Notes</h2><ul id=\"notes\">");
        for n in &r.notes {
            let _ = write!(b, "<li>{}</li>", esc(n));
        }
        b.push_str("</ul>");
    }
    let s = &r.sampling;
    let _ = write!(
        b,
        "<h2>Environment</h2><p id=\"environment\">{} on {} ({} cores), {}, tune {}. \
         Sampling: {} ticks, {}; {} late, {} dropped.</p></main></body></html>",
        esc(&e.host),
        esc(&e.cpu_model),
        e.cores,
        esc(&e.os),
        esc(&e.tune_version),
        s.ticks,
        match s.thread_cpu_pct_of_core {
            Some(p) => format!("{p:.2}% of one core"),
            None => "cost unknown".into(),
        },
        s.late_ticks,
        s.dropped
    );
    b
}
