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
            hint: if float64(script) {
                FLOAT64_HINT.into()
            } else {
                compute_hint(
                    script.get("amp").map(String::as_str),
                    script.get("compile").map(String::as_str),
                )
            },
        }];
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
    if optimizer < SECOND_OPTIMIZER_SHARE || own == Some("fused") {
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

/// The compute finding's hint. bf16 is a hypothesis to measure, never a forecast: on this
/// project's AVX512_BF16 CPU autocast made a BiLSTM 1.39x faster and a small transformer
/// LM 2x slower (scripts/realistic: lstm_text, char_lm). Under the script's own autocast
/// (`amp`) the fused kernels of torch.compile are what is left, unless it compiles
/// already (`compile`, its mode as the hooks read it).
fn compute_hint(amp: Option<&str>, compile: Option<&str>) -> String {
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
    "hypothesis: the step is compute-bound, so lower-precision arithmetic may shorten it: \
     with torch.autocast(device, dtype=torch.bfloat16) (amp = bf16). Untested: it depends on \
     the model and the hardware (on one AVX512_BF16 CPU it made an LSTM 1.39x faster and a \
     small transformer 2x slower), so tune watch wrote sweep.toml beside this report to \
     measure it, with the loss checked"
        .into()
}

/// The optimizer finding's hint: the implementations still to try (`own` is the script's
/// `optim_impl`, read by the hooks), or, where the script runs the fused update already,
/// what is left; `class` the optimizer classes the hooks read; `most` is the gain if
/// the update took no time at all.
fn optimizer_hint(own: Option<&str>, class: Option<&str>, most: f64) -> String {
    if own == Some("fused") {
        return format!(
            "hypothesis: the update itself, not the model's computation, bounds the step; \
             your script runs the fused update already (fused=True), so what is left is its \
             size: fewer parameters in the optimizer (frozen layers), sparse gradients for \
             large embedding tables, or a lighter optimizer; removing all of it would give at \
             most {most:.2}x"
        );
    }
    let generic = crate::knobs::torch_line("optim_impl", "fused", "cpu");
    let line = crate::knobs::name_optimizer(&generic, class);
    let line = match line.strip_prefix("optimizer = ") {
        Some(l) if line != generic => l.to_string(),
        _ => "your optimizer's constructor with fused=True".into(),
    };
    format!(
        "hypothesis: the update itself, not the model's computation, bounds the step (many \
         or large parameter tensors). Try the fused or multi-tensor update \
         ({line}, or foreach=True): sweep.toml's optim_impl \
         measures both against your script as written (tune watch writes it beside this \
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
            // Under its own autocast already, fused kernels are what is left to measure,
            // unless the script compiles already.
            FindingKind::Compute if reduced(script.get("amp").map(String::as_str)) => {
                let own = script.get("compile").map(String::as_str);
                if own.is_some_and(|m| m != "off") {
                    continue;
                }
                "compile = [\"off\", \"default\"]".into()
            }
            // amp cannot act on a float64 model, and tune has no knob for its dtype.
            FindingKind::Compute if float64(script) => continue,
            FindingKind::Compute => "amp = [\"off\", \"bf16\"]".into(),
            FindingKind::Optimizer => {
                let own = script.get("optim_impl").cloned();
                if own.as_deref() == Some("fused") {
                    continue;
                }
                let q = |v: &str| format!("\"{v}\"");
                let v: Vec<String> = ["default", "foreach", "fused"].map(q).to_vec();
                own_first("optim_impl", own.as_deref().map(q), &v)
            }
            _ => continue,
        };
        if !out.contains(&line) {
            out.push(line);
        }
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
    /// `torch.get_num_threads()` of the script, read by the hooks at its first step.
    pub script: usize,
    /// Cores left free: the cores less other processes' mean use, in cores.
    pub free: f64,
    /// The thread count that fits those cores (at least 1).
    pub fit: usize,
    /// More threads than the free cores: they wait for one another at every parallel op.
    pub oversubscribed: bool,
}

impl Threads {
    /// `script` threads on `cores` cores of which others kept `other_pct` percent busy.
    pub fn of(script: usize, cores: usize, other_pct: f64) -> Threads {
        let cores = cores.max(1) as f64;
        let free = (cores - other_pct.clamp(0.0, 100.0) / 100.0 * cores).max(0.0);
        Threads {
            script,
            free,
            // The most threads not called oversubscribed: a quiet 2-core machine's 1.97
            // free cores fit 2 (floor gave 1, and 1 thread ran a U-Net step in 52 ms
            // against 36 ms with 2: scripts/realistic/oversub.py).
            fit: (((free + OVERSUBSCRIBED_BY).ceil() as usize).saturating_sub(1)).max(1),
            oversubscribed: script as f64 >= free + OVERSUBSCRIBED_BY,
        }
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
            "the script computes with {} PyTorch thread{} (torch.get_num_threads(), read by \
             tune's hooks) and about {:.1} core{} {} free",
            t.script,
            if t.script == 1 { "" } else { "s" },
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
                "the job's {} PyTorch threads oversubscribe the CPU: more threads than free cores",
                t.script
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
mod tests {
    use super::*;

    #[test]
    fn threads_beyond_the_free_cores_are_oversubscribed_and_fewer_proposed() {
        // 2 cores, one competing process: the default 2 threads have one core.
        let t = Threads::of(2, 2, 50.0);
        assert!(t.oversubscribed && t.fit == 1, "{t:?}");
        assert_eq!(t.sweep_line().as_deref(), Some("num_threads = [2, 1]"));
        let f = contention(Some("others used 50%".into()), Some(t)).unwrap();
        assert!(f.finding.title.contains("oversubscribe"), "{f:?}");
        assert!(f.hint.contains("torch.set_num_threads(1)"), "{f:?}");
        assert!(f.finding.evidence.contains("2 PyTorch threads"), "{f:?}");
        // More threads than the machine has, with nothing else running.
        let t = Threads::of(8, 4, 2.0);
        assert_eq!(t.sweep_line().as_deref(), Some("num_threads = [8, 4, 1]"));
        // A quiet 2-core machine's noise leaves 1.97 cores: 2 threads fit, not 1.
        let t = Threads::of(8, 2, 1.5);
        assert_eq!(t.fit, 2, "{t:?}");
        assert_eq!(t.sweep_line().as_deref(), Some("num_threads = [8, 2, 1]"));
        // Half a core taken: 1.5 free cores fit one thread, as 2 are oversubscribed there.
        let t = Threads::of(2, 2, 25.0);
        assert!(t.oversubscribed && t.fit == 1, "{t:?}");
    }

    #[test]
    fn a_quiet_machine_or_a_job_that_fits_is_not_oversubscribed() {
        // A quiet machine's own few percent do not make 2 threads on 2 cores too many.
        let t = Threads::of(2, 2, 5.0);
        assert!(!t.oversubscribed, "{t:?}");
        assert!(contention(None, Some(t)).is_none());
        // One thread under load: contention is said, no thread count proposed.
        let t = Threads::of(1, 2, 50.0);
        assert!(!t.oversubscribed && t.sweep_line().is_none(), "{t:?}");
        let f = contention(Some("others used 50%".into()), Some(t)).unwrap();
        assert_eq!(f.finding.title, "other processes competed for the CPU");
    }
    fn found(kind: FindingKind) -> WatchFinding {
        WatchFinding {
            kind,
            device: "python".into(),
            finding: Finding {
                title: String::new(),
                evidence: String::new(),
            },
            hint: String::new(),
        }
    }

    fn script(pairs: &[(&str, &str)]) -> ScriptKnobs {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_data_bound_job_whose_threads_take_every_core_crosses_workers_with_fewer_threads() {
        let two = script(&[("num_threads", "2")]);
        assert_eq!(
            loader_threads_line(&two, 2, Some(0.57)).as_deref(),
            Some("num_threads = [2, 1]")
        );
        // A small wait, a thread to spare, or one core: nothing to cross.
        assert!(loader_threads_line(&two, 2, Some(0.10)).is_none());
        assert!(loader_threads_line(&two, 4, Some(0.57)).is_none());
        assert!(loader_threads_line(&script(&[("num_threads", "1")]), 1, Some(0.57)).is_none());
        let spec = sweep_spec(
            &["python".into(), "train.py".into()],
            &["num_workers = [0, 1]".into(), "num_threads = [2, 1]".into()],
            None,
            true,
        )
        .unwrap();
        assert!(spec.contains("strategy = \"grid\""), "{spec}");
        let parsed = crate::spec::Spec::parse(&spec, "sweep.toml").unwrap();
        assert_eq!(parsed.knobs.len(), 2);
    }

    #[test]
    fn the_sweep_starts_at_the_scripts_own_values_and_skips_what_cannot_pay() {
        let opt = [found(FindingKind::Optimizer)];
        assert_eq!(
            sweep_knobs(&opt, 2, &script(&[("optim_impl", "default")]), None),
            ["optim_impl = [\"default\", \"foreach\", \"fused\"]"]
        );
        assert_eq!(
            sweep_knobs(&opt, 2, &script(&[("optim_impl", "foreach")]), None),
            ["optim_impl = [\"foreach\", \"default\", \"fused\"]"]
        );
        // Fused already: nothing left for the knob to try, and the hint says so.
        assert!(sweep_knobs(&opt, 2, &script(&[("optim_impl", "fused")]), None).is_empty());
        assert!(optimizer_hint(Some("fused"), None, 5.0).contains("fused update already"));
        assert!(optimizer_hint(Some("default"), None, 5.0).contains("optim_impl"));
        // The script's class where the hooks read one, never AdamW for an SGD (#31).
        let sgd = optimizer_hint(Some("forloop"), Some("torch.optim.SGD"), 5.0);
        assert!(
            sgd.contains("(torch.optim.SGD(params, ..., fused=True), or"),
            "{sgd}"
        );
        let any = optimizer_hint(Some("default"), None, 5.0);
        assert!(
            any.contains("your optimizer's constructor with fused=True"),
            "{any}"
        );
        assert!(!any.contains("AdamW"), "{any}");
        let data = [found(FindingKind::DataWait)];
        // The script's 2 workers first, so fewer are measured against it too.
        assert_eq!(
            sweep_knobs(&data, 2, &script(&[("num_workers", "2")]), Some(0.07)),
            ["num_workers = [2, 0, 1]"]
        );
        // No workers and a 5.5% wait: at most 1.06x, no worker trials.
        assert!(sweep_knobs(&data, 2, &script(&[("num_workers", "0")]), Some(0.055)).is_empty());
        assert_eq!(
            sweep_knobs(&data, 2, &script(&[]), Some(0.5)),
            ["num_workers = [0, 1, 2]"]
        );
    }

    fn summary(forward: f64, backward: f64, optimizer: f64) -> StepSummary {
        serde_json::from_value(serde_json::json!({
            "torch": "2.x", "steps": 200, "steady_steps": 180, "median_step_ms": 10.1,
            "samples_per_s": 3181.0,
            "phase_share": {"forward": forward, "backward": backward, "optimizer": optimizer},
        }))
        .unwrap()
    }

    /// A deep MLP's SGD ran its per-parameter loop at 24% of a compute-bound step, and
    /// fused=True gave 1.21x by hand; only bf16 was offered.
    #[test]
    fn a_large_optimizer_share_beside_the_computation_is_named_and_swept_too() {
        let s = summary(0.31, 0.43, 0.24);
        let forloop = script(&[("optim_impl", "forloop")]);
        let f = findings(&s, &forloop);
        let kinds: Vec<FindingKind> = f.iter().map(|x| x.kind).collect();
        assert_eq!(kinds, [FindingKind::Compute, FindingKind::Optimizer]);
        assert!(
            f[1].finding.evidence.contains("24") && f[1].finding.evidence.contains("foreach=False"),
            "{}",
            f[1].finding.evidence
        );
        assert_eq!(
            sweep_knobs(&f, 2, &forloop, None),
            [
                "amp = [\"off\", \"bf16\"]",
                "optim_impl = [\"forloop\", \"default\", \"foreach\", \"fused\"]"
            ]
        );
        // A small update, or a fused one already: the computation alone.
        assert_eq!(findings(&summary(0.4, 0.5, 0.1), &forloop).len(), 1);
        let fused = script(&[("optim_impl", "fused")]);
        assert_eq!(findings(&s, &fused).len(), 1);
    }

    /// A compute-bound script that runs under its own bf16 autocast was told to try
    /// bf16, and its sweep.toml measured bf16 against itself.
    #[test]
    fn a_script_under_its_own_autocast_is_not_offered_bf16() {
        let compute = [found(FindingKind::Compute)];
        assert_eq!(
            sweep_knobs(&compute, 2, &script(&[("amp", "off")]), None),
            ["amp = [\"off\", \"bf16\"]"]
        );
        // Under its own autocast, torch.compile is what is left; unless it compiles too.
        assert_eq!(
            sweep_knobs(&compute, 2, &script(&[("amp", "bf16")]), None),
            ["compile = [\"off\", \"default\"]"]
        );
        let both = script(&[("amp", "bf16"), ("compile", "default")]);
        assert!(sweep_knobs(&compute, 2, &both, None).is_empty());
        let own = compute_hint(Some("bf16"), None);
        assert!(
            own.contains("under autocast (bf16) already")
                && !own.starts_with("hypothesis")
                && own.contains("compile = [\"off\", \"default\"]"),
            "{own}"
        );
        let compiled = compute_hint(Some("bf16"), Some("default"));
        assert!(
            compiled.contains("compiles its model already") && !compiled.contains("compile = ["),
            "{compiled}"
        );
        let off = compute_hint(Some("off"), None);
        assert!(
            off.starts_with("hypothesis") && off.contains("Untested"),
            "{off}"
        );
    }

    /// A float64 model (time_sequence_prediction's `.double()`) was offered bf16, which
    /// autocast cannot apply to it: its finding names the dtype, and no amp is swept.
    #[test]
    fn a_float64_model_is_not_offered_amp() {
        let s = summary(0.01, 0.96, 0.03);
        let f64_script = script(&[("amp", "off"), (PARAM_DTYPE, "float64")]);
        let f = findings(&s, &f64_script);
        assert_eq!(f[0].kind, FindingKind::Compute);
        assert!(
            f[0].hint.contains("float64") && !f[0].hint.contains("amp = bf16"),
            "{}",
            f[0].hint
        );
        assert!(sweep_knobs(&f, 2, &f64_script, None).is_empty());
        let f32_script = script(&[("amp", "off"), (PARAM_DTYPE, "float32")]);
        assert_eq!(
            sweep_knobs(&findings(&s, &f32_script), 2, &f32_script, None),
            ["amp = [\"off\", \"bf16\"]"]
        );
    }
}
