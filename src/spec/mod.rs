//! The sweep spec: a TOML file naming a workload, the knob values to try and how to
//! search them. Parsing keeps TOML's source spans so that every error points at a line
//! and column, and lists the allowed values where there is a fixed set.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::fsio::read_text_limited;
use crate::knobs::Knobs;
pub use cluster::{ExecutorKind, SlurmSpec};
pub use value::{Change, KnobValue};
pub use window::Window;

pub mod cluster;
pub(crate) mod metric;
mod parse;
pub mod plan;
mod shell;
#[cfg(test)]
mod tests;
pub mod value;
pub mod window;

/// Largest spec read. Real specs are a few KB; TOML parsing costs many times the text's
/// size in memory, so a bound far below `fsio::MAX_INPUT_BYTES` keeps `tune sweep
/// /dev/zero` (or a multi-GB file named by mistake) from eating the machine.
pub const MAX_SPEC_BYTES: u64 = 1 << 20;

/// Models of the built-in engine.
pub const MODELS: &[&str] = &["mlp", "cnn-small", "resnet-mini", "mlp-gelu"];
/// Values of `workload.device`.
pub const DEVICES: &[&str] = &["cpu", "cuda", "auto"];

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Spec {
    /// Names the report folder, `reports/<name>/`.
    pub name: String,
    pub workload: Workload,
    /// Knob name and its values, parsed when the spec was read (stored in the spelling
    /// `Knobs::get` gives back), in file order. Values within a knob are distinct.
    #[serde(deserialize_with = "value::knob_axes")]
    pub knobs: Vec<(String, Vec<KnobValue>)>,
    /// `[params]`: a command workload's own parameters and their values, in file order,
    /// as written (numbers keep their spelling). Swept like knobs; each fills `{name}`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub params: Vec<(String, Vec<String>)>,
    pub search: Search,
    /// How trials are submitted when `search.executor` is `slurm` (defaults otherwise).
    #[serde(default = "default_slurm")]
    pub slurm: SlurmSpec,
    /// The file it was read from; relative paths in the spec are relative to its folder.
    pub path: PathBuf,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Workload {
    Engine(EngineWorkload),
    Command(CommandWorkload),
}

/// A workload trained by the built-in engine.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EngineWorkload {
    /// One of `MODELS`.
    pub model: String,
    /// A dataset spec for the engine's data module, e.g. `shapes:4000`.
    pub dataset: String,
    /// Batch size when `batch_size` is not a swept knob.
    pub batch_size: usize,
    /// Measured steps per trial, after warm-up.
    pub steps: usize,
    /// Steps run before measuring.
    pub warmup: usize,
    /// One of `DEVICES`.
    pub device: String,
    pub devices: usize,
    /// Compute threads per trial; None lets the engine decide.
    pub threads: Option<usize>,
    pub lr: Option<f64>,
}

/// An external training command whose throughput is read from its output.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CommandWorkload {
    /// Command template; `{name}` is replaced by the value of the knob or `[params]`
    /// parameter `name`, `{{` and `}}` are literal braces.
    pub run: String,
    pub metric: Metric,
    /// Working folder as written; relative to the spec's folder (`Spec::dir`).
    pub cwd: Option<PathBuf>,
    /// How much of the job a trial measures before tune ends it: always set for
    /// `[workload.python]` (defaults in `window`), set for `[workload.command]` only
    /// when it names `samples`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<Window>,
}

/// How a command reports samples per second.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// A pattern whose single capture group is the number. Only the subset
    /// `literal prefix([0-9.]+)` is supported (see `runner::metric`).
    Regex(String),
    /// A key in JSON lines printed by the command.
    JsonKey(String),
    /// `[workload.python]`: the step events of tune's PyTorch hooks (`crate::bridge`),
    /// which also inject the trial's knobs into the unmodified script.
    Hooks,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Strategy {
    #[serde(rename = "grid")]
    Grid,
    #[serde(rename = "one-at-a-time")]
    OneAtATime,
    #[serde(rename = "halving")]
    Halving,
}

impl Strategy {
    pub const ALLOWED: &'static [&'static str] = &["grid", "one-at-a-time", "halving"];

    fn parse(s: &str) -> Option<Strategy> {
        match s {
            "grid" => Some(Strategy::Grid),
            "one-at-a-time" => Some(Strategy::OneAtATime),
            "halving" => Some(Strategy::Halving),
            _ => None,
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Strategy::Grid => "grid",
            Strategy::OneAtATime => "one-at-a-time",
            Strategy::Halving => "halving",
        })
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Search {
    pub strategy: Strategy,
    /// Repeats of each trial, for the noise floor.
    pub repeats: usize,
    /// Per-trial time limit in seconds.
    pub timeout_s: u64,
    /// Halving's reduction factor: each round keeps 1/eta of the configurations.
    pub eta: usize,
    /// Per-trial resident-memory cap in MiB; a trial above it ends as `oom`.
    #[serde(default)]
    pub mem_cap_mib: Option<u64>,
    /// Where trials run; `tune sweep --executor` overrides it.
    #[serde(default)]
    pub executor: ExecutorKind,
    /// Extra runs per trial that may replace repeats the hardware contaminated
    /// (`runner::hardware`); 0 = flag them and leave them out of the figures only.
    #[serde(default)]
    pub hardware_reruns: usize,
    /// Other processes' CPU share (percent of all cores) above which a repeat counts as
    /// contaminated; None = recorded, never a reason (the trial-level load flag stays).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_foreign_cpu_pct: Option<u64>,
    /// The configuration every other is compared with: workload defaults, then the first
    /// value of each knob list, then `[search] baseline` overrides.
    pub baseline: Knobs,
    /// The job's planned length in optimizer steps: a change with a one-off cost (a
    /// `compile` mode's compile time) is recommended only when it pays off within it.
    #[serde(default = "window::default_job_steps")]
    pub job_steps: u64,
    /// Pairs of runs each confirmation makes; None = the runner's default (the repeats,
    /// 4 to 6, even).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirm_repeats: Option<usize>,
    /// `[search] budget_s`: the whole sweep's time, confirmation included. No run starts
    /// once it is spent, and each Python run measures a share of what is left (#31).
    /// None = no bound beyond each trial's `timeout_s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget_s: Option<u64>,
    /// When the budget ends: a run still going then is stopped, whatever it is (the
    /// built-in engine, a command without a window, a job stuck in one long step). Set
    /// for one run by `runner::budget::capped`, never by the spec, so not in its form.
    #[serde(skip)]
    pub cut_at: Option<std::time::Instant>,
}

fn default_slurm() -> SlurmSpec {
    SlurmSpec::with_timeout(600)
}

impl Spec {
    pub fn load(path: impl AsRef<Path>) -> Result<Spec> {
        let path = path.as_ref();
        let text = match read_text_limited(path, MAX_SPEC_BYTES) {
            Err(Error::Format { path, msg }) if msg.starts_with("larger than") => {
                return Err(Error::format(
                    path,
                    format!(
                        "larger than {} KiB: a sweep spec is a hand-written TOML file of a few KB",
                        MAX_SPEC_BYTES >> 10
                    ),
                ))
            }
            r => r?,
        };
        Spec::parse(&text, path)
    }

    /// Parses and checks a spec: every value that can be checked before a trial runs is
    /// checked here, so a spec that parses is one every trial accepts.
    pub fn parse(text: &str, path: impl AsRef<Path>) -> Result<Spec> {
        parse::parse(text, path.as_ref())
    }

    /// The folder that relative paths in the spec are relative to.
    pub fn dir(&self) -> &Path {
        match self.path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        }
    }

    /// What a trial's measurement depends on besides its own knobs: the workload, and the
    /// baseline every trial's label and comparison is relative to. A journal's records
    /// carry it so `--resume` can refuse records measured for another spec. Repeats,
    /// strategy, limits and knob lists are left out: changing them (more repeats, a longer
    /// timeout, another knob value) continues the same experiment.
    pub fn fingerprint(&self) -> String {
        // Knobs added after journals were first fingerprinted count only when set off
        // their default, so an older journal still resumes.
        let mut baseline = serde_json::to_value(&self.search.baseline).unwrap_or_default();
        if let Some(m) = baseline.as_object_mut() {
            let def = crate::knobs::Knobs::default();
            for n in [
                "persistent_workers",
                "prefetch_factor",
                "channels_last",
                "num_threads",
                "compile",
                "fuse",
                "optim_impl",
            ] {
                if self.search.baseline.get(n) == def.get(n) {
                    m.remove(n);
                }
            }
        }
        let canon = serde_json::json!({
            "workload": self.workload,
            "baseline": baseline,
        });
        // FNV-1a: stable across Rust versions and platforms, unlike std's hashers, so a
        // journal written by one build resumes under another.
        let hash = canon
            .to_string()
            .bytes()
            .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
            });
        format!("{hash:016x}")
    }

    /// The values listed for one knob or parameter, as text.
    pub fn values(&self, knob: &str) -> Option<Vec<&str>> {
        let of_knob = self.knobs.iter().find(|(n, _)| n == knob);
        match of_knob {
            Some((_, v)) => Some(v.iter().map(KnobValue::as_str).collect()),
            None => self
                .params
                .iter()
                .find(|(n, _)| n == knob)
                .map(|(_, v)| v.iter().map(String::as_str).collect()),
        }
    }
}

impl CommandWorkload {
    /// The command line for one configuration: each placeholder's value quoted so that
    /// `sh -c` reads back exactly that value as one word (`shell`).
    pub fn render(&self, knobs: &Knobs) -> String {
        shell::render(&self.run, |name| knobs.value(name).unwrap_or_default())
    }
}

pub(super) enum Piece<'a> {
    Text(&'a str),
    /// `{{` or `}}`.
    Brace(char),
    /// `{name}` starting at byte `at` of the template.
    Placeholder {
        name: &'a str,
        at: usize,
    },
    /// A `{` with no `}` after it.
    Unclosed(usize),
}

pub(super) fn template_pieces(s: &str) -> Vec<Piece<'_>> {
    let mut out = Vec::new();
    let mut text_start = 0;
    let mut i = 0;
    let b = s.as_bytes();
    while i < b.len() {
        let two = b.get(i + 1).copied();
        if (b[i] == b'{' && two == Some(b'{')) || (b[i] == b'}' && two == Some(b'}')) {
            out.push(Piece::Text(&s[text_start..i]));
            out.push(Piece::Brace(b[i] as char));
            i += 2;
            text_start = i;
        } else if b[i] == b'{' {
            out.push(Piece::Text(&s[text_start..i]));
            match s[i..].find('}') {
                Some(len) => {
                    out.push(Piece::Placeholder {
                        name: &s[i + 1..i + len],
                        at: i,
                    });
                    i += len + 1;
                    text_start = i;
                }
                None => {
                    out.push(Piece::Unclosed(i));
                    return out;
                }
            }
        } else {
            i += 1;
        }
    }
    out.push(Piece::Text(&s[text_start..]));
    out
}

/// Capture groups in a regex, counted loosely: unescaped `(` outside character classes
/// that is not `(?:`, a lookaround or a flag group. Enough to catch a missing or extra
/// group without a regex engine.
pub(super) fn capture_groups(re: &str) -> usize {
    let mut n = 0;
    let mut in_class = false;
    let mut chars = re.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                chars.next();
            }
            '[' if !in_class => in_class = true,
            ']' if in_class => in_class = false,
            '(' if !in_class => {
                if chars.peek() != Some(&'?') {
                    n += 1;
                } else {
                    let rest: String = chars.clone().take(4).collect();
                    // (?P<name>...) and (?<name>...) capture; (?<= and (?<! look behind.
                    let named = rest.starts_with("?P<")
                        || (rest.starts_with("?<")
                            && !rest.starts_with("?<=")
                            && !rest.starts_with("?<!"));
                    n += usize::from(named);
                }
            }
            _ => {}
        }
    }
    n
}
