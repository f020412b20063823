//! Which configurations a sweep runs, in which order, and under which ids. Pure: the
//! executor runs the plan, `--resume` matches journal records to it by id.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};

use super::{KnobValue, Metric, Spec, Strategy, Workload};
use crate::knobs::{Knobs, FORCEABLE};

/// One configuration to measure.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trial {
    /// Stable across runs of the same spec: `label#hash`, where the hash covers every
    /// knob, so an edited baseline never matches a stale journal record.
    pub id: String,
    /// The knobs that differ from the baseline, or `baseline`.
    pub label: String,
    pub knobs: Knobs,
}

/// A combination the plan left out because the knobs contradict each other.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    pub label: String,
    pub reason: String,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// Baseline first.
    pub trials: Vec<Trial>,
    pub skipped: Vec<Skipped>,
}

/// FNV-1a over `name=value;` for every knob in `Knobs::NAMES` order (a knob of
/// `Knobs::LATER` only when it is not at its default), then over the user parameters
/// (`Knobs::params`, by name) when there are any, then over `forced=names;` when a knob
/// is forced (`Knobs::forced`). Spelled out rather than
/// `std::hash` because ids are stored in journals and must not change between compiler
/// versions, nor when a knob is added.
pub fn knobs_hash(k: &Knobs) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let defaults = Knobs::default();
    let knobs = Knobs::NAMES.iter().filter_map(|name| {
        let value = k.get(name).unwrap_or_default();
        let later_default =
            Knobs::LATER.contains(name) && defaults.get(name).as_ref() == Some(&value);
        (!later_default).then_some((*name, value))
    });
    let params = k.params.iter().map(|(n, v)| (n.as_str(), v.clone()));
    // Only when some knob is forced, so every other id stays as journals stored it.
    let forced = (!k.forced.is_empty()).then(|| {
        let names: Vec<&str> = k.forced.iter().map(String::as_str).collect();
        ("forced", names.join(","))
    });
    for (name, value) in knobs.chain(params).chain(forced) {
        for b in name
            .bytes()
            .chain(std::iter::once(b'='))
            .chain(value.bytes())
            .chain(std::iter::once(b';'))
        {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
    h
}

pub fn trial_id(knobs: &Knobs, baseline: &Knobs) -> String {
    format!(
        "{}#{:08x}",
        knobs.diff_label(baseline),
        knobs_hash(knobs) >> 32
    )
}

/// The trials of a sweep. `halving` starts from the full grid; its rounds are run by the
/// executor with `halving_rounds` and `select_top`.
pub fn plan(spec: &Spec) -> Plan {
    let base = &spec.search.baseline;
    // User parameters are swept exactly like knobs, after them.
    let axes: Vec<(String, Vec<Setting>)> = spec
        .knobs
        .iter()
        .map(|(n, v)| (n.clone(), v.iter().map(Setting::Knob).collect()))
        .chain(
            spec.params
                .iter()
                .map(|(n, v)| (n.clone(), v.iter().map(|t| Setting::Param(t)).collect())),
        )
        .collect();
    let force = forceable(spec);
    let candidates = match spec.search.strategy {
        Strategy::Grid | Strategy::Halving => {
            let mut all = grid(base, &axes);
            all.extend(force.iter().map(|name| forced(base, name)));
            all
        }
        Strategy::OneAtATime => one_at_a_time(base, &axes, &force),
    };
    let mut out = Plan::default();
    let mut seen = HashSet::new();
    // The baseline goes first so every later trial has something to be compared with.
    for k in std::iter::once(base.clone()).chain(candidates) {
        if !seen.insert(k.clone()) {
            continue;
        }
        let label = k.diff_label(base);
        match k.validate() {
            Ok(()) => out.trials.push(Trial {
                id: trial_id(&k, base),
                label,
                knobs: k,
            }),
            Err(e) => out.skipped.push(Skipped {
                label,
                reason: e.to_string(),
            }),
        }
    }
    out
}

/// One value of one axis: a knob's, parsed when the spec was read, or a user
/// parameter's text.
enum Setting<'a> {
    Knob(&'a KnobValue),
    Param(&'a str),
}

fn with(base: &Knobs, name: &str, value: &Setting) -> Knobs {
    let mut k = base.clone();
    match value {
        Setting::Knob(v) => v.apply(name, &mut k),
        Setting::Param(t) => {
            k.params.insert(name.to_string(), (*t).to_string());
        }
    }
    k
}

/// Cartesian product in file order: the first knob varies slowest.
fn grid(base: &Knobs, knobs: &[(String, Vec<Setting>)]) -> Vec<Knobs> {
    let mut out = vec![base.clone()];
    for (name, values) in knobs {
        out = out
            .iter()
            .flat_map(|k| values.iter().map(move |v| with(k, name, v)))
            .collect();
    }
    out
}

/// Each value of each knob, the others at baseline; a knob in `force` at its baseline
/// value is that value applied (`forced`), not the baseline again.
fn one_at_a_time(base: &Knobs, knobs: &[(String, Vec<Setting>)], force: &[&str]) -> Vec<Knobs> {
    knobs
        .iter()
        .flat_map(|(name, values)| {
            values.iter().map(move |v| match with(base, name, v) {
                k if k == *base && force.contains(&name.as_str()) => forced(base, name),
                k => k,
            })
        })
        .collect()
}

/// The swept knobs whose baseline value a `[workload.python]` sweep measures in a trial
/// of its own. The baseline leaves a swept knob at its default to the script (the
/// script is the baseline, #31), so a script that sets `num_workers=4` under
/// `num_workers = [0, 2]` ran 4 and 2, and 0 nowhere. A knob the baseline moves off its
/// default is applied in the baseline already. Whether the script's own value is the
/// spec's, which makes the trial the baseline again, is known only once the baseline has
/// run: the runner then does not run it.
fn forceable(spec: &Spec) -> Vec<&str> {
    let hooked = matches!(&spec.workload, Workload::Command(c) if c.metric == Metric::Hooks);
    if !hooked {
        return Vec::new();
    }
    let (base, def) = (&spec.search.baseline, Knobs::default());
    spec.knobs
        .iter()
        .map(|(name, _)| name.as_str())
        .filter(|name| FORCEABLE.contains(name) && base.get(name) == def.get(name))
        .collect()
}

fn forced(base: &Knobs, name: &str) -> Knobs {
    let mut k = base.clone();
    k.forced.insert(name.to_string());
    k
}

/// Successive halving's schedule for `n_configs` configurations: per round, how many
/// configurations run and how many times the base number of steps each runs. Each round
/// keeps 1/eta of the previous one (at least one) and runs it eta times longer, ending
/// with a round of one. `eta` below 2 is taken as 2.
pub fn halving_rounds(n_configs: usize, eta: usize) -> Vec<(usize, usize)> {
    let eta = eta.max(2);
    let mut rounds = Vec::new();
    let (mut n, mut mult) = (n_configs, 1usize);
    while n > 0 {
        rounds.push((n, mult));
        if n == 1 {
            break;
        }
        n = (n / eta).max(1);
        mult = mult.saturating_mul(eta);
    }
    rounds
}

/// The ids of the `k` best scores (higher is better). Ties keep the input order; NaN
/// scores (failed trials) rank last.
pub fn select_top<I: Clone>(results: &[(I, f64)], k: usize) -> Vec<I> {
    let mut order: Vec<usize> = (0..results.len()).collect();
    let key = |i: usize| {
        let s = results[i].1;
        if s.is_nan() {
            f64::NEG_INFINITY
        } else {
            s
        }
    };
    order.sort_by(|&a, &b| {
        key(b)
            .total_cmp(&key(a))
            .then(results[a].1.is_nan().cmp(&results[b].1.is_nan()))
    });
    order
        .into_iter()
        .take(k)
        .map(|i| results[i].0.clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(knobs: &str, search: &str) -> Spec {
        let text = format!(
            "[workload]\nmodel = \"mlp\"\ndataset = \"shapes:100\"\n[knobs]\n{knobs}\n[search]\n{search}\n"
        );
        Spec::parse(&text, "t.toml").unwrap()
    }

    const KNOBS: &str =
        "num_workers = [0, 2]\namp = [\"off\", \"bf16\"]\nzero_grad = [\"memset\", \"none\"]";

    #[test]
    fn grid_is_the_product_with_baseline_first() {
        let s = spec(KNOBS, "strategy = \"grid\"");
        let p = plan(&s);
        assert_eq!(p.trials.len(), 8);
        assert!(p.skipped.is_empty());
        assert_eq!(p.trials[0].label, "baseline");
        assert_eq!(p.trials[0].knobs, s.search.baseline);
        // File order, first knob slowest.
        let labels: Vec<&str> = p.trials.iter().map(|t| t.label.as_str()).collect();
        assert_eq!(
            labels[1..4],
            ["zero_grad=none", "amp=bf16", "zero_grad=none amp=bf16"]
        );
        assert_eq!(labels[4], "num_workers=2");
        let ids: HashSet<&str> = p.trials.iter().map(|t| t.id.as_str()).collect();
        assert_eq!(ids.len(), 8);
    }

    #[test]
    fn grid_puts_a_non_first_baseline_first() {
        let s = spec(KNOBS, "strategy = \"grid\"\nbaseline = { amp = \"bf16\" }");
        let p = plan(&s);
        assert_eq!(p.trials.len(), 8);
        assert_eq!(p.trials[0].knobs.amp.to_string(), "bf16");
        assert_eq!(p.trials[1].label, "amp=off");
        assert_eq!(p.trials[2].label, "zero_grad=none amp=off");
    }

    #[test]
    fn one_at_a_time_varies_one_knob() {
        let s = spec(KNOBS, "strategy = \"one-at-a-time\"");
        let p = plan(&s);
        let labels: Vec<&str> = p.trials.iter().map(|t| t.label.as_str()).collect();
        assert_eq!(
            labels,
            ["baseline", "num_workers=2", "amp=bf16", "zero_grad=none"]
        );
    }

    fn python(knobs: &str, search: &str) -> Spec {
        let text = format!(
            "[workload.python]\nrun = \"python train.py\"\n[knobs]\n{knobs}\n[search]\n{search}\n"
        );
        Spec::parse(&text, "t.toml").unwrap()
    }

    #[test]
    fn a_script_sweep_measures_each_baseline_value_in_a_trial_of_its_own() {
        // The baseline is the script as written; the spec's 0, off and memset are each
        // applied over the script's own in a trial of their own (#31).
        let s = python(KNOBS, "strategy = \"one-at-a-time\"");
        let p = plan(&s);
        let labels: Vec<&str> = p.trials.iter().map(|t| t.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "baseline",
                "num_workers=0",
                "num_workers=2",
                "amp=off",
                "amp=bf16",
                "zero_grad=memset",
                "zero_grad=none"
            ]
        );
        let forced = &p.trials[1].knobs;
        assert_eq!(forced.forced.iter().collect::<Vec<_>>(), ["num_workers"]);
        assert_eq!(forced.num_workers, s.search.baseline.num_workers);
        let ids: HashSet<&str> = p.trials.iter().map(|t| t.id.as_str()).collect();
        assert_eq!(ids.len(), p.trials.len());
        // The change a recommendation of it carries forces the value again, so its
        // confirmation runs the trial's configuration, not the baseline.
        let change = crate::spec::Change::of(["num_workers"], forced);
        let mut k = s.search.baseline.clone();
        change.apply(&mut k);
        assert_eq!(&k, forced);
        // A grid adds them after its product; a knob the baseline moves off PyTorch's
        // default is applied in the baseline already, and a knob the hooks cannot set
        // back (num_threads 0 leaves the thread count alone) is not forced.
        let s = python(
            "num_workers = [2, 0]\nnum_threads = [0, 1]\namp = [\"off\", \"bf16\"]",
            "strategy = \"grid\"",
        );
        let p = plan(&s);
        let forced: Vec<_> = p
            .trials
            .iter()
            .filter(|t| !t.knobs.forced.is_empty())
            .collect();
        assert_eq!(forced.len(), 1, "{:?}", p.trials);
        assert_eq!(forced[0].label, "amp=off");
        assert_eq!(p.trials.last().map(|t| t.label.as_str()), Some("amp=off"));
        // Built-in engine and command workloads apply every value: nothing is forced.
        let p = plan(&spec(KNOBS, "strategy = \"one-at-a-time\""));
        assert!(p.trials.iter().all(|t| t.knobs.forced.is_empty()));
    }

    #[test]
    fn contradictory_combinations_are_skipped_with_a_reason() {
        let s = spec(
            "parallel = [\"single\", \"ddp\"]\ndevices = [1, 2]",
            "strategy = \"grid\"",
        );
        let p = plan(&s);
        assert_eq!(p.trials.len(), 3);
        assert_eq!(p.skipped.len(), 1);
        assert_eq!(p.skipped[0].label, "devices=2");
        assert!(p.skipped[0].reason.contains("parallel"), "{:?}", p.skipped);
    }

    #[test]
    fn ids_are_stable_and_cover_all_knobs() {
        let a = plan(&spec(KNOBS, "strategy = \"grid\""));
        let b = plan(&spec(KNOBS, "strategy = \"grid\""));
        assert_eq!(a, b);
        // FNV-1a 64 of "num_workers=0;pin_memory=false;...;grad_accum=1;", upper 32 bits:
        // pinned because journals store these ids.
        assert_eq!(
            trial_id(&Knobs::default(), &Knobs::default()),
            "baseline#8649f191"
        );
        // A later knob changes the id only when set.
        let ddp = Knobs {
            parallel: crate::knobs::Parallel::Ddp,
            devices: 2,
            ..Knobs::default()
        };
        let ddp_bucket = Knobs {
            bucket_mb: 5,
            ..ddp.clone()
        };
        assert_ne!(knobs_hash(&ddp), knobs_hash(&ddp_bucket));
        // Same label against different baselines, different ids.
        let base2 = Knobs {
            batch_size: 128,
            ..Knobs::default()
        };
        assert_eq!(base2.diff_label(&base2), "baseline");
        assert_ne!(
            trial_id(&base2, &base2),
            trial_id(&Knobs::default(), &Knobs::default())
        );
    }

    #[test]
    fn halving_schedule() {
        assert_eq!(halving_rounds(9, 3), [(9, 1), (3, 3), (1, 9)]);
        assert_eq!(halving_rounds(10, 3), [(10, 1), (3, 3), (1, 9)]);
        assert_eq!(halving_rounds(2, 3), [(2, 1), (1, 3)]);
        assert_eq!(halving_rounds(1, 3), [(1, 1)]);
        assert_eq!(halving_rounds(0, 3), []);
        assert_eq!(halving_rounds(4, 1), [(4, 1), (2, 2), (1, 4)]);
    }

    #[test]
    fn select_top_ranks_by_score() {
        let r = [
            ("a", 10.0),
            ("b", f64::NAN),
            ("c", 30.0),
            ("d", 10.0),
            ("e", 20.0),
        ];
        assert_eq!(select_top(&r, 3), ["c", "e", "a"]);
        assert_eq!(select_top(&r, 10), ["c", "e", "a", "d", "b"]);
        assert!(select_top(&r, 0).is_empty());
        // A NaN ranks below a real -inf.
        assert_eq!(
            select_top(&[("x", f64::NAN), ("y", f64::NEG_INFINITY)], 1),
            ["y"]
        );
    }
}
