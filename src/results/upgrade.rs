//! Reading schema 1.x: journal lines and reports written before a repeat embedded the
//! engine's `RunSummary` (schema 2.0). They are converted, as JSON values, into the 2.0
//! form before serde reads them, so every older file stays readable (`--resume`,
//! `tune report`, `tune gate` against an old baseline) and nothing past this module knows
//! the old form.
//!
//! What 1.x did not record is filled with what the record implies (`steps` = the step
//! times recorded, `final_loss` = the last loss, `step_ms_median` = the median after
//! warm-up, `knobs` = the trial's) or left empty/zero where nothing implies it (`model`,
//! `dataset`, `threads`, `params`, `grad_bytes_between_steps`, a device's `busy_s`,
//! `comm_s`, `threads` and per-category peaks). A shape this does not recognise is left
//! as it is, for serde to refuse with its own message.

use serde_json::{Map, Value};

use crate::stats;

/// The major version of `schema_version` (the number before the first dot).
pub fn major(version: &str) -> Option<u64> {
    version.split('.').next()?.parse().ok()
}

/// Converts one journal line to the current form in place; refuses a newer major.
pub fn record(v: &mut Value) -> Result<(), String> {
    let current = major(super::schema::SCHEMA_VERSION);
    let version = match v.get("schema_version") {
        None => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(other) => {
            return Err(format!(
                "schema_version {other} is not a \"MAJOR.MINOR\" string"
            ))
        }
    };
    match version.as_deref().map(major) {
        // Lines written before journal lines were versioned are 1.x.
        None | Some(Some(1)) => {
            if v.get("type").and_then(Value::as_str) == Some("trial") {
                trial_v1(v);
            }
            Ok(())
        }
        Some(m) if m == current => Ok(()),
        _ => Err(format!(
            "journal line schema {} is not one this tune reads ({}): use the tune that wrote it",
            version.unwrap_or_default(),
            super::schema::SCHEMA_VERSION
        )),
    }
}

/// Converts a 1.x report to the 2.0 form in place (the caller has checked the version).
pub fn report_v1(v: &mut Value) {
    if let Some(trials) = v.get_mut("trials").and_then(Value::as_array_mut) {
        trials.iter_mut().for_each(trial_v1);
    }
    if let Some(c) = v.get_mut("confirmation").and_then(Value::as_object_mut) {
        for key in ["trial", "baseline_rerun"] {
            if let Some(t) = c.get_mut(key).filter(|t| t.is_object()) {
                trial_v1(t);
            }
        }
    }
}

/// A 1.x trial (a journal record or a report's trial): its repeats and, in a report, its
/// per-device summary.
fn trial_v1(t: &mut Value) {
    let knobs = t.get("knobs").cloned();
    if let Some(repeats) = t.get_mut("repeats").and_then(Value::as_array_mut) {
        for r in repeats.iter_mut().filter_map(Value::as_object_mut) {
            repeat_v1(r, knobs.as_ref());
        }
    }
    if let Some(devices) = t.get_mut("devices").and_then(Value::as_array_mut) {
        devices_v1(devices);
    }
}

fn repeat_v1(r: &mut Map<String, Value>, knobs: Option<&Value>) {
    // 1.x stored samples per step as a float of a whole number (e.g. 64.0).
    if let Some(f) = r.get("samples_per_step").and_then(Value::as_f64) {
        if f.is_finite() && f >= 0.0 && f.fract() == 0.0 && f <= u32::MAX as f64 {
            r.insert("samples_per_step".into(), Value::from(f as u64));
        }
    }
    let times: Vec<f64> = r
        .get("step_times")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_f64).collect())
        .unwrap_or_default();
    let warmup = r.get("warmup").and_then(Value::as_u64).unwrap_or(0) as usize;
    let measured = times
        .get(warmup..)
        .filter(|m| !m.is_empty())
        .unwrap_or(&times);
    let median_ms = stats::median(measured) * 1e3;
    let final_loss = r
        .get("losses")
        .and_then(Value::as_array)
        .and_then(|l| l.last().cloned())
        .unwrap_or(Value::from(0.0));
    let fill = [
        ("model", Value::from("")),
        ("dataset", Value::from("")),
        ("knobs", knobs.cloned().unwrap_or(Value::Object(Map::new()))),
        ("threads", Value::from(0)),
        ("params", Value::from(0)),
        ("steps", Value::from(times.len())),
        (
            "step_ms_median",
            Value::from(if median_ms.is_finite() {
                median_ms
            } else {
                0.0
            }),
        ),
        ("final_loss", final_loss),
        ("grad_bytes_between_steps", Value::from(0)),
        ("backend", Value::from("")),
        ("not_applicable", Value::Object(Map::new())),
    ];
    for (key, value) in fill {
        r.entry(key).or_insert(value);
    }
    if let Some(devices) = r.get_mut("devices").and_then(Value::as_array_mut) {
        devices_v1(devices);
    }
}

/// 1.x `DeviceStats` (`device` "cpu:1", optional shares and peak) to the engine's
/// `DeviceSummary`; an unknown share becomes 0, as the engine reports an unmeasured one.
fn devices_v1(devices: &mut [Value]) {
    for (i, d) in devices.iter_mut().enumerate() {
        let Some(old) = d.as_object().filter(|o| o.contains_key("device")) else {
            continue;
        };
        let index = old
            .get("device")
            .and_then(Value::as_str)
            .and_then(|n| n.rsplit(':').next()?.parse::<u64>().ok())
            .unwrap_or(i as u64);
        let num = |k: &str| old.get(k).filter(|v| v.is_number()).cloned();
        let mut new = Map::new();
        new.insert("index".into(), Value::from(index));
        new.insert("threads".into(), Value::from(0));
        new.insert("busy_s".into(), Value::from(0.0));
        new.insert(
            "busy_fraction".into(),
            num("busy_share").unwrap_or(Value::from(0.0)),
        );
        new.insert("comm_s".into(), Value::from(0.0));
        new.insert(
            "comm_fraction".into(),
            num("comm_share").unwrap_or(Value::from(0.0)),
        );
        new.insert(
            "comm_overlap".into(),
            num("comm_overlap").unwrap_or(Value::Null),
        );
        new.insert(
            "peak_bytes".into(),
            old.get("peak_bytes")
                .filter(|v| !v.is_null())
                .cloned()
                .unwrap_or(Value::from(0)),
        );
        new.insert("peak_by_category".into(), Value::Object(Map::new()));
        *d = Value::Object(new);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::parallel::DeviceSummary;
    use crate::results::record::{clean, Record, TrialRecord};
    use crate::results::Status;

    /// The first trial line of a journal written by tune before schema 2.0 (committed
    /// from that binary's output, not written by hand).
    fn v1_trial_line() -> Value {
        let text = include_str!("../../tests/corpus/v1/journal.jsonl");
        let line = text.lines().nth(1).unwrap_or_default();
        serde_json::from_str(line).unwrap()
    }

    #[test]
    fn a_1x_journal_line_reads_as_the_engine_summary_with_its_figures_kept() {
        let old = v1_trial_line();
        assert!(old.get("schema_version").is_none());
        let rec: Record = serde_json::from_value(old.clone()).unwrap();
        let Record::Trial(t) = rec else {
            panic!("not a trial")
        };
        let (r, o) = (&t.repeats[0], &old["repeats"][0]);
        assert_eq!(
            r.samples_per_step as f64,
            o["samples_per_step"].as_f64().unwrap()
        );
        assert_eq!(r.knobs, t.knobs);
        assert_eq!(r.steps, r.step_times.len());
        assert_eq!(r.final_loss, *r.losses.last().unwrap());
        assert_eq!(r.devices.len(), 2);
        for (d, o) in r.devices.iter().zip(o["devices"].as_array().unwrap()) {
            assert_eq!(d.name(&r.backend), o["device"].as_str().unwrap());
            assert_eq!(d.busy_fraction, o["busy_share"].as_f64().unwrap());
            assert_eq!(d.comm_share(), o["comm_share"].as_f64());
            assert_eq!(d.peak_bytes, o["peak_bytes"].as_u64().unwrap());
        }
    }

    #[test]
    fn a_trial_line_carries_the_version_and_the_whole_summary_and_reads_back_equal() {
        let mut s = crate::engine::RunSummary {
            params: 1234,
            samples_per_step: 16,
            step_times: vec![0.02, 0.01],
            losses: vec![2.0, f32::NAN],
            final_loss: f32::NAN,
            samples_per_s: f64::INFINITY,
            devices: vec![DeviceSummary {
                index: 1,
                busy_fraction: f64::NAN,
                peak_bytes: 7,
                ..DeviceSummary::default()
            }],
            ..Default::default()
        };
        s.knobs.batch_size = 16;
        let rec = Record::Trial(TrialRecord {
            id: "t".into(),
            label: "t".into(),
            knobs: s.knobs.clone(),
            round: 0,
            steps: 1,
            status: Status::Diverged,
            error: None,
            repeats: vec![clean(s)],
            timeline: Vec::new(),
            nodes: Vec::new(),
            hardware: Vec::new(),
        });
        let line = serde_json::to_value(&rec).unwrap();
        assert_eq!(line["schema_version"], super::super::model::SCHEMA_VERSION);
        assert_eq!(line["repeats"][0]["params"], 1234);
        assert_eq!(line["repeats"][0]["final_loss"], f32::MAX as f64);
        let back: Record = serde_json::from_str(&line.to_string()).unwrap();
        assert_eq!(back, rec);
    }

    #[test]
    fn a_journal_line_of_a_newer_major_is_refused() {
        let mut v = v1_trial_line();
        v["schema_version"] = "3.0".into();
        let e = serde_json::from_value::<Record>(v).unwrap_err().to_string();
        assert!(
            e.contains("3.0") && e.contains("not one this tune reads"),
            "{e}"
        );
    }

    #[test]
    fn malformed_1x_shapes_are_left_for_serde_to_refuse() {
        let mut v = v1_trial_line();
        v["repeats"][0]["samples_per_step"] = Value::from(16.5);
        assert!(serde_json::from_value::<Record>(v.clone()).is_err());
        v["repeats"] = Value::from("nonsense");
        assert!(serde_json::from_value::<Record>(v).is_err());
    }
}
