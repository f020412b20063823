//! Hand-made trial results for the rules' tests: journal records with step times drawn
//! around a chosen mean (1% noise), built into a report by the real report builder.

use std::collections::BTreeMap;

use crate::engine::parallel::DeviceSummary;
use crate::engine::train::Phases;
use crate::knobs::Knobs;
use crate::results::model::{Recommendation, Report, TimelineSample};
use crate::results::record::{Repeat, Status, TrialRecord};
use crate::spec::plan::trial_id;
use crate::spec::Spec;
use crate::stats::SplitMix64;

pub const STEPS: usize = 40;
pub const REPEATS: usize = 2;

/// A spec over mlp with these `[knobs]` lines and extra `[search]` lines.
pub fn spec(knobs: &str, search: &str) -> Spec {
    Spec::parse(
        &format!(
            "name = \"t\"\n[workload]\nmodel = \"mlp\"\ndataset = \"synthetic\"\nbatch_size = 32\n\
             [knobs]\n{knobs}\n[search]\n{search}\n"
        ),
        "t.toml",
    )
    .unwrap()
}

/// One trial's record under construction.
pub struct Trial {
    pub rec: TrialRecord,
}

/// A successful trial of `overrides` (knob, value) against `spec`'s baseline, whose steps
/// take `step_s` seconds with 1% noise.
pub fn trial(spec: &Spec, overrides: &[(&str, &str)], step_s: f64) -> Trial {
    let base = &spec.search.baseline;
    let mut k: Knobs = base.clone();
    for (n, v) in overrides {
        // A hand-written trial: its values are text here, as in a spec.
        if crate::knobs::knob(n).is_some() {
            k.set(n, v).unwrap();
        } else {
            k.params.insert((*n).to_string(), (*v).to_string());
        }
    }
    let mut rng = SplitMix64::new(crate::spec::plan::knobs_hash(&k));
    let repeats = (0..REPEATS)
        .map(|_| {
            let step_times: Vec<f64> = (0..STEPS)
                .map(|_| step_s * (1.0 + 0.01 * rng.next_gaussian()))
                .collect();
            Repeat {
                step_times,
                warmup: 0,
                samples_per_step: k.batch_size * k.grad_accum,
                samples_per_s: (k.batch_size * k.grad_accum) as f64 / step_s,
                losses: (0..STEPS).map(|i| 2.0 / (1.0 + i as f32 / 10.0)).collect(),
                phases_mean: Phases {
                    forward: step_s * 0.4,
                    backward: step_s * 0.5,
                    ..Phases::default()
                },
                peak_bytes: BTreeMap::new(),
                peak_total_bytes: 100 << 20,
                accuracy: Some(0.9),
                backend: "cpu".into(),
                wall_s: step_s * STEPS as f64,
                ..Repeat::default()
            }
        })
        .collect();
    Trial {
        rec: TrialRecord {
            id: trial_id(&k, base),
            label: k.diff_label(base),
            knobs: k,
            round: 0,
            steps: STEPS,
            status: Status::Ok,
            error: None,
            repeats,
            timeline: Vec::new(),
            nodes: Vec::new(),
            hardware: Vec::new(),
        },
    }
}

impl Trial {
    /// `knob` forced at its value (`Knobs::forced`): a script's trial of the spec's
    /// baseline value. The id and label follow, as the plan makes them.
    pub fn forced(mut self, base: &Knobs, knob: &str) -> Trial {
        self.rec.knobs.forced.insert(knob.into());
        self.rec.id = trial_id(&self.rec.knobs, base);
        self.rec.label = self.rec.knobs.diff_label(base);
        self
    }

    /// Every repeat's tracked peak memory at `bytes` (100 MiB otherwise).
    pub fn peak(mut self, bytes: u64) -> Trial {
        for r in &mut self.rec.repeats {
            r.peak_total_bytes = bytes;
        }
        self
    }

    /// Repeat `i`'s steps around `step_s` instead (1% noise): two repeats of one trial
    /// that ran apart.
    pub fn repeat_at(mut self, i: usize, step_s: f64) -> Trial {
        let r = &mut self.rec.repeats[i];
        let was = crate::stats::median(&r.step_times);
        for x in &mut r.step_times {
            *x *= step_s / was;
        }
        r.samples_per_s = r.samples_per_step as f64 / step_s;
        self
    }

    /// The same configuration run again under another id (`results::baselines::again_id`
    /// for an interleaved run of the baseline).
    pub fn with_id(mut self, id: String) -> Trial {
        self.rec.id = id;
        self
    }

    /// Other processes used `pct`% of all cores while the trial ran (the sampler's
    /// per-tick figure on the host).
    pub fn under_load(mut self, pct: f64) -> Trial {
        for i in 0..3 {
            self.rec
                .timeline
                .push(crate::results::model::TimelineSample {
                    t_s: f64::from(i),
                    device: "host".into(),
                    metric: crate::results::model::FOREIGN_CPU_PCT.into(),
                    value: pct,
                });
        }
        self
    }

    /// As `under_load`, in each run's hardware record only: a confirmation's runs keep
    /// no timeline.
    pub fn runs_under_load(mut self, pct: f64) -> Trial {
        self.rec.hardware = (0..self.rec.repeats.len())
            .map(|_| crate::results::hardware::RepeatHardware {
                foreign_cpu_pct: Some(pct),
                ..Default::default()
            })
            .collect();
        self
    }

    /// `knob` could not act in this trial's runs, for `why`.
    pub fn not_applicable(mut self, knob: &str, why: &str) -> Trial {
        for r in &mut self.rec.repeats {
            r.not_applicable.insert(knob.into(), why.into());
        }
        self
    }

    /// The script's own value of `knob`, as the hooks read it.
    pub fn script_knob(mut self, knob: &str, value: &str) -> Trial {
        for r in &mut self.rec.repeats {
            r.script_knobs.insert(knob.into(), value.into());
        }
        self
    }

    /// Mean seconds per step in `phase` = `share` of the step.
    pub fn phase(mut self, phase: &str, share: f64) -> Trial {
        for r in &mut self.rec.repeats {
            let step = r.step_times.iter().sum::<f64>() / r.step_times.len() as f64;
            let p = &mut r.phases_mean;
            let slot = match phase {
                "data_wait" => &mut p.data_wait,
                "h2d" => &mut p.h2d,
                "zero_grad" => &mut p.zero_grad,
                "forward" => &mut p.forward,
                "backward" => &mut p.backward,
                "comm" => &mut p.comm,
                "optimizer" => &mut p.optimizer,
                other => panic!("no phase {other}"),
            };
            *slot = share * step;
        }
        self
    }

    pub fn peak_mib(mut self, mib: u64) -> Trial {
        for r in &mut self.rec.repeats {
            r.peak_total_bytes = mib << 20;
        }
        self
    }

    /// A sampled resident-memory peak while the trial ran.
    pub fn rss_mib(mut self, mib: u64) -> Trial {
        self.rec.timeline.push(TimelineSample {
            t_s: 0.5,
            device: "host".into(),
            metric: "rss_bytes".into(),
            value: (mib << 20) as f64,
        });
        self
    }

    pub fn accuracy(mut self, a: Option<f64>) -> Trial {
        for r in &mut self.rec.repeats {
            r.accuracy = a;
        }
        self
    }

    pub fn losses(mut self, f: impl Fn(usize) -> f32) -> Trial {
        for r in &mut self.rec.repeats {
            r.losses = (0..STEPS).map(&f).collect();
        }
        self
    }

    pub fn status(mut self, s: Status, error: &str) -> Trial {
        self.rec.status = s;
        self.rec.error = Some(error.into());
        if s != Status::Ok {
            self.rec.repeats.clear();
        }
        self
    }

    /// Per device: (busy share, peak MiB, comm share).
    pub fn devices(mut self, devs: &[(f64, u64, f64)]) -> Trial {
        for r in &mut self.rec.repeats {
            r.devices = devs
                .iter()
                .enumerate()
                .map(|(index, &(busy, mib, comm))| DeviceSummary {
                    index,
                    busy_fraction: busy,
                    peak_bytes: mib << 20,
                    comm_fraction: comm,
                    ..DeviceSummary::default()
                })
                .collect();
        }
        self
    }

    /// Each repeat reports `first` algorithm decisions of the first step, `later` ones
    /// first needed after it while training, then `eval` ones of the evaluation.
    pub fn algorithms(mut self, first: usize, later: usize, eval: usize) -> Trial {
        for r in &mut self.rec.repeats {
            r.algorithms = (0..first + later + eval)
                .map(|i| crate::engine::autotune::AlgoChoice {
                    op: "conv2d".into(),
                    key: format!("shape {i}"),
                    algo: "im2col".into(),
                    source: crate::engine::autotune::ChoiceSource::Measured,
                    timings_ms: Default::default(),
                    late: (first..first + later).contains(&i),
                    eval: i >= first + later,
                })
                .collect();
        }
        self
    }

    /// Every `every`-th step of each repeat takes `factor` times as long.
    pub fn spikes(mut self, every: usize, factor: f64) -> Trial {
        for r in &mut self.rec.repeats {
            for (i, t) in r.step_times.iter_mut().enumerate() {
                if i % every == every - 1 {
                    *t *= factor;
                }
            }
        }
        self
    }
}

pub fn report(spec: &Spec, trials: Vec<Trial>) -> Report {
    let recs: Vec<TrialRecord> = trials.into_iter().map(|t| t.rec).collect();
    super::build_report(spec, &recs)
}

/// The recommendations one rule made in `r`.
pub fn by_rule<'a>(r: &'a Report, rule: &str) -> Vec<&'a Recommendation> {
    r.recommendations
        .iter()
        .filter(|x| x.rule == rule)
        .collect()
}
