//! Knobs for an unmodified script (`[workload.python]`): which of a trial's knobs the
//! hooks apply, in the JSON the module reads, and the trial's measurements from the
//! step events.

use serde_json::{Map, Value};

use super::Events;
use crate::knobs::Knobs;
use crate::results::record::Repeat;
use crate::spec::Spec;

/// Whether the hooks can apply knob `name` inside a script (the knob table says).
pub fn injected(name: &str) -> bool {
    crate::knobs::knob(name).is_some_and(|k| k.applies.python)
}

/// The knobs a trial sets, as the module's JSON: a knob the spec's baseline moved off
/// the default, in every trial; a swept knob only where the trial's value differs from
/// the baseline's, or where the trial forces it. Elsewhere the script keeps its own behaviour, so the baseline is the
/// script as its user runs it (PyTorch >= 2.0's bare `zero_grad()` clears to None; a
/// forced memset would make the baseline a script nobody runs), and the hooks report
/// what the script does by itself (`script_knobs`).
pub fn knob_values(spec: &Spec, knobs: &Knobs) -> Map<String, Value> {
    let mut m = Map::new();
    let def = Knobs::default();
    // Each value in its report spelling (numbers, booleans, words), as the module reads it.
    let Ok(Value::Object(all)) = serde_json::to_value(knobs) else {
        return m;
    };
    for (name, v) in all {
        let base = spec.search.baseline.get(&name);
        let moved = base != def.get(&name);
        let swept = spec.knobs.iter().any(|(k, _)| *k == name) && knobs.get(&name) != base;
        // A forced knob is the spec's baseline value measured against a script that
        // sets its own (`spec::plan`).
        let named = moved || swept || knobs.forced.contains(&name);
        if injected(&name) && named {
            m.insert(name, v);
        }
    }
    m
}

/// The repeat of a hooked trial: step times and phases from the events; overrides and
/// knobs the hooks cannot apply listed in `not_applicable`, so the report shows them.
pub fn repeat(events: &Events, spec: &Spec, knobs: &Knobs, wall_s: f64) -> Result<Repeat, String> {
    if events.steps.len() < 3 {
        let why = if !events.compiled.is_empty() && events.steps.is_empty() {
            // Its first step is the compile: a trial limit shorter than the compile ends
            // the job there.
            "the job was still in its first step, compiling (torch.compile of {}); give \
             the trial a longer timeout_s"
                .replace("{}", &events.compiled.join(", "))
        } else if events.torch.is_none() {
            "the script never imported torch with tune's hooks (is it a Python command? \
             does its environment drop PYTHONPATH?)"
                .into()
        } else {
            "the hooks saw fewer than 3 optimizer steps (does the script call optimizer.step()?)"
                .into()
        };
        return Err(format!("no step measurements: {why}"));
    }
    let warmup = events.steps.len() - events.steady().len();
    let mut batches: Vec<f64> = events.steady().iter().map(|s| s.batch as f64).collect();
    batches.retain(|b| *b > 0.0);
    // No batch seen (no DataLoader, no tensor into the model): a "sample" is a step, and
    // the report says steps/s.
    let samples_per_step = if batches.is_empty() {
        1.0
    } else {
        crate::stats::median(&batches)
    };
    let durs: Vec<f64> = events.steady().iter().map(|s| s.dur).collect();
    // The watch's rule (`events::summary`): only where most steady steps saw token ids.
    let tokens: Vec<f64> = events
        .steady()
        .iter()
        .filter(|s| s.tokens > 0)
        .map(|s| s.tokens as f64)
        .collect();
    let tokens_per_step = (2 * tokens.len() > durs.len()).then(|| crate::stats::median(&tokens));
    let mut not_applicable = std::collections::BTreeMap::new();
    let mut overrides = std::collections::BTreeMap::new();
    for o in &events.overrides {
        overrides.insert(
            o.knob.clone(),
            format!(
                "your script sets {}={}; tune applied {} for this trial",
                o.knob, o.script, o.applied
            ),
        );
    }
    // Knobs the hooks applied but that could not act in this job (cudnn.benchmark
    // without CUDA, prefetch_factor without workers), in the hooks' words.
    for (knob, why) in &events.not_applicable {
        not_applicable
            .entry(knob.clone())
            .or_insert_with(|| why.clone());
    }
    let def = Knobs::default();
    for (name, _) in &spec.knobs {
        if !injected(name) && knobs.get(name) != def.get(name) {
            not_applicable.insert(
                name.clone(),
                "tune's PyTorch hooks do not inject this knob yet; use a {placeholder} in run"
                    .into(),
            );
        }
    }
    Ok(Repeat {
        step_times: events.steps.iter().map(|s| s.dur).collect(),
        warmup,
        // The engine's summary counts whole samples; a median of two batch sizes can
        // fall between them.
        samples_per_step: samples_per_step.round().max(1.0) as usize,
        batch_unknown: batches.is_empty(),
        // A bursty loader's rounds, not its instant steps (`stats::typical_step`).
        samples_per_s: samples_per_step / crate::stats::typical_step(&durs),
        // report.json's per-repeat step time was 0 for every PyTorch trial before.
        step_ms_median: crate::stats::typical_step(&durs) * 1e3,
        phases_mean: events.phases_mean(),
        backend: "pytorch".into(),
        wall_s,
        not_applicable,
        overrides,
        script_knobs: events.script_knobs.clone(),
        compile_s: events.compile_cost().map(|(s, _)| s),
        notices: events.notices.clone(),
        tokens_per_step,
        eval_s: Some(events.steps.iter().map(|s| s.eval).sum::<f64>()).filter(|e| *e > 0.0),
        step_phases: events
            .steps
            .iter()
            .map(|s| crate::engine::clock::Phases {
                data_wait: s.data_wait,
                h2d: s.h2d,
                zero_grad: s.zero_grad,
                forward: s.forward,
                backward: s.backward,
                optimizer: s.optimizer,
                ..Default::default()
            })
            .collect(),
        ..Repeat::default()
    })
}
