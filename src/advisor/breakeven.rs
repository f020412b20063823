//! Whether a `compile` mode pays for itself within the job (issue #26). A compiled model
//! first spends seconds to minutes compiling, then (maybe) steps faster: it has paid off
//! after compile time / time saved per step. That count, with its interval (the compile
//! times over the repeats, the steady ratio's 95% interval), is said for every compile
//! trial; a compile mode is recommended only when even the interval's far end falls within
//! the job's planned length (`[search] job_steps`), else it is withdrawn, in words.

use super::Ctx;
use crate::results::build::steady_times;
use crate::results::model::{RecKind, Recommendation, Report, TrialReport};
use crate::results::record::Status;
use crate::stats::median;

const KNOB: &str = "compile";

/// Steps after which a compiled trial has paid for its compile: the estimate and its
/// interval (infinite where the saving's interval reaches zero).
#[derive(Clone, Debug, PartialEq)]
pub struct BreakEven {
    /// Compile time beyond the baseline's, seconds: median and range over the repeats.
    pub compile_s: (f64, f64, f64),
    pub steps: f64,
    pub lo: f64,
    pub hi: f64,
    /// The compiled trial's steady step, seconds.
    pub step_s: f64,
}

fn compile_times(t: &TrialReport) -> Vec<f64> {
    t.repeats.iter().filter_map(|r| r.compile_s).collect()
}

/// The break-even of `t` (compiled) against the baseline `base`.
pub fn break_even(cx: &Ctx, t: &TrialReport, base: &TrialReport) -> Result<BreakEven, String> {
    let mut c = compile_times(t);
    if c.is_empty() {
        return Err("its compile time was not measured (the hooks saw no compilation)".into());
    }
    // A baseline that compiles too (the script's own torch.compile) pays its own compile.
    let own = compile_times(base);
    let own = if own.is_empty() { 0.0 } else { median(&own) };
    c.iter_mut().for_each(|x| *x = (*x - own).max(0.0));
    let (lo_c, hi_c) = c
        .iter()
        .fold((f64::INFINITY, 0.0_f64), |(a, b), x| (a.min(*x), b.max(*x)));
    let r = cx
        .ratio(base, t)
        .ok_or("no steady steps to compare with the baseline's")?;
    let step_s = median(&steady_times(&t.repeats).0);
    // Seconds saved per step at a throughput ratio `x` (same batch: t_base = x * t_c).
    let per_step = |x: f64| step_s * (x - 1.0);
    let steps = |secs: f64, x: f64| {
        if x > 1.0 && per_step(x) > 0.0 {
            secs / per_step(x)
        } else {
            f64::INFINITY
        }
    };
    let c_med = median(&c);
    Ok(BreakEven {
        compile_s: (c_med, lo_c, hi_c),
        steps: steps(c_med, r.ratio),
        lo: steps(lo_c, r.hi),
        hi: steps(hi_c, r.lo),
        step_s,
    })
}

fn count(x: f64) -> String {
    if x.is_finite() {
        format!("{:.0}", x.ceil())
    } else {
        "never".into()
    }
}

fn duration(secs: f64) -> String {
    if !secs.is_finite() {
        return "never".into();
    }
    let s = secs.round() as u64;
    match s {
        0..=119 => format!("{s} s"),
        120..=7199 => format!("{} min", s / 60),
        _ => format!("{:.1} h", secs / 3600.0),
    }
}

/// "compile 41.2 s [38.0, 44.1]; pays off after 850 [700, 1020] steps (about 2 min)".
pub fn describe(b: &BreakEven) -> String {
    let (m, lo, hi) = b.compile_s;
    let c = if hi > lo {
        format!("compile {m:.1} s [{lo:.1}, {hi:.1}] over the repeats")
    } else {
        format!("compile {m:.1} s")
    };
    if !b.steps.is_finite() {
        return format!("{c}; its steady steps are not faster, so it never pays off");
    }
    format!(
        "{c}; pays for its compile after {} [{}, {}] steps (about {} of training)",
        count(b.steps),
        count(b.lo),
        count(b.hi),
        duration(b.steps * b.step_s)
    )
}

fn job(report: &Report) -> String {
    format!(
        "this job's planned {} steps ([search] job_steps)",
        report.spec.search.job_steps
    )
}

/// Keeps a recommendation of a compile mode only when it pays off within the job (the
/// break-even interval's far end), with the break-even in its evidence; withdraws the
/// others, each with a note. Adds a note with every compile trial's break-even.
pub fn judge(report: &Report, recs: Vec<Recommendation>) -> (Vec<Recommendation>, Vec<String>) {
    let cx = Ctx::new(report);
    let Some(base) = cx.base else {
        return (recs, Vec::new());
    };
    let base_mode = cx.base_knobs().get(KNOB);
    let mut notes = Vec::new();
    for t in cx.varying(KNOB) {
        if t.status != Status::Ok || t.knobs.get(KNOB) == Some("off".into()) {
            continue;
        }
        if let Ok(b) = break_even(&cx, t, base) {
            notes.push(format!("{}: {}", t.label, describe(&b)));
        }
    }
    let jobs = report.spec.search.job_steps as f64;
    let mut kept = Vec::new();
    for mut rec in recs {
        let mode = rec.change.get(KNOB).map(str::to_string);
        let compiles = rec.kind == RecKind::Change
            && mode.as_deref().is_some_and(|m| m != "off")
            && mode != base_mode;
        if !compiles {
            kept.push(rec);
            continue;
        }
        let want = super::drift::recommended_knobs(report, &rec);
        let trial = report
            .trials
            .iter()
            .find(|t| t.knobs == want && t.status == Status::Ok);
        let verdict = match trial {
            None => Err("its trial was not found to measure the compile time".to_string()),
            Some(t) => break_even(&cx, t, base).map(|b| (t, b)),
        };
        match verdict {
            Ok((_, b)) if b.hi <= jobs => {
                rec.finding.evidence.push_str(&format!(
                    "; {}, within {}",
                    describe(&b),
                    job(report)
                ));
                kept.push(rec);
            }
            Ok((t, b)) => notes.push(format!(
                "not recommended: {} measured faster per step, but {}: not within {}",
                t.label,
                describe(&b),
                job(report)
            )),
            Err(why) => notes.push(format!(
                "not recommended: compile={}: {why}",
                mode.unwrap_or_default()
            )),
        }
    }
    (kept, notes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::advisor::testkit::{report, spec, trial};

    fn compiled(r: &mut Report, compile_s: &[f64]) {
        let t = r
            .trials
            .iter_mut()
            .find(|t| t.knobs.get(KNOB) == Some("default".into()))
            .unwrap();
        let mut reps = Vec::new();
        for c in compile_s {
            let mut x = t.repeats[0].clone();
            x.compile_s = Some(*c);
            reps.push(x);
        }
        t.repeats = reps;
    }

    fn sweep(job_steps: u64, compile_s: &[f64]) -> Report {
        let mut s = spec("compile = [\"off\", \"default\"]", "");
        s.search.job_steps = job_steps;
        // The compiled step takes 0.010 s against the baseline's 0.015 s: 1.5x, 5 ms saved.
        let mut r = report(
            &s,
            vec![
                trial(&s, &[], 0.015),
                trial(&s, &[(KNOB, "default")], 0.010),
            ],
        );
        compiled(&mut r, compile_s);
        r
    }

    fn rec_for(r: &Report) -> Recommendation {
        let mut rec = Recommendation {
            kind: RecKind::Change,
            ..Recommendation::default()
        };
        let t = r
            .trials
            .iter()
            .find(|t| t.knobs.get(KNOB).as_deref() == Some("default"))
            .unwrap();
        rec.change = crate::spec::Change::of([KNOB], &t.knobs);
        rec
    }

    #[test]
    fn compile_is_recommended_only_when_it_pays_off_within_the_job() {
        // 20 s of compile at 5 ms saved a step: about 4,000 steps.
        let long = sweep(100_000, &[20.0, 21.0]);
        let cx = Ctx::new(&long);
        let b = break_even(&cx, &long.trials[1], cx.base.unwrap()).unwrap();
        assert!((3000.0..5000.0).contains(&b.steps), "{b:?}");
        assert!(b.lo <= b.steps && b.steps <= b.hi, "{b:?}");
        let (kept, notes) = judge(&long, vec![rec_for(&long)]);
        assert_eq!(kept.len(), 1, "{notes:?}");
        assert!(kept[0]
            .finding
            .evidence
            .contains("pays for its compile after"));

        let short = sweep(1_000, &[20.0, 21.0]);
        let (kept, notes) = judge(&short, vec![rec_for(&short)]);
        assert!(kept.is_empty(), "{kept:?}");
        assert!(
            notes
                .iter()
                .any(|n| n.starts_with("not recommended") && n.contains("planned 1000 steps")),
            "{notes:?}"
        );
    }

    #[test]
    fn an_unmeasured_compile_is_not_recommended() {
        let mut r = sweep(100_000, &[1.0]);
        r.trials[1].repeats[0].compile_s = None;
        let (kept, notes) = judge(&r, vec![rec_for(&r)]);
        assert!(kept.is_empty() && notes.iter().any(|n| n.contains("not measured")));
    }
}
