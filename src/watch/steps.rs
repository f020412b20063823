//! Findings from the PyTorch hooks' step events (`crate::bridge`): where a Python job's
//! step time goes, judged with the advisor's thresholds.

use super::findings::{FindingKind, WatchFinding};
use crate::advisor::{data_wait, fmt_pct};
use crate::bridge::{StackSummary, StepSummary};
use crate::results::Finding;

/// Host-to-device copies above this share of a step are worth pinning memory for.
pub const H2D_SHARE: f64 = 0.10;

/// The knob table's lines for loading in persistent worker processes.
fn workers_line() -> String {
    crate::knobs::torch_lines(
        [("num_workers", "N"), ("persistent_workers", "true")],
        "cpu",
    )
}

/// The data-wait hint: where the script loads in worker processes already, more of them
/// (up to the cores) or less work per sample; else workers.
fn data_hint(own_workers: usize, most: f64) -> String {
    if own_workers > 0 {
        return format!(
            "your script loads in {own_workers} worker process{} already; more workers (while \
             they fit the cores beside training), less work per sample in the Dataset, or \
             batches prepared ahead of time; removing all of the wait would give at most \
             {most:.2}x",
            if own_workers == 1 { "" } else { "es" }
        );
    }
    format!(
        "load batches in worker processes: {}; removing all of the wait would give at most \
         {most:.2}x",
        workers_line()
    )
}

/// Each of `workers` DataLoader workers replayed the whole stream of an IterableDataset
/// that does not shard by worker: every sample is trained on that many times per pass, a
/// fault in the script before it is a cost, so it comes first (#31).
fn replayed_finding(workers: u32) -> WatchFinding {
    WatchFinding {
        kind: FindingKind::ReplayedStream,
        device: "python".into(),
        finding: Finding {
            title: "each DataLoader worker replays the whole stream".into(),
            evidence: format!(
                "the DataLoader's IterableDataset gave each of its {workers} workers the same \
                 stream (worker 1's first batch equal to worker 0's, while worker 0's second \
                 differs), so each sample is trained on {workers} times per pass, measured by \
                 tune's PyTorch hooks"
            ),
        },
        hint: "shard the stream in the dataset's __iter__ (info = \
               torch.utils.data.get_worker_info(); take every info.num_workers-th item from \
               info.id), or load with num_workers=0; more workers only repeat samples"
            .into(),
    }
}

pub fn findings(
    s: &StepSummary,
    script: &super::dominant::ScriptKnobs,
    cores: usize,
) -> Vec<WatchFinding> {
    let mut out: Vec<WatchFinding> = s
        .stream_replayed
        .map(replayed_finding)
        .into_iter()
        .collect();
    let of_steps = format!(
        "over {} steps (median {:.1} ms), measured by tune's PyTorch hooks",
        s.steady_steps, s.median_step_ms
    );
    let share = |k: &str| s.phase_share.get(k).copied().unwrap_or(0.0);
    let wait = share("data_wait");
    if wait > data_wait::SHARE {
        out.push(WatchFinding {
            kind: FindingKind::DataWait,
            device: "python".into(),
            finding: Finding {
                title: "the training loop waits for data".into(),
                evidence: format!(
                    "DataLoader iteration takes {} of step time {of_steps}",
                    fmt_pct(wait)
                ),
            },
            hint: if s.stream_replayed.is_some() {
                "shard the stream first (the finding above): its workers repeat samples now, \
                 so more of them would only repeat more"
                    .into()
            } else {
                let mut h = data_hint(
                    super::dominant::script_count(script, "num_workers").unwrap_or(0),
                    1.0 / (1.0 - wait).max(1e-6),
                );
                if let Some(line) = super::dominant::loader_threads_line(script, cores, Some(wait))
                {
                    h.push_str(&format!(
                        "; the script's {} compute threads take all {cores} cores, so a loader \
                         worker only competes with them: give it one (torch.set_num_threads \
                         with fewer threads; sweep.toml crosses {line} with the workers)",
                        script.get("num_threads").map_or("", String::as_str),
                    ));
                }
                h
            },
        });
    }
    let h2d = share("h2d");
    if h2d > H2D_SHARE {
        out.push(WatchFinding {
            kind: FindingKind::H2d,
            device: "python".into(),
            finding: Finding {
                title: "host-to-device copies take a large share of the step".into(),
                evidence: format!(
                    "copies to the device take {} of step time {of_steps}",
                    fmt_pct(h2d)
                ),
            },
            hint: format!(
                "{}; x = x.to(\"cuda\", non_blocking=True)",
                crate::knobs::torch_line("pin_memory", "true", "cuda")
            ),
        });
    }
    out.extend(rank_imbalance(s));
    out
}

/// Evaluation above this share of the job's time is worth a finding of its own.
pub const EVAL_SHARE: f64 = 0.10;

/// The trained model's evaluation passes between training steps (`bridge::Evaluation`),
/// when they take `EVAL_SHARE` of the job's time or more: kept out of the step figures,
/// so without this a job that spends half its time validating was told only about its
/// training step.
pub fn evaluation_finding(s: &StepSummary) -> Option<WatchFinding> {
    let e = s.evaluation.as_ref().filter(|e| e.share >= EVAL_SHARE)?;
    // "about one every 1 steps, 0.00 s each" read badly for a GCN that validates after
    // each 4.6 ms step.
    let every = if e.every < 1.5 {
        "each step".to_string()
    } else {
        format!("about one every {:.0} steps", e.every)
    };
    let each = if e.median_s < 1.0 {
        format!("{:.1} ms", e.median_s * 1e3)
    } else {
        format!("{:.2} s", e.median_s)
    };
    Some(WatchFinding {
        kind: FindingKind::Evaluation,
        device: "python".into(),
        finding: Finding {
            title: "evaluating the model takes a large share of the job's time".into(),
            evidence: format!(
                "the trained model's passes in eval mode, with the batches fetched for them, \
                 took {} of the job's time: {} evaluation{} in {} steps ({every}), {each} each \
                 (median), measured by tune's PyTorch hooks; they are \
                 left out of the step time and samples/s above",
                fmt_pct(e.share),
                e.passes,
                if e.passes == 1 { "" } else { "s" },
                s.steady_steps,
            ),
        },
        hint: format!(
            "evaluate less often ({every} now), on a fixed subset of the validation set, \
             or under torch.inference_mode() with a larger batch; removing it all would \
             make the job at most {:.2}x faster. tune's sweeps measure the training steps, \
             so they cannot test this: change the script and watch it again",
            1.0 / (1.0 - e.share).max(1e-6)
        ),
    })
}

/// A rank whose own work (outside backward) exceeds the fastest rank's by more than this
/// share of the step is a straggler worth a finding.
pub const RANK_SPREAD: f64 = 0.20;

/// torchrun ranks: one rank doing more work per step than the others. Under DDP every
/// rank's step lasts as long as the slowest one's (the others wait in backward's
/// all-reduce), so the step times agree and the spread shows outside backward.
fn rank_imbalance(s: &StepSummary) -> Vec<WatchFinding> {
    // Trainers that multiprocessing started without ranks (Hogwild!) wait for no
    // all-reduce: one slower than another holds none of the others back.
    if s.processes.is_some() {
        return Vec::new();
    }
    let cmp = |a: &&crate::bridge::RankSummary, b: &&crate::bridge::RankSummary| {
        a.outside_backward_ms.total_cmp(&b.outside_backward_ms)
    };
    let (Some(slow), Some(fast)) = (s.ranks.iter().max_by(cmp), s.ranks.iter().min_by(cmp)) else {
        return Vec::new();
    };
    let step_ms = slow.median_step_ms.max(fast.median_step_ms);
    let spread = slow.outside_backward_ms - fast.outside_backward_ms;
    if s.ranks.len() < 2 || step_ms <= 0.0 || spread <= RANK_SPREAD * step_ms {
        return Vec::new();
    }
    let per_rank: Vec<String> = s
        .ranks
        .iter()
        .map(|r| {
            format!(
                "rank {}: step {:.1} ms, {:.1} ms outside backward",
                r.rank, r.median_step_ms, r.outside_backward_ms
            )
        })
        .collect();
    vec![WatchFinding {
        kind: FindingKind::Imbalance,
        device: format!("rank{}", slow.rank),
        finding: Finding {
            title: format!("rank {} is slower than the other ranks", slow.rank),
            evidence: format!(
                "rank {} spends {:.1} ms more per step outside backward than rank {} ({} of \
                 the step; {}), measured by tune's PyTorch hooks; the other ranks wait for it \
                 in the gradient all-reduce",
                slow.rank,
                spread,
                fast.rank,
                fmt_pct(spread / step_ms),
                per_rank.join("; ")
            ),
        },
        hint: format!(
            "find what rank {} does more of per step (its data loading, its own Python \
                 between the hooks, a busier host or device); removing it would shorten every \
                 rank's step by up to {:.1} ms",
            slow.rank, spread
        ),
    }]
}

/// Findings from `--pid` stack samples: the share of samples in each phase.
pub fn stack_findings(s: &StackSummary) -> Vec<WatchFinding> {
    let wait = s.phase_share.get("data_wait").copied().unwrap_or(0.0);
    if s.samples == 0 || wait <= data_wait::SHARE {
        return Vec::new();
    }
    vec![WatchFinding {
        kind: FindingKind::DataWait,
        device: "python".into(),
        finding: Finding {
            title: "the training loop waits for data".into(),
            evidence: format!(
                "{} of {} samples of the main thread's Python stack were in DataLoader iteration",
                fmt_pct(wait),
                s.samples
            ),
        },
        hint: format!("load batches in worker processes: {}", workers_line()),
    }]
}
