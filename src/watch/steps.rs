//! Findings from the PyTorch hooks' step events (`crate::bridge`): where a Python job's
//! step time goes, judged with the advisor's thresholds.

use super::findings::{FindingKind, WatchFinding};
use crate::advisor::{data_wait, fmt_pct};
use crate::bridge::{StackSummary, StepSummary};
use crate::results::Finding;

/// Host-to-device copies above this share of a step are worth pinning memory for.
pub const H2D_SHARE: f64 = 0.10;

pub fn findings(s: &StepSummary) -> Vec<WatchFinding> {
    let mut out = Vec::new();
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
            hint: format!(
                "load batches in worker processes: DataLoader(dataset, num_workers=N, \
                 persistent_workers=True); removing all of the wait would give at most {:.2}x",
                1.0 / (1.0 - wait).max(1e-6)
            ),
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
            hint: "DataLoader(dataset, pin_memory=True); x = x.to(\"cuda\", non_blocking=True)"
                .into(),
        });
    }
    out
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
        hint: "load batches in worker processes: DataLoader(dataset, num_workers=N, \
               persistent_workers=True)"
            .into(),
    }]
}
