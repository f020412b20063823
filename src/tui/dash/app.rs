//! The dashboard's state and what each key does to it. Everything the view draws is
//! here, already in memory: the data thread does the file reading and the statistics,
//! and `set_report` formats the table once per update, not once per frame.

use std::sync::Arc;

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};

use crate::advisor::Story;
use crate::report::markdown::{ratio_cell, throughput_cell};
use crate::results::model::{Report, TrialReport};
use crate::results::record::Status;
use crate::runner::live::LiveTrial;
use crate::tui::widgets::devices::DeviceSeries;

/// The panels `tab` moves between (the current-trial panel has nothing to select).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Panel {
    Results,
    Recommendations,
    Devices,
}

impl Panel {
    fn next(self, back: bool) -> Panel {
        use Panel::*;
        match (self, back) {
            (Results, false) | (Devices, true) => Recommendations,
            (Recommendations, false) | (Results, true) => Devices,
            (Devices, false) | (Recommendations, true) => Results,
        }
    }
}

/// Orders of the results table; `s` steps through them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortKey {
    /// As planned: baseline first.
    Plan,
    /// Fastest first; trials without a measurement last.
    Throughput,
    Ratio,
    /// Smallest peak memory first.
    Memory,
    /// Failures first, so they are seen.
    Status,
}

impl SortKey {
    fn next(self) -> SortKey {
        use SortKey::*;
        match self {
            Plan => Throughput,
            Throughput => Ratio,
            Ratio => Memory,
            Memory => Status,
            Status => Plan,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            SortKey::Plan => "plan order",
            SortKey::Throughput => "samples/s, fastest first",
            SortKey::Ratio => "ratio vs baseline",
            SortKey::Memory => "peak memory, smallest first",
            SortKey::Status => "status, failures first",
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Overlay {
    None,
    Help,
    /// Details of the trial with this id.
    Trial(String),
    /// Details of the recommendation at this index.
    Recommendation(usize),
}

/// Where the data comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Following a journal that may still grow.
    Live,
    /// A report.json: the sweep is over.
    Finished,
}

/// The sweep this dashboard was started with (`tune sweep --tui`), if any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SweepState {
    /// `tune dash`: the sweep, if one runs, belongs to another process.
    Detached,
    Running,
    /// The in-process sweep ended; the text says how.
    Ended(String),
}

/// One results row, formatted once per data update.
#[derive(Clone, Debug, PartialEq)]
pub struct RowView {
    pub id: String,
    pub label: String,
    pub status: Status,
    pub throughput: String,
    pub ratio: String,
    pub peak: String,
    pub baseline: bool,
    pub best: bool,
    pub significant: bool,
    /// Other processes' CPU share while it ran, when high enough to flag.
    pub loaded: Option<f64>,
    sps: Option<f64>,
    ratio_value: Option<f64>,
    peak_bytes: Option<u64>,
    plan_index: usize,
}

impl RowView {
    fn new(
        r: &Report,
        story: &Story,
        loads: &Loads,
        t: &TrialReport,
        plan_index: usize,
    ) -> RowView {
        let baseline = r.baseline.as_deref() == Some(t.id.as_str());
        RowView {
            id: t.id.clone(),
            label: t.label.clone(),
            status: t.status,
            throughput: throughput_cell(t),
            ratio: ratio_cell(t, baseline),
            peak: t.peak_mib().map_or("–".into(), |m| format!("{m:.1}")),
            baseline,
            best: story.fastest.as_deref() == Some(t.id.as_str()),
            loaded: loads.get(t.id.as_str()).copied(),
            significant: t.ratio_vs_baseline.is_some_and(|x| x.significant),
            sps: t.samples_per_s.map(|c| c.median),
            ratio_value: t.ratio_vs_baseline.map(|x| x.ratio),
            peak_bytes: t.peak_total_bytes,
            plan_index,
        }
    }
}

/// The story's loaded trials: id to load (percent of all cores).
type Loads<'a> = std::collections::HashMap<&'a str, f64>;

/// Missing values sort after present ones whichever way the present ones go.
fn by_option<T: PartialOrd>(a: Option<T>, b: Option<T>, descending: bool) -> std::cmp::Ordering {
    use std::cmp::Ordering::*;
    match (a, b) {
        (Some(x), Some(y)) => {
            let o = x.partial_cmp(&y).unwrap_or(Equal);
            if descending {
                o.reverse()
            } else {
                o
            }
        }
        (Some(_), None) => Less,
        (None, Some(_)) => Greater,
        (None, None) => Equal,
    }
}

pub struct App {
    pub name: String,
    /// The folder or file being shown, as given.
    pub source: String,
    pub mode: Mode,
    pub report: Option<Arc<Report>>,
    /// What the report says (headline, noise, verdicts), computed once per update.
    pub story: Option<Story>,
    /// Trial runs journaled so far, and planned in all (halving rounds count apart).
    pub runs_done: usize,
    pub runs_planned: Option<usize>,
    pub rows: Vec<RowView>,
    /// Indices into `rows`, in display order.
    pub order: Vec<usize>,
    pub sort: SortKey,
    /// Position in `order`.
    pub selected: usize,
    pub rec_selected: usize,
    pub device_scroll: usize,
    pub focus: Panel,
    pub overlay: Overlay,
    pub live: Option<LiveTrial>,
    pub devices: Vec<DeviceSeries>,
    pub device_note: Option<String>,
    /// Something wrong with the data source, shown in the footer until it clears.
    pub problem: Option<String>,
    pub sweep: SweepState,
    /// `q` was pressed while the in-process sweep runs: the next `q` stops it.
    pub confirm_quit: bool,
    /// Wall clock of the latest event, for elapsed times (the view reads no clocks).
    pub now_unix_ms: u64,
    pub quit: bool,
    /// Quitting must also stop the in-process sweep.
    pub cancel_sweep: bool,
}

impl App {
    /// What the results count: steps/s for a script whose steps had no countable batch.
    pub fn unit(&self) -> &'static str {
        self.report
            .as_ref()
            .map_or("samples/s", |r| r.throughput_unit())
    }

    pub fn new(name: impl Into<String>, source: impl Into<String>, sweep: SweepState) -> App {
        App {
            name: name.into(),
            source: source.into(),
            mode: Mode::Live,
            report: None,
            story: None,
            runs_done: 0,
            runs_planned: None,
            rows: Vec::new(),
            order: Vec::new(),
            sort: SortKey::Plan,
            selected: 0,
            rec_selected: 0,
            device_scroll: 0,
            focus: Panel::Results,
            overlay: Overlay::None,
            live: None,
            devices: Vec::new(),
            device_note: None,
            problem: None,
            sweep,
            confirm_quit: false,
            now_unix_ms: crate::runner::live::unix_ms(),
            quit: false,
            cancel_sweep: false,
        }
    }

    /// The trial under the cursor.
    pub fn selected_row(&self) -> Option<&RowView> {
        self.order.get(self.selected).map(|&i| &self.rows[i])
    }

    pub fn trial(&self, id: &str) -> Option<&TrialReport> {
        self.report.as_ref()?.trial(id)
    }

    pub fn set_report(
        &mut self,
        report: Arc<Report>,
        mode: Mode,
        done: usize,
        planned: Option<usize>,
    ) {
        let keep = self.selected_row().map(|r| r.id.clone());
        let story = crate::advisor::story(&report);
        // By id once: the story's list scanned per row was quadratic in trials.
        let loads: Loads = story
            .loaded
            .iter()
            .map(|(id, l)| (id.as_str(), *l))
            .collect();
        self.rows = report
            .trials
            .iter()
            .enumerate()
            .map(|(i, t)| RowView::new(&report, &story, &loads, t, i))
            .collect();
        self.story = Some(story);
        self.name = report.spec.name.clone();
        self.report = Some(report);
        self.mode = mode;
        self.runs_done = done;
        self.runs_planned = planned;
        self.resort(keep);
        let recs = self.recommendations_len();
        self.rec_selected = self.rec_selected.min(recs.saturating_sub(1));
        if let Overlay::Recommendation(i) = self.overlay {
            if i >= recs {
                self.overlay = Overlay::None;
            }
        }
    }

    pub fn recommendations_len(&self) -> usize {
        self.report.as_ref().map_or(0, |r| r.recommendations.len())
    }

    fn resort(&mut self, keep: Option<String>) {
        let mut order: Vec<usize> = (0..self.rows.len()).collect();
        let rows = &self.rows;
        order.sort_by(|&a, &b| {
            let (x, y) = (&rows[a], &rows[b]);
            let o = match self.sort {
                SortKey::Plan => std::cmp::Ordering::Equal,
                SortKey::Throughput => by_option(x.sps, y.sps, true),
                SortKey::Ratio => by_option(x.ratio_value, y.ratio_value, true),
                SortKey::Memory => by_option(x.peak_bytes, y.peak_bytes, false),
                SortKey::Status => (x.status == Status::Ok).cmp(&(y.status == Status::Ok)),
            };
            o.then(x.plan_index.cmp(&y.plan_index))
        });
        self.order = order;
        self.selected = keep
            .and_then(|id| self.order.iter().position(|&i| self.rows[i].id == id))
            .unwrap_or(self.selected)
            .min(self.order.len().saturating_sub(1));
    }

    fn move_selection(&mut self, delta: isize) {
        let step = |pos: usize, len: usize| -> usize {
            if len == 0 {
                return 0;
            }
            (pos as isize + delta).clamp(0, len as isize - 1) as usize
        };
        match self.focus {
            Panel::Results => {
                self.selected = step(self.selected, self.order.len());
                if let Overlay::Trial(_) = self.overlay {
                    if let Some(r) = self.selected_row() {
                        self.overlay = Overlay::Trial(r.id.clone());
                    }
                }
            }
            Panel::Recommendations => {
                self.rec_selected = step(self.rec_selected, self.recommendations_len());
                if let Overlay::Recommendation(_) = self.overlay {
                    self.overlay = Overlay::Recommendation(self.rec_selected);
                }
            }
            Panel::Devices => self.device_scroll = step(self.device_scroll, self.devices.len()),
        }
    }

    pub fn on_key(&mut self, key: KeyEvent) {
        // Key releases and repeats only arrive where the terminal reports them; act once.
        if key.kind != KeyEventKind::Press {
            return;
        }
        let ctrl_c =
            key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c');
        if ctrl_c {
            self.quit = true;
            self.cancel_sweep = self.sweep == SweepState::Running;
            return;
        }
        if key.code == KeyCode::Char('q') {
            if self.sweep == SweepState::Running && !self.confirm_quit {
                self.confirm_quit = true;
            } else {
                self.quit = true;
                self.cancel_sweep = self.sweep == SweepState::Running;
            }
            return;
        }
        if self.confirm_quit {
            // Any other key keeps the sweep going.
            self.confirm_quit = false;
            return;
        }
        match key.code {
            KeyCode::Char('?') => {
                self.overlay = if self.overlay == Overlay::Help {
                    Overlay::None
                } else {
                    Overlay::Help
                };
            }
            KeyCode::Esc => self.overlay = Overlay::None,
            KeyCode::Enter if self.overlay != Overlay::None => self.overlay = Overlay::None,
            KeyCode::Enter => self.open_details(),
            KeyCode::Tab | KeyCode::BackTab => {
                self.focus = self.focus.next(key.code == KeyCode::BackTab);
                self.overlay = Overlay::None;
            }
            KeyCode::Down | KeyCode::Char('j') => self.move_selection(1),
            KeyCode::Up | KeyCode::Char('k') => self.move_selection(-1),
            KeyCode::PageDown => self.move_selection(10),
            KeyCode::PageUp => self.move_selection(-10),
            KeyCode::Home | KeyCode::Char('g') => self.move_selection(isize::MIN / 2),
            KeyCode::End | KeyCode::Char('G') => self.move_selection(isize::MAX / 2),
            KeyCode::Char('s') => {
                let keep = self.selected_row().map(|r| r.id.clone());
                self.sort = self.sort.next();
                self.resort(keep);
            }
            _ => {}
        }
    }

    fn open_details(&mut self) {
        match self.focus {
            Panel::Results => {
                if let Some(r) = self.selected_row() {
                    self.overlay = Overlay::Trial(r.id.clone());
                }
            }
            Panel::Recommendations if self.recommendations_len() > 0 => {
                self.overlay = Overlay::Recommendation(self.rec_selected);
            }
            _ => {}
        }
    }
}
