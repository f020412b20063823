//! `tune watch --tui`: the watched process tree and the devices panel of `tune dash`
//! (`crate::tui::widgets::devices`) on one screen, in the dashboard's terminal mode
//! (`crate::tui::terminal`).
//!
//! The watch loop (`session`) stays the owner of the target, the signals and the
//! timeline: it hands this view the samples the recorder thread put on the timeline and
//! the keys the input thread forwards, and the view says how many stop requests the keys
//! made. The draw reads only `WatchApp`'s memory.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossterm::event::{self as term, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Style, Stylize};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Cell, Clear, Paragraph, Row, Table, Widget, Wrap};

use super::procs::{self, GpuProcs, ProcTable, SortBy};
use tune_probes::host::metric as host;
use tune_probes::nvml::metric as gpu;
use tune_probes::{Sample, Source};

use crate::error::{Error, Result};
use crate::tui::input::{input_thread, FromInput};
use crate::tui::terminal;
use crate::tui::widgets::bytes;
use crate::tui::widgets::devices::{DeviceHistory, DeviceSeries, DevicesView};
use crate::tui::widgets::frame::{centered, popup, too_small};

/// Below this the tree and one device do not fit legibly.
pub const MIN_WIDTH: u16 = 50;
pub const MIN_HEIGHT: u16 = 12;

pub const KEYS: &str = "q stop · P cpu · M mem · > sort · / filter · ? help";

/// Redraw at least this often, for the elapsed time and the sparklines.
const FRAME: Duration = Duration::from_millis(250);

/// The latest reading of the watched tree; `None` until measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TreeNow {
    pub cpu_pct: Option<f64>,
    pub rss_bytes: Option<f64>,
    pub procs: Option<f64>,
}

/// What the watch view shows, updated as data and keys arrive.
#[derive(Clone, Debug, Default)]
pub struct WatchApp {
    /// The watched thing in words: "`cmd args` (pid N)" or "pid N".
    pub what: String,
    pub elapsed_s: f64,
    pub tree: TreeNow,
    pub members: Vec<u32>,
    history: DeviceHistory,
    devices: Vec<DeviceSeries>,
    /// Why some devices are missing (no NVML), shown in the devices panel.
    pub note: Option<String>,
    /// Where the started command's output goes while the view is up.
    pub log: Option<String>,
    /// A line replacing the keys in the footer (e.g. "waiting for the command").
    pub status: Option<String>,
    /// A Python job's steps so far as the hooks report them (`bridge::Progress`): the
    /// steps line and the recent phase shares; None for a job without hooks.
    pub training: Option<(String, Vec<(&'static str, f64)>)>,
    pub help: bool,
    /// The per-process table (htop-like), refreshed with the members.
    pub procs: ProcTable,
    /// NVML's latest per-process (memory bytes, SM %), by (pid, GPU).
    gpu_procs: GpuProcs,
}

/// What a key asks of the watch loop.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    None,
    Stop,
}

impl WatchApp {
    pub fn new(what: String, note: Option<String>, log: Option<String>) -> WatchApp {
        WatchApp {
            what,
            note,
            log,
            ..WatchApp::default()
        }
    }

    pub fn devices(&self) -> &[DeviceSeries] {
        &self.devices
    }

    pub fn push_samples(&mut self, samples: &[Sample]) {
        for s in samples {
            self.history.push_sample(s);
            if let (Source::GpuProcess, Some(pid), Some(dev)) = (s.source, s.pid, s.device) {
                let get = |m: &str| s.metrics.get(m).copied().filter(|v| v.is_finite());
                self.gpu_procs.insert(
                    (pid, dev),
                    (get(gpu::PROC_USED_BYTES), get(gpu::PROC_SM_PCT)),
                );
            }
            if s.source == Source::Tree {
                let get = |m: &str| s.metrics.get(m).copied().filter(|v| v.is_finite());
                self.tree = TreeNow {
                    cpu_pct: get(host::TREE_CPU_PCT),
                    rss_bytes: get(host::TREE_RSS_BYTES),
                    procs: get(host::TREE_PROCS),
                };
            }
        }
        if !samples.is_empty() {
            self.devices = self.history.devices();
        }
    }

    /// Reads the members' processes for the table.
    pub fn refresh_procs(&mut self) {
        self.procs
            .refresh(&self.members, &self.gpu_procs, Instant::now());
    }

    pub fn on_key(&mut self, key: KeyEvent) -> Action {
        if key.kind != KeyEventKind::Press {
            return Action::None;
        }
        if key.code == KeyCode::Char('c') && key.modifiers.contains(KeyModifiers::CONTROL) {
            return Action::Stop;
        }
        if !self.help && self.procs.on_key(key.code) == procs::Key::Taken {
            return Action::None;
        }
        match key.code {
            KeyCode::Char('q') | KeyCode::F(10) => Action::Stop,
            KeyCode::Char('?') => {
                self.help = !self.help;
                Action::None
            }
            KeyCode::Esc | KeyCode::Enter => {
                self.help = false;
                Action::None
            }
            _ => Action::None,
        }
    }
}

fn panel<'a>(title: impl Into<Line<'a>>) -> Block<'a> {
    Block::bordered()
        .border_style(Style::new().fg(Color::DarkGray))
        .title(title)
}

fn or_dash(v: Option<String>) -> String {
    v.unwrap_or_else(|| "–".into())
}

impl Widget for &WatchApp {
    fn render(self, area: Rect, buf: &mut Buffer) {
        if area.width < MIN_WIDTH || area.height < MIN_HEIGHT {
            too_small(area, buf, "tune watch --tui", MIN_WIDTH, MIN_HEIGHT);
            return;
        }
        let shown = self.procs.visible().len().max(1) as u16;
        let extra = u16::from(self.log.is_some()) + 2 * u16::from(self.training.is_some());
        let tree_rows = (3 + shown + extra).min((area.height - 4) / 2);
        let [header, tree, devices, footer] = Layout::vertical([
            Constraint::Length(1),
            Constraint::Length(tree_rows + 2),
            Constraint::Min(0),
            Constraint::Length(1),
        ])
        .areas(area);

        let head = Line::from(vec![
            Span::styled("tune watch", Style::new().bold().fg(Color::Cyan)),
            Span::raw(format!(" · {} · {:.1} s", self.what, self.elapsed_s)),
        ]);
        buf.set_line(header.x, header.y, &head, header.width);

        let t = &self.tree;
        let procs = t.procs.map(|n| format!("{n:.0}"));
        let mut lines = vec![Line::from(format!(
            "{} process(es) · cpu {} (100% = one core) · rss {}",
            or_dash(procs),
            or_dash(t.cpu_pct.map(|c| format!("{c:.0}%"))),
            or_dash(t.rss_bytes.map(|b| bytes(b.max(0.0) as u64))),
        ))];
        if let Some((steps, shares)) = &self.training {
            lines.push(Line::from(steps.clone()).bold());
            let shares: Vec<String> = shares
                .iter()
                .map(|(k, v)| format!("{k} {:.0}%", v * 100.0))
                .collect();
            lines.push(Line::from(format!(
                "  step phases: {}",
                or_dash((!shares.is_empty()).then(|| shares.join(" · ")))
            )));
        }
        if let Some(log) = &self.log {
            lines.push(Line::from(format!("output: {log}")).dim());
        }
        let block = panel(" Process tree ");
        let inner = block.inner(tree);
        block.render(tree, buf);
        let n = lines.len() as u16;
        let [top, table] =
            Layout::vertical([Constraint::Length(n), Constraint::Min(0)]).areas(inner);
        Paragraph::new(lines).render(top, buf);
        render_procs(&self.procs, table, buf);

        let block = panel(format!(" Devices ({}) ", self.devices.len()));
        let inner = block.inner(devices);
        block.render(devices, buf);
        if self.devices.is_empty() {
            let text = self
                .note
                .clone()
                .unwrap_or_else(|| "no device readings yet".into());
            Paragraph::new(text)
                .wrap(Wrap { trim: true })
                .dim()
                .render(inner, buf);
        } else {
            DevicesView {
                devices: &self.devices,
                note: self.note.as_deref(),
                scroll: 0,
            }
            .render(inner, buf);
        }

        let foot = match &self.status {
            Some(s) => Line::from(s.clone()).fg(Color::Yellow).bold(),
            None => Line::from(KEYS).dim(),
        };
        buf.set_line(footer.x, footer.y, &foot, footer.width);

        if self.help {
            render_help(centered(area, 80, 70), buf);
        }
    }
}

/// Width of the help's key column: the longest key.
const KEY_COL: usize = 8;

/// The per-process table: the sort column's header is marked and highlighted.
fn render_procs(t: &ProcTable, area: Rect, buf: &mut Buffer) {
    let dash = || "-".to_string();
    let mut cells: Vec<Cell> = SortBy::ALL
        .map(|c| {
            if c == t.sort {
                Cell::from(format!("{}▼", c.header())).style(Style::new().bold().reversed())
            } else {
                Cell::from(c.header()).style(Style::new().bold())
            }
        })
        .into();
    // Which GPU a row's GPU figures are for: a row per (process, GPU), as nvitop.
    cells.insert(2, Cell::from("GPU").style(Style::new().bold()));
    let header = Row::new(cells);
    let rows: Vec<Row> = t
        .visible()
        .into_iter()
        .map(|r| {
            Row::new([
                r.pid.to_string(),
                r.command.clone(),
                r.gpu.map_or_else(dash, |g| g.to_string()),
                r.cpu_pct.map_or_else(dash, |c| format!("{c:.0}")),
                r.rss_bytes.map_or_else(dash, bytes),
                r.gpu_mem_bytes
                    .map_or_else(dash, |b| bytes(b.max(0.0) as u64)),
                r.gpu_util_pct.map_or_else(dash, |u| format!("{u:.0}")),
            ])
        })
        .collect();
    let widths = [
        Constraint::Length(8),
        Constraint::Min(12),
        Constraint::Length(4),
        Constraint::Length(6),
        Constraint::Length(10),
        Constraint::Length(10),
        Constraint::Length(6),
    ];
    let [body, foot] = Layout::vertical([Constraint::Min(0), Constraint::Length(1)]).areas(area);
    Table::new(rows, widths).header(header).render(body, buf);
    if t.editing || !t.filter.is_empty() {
        let cursor = if t.editing { "_" } else { "" };
        let line =
            Line::from(format!("filter: {}{cursor} (esc clears)", t.filter)).fg(Color::Yellow);
        buf.set_line(foot.x, foot.y, &line, foot.width);
    }
}

fn render_help(area: Rect, buf: &mut Buffer) {
    Clear.render(area, buf);
    let key = |k: &str, what: &str| {
        Line::from(vec![
            // The key column is as wide as the longest key plus a gap, so a key of
            // exactly the old width ("q ctrl-c") no longer runs into its description.
            Span::styled(
                format!("  {k:<KEY_COL$}  "),
                Style::new().bold().fg(Color::Cyan),
            ),
            Span::raw(what.to_string()),
        ])
    };
    let lines = vec![
        Line::from("Keys".bold()),
        key(
            "q ctrl-c",
            "stop watching: a command tune started gets SIGINT (as Ctrl-C without \
             --tui) and the watch ends when it exits; press again to kill it. An \
             attached --pid process is left running",
        ),
        key("F10", "stop watching, as q"),
        key(
            "P / M",
            "sort the process table by CPU / by resident memory",
        ),
        key(
            "> F6",
            "sort by the next column (pid, command, CPU, RSS, GPU memory, GPU%)",
        ),
        key(
            "/",
            "filter the processes by command or pid; enter keeps it, esc clears it",
        ),
        key("?", "this help"),
        key("esc", "close this help"),
        Line::from(""),
        Line::from("GPU columns show \"-\" where NVML gives no per-process figures."),
        Line::from(
            "The report (report.json, report.html, summary.md) is written when the watch ends.",
        ),
    ];
    Paragraph::new(lines)
        .wrap(Wrap { trim: false })
        .block(popup(" Help "))
        .render(area, buf);
}

/// What the watch view's event loop takes in: only input (its data comes by the session).
enum Event {
    Input(term::Event),
    Fatal(String),
}

impl FromInput for Event {
    fn input(ev: term::Event) -> Self {
        Event::Input(ev)
    }

    fn fatal(why: String) -> Self {
        Event::Fatal(why)
    }
}

/// The view on the terminal: the terminal guard, the input thread and the app. Dropping
/// it stops the thread and then restores the terminal.
pub struct Screen {
    pub app: WatchApp,
    rx: Receiver<Event>,
    stop: Arc<AtomicBool>,
    input: Option<JoinHandle<()>>,
    guard: Option<terminal::Guard>,
    last_draw: Option<Instant>,
}

impl Screen {
    pub fn start(app: WatchApp) -> Result<Screen> {
        let guard = terminal::enter()?;
        let (tx, rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let input = std::thread::Builder::new()
            .name("watch-input".into())
            .spawn(move || input_thread(tx, &flag))
            .map_err(|e| Error::Runtime(format!("watch: cannot start the input thread: {e}")))?;
        Ok(Screen {
            app,
            rx,
            stop,
            input: Some(input),
            guard: Some(guard),
            last_draw: None,
        })
    }

    /// Applies the keys that arrived and returns how many asked to stop; an error when
    /// the terminal stopped giving input.
    pub fn take_keys(&mut self) -> std::result::Result<usize, String> {
        let mut stops = 0;
        while let Ok(ev) = self.rx.try_recv() {
            match ev {
                Event::Input(term::Event::Key(k)) => {
                    if self.app.on_key(k) == Action::Stop {
                        stops += 1;
                    }
                }
                // A resize or anything else: the next draw picks up the new size.
                Event::Input(_) => {}
                Event::Fatal(msg) => return Err(msg),
            }
            self.last_draw = None;
        }
        Ok(stops)
    }

    /// Draws when something changed or a frame is due.
    pub fn draw(&mut self, changed: bool) -> Result<()> {
        if !changed && self.last_draw.is_some_and(|t| t.elapsed() < FRAME) {
            return Ok(());
        }
        if let Some(g) = self.guard.as_mut() {
            let app = &self.app;
            g.terminal
                .draw(|f| f.render_widget(app, f.area()))
                .map_err(|e| Error::Runtime(format!("watch: cannot draw the view: {e}")))?;
        }
        self.last_draw = Some(Instant::now());
        Ok(())
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.input.take() {
            // The thread polls every 100 ms; a panic there was already reported.
            let _ = h.join();
        }
        drop(self.guard.take());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tui::widgets::buffer_text;
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;

    const GIB: f64 = 1073741824.0;

    fn frame(app: &WatchApp, w: u16, h: u16) -> String {
        let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
        t.draw(|f| f.render_widget(app, f.area())).unwrap();
        buffer_text(t.backend().buffer())
    }

    fn tree(t_ms: f64) -> Sample {
        let mut s = Sample::new(t_ms, Source::Tree).with_pid(42);
        s.set(host::TREE_CPU_PCT, 180.0);
        s.set(host::TREE_RSS_BYTES, 3.0 * 1048576.0);
        s.set(host::TREE_PROCS, 2.0);
        s
    }

    fn gpu(t_ms: f64, i: u32, util: f64, used_gib: f64) -> Sample {
        let mut s = Sample::new(t_ms, Source::Gpu).with_device(i);
        s.set("util_gpu_pct", util);
        s.set("mem_used_bytes", used_gib * GIB);
        s.set("mem_total_bytes", 80.0 * GIB);
        s.set("power_w", 300.0);
        s
    }

    fn app() -> WatchApp {
        let mut a = WatchApp::new("`sh -c sleep 3` (pid 42)".into(), None, None);
        a.elapsed_s = 1.5;
        a.members = vec![42, 43];
        a
    }

    /// A Python job's steps show as the hooks report them: before, the screen had the
    /// process tree and devices only, and a compiling first step or a warm-up was seen
    /// only in the report at the end.
    #[test]
    fn a_python_jobs_steps_and_warm_up_show_above_the_process_table() {
        let mut a = app();
        let mut e = crate::bridge::Events::default();
        e.push_line(r#"{"ev":"first_step","t":1,"dur":16.2,"compile":15.1}"#);
        for i in 1..=7 {
            e.push_line(&format!(
                r#"{{"ev":"step","step":{i},"t":{i},"dur":0.02,"batch":32,"data_wait":0.01,"forward":0.004,"backward":0.006}}"#
            ));
        }
        let p = e.progress();
        a.training = Some((p.line(true), p.shares()));
        let text = frame(&a, 110, 20);
        for needle in [
            "training: 7 steps, warming up · 20.0 ms/step · 1600.0 samples/s · first step \
             16.2 s (15.1 s compiling)",
            "step phases: data_wait 50% · backward 30% · forward 20%",
            "PID",
        ] {
            assert!(text.contains(needle), "{needle:?} missing:\n{text}");
        }
    }

    #[test]
    fn one_device_shows_the_tree_and_the_host() {
        let mut a = app();
        a.note = Some("no GPU: NVML unavailable".into());
        let mut samples = vec![tree(0.0)];
        for k in 0..5 {
            let mut h = Sample::new(f64::from(k) * 100.0, Source::Host);
            h.set(host::CPU_UTIL_PCT, 40.0 + f64::from(k));
            samples.push(h);
        }
        a.push_samples(&samples);
        let text = frame(&a, 80, 16);
        for needle in [
            "tune watch · `sh -c sleep 3` (pid 42) · 1.5 s",
            "Process tree",
            "2 process(es) · cpu 180% (100% = one core) · rss 3.0 MiB",
            "PID",
            "COMMAND",
            "CPU%▼",
            "Devices (1)",
            " cpu",
            "44%",
            "memory –",
            "no GPU: NVML unavailable",
            KEYS,
        ] {
            assert!(text.contains(needle), "missing {needle:?}:\n{text}");
        }
        assert!(!text.contains("imbalance"), "{text}");
    }

    #[test]
    fn four_gpus_with_one_heavy_get_the_imbalance_marker() {
        let mut a = app();
        let mut samples = Vec::new();
        for k in 0..10 {
            let t = f64::from(k) * 100.0;
            samples.push(gpu(t, 0, 95.0, 60.0));
            for i in 1..4 {
                samples.push(gpu(t, i, 60.0, 30.0));
            }
        }
        a.push_samples(&samples);
        assert_eq!(a.devices().len(), 4);
        let text = frame(&a, 90, 20);
        assert!(text.contains("Devices (4)"), "{text}");
        assert!(
            text.contains("imbalance: gpu0 memory 2.0x the others' mean"),
            "{text}"
        );
        assert!(text.contains("▲gpu0"), "{text}");
        for name in ["gpu1", "gpu2", "gpu3"] {
            assert!(text.contains(&format!(" {name}")), "{text}");
        }
        assert!(text.contains("60.0/80.0 GiB"), "{text}");
        // Unmeasured tree figures show as absent, not zero.
        assert!(text.contains("– process(es) · cpu –"), "{text}");
    }

    #[test]
    fn the_process_table_sorts_with_htop_keys_and_shows_dashes_for_absent_gpu_figures() {
        use crate::watch::procs::ProcRow;
        let mut a = app();
        a.push_samples(&[tree(0.0), {
            let mut s = Sample::new(0.0, Source::GpuProcess)
                .with_device(0)
                .with_pid(43);
            s.set("used_bytes", 2.0 * GIB);
            s.set("sm_pct", 77.0);
            s
        }]);
        assert_eq!(
            a.gpu_procs.get(&(43, 0)),
            Some(&(Some(2.0 * GIB), Some(77.0)))
        );
        a.procs.rows = vec![
            ProcRow {
                pid: 42,
                command: "python train.py".into(),
                cpu_pct: Some(95.0),
                rss_bytes: Some(100 * 1048576),
                ..ProcRow::default()
            },
            ProcRow {
                pid: 43,
                command: "python worker".into(),
                cpu_pct: Some(3.0),
                rss_bytes: Some(900 * 1048576),
                gpu: Some(0),
                gpu_mem_bytes: Some(2.0 * GIB),
                gpu_util_pct: Some(77.0),
            },
        ];
        let text = frame(&a, 100, 24);
        let line = |pid: &str| {
            text.lines()
                .find(|l| l.contains(&format!("│{pid}")) || l.contains(&format!(" {pid} ")))
                .unwrap_or_else(|| panic!("no row {pid}:\n{text}"))
                .to_string()
        };
        assert!(
            line("42").contains("python train.py") && line("42").contains("95"),
            "{text}"
        );
        // No NVML figure for 42: a dash, not zero; 43 has both.
        assert!(
            line("42").trim_end_matches('│').trim_end().ends_with('-'),
            "{text}"
        );
        assert!(
            line("43").contains("2.0 GiB") && line("43").contains("77"),
            "{text}"
        );
        let order = |t: &str| t.find("python train.py").unwrap() < t.find("python worker").unwrap();
        assert!(order(&text), "CPU order:\n{text}");
        let press = |c| KeyEvent::new(c, KeyModifiers::NONE);
        assert_eq!(a.on_key(press(KeyCode::Char('M'))), Action::None);
        let text = frame(&a, 100, 24);
        assert!(
            !order(&text) && text.contains("RSS▼"),
            "memory order:\n{text}"
        );
        a.on_key(press(KeyCode::Char('/')));
        assert_eq!(
            a.on_key(press(KeyCode::Char('q'))),
            Action::None,
            "q is text in the filter"
        );
        a.on_key(press(KeyCode::Backspace));
        for c in "train".chars() {
            a.on_key(press(KeyCode::Char(c)));
        }
        a.on_key(press(KeyCode::Enter));
        let text = frame(&a, 100, 24);
        assert!(
            text.contains("python train.py") && !text.contains("python worker"),
            "{text}"
        );
        assert!(text.contains("filter: train"), "{text}");
        assert_eq!(a.on_key(press(KeyCode::F(10))), Action::Stop);
    }

    #[test]
    fn keys_help_and_small_terminal() {
        let mut a = app();
        let press = |c| KeyEvent::new(c, KeyModifiers::NONE);
        assert_eq!(a.on_key(press(KeyCode::Char('?'))), Action::None);
        assert!(a.help);
        let help = frame(&a, 80, 16);
        assert!(help.contains("press again to kill it"), "{help}");
        // The key and its description are apart (it read "q ctrl-cstop watching").
        assert!(help.contains("q ctrl-c  stop watching"), "{help}");
        assert_eq!(a.on_key(press(KeyCode::Esc)), Action::None);
        assert!(!frame(&a, 80, 16).contains("press again to kill it"));
        assert_eq!(a.on_key(press(KeyCode::Char('q'))), Action::Stop);
        let ctrl_c = KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL);
        assert_eq!(a.on_key(ctrl_c), Action::Stop);
        assert_eq!(a.on_key(press(KeyCode::Char('c'))), Action::None);

        a.status = Some("waiting for the command to exit".into());
        let text = frame(&a, 80, 16);
        assert!(
            text.contains("waiting for the command") && !text.contains(KEYS),
            "{text}"
        );
        let text = frame(&a, 40, 10);
        assert!(text.contains("terminal too small"), "{text}");
        // The message wraps at this width.
        assert!(
            text.contains("40x10 here; tune watch --tui needs at") && text.contains("least 50x12"),
            "{text}"
        );
    }
}
