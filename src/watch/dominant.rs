//! The dominant cost of a Python job's step, named whatever it is, as a hypothesis with
//! the sweep that would test it. The data-wait and copy findings (`steps`) cover the
//! input side; this names the optimizer or the computation when one of them is the
//! largest part of the step, so an optimizer-bound or compute-bound job does not end
//! with "findings: none" (seen: Adam at 71% of the step reported as "waits for data 9%").

use std::path::Path;

use super::findings::{FindingKind, WatchFinding};
use crate::advisor::fmt_pct;
use crate::bridge::StepSummary;
use crate::results::Finding;

mod beside;
mod layout;
#[cfg(test)]
use beside::{NO_GRAD_SHARE, RECOMPUTE_SHARE};

/// The file `tune watch` writes beside its report when a finding has a sweep to test it.
pub const SWEEP_TOML: &str = "sweep.toml";

/// A cost is named when it is the largest and takes at least this share of the step.
pub const DOMINANT_SHARE: f64 = 0.30;

fn of_steps(s: &StepSummary) -> String {
    format!(
        "over {} steps (median {:.1} ms), measured by tune's PyTorch hooks",
        s.steady_steps, s.median_step_ms
    )
}

/// What the script itself does for each knob, as the hooks read it (`script_knobs`).
pub type ScriptKnobs = std::collections::BTreeMap<String, String>;

/// The script's own value of a count knob (`num_workers`, `num_threads`).
pub fn script_count(script: &ScriptKnobs, knob: &str) -> Option<usize> {
    script.get(knob)?.parse().ok()
}

/// The optimizer or compute finding, when that cost dominates the step.
pub fn findings(s: &StepSummary, script: &ScriptKnobs) -> Vec<WatchFinding> {
    let share = |k: &str| s.phase_share.get(k).copied().unwrap_or(0.0);
    let optimizer = share("optimizer") + share("zero_grad");
    let compute = share("forward") + share("backward");
    let input = share("data_wait") + share("h2d");
    // The script's own code between the hooks, where the hooks split it from the module
    // calls (on the CPU): an RL loop's environment, a log's `.item()` on every step.
    let own = share("script");
    let top = optimizer.max(compute).max(input).max(own);
    if top < DOMINANT_SHARE {
        return Vec::new();
    }
    if own == top {
        return vec![super::own_code::finding(
            s,
            own,
            compute,
            optimizer,
            &of_steps(s),
        )];
    }
    if optimizer == top {
        let evidence = format!(
            "Optimizer.step and zero_grad take {} of step time, forward and backward {} {}",
            fmt_pct(optimizer),
            fmt_pct(compute),
            of_steps(s)
        );
        return vec![optimizer_finding(
            "the optimizer step is the largest cost",
            evidence,
            script,
            optimizer,
        )];
    }
    if compute == top {
        let mut out = vec![WatchFinding {
            kind: FindingKind::Compute,
            device: "python".into(),
            finding: Finding {
                title: "forward and backward computation is the largest cost".into(),
                evidence: if s.phase_share.contains_key("script") {
                    format!(
                        "the model's calls (forward, a loss module's) and backward take {} of \
                         step time, the script's own code between them {}, the optimizer {}, \
                         waiting for data {} {}",
                        fmt_pct(compute),
                        fmt_pct(own),
                        fmt_pct(optimizer),
                        fmt_pct(share("data_wait")),
                        of_steps(s)
                    )
                } else {
                    format!(
                        "forward (with the loss and the script's own Python) and backward \
                         take {} of step time, the optimizer {}, waiting for data {} {}",
                        fmt_pct(compute),
                        fmt_pct(optimizer),
                        fmt_pct(share("data_wait")),
                        of_steps(s)
                    )
                },
            },
            hint: layout::with_layout(
                if float64(script) {
                    FLOAT64_HINT.into()
                } else if own_slow_bf16(script) {
                    own_bf16_hint(script)
                } else if slow_bf16(script) {
                    no_bf16_hint(script.get("compile").map(String::as_str))
                } else {
                    compute_hint(
                        script.get("amp").map(String::as_str),
                        script.get("compile").map(String::as_str),
                        script.get(crate::knobs::FRAMEWORK).map(String::as_str),
                    )
                },
                script,
            ),
        }];
        out.extend(beside::recompute(s, script));
        out.extend(beside::no_grad(s));
        out.extend(second_optimizer(s, script, optimizer, compute));
        return out;
    }
    Vec::new()
}

/// The optimizer takes at least this share of a step it does not dominate, and the
/// script does not run the fused update: worth a trial of its own. A deep narrow MLP
/// whose SGD ran the per-parameter loop (`foreach=False`) spent 24% of its step in the
/// optimizer under a compute-bound step, and `fused=True` made the step 1.21x faster
/// by hand; only the compute finding was named, and its sweep tried bf16 alone.
pub const SECOND_OPTIMIZER_SHARE: f64 = 0.15;

/// The optimizer finding beside a dominant computation, when the update is a large share
/// too and an implementation is left to try.
fn second_optimizer(
    s: &StepSummary,
    script: &ScriptKnobs,
    optimizer: f64,
    compute: f64,
) -> Option<WatchFinding> {
    let own = script.get("optim_impl").map(String::as_str);
    if optimizer < SECOND_OPTIMIZER_SHARE || impls_left(script).is_empty() {
        return None;
    }
    let runs = match own {
        Some("forloop") => " and your script runs its per-parameter loop (foreach=False)",
        _ => "",
    };
    let evidence = format!(
        "Optimizer.step and zero_grad take {} of step time{runs}, beside forward and \
         backward's {} {}",
        fmt_pct(optimizer),
        fmt_pct(compute),
        of_steps(s)
    );
    Some(optimizer_finding(
        "the optimizer step is a large cost too",
        evidence,
        script,
        optimizer,
    ))
}

/// An optimizer finding whose update takes `share` of the step, with the hint for the
/// script's own implementation and the most that removing the update could give.
fn optimizer_finding(
    title: &str,
    evidence: String,
    script: &ScriptKnobs,
    share: f64,
) -> WatchFinding {
    WatchFinding {
        kind: FindingKind::Optimizer,
        device: "python".into(),
        finding: Finding {
            title: title.into(),
            evidence,
        },
        hint: optimizer_hint(
            script.get("optim_impl").map(String::as_str),
            script.get(crate::bridge::OPTIMIZER).map(String::as_str),
            &impls_left(script),
            1.0 / (1.0 - share).max(1e-6),
        ),
    }
}

/// The `script_knobs` key of the dtype most of the trained model's parameters hold, as
/// the hooks read it ("float32", "float64"): not a knob tune sets.
pub const PARAM_DTYPE: &str = "param_dtype";

/// Whether the model trains in float64 (`.double()`, as pytorch/examples'
/// time_sequence_prediction does): autocast casts float32 operations only, so an amp
/// trial would leave its arithmetic as it is; its watch once offered bf16 regardless.
fn float64(script: &ScriptKnobs) -> bool {
    script.get(PARAM_DTYPE).is_some_and(|d| d == "float64")
}

const FLOAT64_HINT: &str = "your model's parameters are float64 (`.double()`), and autocast \
     casts float32 operations only, so amp cannot act on it and tune's sweep does not try it. \
     float32 (`model.float()` and float32 inputs) moves half the bytes and runs faster \
     kernels where arithmetic bounds the step, not the cost of each operation (a Python loop \
     over small LSTMCells, time_sequence_prediction's, gained only 1.05x by hand on a 2-core \
     CPU): tune has no knob for the parameters' dtype, so time it by hand, with the loss \
     checked";

/// Whether the script computes under its own autocast already (`amp`, as the hooks read
/// it): then tune has no lower precision left to offer it.
fn reduced(own: Option<&str>) -> bool {
    matches!(own, Some("bf16" | "fp16"))
}

/// The `script_knobs` key of the device type most of the trained model's parameters are
/// on ("cpu", "cuda"), as the hooks read it.
pub const PARAM_DEVICE: &str = "param_device";

/// Not the script's: set beside its knobs by the watch (`session`) where the model trains
/// on a CPU without bf16 arithmetic of its own (`probes::cpu::native_bf16`), so that the
/// compute rule, which reads only the script's facts, knows bf16 would run converted.
pub const NO_NATIVE_BF16: &str = "cpu_without_native_bf16";

/// Whether bf16 autocast would only slow this job: it trains on a CPU without native bf16.
fn slow_bf16(script: &ScriptKnobs) -> bool {
    script.contains_key(NO_NATIVE_BF16) && !reduced(script.get("amp").map(String::as_str))
}

/// Whether the script's own bf16 autocast runs on a CPU without bf16 arithmetic, where
/// autocast converts around float32: a small MLP under the script's bf16 autocast ran
/// 19.0 ms a step and 5.0 ms in float32 by hand on a 2-core Xeon without AVX512_BF16
/// (3.79x), and the watch had said "no lower precision left to try".
fn own_slow_bf16(script: &ScriptKnobs) -> bool {
    script.contains_key(NO_NATIVE_BF16) && script.get("amp").is_some_and(|a| a == "bf16")
}

/// The `[knobs]` line that measures the script's own bf16 against float32 (tune's trial
/// turns the script's autocast off), the script as written first.
const OWN_BF16_LINE: &str = "amp = [\"bf16\", \"off\"]";

/// The compute hint where the script's own bf16 autocast runs converted (`own_slow_bf16`).
fn own_bf16_hint(script: &ScriptKnobs) -> String {
    let fused = compile_line(script).map_or(String::new(), |l| {
        format!(", and torch.compile's fused kernels beside it ({l})")
    });
    format!(
        "hypothesis: your script computes under bf16 autocast on a CPU without bf16 \
         arithmetic of its own (no AVX512_BF16 or AMX in /proc/cpuinfo), where autocast \
         converts around float32 and runs slower (0.32-0.61x of float32 on five models on \
         such a CPU): float32 may be faster. tune watch wrote sweep.toml beside this report \
         to measure your autocast against float32 ({OWN_BF16_LINE}: tune's trial turns your \
         autocast off){fused}, with the loss checked"
    )
}

/// The `[knobs]` line that measures torch.compile's fused kernels, unless the script
/// compiles already.
fn compile_line(script: &ScriptKnobs) -> Option<String> {
    let own = script.get("compile").map(String::as_str);
    own.is_none_or(|m| m == "off")
        .then(|| "compile = [\"off\", \"default\"]".into())
}

/// The compute hint on a CPU without native bf16 (`slow_bf16`): fused kernels are the
/// hypothesis left, since autocast would convert around f32 arithmetic. On a 2-core Ice
/// Lake Xeon bf16 ran 0.32-0.61x of float32 on five models (an MLP, a conv net, an LSTM,
/// scripts/realistic's ckpt_mixer and ckpt_seq_lm), and torch.compile ran a residual MLP
/// 1.16-1.18x (its first step 35 s).
fn no_bf16_hint(compile: Option<&str>) -> String {
    let fused = match compile {
        Some(mode) if mode != "off" => format!(
            "your script compiles its model already (torch.compile, mode {mode}), so fused \
             kernels are taken too; what is left is less work per step"
        ),
        _ => "hypothesis: torch.compile's fused kernels may shorten it; tune watch wrote \
              sweep.toml beside this report to measure it (compile = [\"off\", \"default\"]), \
              its compile time counted"
            .into(),
    };
    format!(
        "the step is compute-bound on a CPU without bf16 arithmetic of its own (no \
         AVX512_BF16 or AMX in /proc/cpuinfo), where bf16 autocast converts around float32 \
         and runs slower (0.32-0.61x of float32 on five models on such a CPU), so tune does \
         not try it; {fused}"
    )
}

/// The compute finding's hint. bf16 is a hypothesis to measure, never a forecast: on this
/// project's AVX512_BF16 CPU autocast made a BiLSTM 1.39x faster and a small transformer
/// LM 2x slower (scripts/realistic: lstm_text, char_lm). Under the script's own autocast
/// (`amp`) the fused kernels of torch.compile are what is left, unless it compiles
/// already (`compile`, its mode as the hooks read it). The bf16 line is the framework's
/// where a framework's loop runs the steps (`Trainer(precision="bf16-mixed")`).
fn compute_hint(amp: Option<&str>, compile: Option<&str>, framework: Option<&str>) -> String {
    if reduced(amp) {
        let fused = match compile {
            Some(mode) if mode != "off" => format!(
                "your script compiles its model already (torch.compile, mode {mode}), so \
                 fused kernels are taken too"
            ),
            _ => "or fused kernels: torch.compile, which the sweep tune watch wrote beside \
                  this report measures (compile = [\"off\", \"default\"]), its compile \
                  time counted"
                .into(),
        };
        return format!(
            "the step is compute-bound and your script computes under autocast ({}) already, \
             so tune has no lower precision left to try; what is left is less work per step \
             (a smaller model or sequence, activation checkpointing only where memory is the \
             limit) {fused}",
            amp.unwrap_or_default()
        );
    }
    let how = match framework {
        Some(f) => crate::knobs::script_lines([("amp", "bf16")], "cpu", Some(f), None),
        None => "with torch.autocast(device, dtype=torch.bfloat16)".into(),
    };
    format!(
        "hypothesis: the step is compute-bound, so lower-precision arithmetic may shorten it: \
         {how} (amp = bf16). Untested: it depends on the model and the hardware (on one \
         AVX512_BF16 CPU it made an LSTM 1.39x faster and a small transformer 2x slower), so \
         tune watch wrote sweep.toml beside this report to measure it, with the loss checked"
    )
}

/// The `optim_impl` implementations a trial could still switch the job's optimizers to:
/// those every optimizer class of the job has a switch for (`bridge::OPTIM_IMPLS`; both
/// where the hooks did not say), past the script's own, and none once the script runs
/// the fused update. Before, pytorch/examples' siamese_network was told to try
/// `torch.optim.Adadelta(params, ..., fused=True)`, which Adadelta does not have.
fn impls_left(script: &ScriptKnobs) -> Vec<&'static str> {
    let own = script.get("optim_impl").map(String::as_str);
    if own == Some("fused") {
        return Vec::new();
    }
    let known: Option<Vec<&str>> = script
        .get(crate::bridge::OPTIM_IMPLS)
        .map(|v| v.split(',').map(str::trim).collect());
    ["foreach", "fused"]
        .into_iter()
        .filter(|i| known.as_ref().is_none_or(|k| k.contains(i)) && own != Some(*i))
        .collect()
}

/// The optimizer finding's hint: the implementations still to try (`left`; `own` is the
/// script's `optim_impl`, read by the hooks), or, where none is, what is left; `class`
/// the optimizer classes the hooks read; `most` is the gain if the update took no time
/// at all.
fn optimizer_hint(own: Option<&str>, class: Option<&str>, left: &[&str], most: f64) -> String {
    let size = format!(
        "what is left is its size: fewer parameters in the optimizer (frozen layers), sparse \
         gradients for large embedding tables, or a lighter optimizer; removing all of it \
         would give at most {most:.2}x"
    );
    if left.is_empty() {
        let why = match (own, class) {
            (Some("fused"), _) => "your script runs the fused update already (fused=True)".into(),
            (_, Some(c)) if !c.contains(',') => {
                format!("{c} has no faster implementation to switch to")
            }
            _ => "your optimizers have no faster implementation to switch to".into(),
        };
        return format!(
            "hypothesis: the update itself, not the model's computation, bounds the step; \
             {why}, so {size}"
        );
    }
    // The first implementation to name: fused where the class has it.
    let first = if left.contains(&"fused") {
        "fused"
    } else {
        left[0]
    };
    let generic = crate::knobs::torch_line("optim_impl", first, "cpu");
    let line = crate::knobs::name_optimizer(&generic, class);
    let line = match line.strip_prefix("optimizer = ") {
        Some(l) if line != generic => l.to_string(),
        _ => format!("your optimizer's constructor with {first}=True"),
    };
    let (what, also, them) = match left {
        [_, _] => (
            "the fused or multi-tensor update",
            ", or foreach=True",
            "both",
        ),
        [i] if *i == "fused" => ("the fused update", "", "it"),
        _ => ("the multi-tensor update", "", "it"),
    };
    format!(
        "hypothesis: the update itself, not the model's computation, bounds the step (many \
         or large parameter tensors). Try {what} ({line}{also}): sweep.toml's optim_impl \
         measures {them} against your script as written (tune watch writes it beside this \
         report); else fewer parameters in the optimizer (frozen layers) or a lighter \
         optimizer. Removing all of the update would give at most {most:.2}x"
    )
}

/// A `[knobs]` line listing `own` (the script's value) first, so the baseline is the
/// script as written, then the other values in order.
fn own_first(knob: &str, own: Option<String>, values: &[String]) -> String {
    let mut v: Vec<String> = own.into_iter().collect();
    for x in values {
        if !v.contains(x) {
            v.push(x.clone());
        }
    }
    format!("{knob} = [{}]", v.join(", "))
}

/// `[knobs]` lines of the sweep that tests the findings' hypotheses, on `cores` cores,
/// each starting at the script's own value (`script`) where the hooks read it.
/// `data_wait` is the hooks' share of the step spent waiting for batches: a script
/// without workers whose wait could give less than the advisor's least untested gain
/// gets no worker trials (a recommender's 5.5% wait, beside an optimizer at 81%).
pub fn sweep_knobs(
    found: &[WatchFinding],
    cores: usize,
    script: &ScriptKnobs,
    data_wait: Option<f64>,
) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for f in found {
        let line = match f.kind {
            FindingKind::DataWait | FindingKind::Starvation => {
                let own = script_count(script, "num_workers");
                let minor = data_wait
                    .is_some_and(|w| !crate::advisor::data_wait::worth_untested(w, cores, 0.0));
                if minor && own.unwrap_or(0) == 0 {
                    continue;
                }
                // Loader processes beyond the cores only compete with training for them.
                let mut v: Vec<usize> = vec![0, 1, 2, 4];
                v.retain(|n| *n == 0 || *n <= cores.max(1));
                let own = own.map(|w| w.to_string());
                let v: Vec<String> = v.iter().map(usize::to_string).collect();
                own_first("num_workers", own, &v)
            }
            FindingKind::H2d => "pin_memory = [false, true]".into(),
            // The script's checkpointing is the baseline; the trial runs its calls plainly.
            FindingKind::Recompute => "checkpoint = [\"off\"]".into(),
            // Its own bf16 converted on this CPU: float32 first, then fused kernels.
            FindingKind::Compute if own_slow_bf16(script) => {
                out.push(OWN_BF16_LINE.into());
                match compile_line(script) {
                    Some(l) => l,
                    None => continue,
                }
            }
            // Under its own autocast already, fused kernels are what is left to measure,
            // unless the script compiles already.
            FindingKind::Compute if reduced(script.get("amp").map(String::as_str)) => {
                match compile_line(script) {
                    Some(l) => l,
                    None => continue,
                }
            }
            // amp cannot act on a float64 model, and tune has no knob for its dtype.
            FindingKind::Compute if float64(script) => continue,
            // Without the CPU's own bf16 arithmetic autocast only slows it: fused kernels.
            FindingKind::Compute if slow_bf16(script) => match compile_line(script) {
                Some(l) => l,
                None => continue,
            },
            FindingKind::Compute => "amp = [\"off\", \"bf16\"]".into(),
            FindingKind::Optimizer => {
                let own = script.get("optim_impl").cloned();
                let left = impls_left(script);
                if left.is_empty() {
                    continue;
                }
                let q = |v: &str| format!("\"{v}\"");
                let v: Vec<String> = std::iter::once("default").chain(left).map(q).collect();
                own_first("optim_impl", own.as_deref().map(q), &v)
            }
            _ => continue,
        };
        if !out.contains(&line) {
            out.push(line);
        }
    }
    // The layout is measured beside whatever precision or compilation is left, and where
    // nothing is (a float64 conv net).
    if found.iter().any(|f| f.kind == FindingKind::Compute) && layout::nchw_convs(script) {
        out.push(layout::SWEEP_LINE.into());
    }
    out
}

/// The `[knobs]` line that gives loader workers a core of their own, crossed with the
/// worker counts (`grid`): when waiting for data is a dominant cost (`data_wait`, a share
/// of the step) and the script's compute threads (`script`'s `num_threads`) already take
/// every core, a worker only competes with them. On 2 cores an image job whose Dataset
/// decodes in Python gained nothing from 1 or 2 workers alone and 1.34x (by hand) from
/// one worker with one compute thread (scripts/realistic/img_decode.py).
pub fn loader_threads_line(
    script: &ScriptKnobs,
    cores: usize,
    data_wait: Option<f64>,
) -> Option<String> {
    let threads = script_count(script, "num_threads")?;
    (data_wait? >= DOMINANT_SHARE && cores >= 2 && threads >= cores)
        .then(|| format!("num_threads = [{threads}, {}]", cores - 1))
}

/// A word of a shell command, quoted for `sh` when it needs to be.
fn sh_word(w: &str) -> String {
    let plain = !w.is_empty()
        && w.chars()
            .all(|c| c.is_ascii_alphanumeric() || "_./=:,+-@%".contains(c));
    if plain {
        w.to_string()
    } else {
        format!("'{}'", w.replace('\'', "'\\''"))
    }
}

/// The spec `tune watch` writes beside its report: the watched command under
/// `[workload.python]`, one knob per hypothesis, each tried on its own, or every
/// combination (`grid`) where two knobs act only together.
/// `cwd` is the folder the watched command ran in: the spec lives in the report's folder,
/// and a `python train.py` run from there would find no `train.py` (a spec without it
/// failed every trial of the watch's own hypotheses).
pub fn sweep_spec(
    command: &[String],
    knobs: &[String],
    cwd: Option<&Path>,
    grid: bool,
) -> Option<String> {
    if command.is_empty() || knobs.is_empty() {
        return None;
    }
    let cwd = match cwd.and_then(Path::to_str) {
        Some(d) => format!("cwd = {}\n", serde_json::to_string(d).ok()?),
        None => String::new(),
    };
    let line: Vec<String> = command.iter().map(|w| sh_word(w)).collect();
    // Braces are literal in a run template only when doubled.
    let run = line.join(" ").replace('{', "{{").replace('}', "}}");
    let run = serde_json::to_string(&run).ok()?;
    let (how, strategy) = if grid {
        (
            "every combination of the knobs (loader workers and compute threads share the\n\
             # cores, so each acts only with the other)",
            "grid",
        )
    } else {
        ("each knob on its own", "one-at-a-time")
    };
    Some(format!(
        "# Written by tune watch: a sweep that tests its findings' hypotheses on the watched\n\
         # command, {how}, against your script as written.\n\
         name = \"watch-hypotheses\"\n\n[workload.python]\nrun = {run}\n{cwd}\n[knobs]\n{}\n\n\
         [search]\nstrategy = \"{strategy}\"\nrepeats = 2\n\
         # The whole sweep, its confirmation included, in {WATCH_BUDGET_S} s: each run measures\n\
         # a share of what is left, and the report names what did not fit (--resume runs it).\n\
         budget_s = {WATCH_BUDGET_S}\n",
        knobs.join("\n")
    ))
}

/// The time the sweep `tune watch` writes may take: DESIGN.md's target for a real
/// script's 2-knob sweep ("answers in under 10 minutes on 2 cores"). Without it, a busy
/// machine's 6.7 s LSTM steps kept one such sweep going past 25 minutes (#31).
pub const WATCH_BUDGET_S: u64 = 600;

/// Other processes' share of the machine (percent) from which the watched job is said to
/// have competed for the CPU (`html::foreign_load`'s threshold).
pub const FOREIGN_PCT: f64 = 25.0;

/// PyTorch's threads oversubscribe the CPU when they exceed the cores left free by at
/// least this many cores: a quiet machine's own noise (the sampler, a shell, the desktop)
/// keeps a few hundredths of a core busy, which must not make a 2-thread job on 2 cores
/// "oversubscribed", while one competing process takes a whole core.
pub const OVERSUBSCRIBED_BY: f64 = 0.5;

/// The job's compute threads against the cores other processes left free.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Threads {
    /// `torch.get_num_threads()` of the script, read by the hooks at its first step: in
    /// each of its training processes.
    pub script: usize,
    /// The training processes (DDP's ranks), each running `script` threads: Lightning's
    /// 2 ranks of 1 thread on 2 cores were told "1 more core free".
    pub procs: usize,
    /// Cores left free: the cores less other processes' mean use, in cores.
    pub free: f64,
    /// The thread count per process that fits those cores (at least 1).
    pub fit: usize,
    /// More threads than the free cores: they wait for one another at every parallel op.
    pub oversubscribed: bool,
    /// The threads all processes together fit.
    fit_all: usize,
}

impl Threads {
    /// `script` threads in each of `procs` processes on `cores` cores of which others
    /// kept `other_pct` percent busy.
    pub fn of(script: usize, procs: usize, cores: usize, other_pct: f64) -> Threads {
        let procs = procs.max(1);
        let cores = cores.max(1) as f64;
        let free = (cores - other_pct.clamp(0.0, 100.0) / 100.0 * cores).max(0.0);
        // The most threads not called oversubscribed: a quiet 2-core machine's 1.97
        // free cores fit 2 (floor gave 1, and 1 thread ran a U-Net step in 52 ms
        // against 36 ms with 2: scripts/realistic/oversub.py).
        let fit_all = (((free + OVERSUBSCRIBED_BY).ceil() as usize).saturating_sub(1)).max(1);
        Threads {
            script,
            procs,
            free,
            fit: (fit_all / procs).max(1),
            oversubscribed: (script * procs) as f64 >= free + OVERSUBSCRIBED_BY,
            fit_all,
        }
    }

    /// Whole free cores the script's threads leave idle.
    pub fn idle(&self) -> usize {
        if self.oversubscribed {
            0
        } else {
            self.fit_all.saturating_sub(self.script * self.procs)
        }
    }

    /// "2 PyTorch threads", or "1 PyTorch thread in each of 2 processes".
    fn said(&self) -> String {
        let each = match self.procs {
            1 => String::new(),
            n => format!(" in each of {n} processes"),
        };
        let s = if self.script == 1 { "" } else { "s" };
        format!("{} PyTorch thread{s}{each}", self.script)
    }

    /// The `[knobs]` line of the sweep that tests fewer threads, when fewer would fit: the
    /// script's own count first, so the baseline is the script as it runs, then the count
    /// that fits and one thread (a job whose main thread also loads data can do better
    /// with one, and the sweep, not a guess, says which).
    pub fn sweep_line(&self) -> Option<String> {
        if !(self.oversubscribed && self.script > self.fit) {
            return None;
        }
        let mut v = vec![self.script, self.fit];
        if self.fit > 1 {
            v.push(1);
        }
        let v: Vec<String> = v.iter().map(usize::to_string).collect();
        Some(format!("num_threads = [{}]", v.join(", ")))
    }
}

/// The script's threads leave free cores idle under a compute-bound step (`compute`: the
/// compute finding fired): a recipe pinned to `torch.set_num_threads(1)` for a node shared
/// by several jobs, run alone on 2 free cores, took 63.4 ms a step against 35.9 ms with 2
/// threads by hand, and the watch named only bf16. The `[knobs]` line to measure it is
/// the second item.
pub fn idle_cores(threads: Option<Threads>, compute: bool) -> Option<(WatchFinding, String)> {
    let t = threads.filter(|t| compute && t.idle() > 0)?;
    let line = format!("num_threads = [{}, {}]", t.script, t.fit);
    let finding = WatchFinding {
        kind: FindingKind::IdleCores,
        device: "host".into(),
        finding: Finding {
            title: format!(
                "the compute-bound step runs on {} with {} more core{} free",
                t.said(),
                t.idle(),
                if t.idle() == 1 { "" } else { "s" }
            ),
            evidence: format!(
                "torch.get_num_threads() is {} (read by tune's hooks) and about {:.1} cores \
                 were free while the job ran",
                t.script, t.free
            ),
        },
        hint: format!(
            "the idle cores could share the forward and backward: try \
             torch.set_num_threads({fit}) (or remove the script's own call, or its \
             OMP_NUM_THREADS) and measure it: sweep.toml's {line} (tune watch writes it beside \
             this report). Keep the lower count where other jobs share the machine on purpose",
            fit = t.fit
        ),
    };
    Some((finding, line))
}

/// Contention, where users look (the CLI and summary.md, not only the HTML banner):
/// `foreign` is other processes' load in words when it was a quarter of the machine or
/// more; `threads` the script's compute threads against the free cores, when the hooks
/// read them. Under one competing process on 2 cores, PyTorch's default 2 threads ran an
/// LM's step in 6 s against 200 ms with one thread (#31's evaluation scripts): said, and
/// the thread count that fits proposed for the sweep to measure.
pub fn contention(foreign: Option<String>, threads: Option<Threads>) -> Option<WatchFinding> {
    let over = threads.filter(|t| t.oversubscribed);
    if foreign.is_none() && over.is_none() {
        return None;
    }
    let mut evidence: Vec<String> = foreign
        .map(|f| f.trim_end_matches('.').to_string())
        .into_iter()
        .collect();
    if let Some(t) = threads {
        evidence.push(format!(
            "the script computes with {} (torch.get_num_threads(), read by tune's hooks) \
             and about {:.1} core{} {} free",
            t.said(),
            t.free,
            if (t.free - 1.0).abs() < 0.05 { "" } else { "s" },
            if (t.free - 1.0).abs() < 0.05 {
                "was"
            } else {
                "were"
            }
        ));
    }
    let (title, hint) = match over {
        Some(t) => (
            format!(
                "the job's {} oversubscribe the CPU: more threads than free cores",
                t.said()
            ),
            format!(
                "threads beyond the free cores wait for one another at every parallel operation, \
                 so a step can take many times longer (on 2 cores under one competing process, \
                 an LM's 200 ms step took 6 s with 2 threads); try \
                 torch.set_num_threads({fit}) (or OMP_NUM_THREADS={fit}) and measure it: {}",
                t.sweep_line().map_or_else(
                    || "the script already runs no more threads than fit".to_string(),
                    |l| format!("sweep.toml's {l} (tune watch writes it beside this report)")
                ),
                fit = t.fit
            ),
        ),
        None => (
            "other processes competed for the CPU".to_string(),
            "the figures include that contention: measure again on a quiet machine, or give \
             the job fewer threads than cores (torch.set_num_threads) so it does not wait for \
             them"
                .to_string(),
        ),
    };
    Some(WatchFinding {
        kind: FindingKind::Contention,
        device: "host".into(),
        finding: Finding {
            title,
            evidence: evidence.join("; "),
        },
        hint,
    })
}

#[cfg(test)]
mod tests;
