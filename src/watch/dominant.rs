//! The dominant cost of a Python job's step, named whatever it is, as a hypothesis with
//! the sweep that would test it. The data-wait and copy findings (`steps`) cover the
//! input side; this names the optimizer or the computation when one of them is the
//! largest part of the step, so an optimizer-bound or compute-bound job does not end
//! with "findings: none" (seen: Adam at 71% of the step reported as "waits for data 9%").

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

/// The optimizer or compute finding, when that cost dominates the step.
pub fn findings(s: &StepSummary) -> Vec<WatchFinding> {
    let share = |k: &str| s.phase_share.get(k).copied().unwrap_or(0.0);
    let optimizer = share("optimizer") + share("zero_grad");
    let compute = share("forward") + share("backward");
    let input = share("data_wait") + share("h2d");
    let top = optimizer.max(compute).max(input);
    if top < DOMINANT_SHARE {
        return Vec::new();
    }
    if optimizer == top {
        return vec![WatchFinding {
            kind: FindingKind::Optimizer,
            device: "python".into(),
            finding: Finding {
                title: "the optimizer step is the largest cost".into(),
                evidence: format!(
                    "Optimizer.step and zero_grad take {} of step time, forward and backward {} \
                     {}",
                    fmt_pct(optimizer),
                    fmt_pct(compute),
                    of_steps(s)
                ),
            },
            hint: format!(
                "hypothesis: the update itself, not the model's computation, bounds the step \
                 (many or large parameter tensors). Try the fused or multi-tensor update \
                 (torch.optim.AdamW(params, fused=True), or foreach=True), fewer parameters \
                 in the optimizer (frozen layers), or a lighter optimizer; removing all of it \
                 would give at most {:.2}x. tune has no optimizer knob: test it with a \
                 [params] entry passed to your script's own flag",
                1.0 / (1.0 - optimizer).max(1e-6)
            ),
        }];
    }
    if compute == top {
        return vec![WatchFinding {
            kind: FindingKind::Compute,
            device: "python".into(),
            finding: Finding {
                title: "forward and backward computation is the largest cost".into(),
                evidence: format!(
                    "forward (with the loss and the script's own Python) and backward take {} \
                     of step time, the optimizer {}, waiting for data {} {}",
                    fmt_pct(compute),
                    fmt_pct(optimizer),
                    fmt_pct(share("data_wait")),
                    of_steps(s)
                ),
            },
            hint: "hypothesis: the step is compute-bound, so lower-precision arithmetic may \
                   shorten it: with torch.autocast(device, dtype=torch.bfloat16) (amp = bf16); \
                   tune watch wrote sweep.toml beside this report to measure it, with the \
                   loss checked"
                .into(),
        }];
    }
    Vec::new()
}

/// `[knobs]` lines of the sweep that tests the findings' hypotheses, on `cores` cores.
pub fn sweep_knobs(found: &[WatchFinding], cores: usize) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for f in found {
        let line = match f.kind {
            FindingKind::DataWait | FindingKind::Starvation => {
                // Loader processes beyond the cores only compete with training for them.
                let mut v: Vec<usize> = vec![0, 1, 2, 4];
                v.retain(|n| *n == 0 || *n <= cores.max(1));
                format!(
                    "num_workers = [{}]",
                    v.iter()
                        .map(usize::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            }
            FindingKind::H2d => "pin_memory = [false, true]".into(),
            FindingKind::Compute => "amp = [\"off\", \"bf16\"]".into(),
            _ => continue,
        };
        if !out.contains(&line) {
            out.push(line);
        }
    }
    out
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
/// `[workload.python]`, one knob per hypothesis, each tried on its own.
pub fn sweep_spec(command: &[String], knobs: &[String]) -> Option<String> {
    if command.is_empty() || knobs.is_empty() {
        return None;
    }
    let line: Vec<String> = command.iter().map(|w| sh_word(w)).collect();
    // Braces are literal in a run template only when doubled.
    let run = line.join(" ").replace('{', "{{").replace('}', "}}");
    let run = serde_json::to_string(&run).ok()?;
    Some(format!(
        "# Written by tune watch: a sweep that tests its findings' hypotheses on the watched\n\
         # command, each knob on its own against your script as written.\n\
         name = \"watch-hypotheses\"\n\n[workload.python]\nrun = {run}\n\n[knobs]\n{}\n\n\
         [search]\nstrategy = \"one-at-a-time\"\nrepeats = 2\n",
        knobs.join("\n")
    ))
}

/// Contention, where users look (the CLI and summary.md, not only the HTML banner).
pub fn contention(line: String) -> WatchFinding {
    WatchFinding {
        kind: FindingKind::Contention,
        device: "host".into(),
        finding: Finding {
            title: "other processes competed for the CPU".into(),
            evidence: line,
        },
        hint: "the figures include that contention: measure again on a quiet machine, or give \
               the job fewer threads than cores (torch.set_num_threads) so it does not wait \
               for them"
            .into(),
    }
}
