//! `tune watch`: follows any process tree (a user's PyTorch job included) on the probes'
//! timeline, shows it live and explains at exit what it saw.
//!
//! - `model`: per-device series grouped from the timeline (what the live view, a
//!   dashboard widget or a finding reads; no formatting);
//! - `findings`: rules over those series (imbalance, starvation, throttling, GPU sharing);
//! - `target`: the watched process, started from a command or attached by pid, and the
//!   stop signals;
//! - `live`: the plain-line view and the `--json` sample stream;
//! - `report`: report.json and summary.md;
//! - `html`: report.html (timeline charts and findings);
//! - `steps`: findings from the PyTorch hooks' step events (`crate::bridge`);
//! - `session`: one watch from start to report;
//! - `tui`: the full-screen live view (`--tui`), on the dashboard's devices widget;
//! - `procs`: its per-process table (htop keys);
//! - `window`: `--steps`/`--duration`, which end a watch (and the job tune started);
//! - `timeline`: the steps over time (warm-up, step-time and phase charts, trace.json).

pub(crate) mod dominant;
pub(crate) mod files;
pub(crate) mod findings;
pub(crate) mod html;
pub(crate) mod live;
pub(crate) mod model;
pub(crate) mod own_code;
pub(crate) mod procs;
// `report` and `target` stay public: `WatchReport::load` and `Target::wait` have no caller
// in the crate yet, and pub(crate) would flag them as dead code.
pub mod report;
pub(crate) mod session;
pub(crate) mod steps;
pub mod target;
pub(crate) mod timeline;
pub(crate) mod tui;
pub(crate) mod window;
