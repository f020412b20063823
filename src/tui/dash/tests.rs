//! Rendering tests: the dashboard drawn on a `TestBackend` and read back as text, the
//! way a person reads the screen; and what the keys do.

use std::sync::Arc;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::backend::TestBackend;
use ratatui::Terminal;

use super::app::{App, Mode, Overlay, Panel, SortKey, SweepState};
use super::bench::{synthetic_app, synthetic_devices, synthetic_live, synthetic_report};
use crate::results::record::Status;
use crate::spec::Spec;
use crate::tui::widgets::buffer_text;

fn screen(app: &App, w: u16, h: u16) -> String {
    let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
    t.draw(|f| f.render_widget(app, f.area())).unwrap();
    buffer_text(t.backend().buffer())
}

fn key(app: &mut App, code: KeyCode) {
    app.on_key(KeyEvent::from(code));
}

/// Row of the first line containing `needle`.
fn row_of(text: &str, needle: &str) -> Option<usize> {
    text.lines().position(|l| l.contains(needle))
}

fn app_with(trials: usize, fail_every: usize, devices: usize) -> App {
    let report = synthetic_report(trials, fail_every).unwrap();
    let mut app = App::new("", "reports/synthetic", SweepState::Detached);
    app.devices = synthetic_devices(devices);
    app.set_report(Arc::new(report), Mode::Finished, trials, Some(trials));
    app
}

#[test]
fn a_frame_has_every_panel_and_the_keys() {
    let app = synthetic_app(12, 4).unwrap();
    let s = screen(&app, 120, 40);
    for needle in [
        " tune dash  synthetic · reports/synthetic · live: following the journal · 12/14 trial runs done",
        "Devices (4)",
        "Current trial",
        "Results (12) · sorted by plan order",
        "Recommendations (3)",
        "q quit · tab panel · ↑↓/j/k move · s sort · enter details · ? help",
    ] {
        assert!(s.contains(needle), "missing {needle:?} in\n{s}");
    }
    // Panels are stacked: devices and the current trial on top, then results, then
    // recommendations, then the footer.
    let order = [
        "Devices (4)",
        "Results (12)",
        "Recommendations (3)",
        "q quit",
    ]
    .map(|n| row_of(&s, n).unwrap());
    assert!(order.windows(2).all(|w| w[0] < w[1]), "{order:?}\n{s}");
}

#[test]
fn current_trial_panel_shows_knobs_progress_phases_and_throughput() {
    let app = synthetic_app(10, 4).unwrap();
    let s = screen(&app, 120, 40);
    assert!(
        s.contains("num_workers=2 batch_size=64  trial 11/12 · repeat 1/2 · 13 s"),
        "{s}"
    );
    assert!(s.contains("step    30/55"), "{s}");
    assert!(s.contains("55%"), "{s}");
    assert!(
        s.contains("640.5 samples/s · 50.0 ms/step · loss 1.234 · peak 40.0 MiB"),
        "{s}"
    );
    for (phase, share) in [
        ("data_wait", "10.0%"),
        ("forward", "30.0%"),
        ("backward", "44.0%"),
    ] {
        let line = s.lines().find(|l| l.contains(phase)).unwrap();
        assert!(line.contains(share), "{line}");
    }
    // Without a running trial, the panel says so and gives the headline so far.
    let mut idle = synthetic_app(10, 4).unwrap();
    idle.live = None;
    let s = screen(&idle, 120, 40);
    assert!(s.contains("no trial running right now"), "{s}");
    assert!(s.contains("so far: "), "{s}");
    let head = &idle.story.as_ref().unwrap().headline;
    assert!(s.contains(&head[..30]), "{head}\n{s}");
}

#[test]
fn empty_sweep_says_what_is_coming() {
    let spec = Spec::parse(
        "name = \"empty\"\n[workload]\nmodel = \"mlp\"\ndataset = \"synthetic\"\n[knobs]\nbatch_size = [16, 32]\n",
        "empty.toml",
    )
    .unwrap();
    let report = crate::advisor::build_report(&spec, &[]);
    let mut app = App::new("", "reports/empty", SweepState::Detached);
    app.set_report(Arc::new(report), Mode::Live, 0, Some(2));
    app.device_note = Some("no GPU readings: NVML unavailable".into());
    let s = screen(&app, 100, 30);
    assert!(
        s.contains("empty · reports/empty · live: following the journal · 0/2 trial runs done"),
        "{s}"
    );
    assert!(s.contains("Results (0)"), "{s}");
    assert!(s.contains("no finished trials yet"), "{s}");
    assert!(
        s.contains("written with the report when the sweep finishes"),
        "{s}"
    );
    assert!(s.contains("no trial running right now"), "{s}");
    assert!(s.contains("no GPU readings: NVML unavailable"), "{s}");
    // Keys on an empty table do nothing harmful.
    for k in [
        KeyCode::Down,
        KeyCode::Enter,
        KeyCode::Char('s'),
        KeyCode::End,
    ] {
        key(&mut app, k);
    }
    assert_eq!(app.overlay, Overlay::None);
    screen(&app, 100, 30);
}

#[test]
fn failed_trial_is_marked_and_its_details_show_the_error() {
    let mut app = app_with(12, 5, 1);
    let s = screen(&app, 120, 40);
    assert!(s.contains("finished"), "{s}");
    assert!(s.contains("2 not ok"), "{s}");
    let line = s
        .lines()
        .find(|l| l.contains("crashed"))
        .expect("a crashed row");
    assert!(
        line.contains('–'),
        "no throughput for a crashed trial: {line}"
    );
    // Walk down to the first crashed row and open it.
    let at = app
        .order
        .iter()
        .position(|&i| app.rows[i].status == Status::Crashed)
        .unwrap();
    for _ in 0..at {
        key(&mut app, KeyCode::Char('j'));
    }
    assert_eq!(app.selected_row().unwrap().status, Status::Crashed);
    key(&mut app, KeyCode::Enter);
    assert!(matches!(app.overlay, Overlay::Trial(_)));
    let s = screen(&app, 120, 40);
    assert!(s.contains("Trial details"), "{s}");
    assert!(s.contains("status: crashed"), "{s}");
    assert!(s.contains("error: no result: killed by signal 9"), "{s}");
    // ↑ in the details moves to the trial above (ok: failures are 5 apart), and the
    // details follow.
    key(&mut app, KeyCode::Up);
    let s = screen(&app, 120, 40);
    assert!(s.contains("status: ok"), "{s}");
    assert!(s.contains("step phases (mean share of a step)"), "{s}");
    assert!(s.contains("peak memory"), "{s}");
    key(&mut app, KeyCode::Esc);
    assert_eq!(app.overlay, Overlay::None);
}

#[test]
fn one_device_and_four_devices_lay_out_differently() {
    let one = screen(&app_with(8, 0, 1), 120, 40);
    let four = screen(&app_with(8, 0, 4), 120, 40);
    assert!(
        one.contains("Devices (1)") && one.contains(" gpu0 "),
        "{one}"
    );
    assert!(!one.contains("gpu1") && !one.contains("imbalance"), "{one}");
    for g in ["gpu0", "gpu1", "gpu2", "gpu3"] {
        assert!(four.contains(g), "{g} missing\n{four}");
    }
    assert!(
        four.contains("▲ imbalance: gpu0 memory 2.0x the others' mean"),
        "{four}"
    );
    assert_eq!(
        four.matches("mem ").count(),
        4,
        "one memory gauge per device\n{four}"
    );
    // Four devices need a taller top row: the results table starts lower.
    let (r1, r4) = (
        row_of(&one, "Results (8)").unwrap(),
        row_of(&four, "Results (8)").unwrap(),
    );
    assert!(r4 > r1, "results at row {r4} with 4 devices, {r1} with 1");
}

#[test]
fn help_overlay_lists_the_keys() {
    let mut app = app_with(5, 0, 1);
    key(&mut app, KeyCode::Char('?'));
    let s = screen(&app, 100, 30);
    for k in [
        "quit",
        "tab shift-tab",
        "↑ ↓ j k",
        "sort the results",
        "enter",
        "esc",
    ] {
        assert!(s.contains(k), "{k} missing\n{s}");
    }
    key(&mut app, KeyCode::Char('?'));
    assert_eq!(app.overlay, Overlay::None);
}

#[test]
fn small_terminals_get_a_message_not_garbage() {
    let app = app_with(5, 0, 4);
    let s = screen(&app, 50, 12);
    assert!(s.contains("terminal too small"), "{s}");
    assert!(
        s.contains("50x12 here; tune dash needs at least 60x18"),
        "{s}"
    );
    assert!(!s.contains("Results"), "{s}");
    // The smallest accepted size draws every panel.
    let s = screen(&app, 60, 18);
    assert!(
        s.contains("Results") && s.contains("Devices") && s.contains("q quit"),
        "{s}"
    );
    // Tiny and odd sizes must not panic.
    for (w, h) in [(1, 1), (0, 0), (200, 18), (60, 200), (61, 19), (1000, 700)] {
        screen(&app, w, h);
    }
}

#[test]
fn sort_cycles_and_keeps_the_selected_trial() {
    let mut app = app_with(12, 5, 1);
    key(&mut app, KeyCode::Char('j'));
    let picked = app.selected_row().unwrap().id.clone();
    key(&mut app, KeyCode::Char('s'));
    assert_eq!(app.sort, SortKey::Throughput);
    assert_eq!(
        app.selected_row().unwrap().id,
        picked,
        "selection follows the trial"
    );
    let sps: Vec<f64> = app
        .order
        .iter()
        .filter_map(|&i| {
            app.trial(&app.rows[i].id)
                .unwrap()
                .samples_per_s
                .map(|c| c.median)
        })
        .collect();
    assert!(sps.windows(2).all(|w| w[0] >= w[1]), "{sps:?}");
    let last = app.order.last().map(|&i| app.rows[i].status);
    assert_eq!(last, Some(Status::Crashed), "unmeasured trials sort last");
    let s = screen(&app, 120, 40);
    assert!(s.contains("sorted by samples/s, fastest first"), "{s}");
    for expect in [
        SortKey::Ratio,
        SortKey::Memory,
        SortKey::Status,
        SortKey::Plan,
    ] {
        key(&mut app, KeyCode::Char('s'));
        assert_eq!(app.sort, expect);
    }
    key(&mut app, KeyCode::Char('s'));
    key(&mut app, KeyCode::Char('s'));
    key(&mut app, KeyCode::Char('s'));
    key(&mut app, KeyCode::Char('s'));
    assert_eq!(app.sort, SortKey::Status);
    assert_ne!(app.rows[app.order[0]].status, Status::Ok, "failures first");
}

#[test]
fn tab_moves_between_panels_and_enter_opens_a_recommendation() {
    let mut app = synthetic_app(6, 2).unwrap();
    assert_eq!(app.focus, Panel::Results);
    key(&mut app, KeyCode::Tab);
    assert_eq!(app.focus, Panel::Recommendations);
    key(&mut app, KeyCode::Down);
    assert_eq!(app.rec_selected, 1);
    key(&mut app, KeyCode::Enter);
    assert_eq!(app.overlay, Overlay::Recommendation(1));
    let s = screen(&app, 100, 32);
    assert!(s.contains("synthetic recommendation 1"), "{s}");
    assert!(
        s.contains("verdict: medium · expect 1.10× [1.05, 1.15]"),
        "{s}"
    );
    assert!(s.contains("PyTorch: DataLoader(num_workers=2)"), "{s}");
    key(&mut app, KeyCode::Enter);
    assert_eq!(app.overlay, Overlay::None);
    key(&mut app, KeyCode::Tab);
    assert_eq!(app.focus, Panel::Devices);
    key(&mut app, KeyCode::Down);
    assert_eq!(app.device_scroll, 1);
    key(&mut app, KeyCode::BackTab);
    assert_eq!(app.focus, Panel::Recommendations);
    key(&mut app, KeyCode::Tab);
    key(&mut app, KeyCode::Tab);
    assert_eq!(app.focus, Panel::Results);
}

#[test]
fn quitting_an_in_process_sweep_asks_first_and_ctrl_c_does_not() {
    let mut app = synthetic_app(4, 1).unwrap();
    app.sweep = SweepState::Running;
    key(&mut app, KeyCode::Char('q'));
    assert!(!app.quit && app.confirm_quit);
    let s = screen(&app, 120, 30);
    assert!(
        s.contains("the sweep is still running: q again stops it"),
        "{s}"
    );
    key(&mut app, KeyCode::Char('x'));
    assert!(
        !app.quit && !app.confirm_quit,
        "any other key keeps the sweep"
    );
    key(&mut app, KeyCode::Char('q'));
    key(&mut app, KeyCode::Char('q'));
    assert!(app.quit && app.cancel_sweep);

    let mut app = synthetic_app(4, 1).unwrap();
    app.sweep = SweepState::Running;
    app.on_key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL));
    assert!(app.quit && app.cancel_sweep);

    // Detached (`tune dash`): q just quits; the sweep belongs to another process.
    let mut app = synthetic_app(4, 1).unwrap();
    key(&mut app, KeyCode::Char('q'));
    assert!(app.quit && !app.cancel_sweep);
}

#[test]
fn a_live_trial_during_warmup_and_a_command_trial() {
    let mut app = synthetic_app(3, 1).unwrap();
    let mut l = synthetic_live(app.report.as_ref().unwrap());
    l.step = 3;
    l.samples_per_s = None;
    l.phases = None;
    app.live = Some(l.clone());
    let s = screen(&app, 120, 30);
    assert!(s.contains("warm-up"), "{s}");
    assert!(s.contains("samples/s after warm-up"), "{s}");
    l.round = 1;
    app.live = Some(l.clone());
    let s = screen(&app, 120, 30);
    assert!(s.contains("trial 4/5 · round 2 · repeat 1/2"), "{s}");
    l.steps = 0;
    l.step = 0;
    app.live = Some(l.clone());
    let s = screen(&app, 120, 30);
    assert!(s.contains("command workloads report no steps"), "{s}");
    // A Python trial's steps, from the hooks (`executor::live_py`): its words, before its
    // first step and after.
    l.note = Some("training: no step reported yet (start-up, first batch, compile)".into());
    app.live = Some(l.clone());
    let s = screen(&app, 120, 30);
    assert!(s.contains("training: no step reported yet"), "{s}");
    assert!(!s.contains("command workloads"), "{s}");
    (l.step, l.warmup, l.steps, l.loss, l.mem_peak_bytes) = (12, 12, 42, None, 0);
    l.note = Some("first step 9.1 s (8.7 s compiling)".into());
    app.live = Some(l);
    let s = screen(&app, 120, 30);
    assert!(s.contains("step    12/42") && s.contains("warm-up"), "{s}");
    assert!(s.contains("first step 9.1 s (8.7 s compiling)"), "{s}");
}

/// The results table draws only a window of rows around the selection (#27: all rows
/// were formatted every frame); the selected row is on screen, marked, wherever it is.
#[test]
fn the_selected_row_is_drawn_wherever_it_is_in_a_long_table() {
    let mut app = app_with(150, 0, 1);
    app.focus = Panel::Results;
    for k in 0..150 {
        let s = screen(&app, 120, 40);
        let label = &app.rows[app.order[k]].label;
        let line = s
            .lines()
            .find(|l| l.contains("▶ "))
            .unwrap_or_else(|| panic!("no selection marker at row {k}:\n{s}"));
        assert!(line.contains(label.as_str()), "row {k} ({label}):\n{s}");
        key(&mut app, KeyCode::Down);
    }
    key(&mut app, KeyCode::Home);
    assert!(screen(&app, 120, 40).contains(&format!("▶ {}", app.rows[app.order[0]].label)));
}

/// A script whose steps had no countable batch: the results table, a trial's details and
/// a live trial past warm-up say steps, never samples/s (#31).
#[test]
fn a_sweep_without_a_countable_batch_says_steps_per_second() {
    let mut report = synthetic_report(4, 0).unwrap();
    for t in &mut report.trials {
        for r in &mut t.repeats {
            r.batch_unknown = true;
        }
    }
    let mut live = synthetic_live(&report);
    live.samples_per_s = None;
    let mut app = App::new("", "reports/synthetic", SweepState::Detached);
    app.set_report(Arc::new(report), Mode::Finished, 4, Some(4));
    app.live = Some(live);
    let s = screen(&app, 120, 40);
    assert!(s.contains("steps/s [95% CI]"), "{s}");
    assert!(s.contains("batch size unknown"), "{s}");
    assert!(!s.contains("samples/s"), "{s}");
    key(&mut app, KeyCode::Enter);
    assert!(matches!(app.overlay, Overlay::Trial(_)));
    let s = screen(&app, 120, 40);
    assert!(s.contains("steps/s: "), "{s}");
    assert!(!s.contains("samples/s"), "{s}");
}
