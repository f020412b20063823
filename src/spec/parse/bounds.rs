//! The size of what a spec asks for, counted when it is read: list lengths, and the
//! plan's configurations, runs and text, from arithmetic on the list lengths (saturating,
//! never by building the plan). A refusal names the bound and points at the table (or
//! key) that passes it.

use std::ops::Range;

use toml::de::{DeTable, DeValue};

use super::{Cx, Param, Val};
use crate::error::Result;
use crate::limits::{self, Bound};
use crate::spec::plan::halving_rounds;
use crate::spec::{KnobValue, Search, Strategy};

/// Bytes of one configuration's parameter values: its knobs, its label and its
/// journal record each hold a copy.
const COPIES: u64 = 3;

impl Cx<'_> {
    /// The values of a knob or parameter (`what`): an array, or one value standing
    /// alone; at least one, at most `LIST_VALUES`.
    pub(super) fn items<'t, 'i>(&self, v: &'t Val<'i>, what: &str) -> Result<Vec<&'t Val<'i>>> {
        let items: Vec<&Val<'_>> = match v.get_ref() {
            DeValue::Array(a) => a.iter().collect(),
            _ => vec![v],
        };
        if items.is_empty() {
            return Err(self.err(v.span(), format!("{what} has no values: list at least one")));
        }
        limits::LIST_VALUES
            .check_usize(items.len())
            .map_err(|e| self.err(v.span(), format!("{what} lists {e}")))?;
        Ok(items)
    }

    /// The plan's configurations, runs and parameter text, each within its bound.
    pub(super) fn check_plan(
        &self,
        doc: &DeTable<'_>,
        search: &Search,
        knobs: &[(String, Vec<KnobValue>)],
        params: &[Param],
    ) -> Result<()> {
        let at = |table: &str| doc.get_key_value(table).map_or(0..0, |(k, _)| k.span());
        let axes: Vec<(u64, Range<usize>, &str)> = knobs
            .iter()
            .map(|(_, v)| (v.len() as u64, at("knobs"), "[knobs]"))
            .chain(
                params
                    .iter()
                    .map(|p| (p.1.len() as u64, at("params"), "[params]")),
            )
            .collect();
        let grid = !matches!(search.strategy, Strategy::OneAtATime);
        let lens: Vec<String> = axes.iter().map(|a| a.0.to_string()).collect();
        let (shape, total) = if grid {
            let total = axes.iter().fold(1u64, |n, a| n.saturating_mul(a.0));
            (format!("the grid of {} values", lens.join(" x ")), total)
        } else {
            // Each list holds the baseline's value once.
            let total = axes
                .iter()
                .fold(1u64, |n, a| n.saturating_add(a.0.saturating_sub(1)));
            (
                format!("one at a time over {} values", lens.join(" + ")),
                total,
            )
        };
        let mut trials = 1u64;
        for (len, span, table) in &axes {
            trials = if grid {
                trials.saturating_mul(*len)
            } else {
                trials.saturating_add(len.saturating_sub(1))
            };
            if trials > limits::PLAN_TRIALS.max {
                return Err(self.refuse(
                    span.clone(),
                    format!("{table}: {shape} is {}", shown_count(total)),
                    "configurations",
                    &limits::PLAN_TRIALS,
                ));
            }
        }
        self.check_runs(doc, search, trials)?;
        let per_trial: u64 = params
            .iter()
            .map(|p| (p.0.len() + p.1.iter().map(String::len).max().unwrap_or(0)) as u64)
            .sum();
        let bytes = trials.saturating_mul(per_trial).saturating_mul(COPIES);
        if bytes > limits::PLAN_BYTES.max {
            return Err(self.refuse(
                at("params"),
                format!(
                    "[params]: {trials} configurations, each with {per_trial} bytes of parameter values, are {}",
                    shown_count(bytes)
                ),
                "bytes",
                &limits::PLAN_BYTES,
            ));
        }
        Ok(())
    }

    /// Runs: configurations times repeats, and for `halving` its shorter rounds.
    fn check_runs(&self, doc: &DeTable<'_>, search: &Search, trials: u64) -> Result<()> {
        let repeats = search.repeats.max(1) as u64;
        let runs = match search.strategy {
            Strategy::Halving => {
                let rounds = halving_rounds(trials as usize, search.eta);
                // Only the last round is repeated.
                rounds.iter().enumerate().fold(0u64, |n, (i, (k, _))| {
                    let reps = if i + 1 == rounds.len() { repeats } else { 1 };
                    n.saturating_add((*k as u64).saturating_mul(reps))
                })
            }
            _ => trials.saturating_mul(repeats),
        };
        if runs <= limits::PLAN_RUNS.max {
            return Ok(());
        }
        let search_t = doc.get("search").and_then(|v| v.get_ref().as_table());
        let span = search_t
            .and_then(|t| t.get("repeats"))
            .map(|v| v.span())
            .or_else(|| doc.get_key_value("search").map(|(k, _)| k.span()))
            .unwrap_or(0..0);
        Err(self.refuse(
            span,
            format!(
                "search.repeats: {trials} configurations x {repeats} repeats are {}",
                shown_count(runs)
            ),
            "runs",
            &limits::PLAN_RUNS,
        ))
    }

    fn refuse(&self, span: Range<usize>, what: String, unit: &str, b: &Bound) -> crate::Error {
        self.err(
            span,
            format!(
                "{what} {unit}, more than the {} a sweep may have ({}): list fewer values, \
                 use fewer repeats or split the sweep (at most {} {unit})",
                b.max, b.why, b.max
            ),
        )
    }
}

/// A count that may have saturated.
fn shown_count(n: u64) -> String {
    if n == u64::MAX {
        format!("more than {n}")
    } else {
        n.to_string()
    }
}
