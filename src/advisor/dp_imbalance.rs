//! DataParallel's imbalance: device 0 scatters, gathers, computes the loss and steps the
//! optimizer, so it holds more memory and works longer than the others. When a DP trial
//! shows that, recommend DistributedDataParallel, with the DDP trial's measured gain over
//! DP when the sweep has one.

use super::{fmt_pct, fmt_ratio, mib, unmeasured_change, Ctx, Say};
use crate::knobs::Parallel;
use crate::results::model::{RecKind, Recommendation, TrialReport};
use crate::results::record::Status;
use crate::results::Finding;

/// Device 0 above the others' mean by this factor (memory or busy share) is imbalance.
pub const IMBALANCE: f64 = 1.10;

const PYTORCH: &str = "model = DistributedDataParallel(model, device_ids=[local_rank])  \
                       # launch: torchrun --nproc_per_node=N train.py";

/// Device 0's peak and busy share over the other devices' means.
pub fn imbalance(t: &TrialReport) -> Option<(f64, f64)> {
    let (d0, rest) = t.devices.split_first()?;
    if rest.is_empty() {
        return None;
    }
    let mean = |v: Vec<f64>| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
    let mem = mean(
        rest.iter()
            .filter_map(|d| d.peak().map(|b| b as f64))
            .collect(),
    )
    .and_then(|m| Some(d0.peak()? as f64 / m.max(1.0)))
    .unwrap_or(1.0);
    let busy = mean(rest.iter().filter_map(|d| d.busy_share()).collect())
        .and_then(|m| Some(d0.busy_share()? / m.max(1e-9)))
        .unwrap_or(1.0);
    Some((mem, busy))
}

fn describe(t: &TrialReport) -> String {
    let devs: Vec<String> = t
        .devices
        .iter()
        .map(|d| {
            format!(
                "{} {} MiB{}",
                t.device_name(d),
                d.peak().map_or("–".into(), |b| format!("{:.1}", mib(b))),
                d.busy_share()
                    .map_or(String::new(), |s| format!(" busy {}", fmt_pct(s)))
            )
        })
        .collect();
    devs.join(", ")
}

pub fn check(cx: &Ctx) -> Vec<Recommendation> {
    let mut out = Vec::new();
    for dp in cx.report.trials.iter().filter(|t| {
        t.status == Status::Ok && t.knobs.parallel == Parallel::Dp && t.knobs.devices > 1
    }) {
        let Some((mem, busy)) = imbalance(dp) else {
            continue;
        };
        if mem < IMBALANCE && busy < IMBALANCE {
            continue;
        }
        let n = dp.knobs.devices;
        let seen = format!(
            "{}: device 0 holds {mem:.2}× the others' mean peak memory and is busy {busy:.2}× as long ({})",
            dp.label,
            describe(dp)
        );
        let mut ddp_knobs = dp.knobs.clone();
        ddp_knobs.parallel = Parallel::Ddp;
        let ddp = cx
            .report
            .trials
            .iter()
            .find(|t| t.knobs == ddp_knobs && t.status == Status::Ok);
        let say = |evidence| Say {
            title: format!("Use DistributedDataParallel instead of DataParallel on {n} devices"),
            evidence,
            tune_flag: format!(
                "{} {}",
                super::flag("parallel", "ddp"),
                super::flag("devices", &n.to_string())
            ),
            pytorch: PYTORCH.into(),
        };
        match ddp.and_then(|d| Some((d, cx.ratio(dp, d)?))) {
            Some((d, r)) if r.significant && r.ratio > 1.0 => {
                let noise = dp.noise_floor.max(d.noise_floor);
                let mut evidence = vec![seen, format!("{}: {}", d.label, describe(d))];
                evidence.push(format!("DDP over DP: {} throughput", fmt_ratio(&r)));
                let s = say(evidence);
                out.push(Recommendation {
                    kind: RecKind::Change,
                    finding: Finding {
                        title: s.title,
                        evidence: s.evidence.join("; "),
                    },
                    expected_gain: Some(r),
                    confidence: super::confidence(&r, noise).into(),
                    tune_flag: s.tune_flag,
                    pytorch: s.pytorch,
                    change: crate::spec::Change::of(["parallel", "devices"], &d.knobs),
                    ..Recommendation::default()
                });
            }
            // DDP measured and no faster: the imbalance costs nothing here.
            Some(_) => {}
            None => out.push(unmeasured_change(say(vec![
                seen,
                "DDP on the same devices was not measured in this sweep".into(),
            ]))),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{by_rule, report, spec, trial};

    fn dp_ddp(dp_devs: &[(f64, u64, f64)], ddp_step: f64) -> crate::results::model::Report {
        let s = spec(
            "parallel = [\"single\", \"dp\", \"ddp\"]\ndevices = [1, 2]",
            "strategy = \"grid\"",
        );
        report(
            &s,
            vec![
                trial(&s, &[], 0.010).devices(&[(0.9, 100, 0.0)]),
                trial(&s, &[("parallel", "dp"), ("devices", "2")], 0.008).devices(dp_devs),
                trial(&s, &[("parallel", "ddp"), ("devices", "2")], ddp_step)
                    .devices(&[(0.85, 110, 0.05), (0.85, 110, 0.05)]),
            ],
        )
    }

    #[test]
    fn fires_on_device0_imbalance_with_the_ddp_gain() {
        let r = dp_ddp(&[(0.95, 180, 0.0), (0.55, 100, 0.0)], 0.006);
        let recs = by_rule(&r, "dp_imbalance");
        assert_eq!(recs.len(), 1, "{:?}", r.recommendations);
        let g = recs[0].expected_gain.unwrap();
        assert!(g.significant && g.ratio > 1.2, "{g:?}");
        assert!(
            recs[0].finding.evidence.contains("1.80×"),
            "{}",
            recs[0].finding.evidence
        );
        assert!(recs[0].pytorch.contains("DistributedDataParallel"));
        assert_eq!(recs[0].tune_flag, "--parallel ddp --devices 2");
    }

    #[test]
    fn silent_when_balanced() {
        let r = dp_ddp(&[(0.9, 101, 0.0), (0.88, 100, 0.0)], 0.006);
        assert!(by_rule(&r, "dp_imbalance").is_empty());
    }

    #[test]
    fn silent_when_ddp_is_measured_without_a_gain() {
        let r = dp_ddp(&[(0.95, 180, 0.0), (0.55, 100, 0.0)], 0.008);
        assert!(
            by_rule(&r, "dp_imbalance").is_empty(),
            "{:?}",
            r.recommendations
        );
    }
}
