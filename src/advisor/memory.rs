//! Memory near the device limit: checkpointing or mixed precision, with the memory each
//! saved and the throughput it cost in this sweep.

use super::{fmt_pct, fmt_ratio, mib, unmeasured_change, Ctx, Say};
use crate::knobs::{Amp, Checkpoint};
use crate::results::model::{RecKind, Recommendation, TrialReport};
use crate::results::record::Status;
use crate::results::Finding;

/// Peak memory above this share of the limit leaves no room to grow (DESIGN.md's anchor).
pub const NEAR: f64 = 0.90;

/// What counts against the limit: on the CUDA backend the engine's tracked device
/// memory; otherwise the sampled resident memory when there is one (the per-trial cap
/// and the host limit apply to it), else the tracked bytes.
pub fn used(cx: &Ctx, t: &TrialReport) -> Option<u64> {
    if cx.backend() == "cuda" {
        t.peak_total_bytes
    } else {
        t.rss_peak_bytes.or(t.peak_total_bytes)
    }
}

fn what_used(cx: &Ctx, t: &TrialReport) -> &'static str {
    if cx.backend() != "cuda" && t.rss_peak_bytes.is_some() {
        "resident memory"
    } else {
        "tracked memory"
    }
}

/// The memory a trial may use, and what that limit is: the spec's per-trial cap, else
/// GPU 0's memory on the CUDA backend, else the host's memory.
pub fn limit(cx: &Ctx) -> Option<(u64, String)> {
    let env = &cx.report.environment;
    if let Some(cap) = cx.report.spec.search.mem_cap_mib {
        return Some((cap << 20, "the per-trial memory cap (mem_cap_mib)".into()));
    }
    if cx.backend() == "cuda" {
        if let Some(g) = env.gpus.first() {
            return Some((g.memory_total_bytes, format!("GPU 0 ({})", g.name)));
        }
    }
    env.host_memory_bytes.map(|b| (b, "host memory".into()))
}

fn pytorch(cx: &Ctx, t: &TrialReport) -> String {
    match t.knobs.amp {
        // TF32 keeps f32 storage: it saves no memory.
        Amp::Off | Amp::Tf32 => cx.line("checkpoint", "sqrt"),
        a => super::amp::autocast_line(cx, a),
    }
}

pub fn check(cx: &Ctx) -> Vec<Recommendation> {
    let Some((limit, what)) = limit(cx) else {
        return Vec::new();
    };
    let base_id = cx.report.baseline.as_deref();
    let Some(base) = base_id.and_then(|id| cx.report.trial(id)) else {
        return Vec::new();
    };
    let base_oom = base.status == Status::Oom;
    let base_peak = used(cx, base).filter(|_| base.status == Status::Ok);
    let seen = match base_peak {
        Some(p) if p as f64 >= NEAR * limit as f64 => format!(
            "the baseline's {} peaks at {:.1} MiB, {} of {what} ({:.1} MiB)",
            what_used(cx, base),
            mib(p),
            fmt_pct(p as f64 / limit as f64),
            mib(limit)
        ),
        _ if base_oom => format!(
            "the baseline ran out of memory ({})",
            base.error.as_deref().unwrap_or("no detail")
        ),
        _ => return Vec::new(),
    };
    let mut cands: Vec<(&TrialReport, &str)> = Vec::new();
    for (knob, t) in cx
        .varying("checkpoint")
        .into_iter()
        .map(|t| ("checkpoint", t))
        .chain(cx.varying("amp").into_iter().map(|t| ("amp", t)))
    {
        let saves = match (used(cx, t), base_peak) {
            (Some(x), Some(b)) => x < b,
            (Some(_), None) => true,
            _ => false,
        };
        if t.status == Status::Ok && saves && cx.parity(t).allows() {
            cands.push((t, knob));
        }
    }
    // The most memory saved; among equals, the faster.
    cands.sort_by(|a, b| {
        a.0.peak_total_bytes.cmp(&b.0.peak_total_bytes).then(
            b.0.samples_per_s
                .map(|c| c.median)
                .unwrap_or(0.0)
                .total_cmp(&a.0.samples_per_s.map(|c| c.median).unwrap_or(0.0)),
        )
    });
    let Some(&(t, knob)) = cands.first() else {
        if cx
            .varying("checkpoint")
            .iter()
            .any(|t| t.status == Status::Ok)
        {
            return Vec::new();
        }
        return vec![unmeasured_change(Say {
            title: "Checkpoint activations to make room".into(),
            evidence: vec![
                seen,
                "checkpointing was not measured in this sweep: add checkpoint = [\"off\", \"sqrt\"]"
                    .into(),
            ],
            tune_flag: super::flag("checkpoint", "sqrt"),
            pytorch: cx.line("checkpoint", "sqrt"),
        })];
    };
    let peak = used(cx, t).unwrap_or(0);
    let mut evidence = vec![seen];
    match base_peak {
        Some(b) => evidence.push(format!(
            "{}: peak {:.1} MiB, saves {:.1} MiB ({} of the baseline's)",
            t.label,
            mib(peak),
            mib(b.saturating_sub(peak)),
            fmt_pct(b.saturating_sub(peak) as f64 / b.max(1) as f64)
        )),
        None => evidence.push(format!("{}: runs, peak {:.1} MiB", t.label, mib(peak))),
    }
    let r = t.ratio_vs_baseline;
    if let Some(r) = &r {
        evidence.push(format!(
            "throughput {} of the baseline's{}",
            fmt_ratio(r),
            if r.significant {
                ""
            } else {
                " (no significant change)"
            }
        ));
    }
    let value = t.knobs.get(knob).unwrap_or_default();
    let what_change = match (t.knobs.checkpoint, t.knobs.amp) {
        (Checkpoint::Off, a) => format!("mixed precision ({a})"),
        (c, _) => format!("activation checkpointing ({c})"),
    };
    vec![Recommendation {
        kind: RecKind::Change,
        finding: Finding {
            title: format!("Near the memory limit: use {what_change}"),
            evidence: evidence.join("; "),
        },
        expected_gain: r,
        confidence: if r.is_some() { "high" } else { "medium" }.into(),
        tune_flag: super::flag(knob, &value),
        pytorch: pytorch(cx, t),
        change: crate::spec::Change::of([knob], &t.knobs),
        ..Recommendation::default()
    }]
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{by_rule, report, spec, trial};
    use crate::results::record::Status;

    const CAP: &str = "mem_cap_mib = 1000";

    #[test]
    fn fires_near_the_limit_with_memory_saved_and_throughput_cost() {
        let s = spec("checkpoint = [\"off\", \"sqrt\"]", CAP);
        let r = report(
            &s,
            vec![
                trial(&s, &[], 0.010).peak_mib(950),
                trial(&s, &[("checkpoint", "sqrt")], 0.012).peak_mib(600),
            ],
        );
        let recs = by_rule(&r, "memory");
        assert_eq!(recs.len(), 1, "{recs:?}");
        let e = &recs[0].finding.evidence;
        assert!(e.contains("95.0%") && e.contains("saves 350.0 MiB"), "{e}");
        let g = recs[0].expected_gain.unwrap();
        assert!(g.ratio < 0.9 && g.significant, "{g:?}");
        assert_eq!(recs[0].tune_flag, "--checkpoint sqrt");
        assert!(recs[0].pytorch.contains("torch.utils.checkpoint"));
    }

    #[test]
    fn resident_memory_counts_against_the_cap_when_sampled() {
        let s = spec("checkpoint = [\"off\", \"sqrt\"]", CAP);
        // Little tracked memory, but the process really holds 960 MiB.
        let r = report(
            &s,
            vec![
                trial(&s, &[], 0.010).peak_mib(100).rss_mib(960),
                trial(&s, &[("checkpoint", "sqrt")], 0.012)
                    .peak_mib(60)
                    .rss_mib(700),
            ],
        );
        let recs = by_rule(&r, "memory");
        assert_eq!(recs.len(), 1, "{recs:?}");
        let e = &recs[0].finding.evidence;
        assert!(
            e.contains("resident memory peaks at 960.0 MiB") && e.contains("saves 260.0 MiB"),
            "{e}"
        );
    }

    #[test]
    fn silent_with_room_to_spare() {
        let s = spec("checkpoint = [\"off\", \"sqrt\"]", CAP);
        let r = report(
            &s,
            vec![
                trial(&s, &[], 0.010).peak_mib(500),
                trial(&s, &[("checkpoint", "sqrt")], 0.012).peak_mib(300),
            ],
        );
        assert!(by_rule(&r, "memory").is_empty());
    }

    #[test]
    fn an_out_of_memory_baseline_takes_what_fits() {
        let s = spec("amp = [\"off\", \"bf16\"]", CAP);
        let r = report(
            &s,
            vec![
                trial(&s, &[], 0.010).status(Status::Oom, "resident memory exceeded the cap"),
                trial(&s, &[("amp", "bf16")], 0.008).peak_mib(700),
            ],
        );
        let recs = by_rule(&r, "memory");
        assert_eq!(recs.len(), 1, "{recs:?}");
        assert!(recs[0].finding.evidence.contains("ran out of memory"));
        assert!(
            recs[0].pytorch.contains("torch.autocast"),
            "{}",
            recs[0].pytorch
        );
    }

    #[test]
    fn never_recommends_a_saving_that_lost_accuracy() {
        let s = spec("amp = [\"off\", \"fp16\"]", CAP);
        let r = report(
            &s,
            vec![
                trial(&s, &[], 0.010).peak_mib(950),
                trial(&s, &[("amp", "fp16")], 0.008)
                    .peak_mib(500)
                    .accuracy(Some(0.6)),
            ],
        );
        assert!(by_rule(&r, "memory")
            .iter()
            .all(|x| !x.tune_flag.contains("fp16")));
    }
}
