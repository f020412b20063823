//! The measured-speedup rule: a configuration measured significantly faster than the
//! baseline (its interval excludes 1) that learns the same is always a recommendation,
//! even when no phase rule explains it. Command and Python workloads report throughput
//! only, so without this rule the one change that doubled a user's throughput would go
//! unsaid; a change of the script's own `[params]` counts like a knob's, its line being
//! the user's command with the new value. It runs after the phase rules and only speaks
//! for knobs they left alone, so a phase rule's "why" is never duplicated.

use super::{effect_evidence, flag, Ctx, Say};
use crate::knobs::Knobs;
use crate::results::model::{Recommendation, TrialReport};
use crate::results::Finding;
use crate::spec::{Change, Workload};

/// Knobs and `[params]` where `t` differs from the baseline, with `t`'s values.
pub(crate) fn changed(t: &TrialReport, base: &Knobs) -> Change {
    let params = t
        .knobs
        .params
        .iter()
        .filter(|(n, v)| base.params.get(*n) != Some(*v))
        .map(|(n, _)| n.as_str());
    let knobs = Knobs::NAMES
        .iter()
        .copied()
        .filter(|n| t.knobs.differs(base, n));
    Change::of(knobs.chain(params), &t.knobs)
}

/// The change as `tune` takes it (knob flags; a parameter, which has no flag, as
/// `name=value`) and as the line to run (the PyTorch line of each knob, the user's
/// command with the new parameter values).
fn lines(cx: &Ctx, t: &TrialReport, change: &Change) -> (String, String) {
    let (knobs, params): (Vec<_>, Vec<_>) = change
        .iter()
        .partition(|(k, _)| crate::knobs::knob(k).is_some());
    let mut tune: Vec<String> = knobs.iter().map(|(k, v)| flag(k, v)).collect();
    tune.extend(params.iter().map(|(k, v)| format!("{k}={v}")));
    tune.retain(|f| !f.is_empty());
    let mut line = cx.lines(knobs.iter().copied());
    if let (false, Workload::Command(c)) = (params.is_empty(), &cx.report.spec.workload) {
        if !line.is_empty() {
            line.push_str("; ");
        }
        line.push_str(&c.render(&t.knobs));
    }
    (tune.join(" "), line)
}

/// The phase whose time shrank by most of the gain, said in shares of the baseline's
/// step: a trial's step is `1 / ratio` of the baseline's (same samples per step), so a
/// phase's share of it, in the baseline's terms, is its own share over the ratio. A
/// script's fused optimizer measured 1.13x with only "no phase rule explains this gain"
/// beside it, where its optimizer had gone from 24% of the step to 12%.
fn phase_behind(base: &TrialReport, t: &TrialReport, ratio: f64) -> Option<String> {
    if ratio <= 1.0 || t.phase_share.is_empty() {
        return None;
    }
    let saved = 1.0 - 1.0 / ratio;
    let (phase, before, after) = base
        .phase_share
        .iter()
        .filter(|(p, _)| p.as_str() != "other")
        .map(|(p, b)| {
            let a = t.phase_share.get(p).copied().unwrap_or(0.0) / ratio;
            (p, *b, a)
        })
        .max_by(|x, y| (x.1 - x.2).total_cmp(&(y.1 - y.2)))?;
    (before - after >= 0.5 * saved).then(|| {
        format!(
            "its {phase} phase took {} of the baseline's step and {} after the change (in \
             the baseline's step time): most of the gain",
            super::fmt_pct(before),
            super::fmt_pct(after)
        )
    })
}

/// The memory a faster change costs, where its peak is a tenth (and 16 MiB) above the
/// baseline's: a script's checkpointing switched off buys its speed with the activations
/// it kept, and a user deciding on it needs both figures.
fn memory_cost(cx: &Ctx, base: &TrialReport, t: &TrialReport) -> Option<String> {
    let (b, m) = (super::memory::used(cx, base)?, super::memory::used(cx, t)?);
    let more = m.checked_sub(b)?;
    (more >= 16 << 20 && more as f64 >= 0.1 * b as f64).then(|| {
        format!(
            "at a peak of {:.0} MiB against the baseline's {:.0} MiB (+{:.0}%)",
            super::mib(m),
            super::mib(b),
            100.0 * more as f64 / b as f64
        )
    })
}

/// Whether an earlier recommendation (a change, a suggestion or a warning) already
/// speaks about `knob`: the phase rule's words then stand.
fn spoken_for(earlier: &[Recommendation], knob: &str) -> bool {
    let f = super::switch(knob);
    earlier.iter().any(|r| {
        r.change.contains_key(knob)
            || r.tune_flag
                .split_whitespace()
                .any(|w| f.as_deref() == Some(w))
    })
}

fn recommend(cx: &Ctx, t: &TrialReport, earlier: &[Recommendation]) -> Option<Recommendation> {
    let base = cx.base?;
    let r = t.ratio_vs_baseline?;
    let change = changed(t, cx.base_knobs());
    if change.is_empty() || change.keys().any(|k| spoken_for(earlier, k)) {
        return None;
    }
    let mut evidence = vec![effect_evidence(&t.label, t, base, &r)];
    if base.phase_share.is_empty() {
        evidence.push("this workload reports throughput only, so no phase rule can say why".into());
    } else {
        evidence.push(
            phase_behind(base, t, r.ratio)
                .unwrap_or_else(|| "no phase rule explains this gain".into()),
        );
    }
    evidence.extend(memory_cost(cx, base, t));
    let noise = base.noise_floor.max(t.noise_floor);
    let (tune_flag, pytorch) = lines(cx, t, &change);
    let say = Say {
        title: format!("Use {} (measured {:.2}× faster)", t.label, r.ratio),
        evidence,
        tune_flag,
        pytorch,
    };
    Some(Recommendation {
        rule: "faster".into(),
        kind: crate::results::model::RecKind::Change,
        finding: Finding {
            title: say.title,
            evidence: say.evidence.join("; "),
        },
        expected_gain: Some(r),
        confidence: super::confidence(&r, noise).into(),
        tune_flag: say.tune_flag,
        pytorch: say.pytorch,
        change,
    })
}

/// Recommendations for significant speedups the rules in `earlier` did not cover: the
/// best one-knob (or one-parameter) change per knob and parameter, then the best
/// multi-knob configuration whose knobs no recommendation claims yet (a random search
/// may have no one-knob trials).
pub fn check(cx: &Ctx, earlier: &[Recommendation]) -> Vec<Recommendation> {
    let mut out: Vec<Recommendation> = Vec::new();
    let mut seen = earlier.to_vec();
    let params = cx.base_knobs().params.keys().map(String::as_str);
    for knob in Knobs::NAMES.iter().copied().chain(params) {
        let Some((t, _)) = cx.best_gain(&cx.varying(knob)) else {
            continue;
        };
        if let Some(rec) = recommend(cx, t, &seen) {
            seen.push(rec.clone());
            out.push(rec);
        }
    }
    let base = cx.base_knobs();
    let multi: Vec<&TrialReport> = cx
        .report
        .trials
        .iter()
        .filter(|t| changed(t, base).len() > 1)
        .collect();
    if let Some((t, _)) = cx.best_gain(&multi) {
        out.extend(recommend(cx, t, &seen));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::testkit::{by_rule, report, spec, trial};

    #[test]
    fn a_significant_speedup_without_phase_evidence_is_recommended() {
        // No data-wait share at the baseline: the data_wait rule stays silent, yet
        // num_workers=2 is measured 1.4× faster.
        let s = spec("num_workers = [0, 2]", "");
        let r = report(
            &s,
            vec![
                trial(&s, &[], 0.010),
                trial(&s, &[("num_workers", "2")], 0.007),
            ],
        );
        assert!(by_rule(&r, "data_wait").is_empty());
        let recs = by_rule(&r, "faster");
        assert_eq!(recs.len(), 1, "{:?}", r.recommendations);
        let rec = &recs[0];
        assert!(rec.expected_gain.unwrap().lo > 1.0);
        assert_eq!(rec.change.get("num_workers").unwrap(), "2");
        assert_eq!(rec.tune_flag, "--num-workers 2");
        assert!(rec.pytorch.contains("num_workers=2"), "{}", rec.pytorch);
        assert!(
            rec.finding.evidence.contains("1.4"),
            "{}",
            rec.finding.evidence
        );
        // The confirmation combines it.
        let c = r.confirmation.as_ref().unwrap();
        assert_eq!(c.knobs.num_workers, 2);
        assert_eq!(c.rules, vec!["faster"]);
    }

    /// The phase that shrank by most of the gain is named in place of "no phase rule".
    #[test]
    fn the_phase_behind_a_gain_is_named() {
        let s = spec("num_workers = [0, 2]", "");
        // 10 ms: forward 5, optimizer 3; 7 ms: forward 5, optimizer 1.
        let r = report(
            &s,
            vec![
                trial(&s, &[], 0.010)
                    .phase("forward", 0.5)
                    .phase("optimizer", 0.3),
                trial(&s, &[("num_workers", "2")], 0.007)
                    .phase("forward", 5.0 / 7.0)
                    .phase("optimizer", 1.0 / 7.0),
            ],
        );
        let recs = by_rule(&r, "faster");
        assert_eq!(recs.len(), 1, "{:?}", r.recommendations);
        let e = &recs[0].finding.evidence;
        assert!(
            e.contains("optimizer phase took 30.0%") && e.contains("10.0% after"),
            "{e}"
        );
        // A gain no one phase explains keeps the plain words.
        let r = report(
            &s,
            vec![
                trial(&s, &[], 0.010)
                    .phase("forward", 0.5)
                    .phase("optimizer", 0.3),
                trial(&s, &[("num_workers", "2")], 0.007)
                    .phase("forward", 0.5)
                    .phase("optimizer", 0.3),
            ],
        );
        let e = &by_rule(&r, "faster")[0].finding.evidence;
        assert!(e.contains("no phase rule explains"), "{e}");
    }

    /// A gain bought with memory says what it costs; one that costs little says nothing.
    #[test]
    fn a_gain_that_costs_memory_says_how_much() {
        let s = spec("num_workers = [0, 2]", "");
        let with = |mib: u64| {
            let r = report(
                &s,
                vec![
                    trial(&s, &[], 0.010),
                    trial(&s, &[("num_workers", "2")], 0.007).peak(mib << 20),
                ],
            );
            by_rule(&r, "faster")[0].finding.evidence.clone()
        };
        let e = with(160);
        assert!(
            e.contains("at a peak of 160 MiB against the baseline's 100 MiB (+60%)"),
            "{e}"
        );
        assert!(!with(105).contains("peak of"), "{}", with(105));
    }

    #[test]
    fn silent_when_a_phase_rule_already_recommends_the_knob() {
        let s = spec("num_workers = [0, 2]", "");
        let r = report(
            &s,
            vec![
                trial(&s, &[], 0.010).phase("data_wait", 0.30),
                trial(&s, &[("num_workers", "2")], 0.007),
            ],
        );
        assert_eq!(by_rule(&r, "data_wait").len(), 1);
        assert!(by_rule(&r, "faster").is_empty());
    }

    #[test]
    fn silent_when_not_significant_or_learning_less() {
        let s = spec("num_workers = [0, 2]", "");
        for (step, acc) in [(0.010, Some(0.9)), (0.011, Some(0.9)), (0.007, Some(0.5))] {
            let r = report(
                &s,
                vec![
                    trial(&s, &[], 0.010),
                    trial(&s, &[("num_workers", "2")], step).accuracy(acc),
                ],
            );
            assert!(by_rule(&r, "faster").is_empty(), "{step} {acc:?}");
        }
    }

    /// A command whose `[params]` alone were swept: its measured speed-up is recommended
    /// like a knob's, the line is the command with the new value, and the confirmation
    /// runs it.
    #[test]
    fn a_params_only_speedup_is_recommended_and_confirmed() {
        let s = crate::spec::Spec::parse(
            "name = \"p\"\n[workload.command]\nrun = \"python train.py --lr {lr}\"\n\
             metric_json_key = \"k\"\n[params]\nlr = [\"0.1\", \"0.01\"]\n",
            "p.toml",
        )
        .unwrap();
        let r = report(
            &s,
            vec![trial(&s, &[], 0.010), trial(&s, &[("lr", "0.01")], 0.007)],
        );
        let recs = by_rule(&r, "faster");
        assert_eq!(recs.len(), 1, "{:?}", r.recommendations);
        let rec = &recs[0];
        assert_eq!(rec.change.get("lr").unwrap(), "0.01");
        assert!(
            rec.finding.title.contains("lr=0.01"),
            "{}",
            rec.finding.title
        );
        assert!(
            rec.pytorch.contains("python train.py --lr") && rec.pytorch.contains("0.01"),
            "{}",
            rec.pytorch
        );
        // No tune flag exists for a script's own parameter; none is made up.
        assert!(!rec.tune_flag.contains("--lr"), "{}", rec.tune_flag);
        let c = r.confirmation.as_ref().unwrap();
        assert_eq!(c.knobs.params["lr"], "0.01");
        assert_eq!(c.rules, vec!["faster"]);
    }

    /// `fuse = on` measured faster is recommended with its PyTorch line, torch.compile
    /// and a fused optimizer (#30).
    #[test]
    fn a_faster_fuse_is_recommended_as_torch_compile() {
        let s = spec("fuse = [\"off\", \"on\"]", "");
        let r = report(
            &s,
            vec![trial(&s, &[], 0.010), trial(&s, &[("fuse", "on")], 0.006)],
        );
        let recs = by_rule(&r, "faster");
        assert_eq!(recs.len(), 1, "{:?}", r.recommendations);
        assert!(
            recs[0].tune_flag.contains("--fuse on"),
            "{}",
            recs[0].tune_flag
        );
        assert!(
            recs[0].pytorch.contains("torch.compile(model)")
                && recs[0].pytorch.contains("fused=True"),
            "{}",
            recs[0].pytorch
        );
    }

    #[test]
    fn a_multi_knob_winner_is_recommended_when_no_one_knob_trial_exists() {
        let s = spec(
            "num_workers = [0, 2]\nzero_grad = [\"memset\", \"none\"]",
            "",
        );
        let r = report(
            &s,
            vec![
                trial(&s, &[], 0.010),
                trial(&s, &[("num_workers", "2"), ("zero_grad", "none")], 0.006),
            ],
        );
        let recs = by_rule(&r, "faster");
        assert_eq!(recs.len(), 1, "{:?}", r.recommendations);
        assert_eq!(recs[0].change.len(), 2);
        assert!(recs[0].pytorch.contains("set_to_none=True"));
        assert!(recs[0].tune_flag.contains("--zero-grad none"));
    }

    /// A script's SGD is told to build torch.optim.SGD with fused=True, not AdamW (#31).
    #[test]
    fn an_optimizer_change_names_the_scripts_own_class() {
        let s = crate::spec::Spec::parse(
            "[workload.python]\nrun = \"python t.py\"\n[knobs]\n\
             optim_impl = [\"default\", \"fused\"]\n",
            "t.toml",
        )
        .unwrap();
        let r = report(
            &s,
            vec![
                trial(&s, &[], 0.010).script_knob("optimizer", "torch.optim.SGD"),
                trial(&s, &[("optim_impl", "fused")], 0.007),
            ],
        );
        let recs = by_rule(&r, "faster");
        assert_eq!(recs.len(), 1, "{:?}", r.recommendations);
        assert!(
            recs[0]
                .pytorch
                .starts_with("optimizer = torch.optim.SGD(params, ..., fused=True)"),
            "{}",
            recs[0].pytorch
        );
        assert!(!recs[0].pytorch.contains("AdamW"), "{}", recs[0].pytorch);
    }

    /// A Lightning script's measured bf16 is its Trainer's precision, and the Hugging
    /// Face Trainer's workers its TrainingArguments' (#31): before, both were told
    /// PyTorch's autocast block and DataLoader call, which their loops own.
    #[test]
    fn a_frameworks_script_is_told_its_frameworks_setting() {
        let s = crate::spec::Spec::parse(
            "[workload.python]\nrun = \"python t.py\"\n[knobs]\n\
             amp = [\"off\", \"bf16\"]\nnum_workers = [0, 2]\n",
            "t.toml",
        )
        .unwrap();
        for (framework, amp, workers) in [
            (
                "lightning",
                "L.Trainer(..., precision=\"bf16-mixed\")",
                "DataLoader(dataset, num_workers=2)",
            ),
            (
                "transformers",
                "TrainingArguments(..., bf16=True)",
                "TrainingArguments(..., dataloader_num_workers=2)",
            ),
        ] {
            let r = report(
                &s,
                vec![
                    trial(&s, &[], 0.010).script_knob("framework", framework),
                    trial(&s, &[("amp", "bf16")], 0.006),
                    trial(&s, &[("num_workers", "2")], 0.007),
                ],
            );
            let lines: Vec<&str> = r
                .recommendations
                .iter()
                .map(|r| r.pytorch.as_str())
                .collect();
            assert!(lines.contains(&amp), "{framework}: {lines:?}");
            assert!(lines.contains(&workers), "{framework}: {lines:?}");
        }
    }
}
