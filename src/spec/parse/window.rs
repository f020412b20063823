//! The measurement window's keys in `[workload.python]` (`warmup`, `steps`, `seconds`,
//! `min_seconds` and `compile_budget_s`, the most a trial's torch.compile may take)
//! and `[workload.command]` (`warmup`, `samples`, `seconds`), checked when
//! the spec is read.

use toml::de::{DeTable, DeValue};

use super::{Cx, Val};
use crate::error::Result;
use crate::limits;
use crate::spec::window::{Window, DEFAULT_MIN_SECONDS, DEFAULT_STEPS, DEFAULT_WARMUP};

/// Longest measuring time a window may ask for: a trial's own limit is at most a week.
const MAX_SECONDS: f64 = 7.0 * 24.0 * 3600.0;

impl Cx<'_> {
    /// `[workload.python]`'s window: every key optional, defaults in `spec::window`.
    pub(super) fn python_window(&self, t: &DeTable<'_>, table: &str) -> Result<Window> {
        let warmup = match t.get("warmup") {
            Some(v) => self.warmup(v, &format!("{table}.warmup"))?,
            None => Some(DEFAULT_WARMUP),
        };
        let steps = match t.get("steps") {
            Some(v) => self.count(v, &format!("{table}.steps"), &limits::STEPS)?,
            None => DEFAULT_STEPS,
        };
        let seconds = self.seconds(t, table, "seconds")?;
        let min_seconds = match t.get("min_seconds") {
            Some(v) => self.min_seconds(v, &format!("{table}.min_seconds"), seconds)?,
            None => Some(DEFAULT_MIN_SECONDS).filter(|m| seconds.is_none_or(|s| *m <= s)),
        };
        Ok(Window {
            warmup,
            steps,
            seconds,
            min_seconds,
            compile_budget_s: self.seconds(t, table, "compile_budget_s")?,
            warmup_max_s: None,
        })
    }

    /// `min_seconds = S`: 0 (no minimum) up to the window's `seconds`, which would end it
    /// first.
    fn min_seconds(&self, v: &Val<'_>, what: &str, most: Option<f64>) -> Result<Option<f64>> {
        let x = self.number(v, what, "a number of seconds")?;
        let top = most.unwrap_or(MAX_SECONDS);
        match x {
            Some(0.0) => Ok(None),
            Some(x) if x > 0.0 && x <= top => Ok(Some(x)),
            _ => Err(self.err(
                v.span(),
                match most {
                    Some(s) => format!(
                        "{what}: must be at least 0 and at most the window's seconds = {s}, \
                         which ends the window first"
                    ),
                    None => {
                        format!("{what}: must be at least 0 and at most {MAX_SECONDS} (one week)")
                    }
                },
            )),
        }
    }

    /// `[workload.command]`'s window: only when it names `samples` (a command that ends
    /// by itself is measured whole, as before).
    pub(super) fn command_window(&self, t: &DeTable<'_>, table: &str) -> Result<Option<Window>> {
        let Some(samples) = t.get("samples") else {
            if let Some((k, _)) = t
                .get_key_value("warmup")
                .or_else(|| t.get_key_value("seconds"))
            {
                return Err(self.err(
                    k.span(),
                    format!(
                        "{table}.{} needs samples = N: the window ends after N metric values",
                        k.get_ref()
                    ),
                ));
            }
            return Ok(None);
        };
        let warmup = match t.get("warmup") {
            Some(v) => Some(self.count(v, &format!("{table}.warmup"), &limits::WARMUP)?),
            None => Some(0),
        };
        Ok(Some(Window {
            warmup,
            steps: self.count(samples, &format!("{table}.samples"), &limits::STEPS)?,
            seconds: self.seconds(t, table, "seconds")?,
            min_seconds: None,
            compile_budget_s: None,
            warmup_max_s: None,
        }))
    }

    /// A compile budget at or past the trial's time limit could never act: refused.
    pub(super) fn check_compile_budget(
        &self,
        doc: &DeTable<'_>,
        window: Option<&Window>,
        timeout_s: u64,
    ) -> Result<()> {
        let Some(budget) = window.and_then(|w| w.compile_budget_s) else {
            return Ok(());
        };
        if budget < timeout_s as f64 {
            return Ok(());
        }
        let v = doc
            .get("workload")
            .and_then(|w| self.table(w, "workload").ok())
            .and_then(|w| w.get("python"))
            .and_then(|p| self.table(p, "workload.python").ok())
            .and_then(|p| p.get("compile_budget_s"));
        Err(self.err(
            v.map_or(0..0, |v| v.span()),
            format!(
                "workload.python.compile_budget_s = {budget}: must be less than the trial's \
                 time limit ([search] timeout_s = {timeout_s}), or the limit ends the trial first"
            ),
        ))
    }

    /// `warmup = N` steps, or `warmup = "steady"`.
    fn warmup(&self, v: &Val<'_>, what: &str) -> Result<Option<usize>> {
        match v.get_ref() {
            DeValue::String(s) if s.as_ref() == "steady" => Ok(None),
            DeValue::String(_) => Err(self.err(
                v.span(),
                format!("{what}: expected a number of steps or \"steady\""),
            )),
            _ => self.count(v, what, &limits::WARMUP).map(Some),
        }
    }

    /// `key` (`seconds` of measuring, or `compile_budget_s`): a positive number of
    /// seconds, at most a week.
    fn seconds(&self, t: &DeTable<'_>, table: &str, key: &str) -> Result<Option<f64>> {
        let Some(v) = t.get(key) else {
            return Ok(None);
        };
        let what = format!("{table}.{key}");
        let x = self.number(v, &what, "a number of seconds")?;
        match x {
            Some(x) if x > 0.0 && x <= MAX_SECONDS => Ok(Some(x)),
            _ => Err(self.err(
                v.span(),
                format!(
                    "{what}: must be more than 0 and at most {MAX_SECONDS} (one week, the longest trial)"
                ),
            )),
        }
    }
}
