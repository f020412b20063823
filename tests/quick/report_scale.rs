//! Issue #27, the faces at scale: a report of thousands of configurations renders with
//! charts a person can read (at most 50 configurations each, and a sentence saying so)
//! while the trials table and summary.md keep every one. What is asserted is the size
//! of what is drawn, not time: the time a chart takes follows from it, and label
//! placement's own cost is held by a unit test that counts its comparisons
//! (`report::chart_key`). The timings are benchmarks in docs/performance.md ("Scale of
//! the faces").

use crate::cli;

use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};

/// Configurations in the test's report: far more than a chart draws, few enough to
/// render in about a second.
const N: usize = 3000;
/// Most configurations a chart draws (`report::shown::CHART_MAX`).
const CHART_MAX: usize = 50;
/// Only a hang reaches it.
const DEADLINE: Duration = Duration::from_secs(300);

/// reports/ci-baseline/report.json grown to `n` configurations with distinct ids,
/// labels, throughputs and memory, laid end to end on the timeline.
fn big_report(n: usize) -> Value {
    let text = std::fs::read_to_string("reports/ci-baseline/report.json").unwrap();
    let mut r: Value = serde_json::from_str(&text).unwrap();
    let proto = r["trials"][0].clone();
    let mut trials = Vec::with_capacity(n);
    let mut spans = Vec::with_capacity(n);
    for i in 0..n {
        let mut t = proto.clone();
        let rate = 900.0 + (i * 7919 % 2000) as f64 / 10.0;
        let (id, label) = if i == 0 {
            (
                proto["id"].as_str().unwrap().to_string(),
                "baseline".to_string(),
            )
        } else {
            (format!("t{i}#{i:08x}"), format!("config number {i}"))
        };
        t["id"] = json!(id);
        t["label"] = json!(label);
        t["samples_per_s"] = json!({"median": rate, "lo": rate * 0.98, "hi": rate * 1.02});
        t["peak_total_bytes"] = json!(20_000_000 + (i * 104_729 % 5_000_000));
        t["ratio_vs_baseline"] = json!({"ratio": rate / 1000.0, "lo": rate / 1020.0,
            "hi": rate / 980.0, "significant": false});
        spans.push(json!({"id": id, "label": label, "start_s": i as f64, "end_s": i as f64 + 1.0}));
        trials.push(t);
    }
    r["trials"] = json!(trials);
    r["trial_spans"] = json!(spans);
    r["timeline"] = json!((0..2 * n)
        .map(
            |k| json!({"t_s": k as f64 / 2.0, "device": "host", "metric": "cpu_util_pct",
            "value": (k % 90) as f64})
        )
        .collect::<Vec<_>>());
    r
}

fn run(args: &[&std::ffi::OsStr]) -> std::process::Output {
    cli::output_within(cli::tune().args(args), DEADLINE)
}

/// The markup of the chart figure `id`.
fn figure<'a>(page: &'a str, id: &str) -> &'a str {
    let start = page
        .find(&format!("<figure class=\"chart\" id=\"{id}\">"))
        .unwrap_or_else(|| panic!("no figure {id}"));
    let len = page[start..].find("</figure>").unwrap();
    &page[start..start + len]
}

#[test]
fn a_report_of_thousands_of_configurations_draws_readable_charts_and_keeps_every_row() {
    let d = tempfile::tempdir().unwrap();
    let json = d.path().join("report.json");
    std::fs::write(&json, big_report(N).to_string()).unwrap();
    let (html, md) = (d.path().join("r.html"), d.path().join("r.md"));
    let o = run(&[
        "report".as_ref(),
        json.as_os_str(),
        "--html".as_ref(),
        html.as_os_str(),
        "--md".as_ref(),
        md.as_os_str(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let page = std::fs::read_to_string(&html).unwrap();
    let note = format!("This report has {N} configurations");
    assert!(
        page.contains(&note),
        "no sentence saying what the charts show"
    );
    // The throughput chart has one bar and one label per configuration it shows.
    let bars = figure(&page, "fig-throughput")
        .matches("config number ")
        .count();
    assert!(
        (1..CHART_MAX).contains(&bars),
        "{bars} configurations drawn in the throughput chart"
    );
    // No chart holds more than a bounded drawing. Every configuration drawn would be
    // megabytes in each: 0.8 KB per configuration in the throughput chart, 10 KB in the
    // loss chart (one dashed curve with markers each; 50 of them make 0.5 MB).
    for id in [
        "fig-throughput",
        "fig-phases",
        "fig-pareto",
        "fig-device-timeline",
        "fig-device-memory",
        "fig-loss",
    ] {
        let size = figure(&page, id).len();
        assert!(
            size < 1_000_000,
            "{id} is {size} bytes for {N} configurations"
        );
    }
    // Every configuration is in the trials table and in summary.md.
    let summary = std::fs::read_to_string(&md).unwrap();
    for i in [1, N / 2, N - 1] {
        let label = format!("config number {i}<");
        assert!(
            page.contains(&label),
            "{label} missing from the trials table"
        );
        assert!(
            summary.contains(&format!("| config number {i} |")),
            "config number {i} missing from summary.md"
        );
    }
}

#[test]
fn a_small_report_draws_every_configuration_without_a_note() {
    let d = tempfile::tempdir().unwrap();
    let json = d.path().join("report.json");
    std::fs::write(&json, big_report(12).to_string()).unwrap();
    let html = d.path().join("r.html");
    let o = run(&[
        "report".as_ref(),
        json.as_os_str(),
        "--html".as_ref(),
        html.as_os_str(),
        "--md".as_ref(),
        d.path().join("r.md").as_os_str(),
    ]);
    assert!(o.status.success());
    let page = std::fs::read_to_string(Path::new(&html)).unwrap();
    assert!(!page.contains("configurations, too many to draw"));
    assert_eq!(
        figure(&page, "fig-throughput")
            .matches("config number ")
            .count(),
        11
    );
}
