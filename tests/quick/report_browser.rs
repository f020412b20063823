//! report.html in a real browser: headless Chromium (Debian's `chromium` package) loads
//! a generated report, takes a screenshot and dumps the DOM. The page must render every
//! chart, log no console errors (the page's Content-Security-Policy turns any script or
//! external request into one), and show hostile names as text.
//!
//! Skips with a printed reason when chromium is not installed; fails instead under
//! `TUNE_REQUIRE_BROWSER=1` (set by .ci/run, which installs it).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tune::report::html::CHARTS;

const REQUIRE: &str = "TUNE_REQUIRE_BROWSER";
const LIMIT: Duration = Duration::from_secs(120);

fn chromium() -> Option<PathBuf> {
    let found = ["chromium", "chromium-browser"].iter().find_map(|name| {
        std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join(name))
                .find(|p| p.is_file())
        })
    });
    if found.is_none() {
        let why = "chromium is not installed (apt-get install -y chromium)";
        if std::env::var(REQUIRE).is_ok_and(|v| v == "1") {
            panic!("{REQUIRE}=1 but {why}");
        }
        eprintln!("skipped: {why}");
    }
    found
}

struct Run {
    stdout: String,
    stderr: String,
}

/// Runs headless chromium on `page` with `extra` flags, killing it past `LIMIT`.
fn run(browser: &Path, page: &Path, profile: &Path, extra: &[String]) -> Run {
    let mut child = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--hide-scrollbars",
            "--enable-logging=stderr",
            "--v=0",
            "--window-size=1200,2600",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(extra)
        .arg(format!("file://{}", page.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start chromium");
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let o = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let e = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if start.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("chromium did not finish within {LIMIT:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Run {
        stdout: o.join().unwrap(),
        stderr: e.join().unwrap(),
    }
}

/// Console messages. Chromium logs every one, errors and CSP violations included, as
/// `INFO:CONSOLE(...)`; the report has no scripts, so any message means something tried
/// to run or load.
fn console_errors(stderr: &str) -> Vec<&str> {
    stderr
        .lines()
        .filter(|l| {
            l.contains("CONSOLE") || l.contains("Uncaught") || l.contains("Content Security Policy")
        })
        .collect()
}

#[test]
fn console_check_catches_blocked_scripts() {
    let Some(browser) = chromium() else { return };
    let d = tempfile::tempdir().unwrap();
    let page = d.path().join("bad.html");
    std::fs::write(
        &page,
        "<!DOCTYPE html><html><head><meta http-equiv=\"Content-Security-Policy\" \
         content=\"default-src 'none'\"></head><body><main><script>document.title='x'</script>\
         </main></body></html>",
    )
    .unwrap();
    let r = run(&browser, &page, &d.path().join("p"), &["--dump-dom".into()]);
    assert!(!console_errors(&r.stderr).is_empty(), "{}", r.stderr);
}

/// Dumps the DOM and takes a screenshot; checks both and returns the DOM.
fn render(browser: &Path, page: &Path, dir: &Path) -> String {
    let dom = run(
        browser,
        page,
        &dir.join("profile-dom"),
        &["--dump-dom".into()],
    );
    let errors = console_errors(&dom.stderr);
    assert!(errors.is_empty(), "console errors: {errors:#?}");
    assert!(
        dom.stdout.contains("</main>"),
        "no rendered DOM; stderr:\n{}",
        dom.stderr
    );

    let png = dir.join("shot.png");
    let shot = run(
        browser,
        page,
        &dir.join("profile-shot"),
        &[format!("--screenshot={}", png.display())],
    );
    let errors = console_errors(&shot.stderr);
    assert!(errors.is_empty(), "console errors: {errors:#?}");
    let file = std::fs::File::open(&png)
        .unwrap_or_else(|e| panic!("no screenshot ({e}); stderr:\n{}", shot.stderr));
    let mut reader = png::Decoder::new(std::io::BufReader::new(file))
        .read_info()
        .unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!((info.width, info.height), (1200, 2600));
    // A blank page is one colour; a rendered report has text, bars and lines.
    let px = info.color_type.samples();
    let mut colours: Vec<&[u8]> = buf[..info.buffer_size()].chunks(px).collect();
    colours.sort_unstable();
    colours.dedup();
    assert!(
        colours.len() > 50,
        "screenshot looks blank: {} colours",
        colours.len()
    );
    dom.stdout
}

/// The markup between a figure's opening tag and its end.
fn figure<'a>(dom: &'a str, id: &str) -> &'a str {
    let start = dom
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("figure {id} missing"));
    let end = dom[start..].find("</figure>").unwrap() + start;
    &dom[start..end]
}

fn write_spec(dir: &Path) -> PathBuf {
    let p = dir.join("spec.toml");
    std::fs::write(
        &p,
        "name = \"browser\"\n[workload]\nmodel = \"mlp\"\ndataset = \"synthetic\"\nbatch_size = 16\n\
         steps = 8\nwarmup = 1\ndevice = \"cpu\"\nthreads = 1\n\n[knobs]\n\
         zero_grad = [\"memset\", \"none\"]\nbatch_size = [16, 32]\n\n[search]\nrepeats = 2\ntimeout_s = 60\n",
    )
    .unwrap();
    p
}

/// One tiny real sweep, shared by the tests here.
fn swept() -> &'static Path {
    static OUT: OnceLock<PathBuf> = OnceLock::new();
    OUT.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("report_browser");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        sweep(&dir)
    })
}

fn sweep(dir: &Path) -> PathBuf {
    let out = dir.join("out");
    let o = Command::new(env!("CARGO_BIN_EXE_tune"))
        .arg("sweep")
        .arg(write_spec(dir))
        .arg("--out")
        .arg(&out)
        .env("TUNE_SAMPLE_MS", "50")
        .env_remove("TUNE_TRIAL_FAULT")
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

#[test]
fn sweep_report_renders_every_chart_without_console_errors() {
    let Some(browser) = chromium() else { return };
    let d = tempfile::tempdir().unwrap();
    let dom = render(&browser, &swept().join("report.html"), d.path());
    for id in CHARTS {
        let fig = figure(&dom, id);
        assert!(
            fig.contains("<svg") && fig.contains("data-chart="),
            "figure {id} has no chart: {fig}"
        );
        // Something is drawn: bars, lines or points.
        assert!(
            fig.contains("<rect") || fig.contains("<polyline") || fig.contains("<circle"),
            "figure {id} is empty"
        );
    }
    assert!(dom.contains("id=\"environment\""));
}

#[test]
fn hostile_names_render_as_text() {
    let Some(browser) = chromium() else { return };
    let d = tempfile::tempdir().unwrap();
    let out = swept();
    // Names from a hand-edited report.json: the spec parser refuses such names.
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    let evil = "<script>document.title='pwned'</script>\"q\" 'a' <img src=x onerror=alert(1)>";
    v["spec"]["name"] = evil.into();
    for t in v["trials"].as_array_mut().unwrap() {
        let l = t["label"].as_str().unwrap().to_string();
        t["label"] = format!("{l} {evil}").into();
    }
    v["recommendations"] = serde_json::json!([{
        "rule": "data_wait", "kind": "change", "title": evil, "evidence": evil,
        "expected_gain": null, "confidence": "low", "tune_flag": evil, "pytorch": evil, "change": {}
    }]);
    let json = d.path().join("evil.json");
    std::fs::write(&json, v.to_string()).unwrap();
    let page = d.path().join("evil.html");
    let o = Command::new(env!("CARGO_BIN_EXE_tune"))
        .arg("report")
        .arg(&json)
        .arg("--html")
        .arg(&page)
        .arg("--md")
        .arg(d.path().join("evil.md"))
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let dom = render(&browser, &page, d.path());
    // No element was made from the names: the DOM has no script or img at all.
    assert!(!dom.contains("<script"), "a script element was created");
    assert!(!dom.contains("<img"), "an img element was created");
    assert!(!dom.contains("pwned</title>"));
    // They show as text, in HTML and in the charts' SVG text.
    let shown = "&lt;script&gt;document.title='pwned'&lt;/script&gt;\"q\" 'a' &lt;img src=x onerror=alert(1)&gt;";
    assert!(dom.contains(shown), "names not shown as text");
    assert!(
        figure(&dom, "fig-throughput").contains("&lt;script&gt;"),
        "chart labels not shown as text"
    );
}
