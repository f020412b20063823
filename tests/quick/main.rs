//! The integration tests that time nothing and end within seconds, in one test binary
//! (`cargo test --release --test quick`; one file's tests: `-- gate::`). Each file here
//! was a test binary of its own, and each binary links all of tune and its dependencies:
//! docs/ci.md says what that cost in CI's build and why these files moved here.
//!
//! What stays out, each in its own binary: tests that judge a speed or a timing
//! (`pytorch_*`, `parallel`, `report_story`, `advisor_*`), that need the machine to
//! themselves (`slurm_*`, the PyTorch tests), and those that put the CUDA stand-in on
//! this process's `TUNE_CUDA_LIB_DIRS` (`gpu_*`, `cuda_kernels`, `knobs`, `sweep`,
//! `probe_libs`, `fuse`): a stand-in set for one test would be a GPU for every other
//! test of the binary.

#[path = "../common/cli.rs"]
mod cli;
#[path = "../common/mod.rs"]
mod common;
#[path = "../common/mutate.rs"]
mod mutate;

mod autotune;
mod dash_cli;
mod dash_tmux;
mod engine_floors;
mod file_size;
mod gate;
mod hardware_validity;
mod knob_caps;
mod knob_table;
mod reliability_bounds;
mod reliability_input;
mod reliability_interleave;
mod reliability_journal_fuzz;
mod reliability_records;
mod reliability_rendezvous;
mod reliability_report_fuzz;
mod reliability_reports;
mod reliability_shell;
mod reliability_spec_fuzz;
mod reliability_trials;
mod report_browser;
mod report_scale;
mod settle;
mod stages;
mod sweep_trace;
mod train_cli;
mod watch_cli;
mod watch_report;
mod watch_tmux;
