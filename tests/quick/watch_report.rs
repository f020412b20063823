//! A watch's report is no dead end: real `tune watch` runs write report.html (timeline
//! charts, findings), `tune report` re-renders it, `tune compare` says what changed
//! between two watches (and between two sweeps), `tune gate` refuses a watch with its
//! reason, and the page loads in headless Chromium without console errors. Also a
//! command sweep over user `[params]`, with the process tree's peak memory in the report.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

fn tune() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tune"));
    c.env_remove("TUNE_TRIAL_FAULT");
    c
}

fn show(o: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status.code(),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A python3 program that holds `mib` MiB and burns CPU for `secs` seconds.
fn load(mib: u32, secs: f64) -> String {
    format!(
        "import time\nb=bytearray({mib}*1048576)\nfor i in range(0,len(b),4096): b[i]=1\n\
         t=time.time()\nwhile time.time()-t<{secs}: sum(range(20000))\n"
    )
}

fn watch(out: &Path, program: &str, extra: &[&str]) -> Value {
    let o = tune()
        .args(["watch", "--interval", "50", "--out"])
        .arg(out)
        .arg("--")
        .args(["python3", "-c", program])
        .args(extra)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap()
}

fn html_has_charts(html: &str) {
    for id in ["watch-cpu", "watch-memory"] {
        let at = html
            .find(&format!("id=\"{id}\""))
            .unwrap_or_else(|| panic!("no figure {id}"));
        let fig = &html[at..at + html[at..].find("</figure>").unwrap()];
        assert!(
            fig.contains("data-chart=") && fig.contains("<polyline"),
            "figure {id} has no drawn line: {fig}"
        );
    }
    assert!(html.contains("id=\"findings\""), "no findings section");
}

#[test]
fn watches_render_rerender_compare_and_are_refused_by_the_gate() {
    let d = tempfile::tempdir().unwrap();
    let (big, small) = (d.path().join("big"), d.path().join("small"));
    // Long enough that the medians are taken well after start-up on a loaded machine.
    watch(&big, &load(300, 3.0), &[]);
    watch(&small, &load(10, 3.0), &[]);
    html_has_charts(&std::fs::read_to_string(big.join("report.html")).unwrap());

    // `tune report` on the folder and on the file: no "missing field `spec`".
    std::fs::remove_file(big.join("report.html")).unwrap();
    let o = tune().arg("report").arg(&big).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    html_has_charts(&std::fs::read_to_string(big.join("report.html")).unwrap());
    let other = d.path().join("again.html");
    let o = tune()
        .arg("report")
        .arg(big.join("report.json"))
        .arg("--html")
        .arg(&other)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    assert!(other.is_file());

    // The gate judges sweeps; a watch is refused as input, naming what to use instead.
    let o = tune()
        .args(["gate", "--baseline"])
        .arg(&big)
        .arg("--current")
        .arg(&small)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", show(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("is a tune watch report") && err.contains("tune compare"),
        "{err}"
    );

    // Compare: the 300 MiB job against the 10 MiB one.
    let o = tune()
        .arg("compare")
        .arg(&big)
        .arg(&small)
        .arg("--json")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let rows: Vec<Value> = serde_json::from_slice(&o.stdout).unwrap();
    let rss = rows
        .iter()
        .find(|r| r["subject"] == "watched processes" && r["metric"] == "resident MiB")
        .unwrap_or_else(|| panic!("no resident memory row: {rows:#?}"));
    let (before, after) = (
        rss["before"].as_f64().unwrap(),
        rss["after"].as_f64().unwrap(),
    );
    assert!(before > 150.0 && after < 80.0, "{rss}");
    assert_eq!(rss["significant"], true, "{rss}");
    assert!(rss["ratio"].as_f64().unwrap() < 0.5, "{rss}");
    // A watch compared with itself: nothing changed.
    let o = tune()
        .arg("compare")
        .arg(&big)
        .arg(&big)
        .arg("--json")
        .output()
        .unwrap();
    let rows: Vec<Value> = serde_json::from_slice(&o.stdout).unwrap();
    assert!(rows.iter().all(|r| r["significant"] != true), "{rows:#?}");
    let table = tune()
        .arg("compare")
        .arg(&big)
        .arg(&small)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&table.stdout);
    assert!(
        text.contains("resident MiB") && text.contains("lower"),
        "{text}"
    );
}

fn sweep_spec(dir: &Path) -> PathBuf {
    let p = dir.join("params.toml");
    std::fs::write(
        &p,
        "name = \"params\"\n[workload.command]\n\
         run = \"python3 -c 'b=bytearray({mib}*1048576)\\nfor i in range(0,len(b),4096): b[i]=1\\nimport time\\nfor _ in range(5): print(\\\"samples/s: {rate}\\\", flush=True); time.sleep(0.05)'\"\n\
         metric_regex = 'samples/s: ([0-9.]+)'\n[params]\nmib = [20, 200]\nrate = 100\n\
         [search]\ntimeout_s = 60\n",
    )
    .unwrap();
    p
}

#[test]
fn a_command_sweep_over_params_shows_them_and_the_trees_peak_memory() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("out");
    let o = tune()
        .arg("sweep")
        .arg(sweep_spec(d.path()))
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    let trials = r["trials"].as_array().unwrap();
    let labels: Vec<&str> = trials
        .iter()
        .map(|t| t["label"].as_str().unwrap())
        .collect();
    assert_eq!(labels, ["baseline", "mib=200"], "{}", show(&o));
    let peak = |t: &Value| t["peak_total_bytes"].as_f64().unwrap_or(0.0) / 1048576.0;
    assert!(peak(&trials[0]) >= 20.0, "{}", trials[0]);
    assert!(peak(&trials[1]) >= 200.0, "{}", trials[1]);
    let md = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(md.contains("mib=200"), "{md}");

    // Compare a sweep with itself: every configuration matched, nothing significant.
    let o = tune()
        .arg("compare")
        .arg(&out)
        .arg(&out)
        .arg("--json")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    let rows: Vec<Value> = serde_json::from_slice(&o.stdout).unwrap();
    let thr: Vec<&Value> = rows.iter().filter(|r| r["metric"] == "samples/s").collect();
    assert_eq!(thr.len(), 2, "{rows:#?}");
    assert!(
        thr.iter()
            .all(|r| r["significant"] == false && r["ratio"] == 1.0),
        "{rows:#?}"
    );

    // A sweep and a watch are not comparable: bad input, exit 2.
    let w = d.path().join("w");
    watch(&w, &load(5, 0.3), &[]);
    let o = tune().arg("compare").arg(&out).arg(&w).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", show(&o));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("a sweep report and"),
        "{}",
        show(&o)
    );
}

fn chromium() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .flat_map(|d| [d.join("chromium"), d.join("chromium-browser")])
            .find(|p| p.is_file())
    });
    if found.is_none() {
        let why = "chromium is not installed (apt-get install -y chromium)";
        if std::env::var("TUNE_REQUIRE_BROWSER").is_ok_and(|v| v == "1") {
            panic!("TUNE_REQUIRE_BROWSER=1 but {why}");
        }
        eprintln!("skipped: {why}");
    }
    found
}

/// Headless Chromium on `page`: stdout and stderr, killed past two minutes.
fn chrome(browser: &Path, page: &Path, profile: &Path, extra: &str) -> (String, String) {
    let mut child = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--no-first-run",
            "--hide-scrollbars",
            "--enable-logging=stderr",
            "--v=0",
            "--window-size=1200,2000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(extra)
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(profile.with_extension("out")).unwrap())
        .stderr(std::fs::File::create(profile.with_extension("err")).unwrap())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish in 120 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    (
        std::fs::read_to_string(profile.with_extension("out")).unwrap(),
        std::fs::read_to_string(profile.with_extension("err")).unwrap(),
    )
}

#[test]
fn a_watch_page_renders_in_chromium_with_hostile_text_as_text() {
    let Some(browser) = chromium() else { return };
    let d = tempfile::tempdir().unwrap();
    let w = d.path().join("w");
    let evil = "<script>document.title='pwned'</script><img src=x onerror=alert(1)>";
    watch(&w, &load(50, 1.0), &[evil]);
    let page = w.join("report.html");
    let (dom, err) = chrome(&browser, &page, &d.path().join("p1"), "--dump-dom");
    let console: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("CONSOLE") || l.contains("Content Security Policy"))
        .collect();
    assert!(console.is_empty(), "console errors: {console:#?}");
    html_has_charts(&dom);
    assert!(!dom.contains("<script>") && !dom.contains("<img"), "{dom}");
    assert!(
        dom.contains("&lt;script&gt;"),
        "the command is not shown as text"
    );
    assert!(!dom.contains("pwned</title>"));

    let png = d.path().join("shot.png");
    let (_, err) = chrome(
        &browser,
        &page,
        &d.path().join("p2"),
        &format!("--screenshot={}", png.display()),
    );
    let file = std::fs::File::open(&png).unwrap_or_else(|e| panic!("no screenshot ({e}): {err}"));
    let mut reader = png::Decoder::new(std::io::BufReader::new(file))
        .read_info()
        .unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    let px = info.color_type.samples();
    let mut colours: Vec<&[u8]> = buf[..info.buffer_size()].chunks(px).collect();
    colours.sort_unstable();
    colours.dedup();
    assert!(
        colours.len() > 50,
        "screenshot looks blank: {} colours",
        colours.len()
    );
}
