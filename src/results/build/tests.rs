use super::*;

fn repeat(median_step: f64) -> Repeat {
    Repeat {
        // The slow first step is the warm-up and must not count.
        step_times: vec![10.0, median_step, median_step, median_step],
        warmup: 1,
        samples_per_step: 8,
        ..Repeat::default()
    }
}

fn trial(status: Status, medians: &[f64]) -> TrialReport {
    let repeats: Vec<Repeat> = medians.iter().map(|&m| repeat(m)).collect();
    TrialReport {
        id: "t".into(),
        label: "t".into(),
        knobs: Default::default(),
        status,
        error: None,
        round: 0,
        steps: 3,
        noise_floor: repeat_noise_floor(&repeats).unwrap_or(0.0),
        repeats,
        samples_per_s: None,
        tokens_per_s: None,
        ratio_vs_baseline: None,
        peak_total_bytes: None,
        phase_share: BTreeMap::new(),
        accuracy: None,
        final_loss: None,
        not_applicable: BTreeMap::new(),
        devices: Vec::new(),
        rss_peak_bytes: None,
        nodes: Vec::new(),
        foreign_cpu_pct: None,
        partial: None,
        hardware: Vec::new(),
        joules_per_sample: None,
        contamination: None,
        overrides: BTreeMap::new(),
        script_knobs: BTreeMap::new(),
        nearest_baseline: None,
        against: Vec::new(),
        settled: None,
    }
}

#[test]
fn the_noise_floor_is_unknown_below_two_repeats_and_summarised_over_trials() {
    assert_eq!(repeat_noise_floor(&[repeat(0.1)]), None);
    let f = repeat_noise_floor(&[repeat(0.10), repeat(0.11), repeat(0.105)]).unwrap();
    assert!((f - 0.1).abs() < 1e-12, "{f}");
    assert_eq!(noise_summary(&[trial(Status::Ok, &[0.1])]), None);
    let s = noise_summary(&[
        trial(Status::Ok, &[0.10, 0.12]),
        trial(Status::Ok, &[0.10, 0.102, 0.101]),
        trial(Status::Ok, &[0.10, 0.104]),
        // A failed trial's repeats say nothing about noise; a single repeat neither.
        trial(Status::Crashed, &[0.1, 0.5]),
        trial(Status::Ok, &[0.1]),
    ])
    .unwrap();
    assert_eq!((s.trials, s.repeats), (3, 2));
    assert!(
        (s.median - 0.04).abs() < 1e-12 && (s.max - 0.2).abs() < 1e-12,
        "{s:?}"
    );
}

/// A cluster record: one repeat per (median step, node type) pair, in run order.
fn on_nodes(runs: &[(f64, &str)]) -> TrialRecord {
    use crate::results::record::{NodeFingerprint, NodeRun};
    TrialRecord {
        id: "t".into(),
        label: "t".into(),
        knobs: Knobs::default(),
        round: 0,
        steps: 3,
        status: Status::Ok,
        error: None,
        repeats: runs.iter().map(|&(m, _)| repeat(m)).collect(),
        timeline: Vec::new(),
        hardware: Vec::new(),
        nodes: runs
            .iter()
            .enumerate()
            .map(|(i, &(_, cpu))| NodeRun {
                repeat: i,
                job_id: format!("{i}"),
                node: format!("n{i}"),
                fingerprint: Some(NodeFingerprint {
                    hostname: format!("n{i}"),
                    cpu_model: cpu.into(),
                    cores: 2,
                    ..NodeFingerprint::default()
                }),
            })
            .collect(),
    }
}

#[test]
fn cluster_ratios_use_only_repeats_on_the_baselines_node_type() {
    // The baseline ran twice on "fast" nodes (1 s steps) and once on a "slow" one; the
    // trial once on "fast" at the same speed and twice on "slow" at 3 s. Pooled, the
    // trial would look about 2x slower; on one node type it is the same speed.
    let base = on_nodes(&[(1.0, "fast"), (1.0, "fast"), (2.0, "slow")]);
    let t = on_nodes(&[(1.0, "fast"), (3.0, "slow"), (3.0, "slow")]);
    let ty = reference_type(Some(&base));
    assert_eq!(
        ty.as_deref().map(|t| t.contains("fast")),
        Some(true),
        "{ty:?}"
    );
    let bd = steady_on(&base, ty.as_deref());
    let r = trial_report(&t, Some(&bd), ty.as_deref());
    let ratio = r
        .ratio_vs_baseline
        .expect("a ratio on the shared node type");
    assert!((ratio.ratio - 1.0).abs() < 1e-9, "{ratio:?}");
    // A trial with no repeat on the baseline's node type has no ratio at all.
    let elsewhere = on_nodes(&[(1.0, "slow")]);
    let r = trial_report(&elsewhere, Some(&bd), ty.as_deref());
    assert!(r.ratio_vs_baseline.is_none(), "{:?}", r.ratio_vs_baseline);
    // A local record (no node information) keeps every repeat.
    let mut local = t.clone();
    local.nodes.clear();
    assert_eq!(steady_on(&local, ty.as_deref()).0.len(), 9);
}
