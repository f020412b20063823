//! Command-line definitions (clap). `main.rs` only parses and dispatches; each command's
//! work lives in its stage.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::engine::amp::ScalerConfig;
use crate::engine::nn::zoo::ModelKind;
use crate::engine::optim::OptimKind;
use crate::engine::train::{default_cache_dir, default_threads, DeviceChoice, Workload};
use crate::error::{Error, Result};
use crate::gate::Metric;
use crate::knobs::{self, Knob, Knobs, Values};
use crate::limits::{self, Bound};

#[derive(Debug, Parser)]
#[command(
    name = "tune",
    version,
    about = "Measures which training settings make training faster on this machine, by how much, and why."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// One training run with a live progress line.
    Train(TrainCmdArgs),
    /// Runs a sweep spec: trials in child processes, journal, report.json/html, summary.md.
    Sweep(SweepArgs),
    /// Re-renders a report (HTML and markdown) from a report.json, a sweep directory or a watch directory.
    Report(ReportArgs),
    /// What this machine has: CPU, GPUs (or why none), which CUDA libraries load.
    Probe(ProbeArgs),
    /// Engine throughput and GEMM benchmarks (the figures in docs/performance.md).
    Bench(BenchArgs),
    /// Compares a report with a baseline report: exit 0 pass, 1 regression, 2 bad input.
    Gate(GateArgs),
    /// What changed between two watches or two sweeps: per metric before, after, ratio and whether it is beyond noise.
    Compare(CompareArgs),
    /// Live terminal dashboard of a running or finished sweep.
    Dash(DashArgs),
    /// Follows a process tree (a command it starts, or --pid) with the probes; writes a report.
    Watch(WatchArgs),
    /// One trial of a sweep (run by `tune sweep` in a child process; prints one JSON line).
    #[command(hide = true)]
    Trial(TrialArgs),
    /// Runs one command trial and ends its whole process tree (run by `tune sweep`).
    #[command(hide = true)]
    Supervise(SuperviseArgs),
}

/// `tune supervise`: see `runner::supervise`.
#[derive(Debug, Args, Clone)]
pub struct SuperviseArgs {
    /// The sweep's pid: the supervisor ends the tree when it is no longer its parent.
    #[arg(long)]
    pub parent: u32,
    /// End the tree when its resident memory passes this many bytes.
    #[arg(long)]
    pub mem_cap_bytes: Option<u64>,
    /// The command and its arguments.
    #[arg(trailing_var_arg = true, required = true, allow_hyphen_values = true)]
    pub command: Vec<String>,
}

/// The knob flags shared by `train` and `trial`, one per row of the knob table
/// (`crate::knobs::TABLE`): the flag is the knob's name, the help its doc line. Values
/// stay text until [`KnobArgs::knobs`], which reads them through the table, so a bad value
/// is one line naming the flag (exit 2) rather than clap's multi-line usage error.
#[derive(Debug, Clone, Default)]
pub struct KnobArgs {
    /// Each knob's value as given (or its default), in table order.
    values: Vec<(&'static str, String)>,
    /// The knobs given on the command line (not left at their default).
    given: Vec<&'static str>,
}

impl clap::FromArgMatches for KnobArgs {
    fn from_arg_matches(m: &clap::ArgMatches) -> std::result::Result<Self, clap::Error> {
        let mut a = KnobArgs::default();
        for k in knobs::TABLE {
            let value = match k.values {
                Values::Switch => m
                    .try_get_one::<bool>(k.name)
                    .map(|v| v.map(bool::to_string)),
                _ => m.try_get_one::<String>(k.name).map(|v| v.cloned()),
            }
            .map_err(|e| clap::Error::raw(clap::error::ErrorKind::ArgumentConflict, e))?;
            if let Some(v) = value {
                a.values.push((k.name, v));
            }
            if m.value_source(k.name) == Some(clap::parser::ValueSource::CommandLine) {
                a.given.push(k.name);
            }
        }
        Ok(a)
    }

    fn update_from_arg_matches(
        &mut self,
        m: &clap::ArgMatches,
    ) -> std::result::Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

impl Args for KnobArgs {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        knobs::TABLE.iter().fold(cmd, |cmd, k| {
            let arg = clap::Arg::new(k.name)
                .long(k.name.replace('_', "-"))
                .value_name(k.name.to_uppercase())
                .help(knob_help(k));
            cmd.arg(match k.values {
                Values::Switch => arg.action(clap::ArgAction::SetTrue),
                _ => arg
                    .action(clap::ArgAction::Set)
                    .value_parser(clap::value_parser!(String))
                    .default_value(k.default_text()),
            })
        })
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

/// A knob's `--help` line: its doc line (without the final period, as clap's derive
/// writes doc comments), then the words it takes.
fn knob_help(k: &Knob) -> String {
    let doc = k.help().trim_end_matches('.');
    match k.values {
        Values::Words(w) => format!("{doc} [values: {}]", w.join(", ")),
        _ => doc.to_string(),
    }
}

/// A flag's value against its bound: exit 2 naming the flag and the allowed range.
pub fn check_flag(flag: &str, bound: &Bound, value: usize) -> Result<usize> {
    bound
        .check_usize(value)
        .map_err(|e| Error::Invalid(format!("--{flag} {e}")))
}

impl KnobArgs {
    /// The knobs the flags give, each read through the knob table (errors name the flag),
    /// then held to the rules between knobs.
    pub fn knobs(&self) -> Result<Knobs> {
        let k = self.each_knob()?;
        k.validate()?;
        Ok(k)
    }

    /// The knobs the flags give, each value checked alone but not the rules between
    /// knobs (`devices` needs `parallel`): what the flags carried.
    pub fn each_knob(&self) -> Result<Knobs> {
        let mut k = Knobs::default();
        for (name, value) in &self.values {
            k.set_flag(name, value)?;
        }
        Ok(k)
    }

    /// The knob flags given on the command line, by knob name.
    pub fn given(&self) -> &[&'static str] {
        &self.given
    }
}

#[derive(Debug, Args, Clone)]
pub struct TrainArgs {
    /// mlp | cnn-small | resnet-mini | mlp-gelu
    #[arg(long, default_value = "cnn-small")]
    pub model: ModelKind,
    /// shapes[:N] | mnist:DIR | cifar10:DIR | synthetic
    #[arg(long, default_value = "shapes:6000")]
    pub dataset: String,
    /// Optimizer steps.
    #[arg(long, default_value_t = 250)]
    pub steps: usize,
    /// Steps excluded from throughput figures [default: 5, or steps - 1 when fewer].
    #[arg(long)]
    pub warmup: Option<usize>,
    #[arg(long, default_value_t = 0.05)]
    pub lr: f32,
    /// sgd | adamw
    #[arg(long, default_value = "sgd")]
    pub optimizer: OptimKind,
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Compute threads (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// cpu | cuda | auto
    #[arg(long, default_value = "cpu")]
    pub device: DeviceChoice,
    /// Skip the held-out evaluation.
    #[arg(long)]
    pub no_eval: bool,
    /// Where generated datasets are cached.
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
    /// Print one JSON summary object instead of progress.
    #[arg(long)]
    pub json: bool,
    /// Loss scaling under AMP: auto (on for fp16, off for bf16), on, off.
    #[arg(long, default_value = "auto", value_parser = ["auto", "on", "off"])]
    pub loss_scaling: String,
    /// Initial loss scale (PyTorch GradScaler: 2^16).
    #[arg(long, default_value_t = 65536.0)]
    pub loss_scale_init: f32,
    /// Scale multiplier after `--loss-scale-growth-interval` clean steps.
    #[arg(long, default_value_t = 2.0)]
    pub loss_scale_growth_factor: f32,
    /// Scale multiplier after an overflow (the step is skipped).
    #[arg(long, default_value_t = 0.5)]
    pub loss_scale_backoff: f32,
    /// Consecutive clean steps before the scale grows.
    #[arg(long, default_value_t = 2000)]
    pub loss_scale_growth_interval: u32,
    /// Autotuning's cache file (default: autotune.json in the cache dir).
    #[arg(long)]
    pub autotune_cache: Option<PathBuf>,
    #[command(flatten)]
    pub knobs: KnobArgs,
}

const DEFAULT_WARMUP: usize = 5;

impl TrainArgs {
    /// Checks every run flag with the rules a sweep spec is held to (`crate::limits`), so
    /// a bad size is one line naming the flag (exit 2), not an allocation failure.
    pub fn check(&self) -> Result<()> {
        // Knob flags first: their messages are the more specific ones.
        self.knobs.knobs()?;
        check_flag("steps", &limits::STEPS, self.steps)?;
        if let Some(w) = self.warmup {
            limits::warmup_within(w, self.steps)
                .map_err(|e| Error::Invalid(format!("--warmup {e}")))?;
        }
        if let Some(t) = self.threads {
            check_flag("threads", &limits::THREADS, t)?;
        }
        limits::lr(f64::from(self.lr)).map_err(|e| Error::Invalid(format!("--lr {e}")))?;
        limits::dataset(&self.dataset).map_err(|e| Error::Invalid(format!("--dataset {e}")))
    }

    /// The warm-up steps: as given, else 5 but never all of a short run (`--steps 3`
    /// measures its last step rather than being refused for a flag the user never typed).
    pub fn warmup(&self) -> usize {
        self.warmup
            .unwrap_or(DEFAULT_WARMUP.min(self.steps.saturating_sub(1)))
    }

    pub fn workload(&self) -> Workload {
        Workload {
            model: self.model,
            dataset: self.dataset.clone(),
            steps: self.steps,
            warmup: self.warmup(),
            lr: self.lr,
            optimizer: self.optimizer,
            seed: self.seed,
            threads: self.threads.unwrap_or_else(default_threads),
            eval: !self.no_eval,
            cache_dir: self.cache_dir.clone().unwrap_or_else(default_cache_dir),
            device: self.device,
            scaler: ScalerConfig {
                enabled: match self.loss_scaling.as_str() {
                    "on" => Some(true),
                    "off" => Some(false),
                    _ => None,
                },
                init_scale: self.loss_scale_init,
                growth_factor: self.loss_scale_growth_factor,
                backoff_factor: self.loss_scale_backoff,
                growth_interval: self.loss_scale_growth_interval,
            },
            autotune_cache: self.autotune_cache.clone(),
            inject_overflow_at: None,
            launch: None,
        }
    }
}

/// `tune trial`: the run flags, with the knobs as one JSON value from the runner.
#[derive(Debug, Args, Clone)]
pub struct TrialArgs {
    #[command(flatten)]
    pub run: TrainArgs,
    /// The trial's knobs as the JSON of a `Knobs` value (what the runner passes); knob
    /// flags may not be given with it.
    #[arg(long, value_name = "JSON")]
    pub knobs_json: Option<String>,
}

impl TrialArgs {
    /// The trial's knobs: from `--knobs-json` (read with serde, checked by the knob
    /// table), or from the knob flags when it is absent.
    pub fn knobs(&self) -> Result<Knobs> {
        let Some(json) = &self.knobs_json else {
            return self.run.knobs.knobs();
        };
        if let Some(name) = self.run.knobs.given().first() {
            let flag = knobs::knob(name).map_or_else(|| name.to_string(), Knob::flag);
            return Err(Error::Invalid(format!(
                "--knobs-json and {flag} both given: a trial takes its knobs from one of them"
            )));
        }
        Knobs::from_json(json)
    }
}

/// `tune train`: the run flags plus what only an interactive run has.
#[derive(Debug, Args, Clone)]
pub struct TrainCmdArgs {
    #[command(flatten)]
    pub run: TrainArgs,
    /// Sample host, process, engine devices and GPUs every MS milliseconds on one
    /// timeline, and print per-device summaries and findings (off by default).
    #[arg(long, value_name = "MS")]
    pub sample_interval: Option<u64>,
}

impl TrainCmdArgs {
    /// The run flags (`TrainArgs::check`), then the interval.
    pub fn check(&self) -> Result<()> {
        self.run.check()?;
        match self.sample_interval {
            Some(ms) => check_ms("sample-interval", ms).map(|_| ()),
            None => Ok(()),
        }
    }
}

/// A sampling interval flag in milliseconds, within `limits::SAMPLE_INTERVAL_MS`.
pub fn check_ms(flag: &str, ms: u64) -> Result<u64> {
    limits::SAMPLE_INTERVAL_MS
        .check(ms)
        .map_err(|e| Error::Invalid(format!("--{flag} {e}")))
}

#[derive(Debug, Args, Clone)]
pub struct WatchArgs {
    /// Watch this running process and its descendants instead of starting a command.
    #[arg(long, conflicts_with = "command")]
    pub pid: Option<u32>,
    /// Sampling interval in milliseconds.
    #[arg(long, value_name = "MS", default_value_t = 100)]
    pub interval: u64,
    /// Stream one JSON sample per line on stdout (the command's stdout goes to stderr).
    #[arg(long)]
    pub json: bool,
    /// Show the process tree and the devices full-screen (as `tune dash`) instead of
    /// plain lines; the command's output goes to command.log in the report folder.
    #[arg(long)]
    pub tui: bool,
    /// Folder for report.json and summary.md (default: reports/watch-<time>-<pid>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// End after N training steps (PyTorch hooks): the job is stopped at a step boundary
    /// and the report written.
    #[arg(long, value_name = "N")]
    pub steps: Option<u64>,
    /// End after S seconds: a command tune started is stopped (SIGINT, then killed after
    /// 10 s), an attached process is left running; the report is written.
    #[arg(long, value_name = "S")]
    pub duration: Option<f64>,
    /// The command to start and watch, after `--`; its exit code becomes tune's.
    #[arg(last = true, value_name = "CMD", required_unless_present = "pid")]
    pub command: Vec<String>,
}

#[derive(Debug, Args, Clone)]
pub struct SweepArgs {
    /// The sweep spec (TOML).
    pub spec: PathBuf,
    /// Output directory (default: reports/<spec name>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Skip trials already finished in the journal.
    #[arg(long)]
    pub resume: bool,
    /// Machine-readable output: one JSON line per trial, then the report path.
    #[arg(long)]
    pub json: bool,
    /// Show the live dashboard while the sweep runs.
    #[arg(long)]
    pub tui: bool,
    /// Where trials run, overriding the spec's `[search] executor` (docs/cluster.md).
    #[arg(long, value_parser = ["local", "slurm"])]
    pub executor: Option<String>,
    /// The backend every trial trains on, overriding the spec's `[workload] device`
    /// (engine workloads only).
    #[arg(long, value_parser = ["cpu", "cuda", "auto"])]
    pub device: Option<String>,
}

#[derive(Debug, Args, Clone)]
pub struct ReportArgs {
    /// A report.json (a sweep's or a watch's), or a sweep or watch directory (report.json
    /// or journal.jsonl inside).
    pub input: PathBuf,
    /// Write the HTML report here.
    #[arg(long)]
    pub html: Option<PathBuf>,
    /// Write the markdown summary here.
    #[arg(long)]
    pub md: Option<PathBuf>,
}

#[derive(Debug, Args, Clone)]
pub struct CompareArgs {
    /// The earlier report: a report.json or its folder (a sweep's or a watch's).
    pub a: PathBuf,
    /// The later report, of the same kind as A.
    pub b: PathBuf,
    /// Print the changes as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args, Clone)]
pub struct DashArgs {
    /// A sweep folder (reports/<name>) or a report.json. Default: the sweep under
    /// reports/ that changed last.
    pub dir: Option<PathBuf>,
}

#[derive(Debug, Args, Clone)]
pub struct ProbeArgs {
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args, Clone)]
pub struct BenchArgs {
    /// Thread counts to measure.
    #[arg(long, value_delimiter = ',', default_value = "1,2")]
    pub threads: Vec<usize>,
    /// What to measure: mlp, cnn, gemm, peak (the cores' measured FMA peak, also printed
    /// before mlp and cnn, whose rows give their useful GFLOP/s as a share of it), dash
    /// (one dashboard frame: 100 trials, 4 devices), sampling (10 Hz probes on vs off).
    /// peak, dash and sampling are not in the default.
    #[arg(long, value_delimiter = ',', default_value = "mlp,cnn,gemm")]
    pub what: Vec<String>,
    /// Precisions (amp values: off, bf16, fp16, tf32) to train mlp and cnn in. With more
    /// than one, each timed run is its own training, alternating precisions (the order
    /// flipped every round), and each row gives its speed against the first.
    #[arg(long, value_delimiter = ',', default_value = "off")]
    pub amp: Vec<String>,
    /// Timed runs per configuration (median reported).
    #[arg(long, default_value_t = 5)]
    pub runs: usize,
    /// Steps per timed run.
    #[arg(long, default_value_t = 50)]
    pub steps: usize,
    /// JSON lines instead of a table.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args, Clone)]
pub struct GateArgs {
    /// The reference report.json or its sweep folder (kept in the repository or as a CI
    /// artifact).
    #[arg(long)]
    pub baseline: PathBuf,
    /// The report.json (or sweep folder) to judge.
    #[arg(long)]
    pub current: PathBuf,
    /// Metrics to judge, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "samples_per_s")]
    pub metric: Vec<Metric>,
    /// Largest tolerated worsening per metric (5% or 0.05); raised to the measured noise
    /// floor where that is larger.
    #[arg(long, default_value = "3%")]
    pub max_regression: String,
    /// Fail a check whose figures rest on repeats the hardware contaminated (throttling,
    /// another process on the GPU, steal time), and a report whose recommendation's
    /// confirmation rests on contaminated pairs, instead of passing them with a warning.
    #[arg(long)]
    pub fail_on_contaminated: bool,
    /// Write a markdown summary here (CI step summary, PR comment).
    #[arg(long)]
    pub md: Option<PathBuf>,
    /// Write JUnit XML here: one testcase per configuration and metric.
    #[arg(long)]
    pub junit: Option<PathBuf>,
    /// Print the verdicts as JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}
