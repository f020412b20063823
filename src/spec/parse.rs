//! Reading a spec: TOML with source spans, so every error points at `file:line:col`.

use std::collections::HashSet;
use std::ops::Range;
use std::path::{Path, PathBuf};

use toml::de::{DeString, DeTable, DeValue};
use toml::Spanned;

use super::{
    capture_groups, CommandWorkload, EngineWorkload, Metric, Search, Spec, Strategy, Workload,
    DEVICES, MODELS,
};
use crate::error::{shown, Error, Result};
use crate::knobs::Knobs;
use crate::limits::{self, Bound};
use crate::spec::KnobValue;

mod bounds;
mod inject_check;
mod params;
mod slurm;
mod window;

const TOP_KEYS: &[&str] = &["name", "workload", "knobs", "params", "search", "slurm"];
const ENGINE_KEYS: &[&str] = &[
    "model",
    "dataset",
    "batch_size",
    "steps",
    "warmup",
    "device",
    "devices",
    "threads",
    "lr",
];
const COMMAND_KEYS: &[&str] = &[
    "run",
    "metric_regex",
    "metric_json_key",
    "cwd",
    "warmup",
    "samples",
    "seconds",
];
const PYTHON_KEYS: &[&str] = &[
    "run",
    "cwd",
    "warmup",
    "steps",
    "seconds",
    "min_seconds",
    "compile_budget_s",
];
const SEARCH_KEYS: &[&str] = &[
    "strategy",
    "repeats",
    "timeout_s",
    "eta",
    "baseline",
    "mem_cap_mib",
    "executor",
    "job_steps",
    "hardware_reruns",
    "max_foreign_cpu_pct",
    "confirm_repeats",
    "budget_s",
];

pub(super) fn parse(text: &str, path: &Path) -> Result<Spec> {
    let cx = Cx { text, path };
    let doc = DeTable::parse(text).map_err(|e| {
        let span = e.span().unwrap_or(0..0);
        let mut msg = e.message().trim_end().to_string();
        // TOML's message does not say which key; the span does.
        if msg == "duplicate key" {
            if let Some(key) = text.get(span.clone()) {
                msg = format!("duplicate key '{}'", shown(key.trim()));
            }
        }
        cx.err(span, shown(&msg))
    })?;
    cx.spec(doc.get_ref())
}

type Val<'i> = Spanned<DeValue<'i>>;
/// A `[params]` entry: name, values as written, and the name's span for errors.
type Param = (String, Vec<String>, Range<usize>);
type Key<'i> = Spanned<DeString<'i>>;

/// Entries in file order (the map itself is sorted by key).
fn entries<'t, 'i>(t: &'t DeTable<'i>) -> Vec<(&'t Key<'i>, &'t Val<'i>)> {
    let mut v: Vec<_> = t.iter().collect();
    v.sort_by_key(|(k, _)| k.span().start);
    v
}

/// Parsing context: the source text, for turning spans into line and column.
struct Cx<'a> {
    text: &'a str,
    path: &'a Path,
}

impl Cx<'_> {
    fn err(&self, span: Range<usize>, msg: impl Into<String>) -> Error {
        let at = span.start.min(self.text.len());
        let before = self.text.get(..at).unwrap_or("");
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let col = before[line_start..].chars().count() + 1;
        Error::Spec {
            path: self.path.to_path_buf(),
            line,
            col,
            msg: msg.into(),
        }
    }

    fn check_keys(&self, t: &DeTable<'_>, allowed: &[&str], table: &str) -> Result<()> {
        match entries(t)
            .into_iter()
            .find(|(k, _)| !allowed.contains(&k.get_ref().as_ref()))
        {
            Some((k, _)) => Err(self.err(
                k.span(),
                format!(
                    "unknown key '{}' in {table}: allowed keys are {}",
                    shown(k.get_ref()),
                    allowed.join(", ")
                ),
            )),
            None => Ok(()),
        }
    }

    fn wrong_type(&self, v: &Val<'_>, what: &str, expected: &str) -> Error {
        self.err(
            v.span(),
            format!(
                "{what}: expected {expected}, found {}",
                v.get_ref().type_str()
            ),
        )
    }

    fn string(&self, v: &Val<'_>, what: &str) -> Result<String> {
        match v.get_ref() {
            DeValue::String(s) if !s.trim().is_empty() => Ok(s.to_string()),
            DeValue::String(_) => Err(self.err(v.span(), format!("{what} is empty"))),
            _ => Err(self.wrong_type(v, what, "a string")),
        }
    }

    fn choice(&self, v: &Val<'_>, what: &str, allowed: &[&str]) -> Result<String> {
        let s = self.string(v, what)?;
        if allowed.contains(&s.as_str()) {
            Ok(s)
        } else {
            Err(self.err(
                v.span(),
                format!(
                    "unknown {what} '{}': allowed values are {}",
                    shown(&s),
                    allowed.join(", ")
                ),
            ))
        }
    }

    /// A non-negative integer within `bound`.
    fn count(&self, v: &Val<'_>, what: &str, bound: &Bound) -> Result<usize> {
        let DeValue::Integer(i) = v.get_ref() else {
            return Err(self.wrong_type(v, what, "an integer"));
        };
        let digits = i.as_str();
        if digits.starts_with('-') {
            return Err(self.err(
                v.span(),
                format!(
                    "{what}: expected a non-negative integer, found {}",
                    shown(&i.to_string())
                ),
            ));
        }
        // Anything that does not fit a u64 is out of range as surely as u64::MAX is.
        let n = u64::from_str_radix(digits.trim_start_matches('+'), i.radix()).unwrap_or(u64::MAX);
        let n = bound.check(n).map_err(|_| {
            self.err(
                v.span(),
                format!("{what} {}", bound.refusal(&i.to_string())),
            )
        })?;
        usize::try_from(n).map_err(|_| {
            self.err(
                v.span(),
                format!("{what} {}", bound.refusal(&i.to_string())),
            )
        })
    }

    /// A TOML float or integer as f64 (None where its text does not parse); any other
    /// type is refused as not `expected`.
    pub(super) fn number(&self, v: &Val<'_>, what: &str, expected: &str) -> Result<Option<f64>> {
        match v.get_ref() {
            DeValue::Float(f) => Ok(f.as_str().parse::<f64>().ok()),
            DeValue::Integer(i) => Ok(i64::from_str_radix(i.as_str(), i.radix())
                .ok()
                .map(|n| n as f64)),
            _ => Err(self.wrong_type(v, what, expected)),
        }
    }

    /// A learning rate the engine's f32 arithmetic can use.
    fn lr(&self, v: &Val<'_>, what: &str) -> Result<f64> {
        let x = self.number(v, what, "a number")?.unwrap_or(f64::NAN);
        limits::lr(x)
            .map(|_| x)
            .map_err(|e| self.err(v.span(), format!("{what}: {e}")))
    }

    fn table<'t, 'i>(&self, v: &'t Val<'i>, what: &str) -> Result<&'t DeTable<'i>> {
        v.get_ref()
            .as_table()
            .ok_or_else(|| self.wrong_type(v, what, "a table"))
    }

    fn spec(&self, doc: &DeTable<'_>) -> Result<Spec> {
        self.check_keys(doc, TOP_KEYS, "the spec")?;
        let name = match doc.get("name") {
            Some(v) => {
                let name = self.string(v, "name")?;
                let ok = !name.starts_with('.')
                    && name
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
                if !ok {
                    return Err(self.err(
                        v.span(),
                        format!(
                            "name '{}' is not a folder name: use letters, digits, '-', '_' and '.', not starting with '.'",
                            shown(&name)
                        ),
                    ));
                }
                limits::NAME_BYTES.check_usize(name.len()).map_err(|_| {
                    let n = format!("{} bytes", name.len());
                    self.err(
                        v.span(),
                        format!("name of {}", limits::NAME_BYTES.refusal(&n)),
                    )
                })?;
                name
            }
            None => self.default_name(),
        };
        let (wkey, wval) = doc.get_key_value("workload").ok_or_else(|| {
            self.err(
                0..0,
                "missing [workload]: give model = ... for the built-in engine or a [workload.command]",
            )
        })?;
        let params = match doc.get_key_value("params") {
            Some((k, v)) => self.params(k, self.table(v, "params")?)?,
            None => Vec::new(),
        };
        let workload = self.workload(wkey, wval, &params)?;
        if let (Workload::Engine(_), Some((k, _))) = (&workload, doc.get_key_value("params")) {
            return Err(self.err(
                k.span(),
                "[params] is for a [workload.command] or [workload.python]: the built-in engine's settings are knobs, listed under [knobs]",
            ));
        }
        let knobs = match doc.get("knobs") {
            Some(v) => self.knobs(self.table(v, "knobs")?)?,
            None => Vec::new(),
        };
        self.check_injectable(doc, &workload)?;
        let search = self.search(doc, &workload, &knobs, &params)?;
        if let Workload::Command(c) = &workload {
            self.check_compile_budget(doc, c.window.as_ref(), search.timeout_s)?;
        }
        self.check_plan(doc, &search, &knobs, &params)?;
        self.check_executor(doc, search.executor, &workload)?;
        let slurm = self.slurm(doc, search.timeout_s)?;
        Ok(Spec {
            name,
            workload,
            knobs,
            params: params.into_iter().map(|(n, v, _)| (n, v)).collect(),
            search,
            slurm,
            path: self.path.to_path_buf(),
        })
    }

    /// The file stem, with characters that cannot name a folder replaced.
    fn default_name(&self) -> String {
        let stem = self
            .path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let clean: String = stem
            .trim_start_matches('.')
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        if clean.is_empty() {
            "sweep".into()
        } else {
            clean
        }
    }

    fn workload(&self, key: &Key<'_>, v: &Val<'_>, params: &[Param]) -> Result<Workload> {
        let t = self.table(v, "workload")?;
        if let Some((k, py)) = t.get_key_value("python") {
            return self.python(t, k, py, params);
        }
        let engine_keys: Vec<_> = entries(t)
            .into_iter()
            .filter(|(k, _)| k.get_ref() != "command")
            .collect();
        match (t.get_key_value("command"), engine_keys.first()) {
            (Some(_), Some((k, _))) => Err(self.err(
                k.span(),
                format!(
                    "workload.{} given together with [workload.command]: a workload is either the built-in engine or a command, not both",
                    k.get_ref()
                ),
            )),
            (Some((_, cmd)), None) => {
                let ct = self.table(cmd, "workload.command")?;
                Ok(Workload::Command(self.command(ct, cmd, params)?))
            }
            (None, None) => Err(self.err(
                key.span(),
                "[workload] is empty: give model = ... for the built-in engine or a [workload.command]",
            )),
            (None, Some(_)) => Ok(Workload::Engine(self.engine(t, key)?)),
        }
    }

    fn engine(&self, t: &DeTable<'_>, key: &Key<'_>) -> Result<EngineWorkload> {
        self.check_keys(t, ENGINE_KEYS, "[workload]")?;
        let required = |name: &str, hint: &str| {
            t.get(name)
                .ok_or_else(|| self.err(key.span(), format!("missing workload.{name} ({hint})")))
        };
        let model = self.choice(
            required("model", &format!("one of {}", MODELS.join(", ")))?,
            "workload.model",
            MODELS,
        )?;
        let dataset_v = required("dataset", "e.g. dataset = \"shapes:4000\"")?;
        let dataset = self.string(dataset_v, "workload.dataset")?;
        limits::dataset(&dataset)
            .map_err(|e| self.err(dataset_v.span(), format!("workload.dataset: {e}")))?;
        let count = |name: &str, bound: &Bound, default: usize| match t.get(name) {
            Some(v) => self.count(v, &format!("workload.{name}"), bound),
            None => Ok(default),
        };
        let defaults = Knobs::default();
        Ok(EngineWorkload {
            model,
            dataset,
            batch_size: count("batch_size", &limits::BATCH_SIZE, defaults.batch_size)?,
            steps: count("steps", &limits::STEPS, 50)?,
            warmup: count("warmup", &limits::WARMUP, 5)?,
            device: match t.get("device") {
                Some(v) => self.choice(v, "workload.device", DEVICES)?,
                None => "auto".into(),
            },
            devices: count("devices", &limits::DEVICES, 1)?,
            threads: match t.get("threads") {
                Some(v) => Some(self.count(v, "workload.threads", &limits::THREADS)?),
                None => None,
            },
            lr: match t.get("lr") {
                Some(v) => Some(self.lr(v, "workload.lr")?),
                None => None,
            },
        })
    }

    fn command(&self, t: &DeTable<'_>, at: &Val<'_>, params: &[Param]) -> Result<CommandWorkload> {
        self.check_keys(t, COMMAND_KEYS, "[workload.command]")?;
        let run_v = t.get("run").ok_or_else(|| {
            self.err(
                at.span(),
                "missing workload.command.run, e.g. run = \"python train.py --workers {num_workers}\"",
            )
        })?;
        let run = self.string(run_v, "workload.command.run")?;
        self.placeholders(run_v, &run, "workload.command.run", params)?;
        let metric = match (t.get("metric_regex"), t.get("metric_json_key")) {
            (Some(_), Some(j)) => {
                return Err(self.err(
                    j.span(),
                    "give exactly one of metric_regex and metric_json_key, not both",
                ))
            }
            (None, None) => {
                return Err(self.err(
                    at.span(),
                    "missing metric: give metric_regex = 'samples/s: ([0-9.]+)' or metric_json_key = \"samples_per_s\"",
                ))
            }
            (Some(r), None) => {
                let re = self.string(r, "workload.command.metric_regex")?;
                let groups = capture_groups(&re);
                if groups != 1 {
                    return Err(self.err(
                        r.span(),
                        format!("metric_regex needs exactly one capture group around the number, found {groups}"),
                    ));
                }
                // Without a regex engine only `literal prefix(number)` is matched; say so
                // here rather than silently never finding the metric.
                crate::spec::metric::NumberPattern::parse(&re)
                    .map_err(|msg| self.err(r.span(), shown(&msg)))?;
                Metric::Regex(re)
            }
            (None, Some(j)) => Metric::JsonKey(self.string(j, "workload.command.metric_json_key")?),
        };
        let cwd = self.cwd(t, "workload.command.cwd")?;
        let window = self.command_window(t, "workload.command")?;
        Ok(CommandWorkload {
            run,
            metric,
            cwd,
            window,
        })
    }

    /// A workload's `cwd`, which must exist: trials run the command in this folder, and a
    /// missing one would fail every trial later as "cannot start sh".
    fn cwd(&self, t: &DeTable<'_>, what: &str) -> Result<Option<PathBuf>> {
        let Some(v) = t.get("cwd") else {
            return Ok(None);
        };
        let cwd = PathBuf::from(self.string(v, what)?);
        let dir = crate::fsio::parent_dir(self.path).join(&cwd);
        if !dir.is_dir() {
            return Err(self.err(
                v.span(),
                format!(
                    "{what}: folder '{}' does not exist (relative to the spec's folder)",
                    shown(&dir.display().to_string())
                ),
            ));
        }
        Ok(Some(cwd))
    }

    /// `[workload.python]`: an unmodified PyTorch script, measured and tuned through the
    /// hooks (`crate::bridge`); `{knob}` placeholders still work.
    fn python(
        &self,
        w: &DeTable<'_>,
        key: &Key<'_>,
        v: &Val<'_>,
        params: &[Param],
    ) -> Result<Workload> {
        if let Some((k, _)) = entries(w)
            .into_iter()
            .find(|(k, _)| k.get_ref() != "python")
        {
            return Err(self.err(
                k.span(),
                format!(
                    "workload.{} given together with [workload.python]: a workload is one of the engine, a command or a python script",
                    shown(k.get_ref())
                ),
            ));
        }
        let t = self.table(v, "workload.python")?;
        self.check_keys(t, PYTHON_KEYS, "[workload.python]")?;
        let run_v = t.get("run").ok_or_else(|| {
            self.err(
                key.span(),
                "missing workload.python.run, e.g. run = \"python train.py --epochs 1\"",
            )
        })?;
        let run = self.string(run_v, "workload.python.run")?;
        self.placeholders(run_v, &run, "workload.python.run", params)?;
        Ok(Workload::Command(CommandWorkload {
            run,
            metric: Metric::Hooks,
            cwd: self.cwd(t, "workload.python.cwd")?,
            window: Some(self.python_window(t, "workload.python")?),
        }))
    }

    /// Span of `needle` inside a string literal's source, or the literal's start when
    /// escapes make the source differ from the value.
    fn locate(&self, v: &Val<'_>, raw: &str, needle: &str) -> Range<usize> {
        let start = v.span().start + raw.find(needle).unwrap_or(0);
        start..start + needle.len()
    }

    /// One knob value in its canonical spelling.
    fn knob_value(&self, name: &str, v: &Val<'_>) -> Result<KnobValue> {
        let raw = match v.get_ref() {
            DeValue::String(s) => s.to_string(),
            DeValue::Boolean(b) => b.to_string(),
            DeValue::Integer(i) => match i128::from_str_radix(i.as_str(), i.radix()) {
                Ok(n) => n.to_string(),
                Err(_) => i.to_string(),
            },
            _ => {
                return Err(self.wrong_type(
                    v,
                    &format!("knob {name}"),
                    "an integer, boolean or string",
                ))
            }
        };
        KnobValue::parse(name, &raw).map_err(|e| self.err(v.span(), e.to_string()))
    }

    fn knob_name(&self, k: &Key<'_>) -> Result<String> {
        let name = k.get_ref().to_string();
        match crate::knobs::knob(&name) {
            Some(_) => Ok(name),
            None => Err(self.err(k.span(), crate::knobs::unknown_knob(&name).to_string())),
        }
    }

    fn knobs(&self, t: &DeTable<'_>) -> Result<Vec<(String, Vec<KnobValue>)>> {
        let mut out = Vec::new();
        for (k, v) in entries(t) {
            let name = self.knob_name(k)?;
            let items = self.items(v, &format!("knob {name}"))?;
            let mut values: Vec<KnobValue> = Vec::new();
            let mut seen = HashSet::new();
            for item in items {
                let value = self.knob_value(&name, item)?;
                if !seen.insert(value.to_string()) {
                    return Err(self.err(item.span(), format!("knob {name} lists '{value}' twice")));
                }
                values.push(value);
            }
            out.push((name, values));
        }
        Ok(out)
    }

    fn search(
        &self,
        doc: &DeTable<'_>,
        workload: &Workload,
        knobs: &[(String, Vec<KnobValue>)],
        params: &[Param],
    ) -> Result<Search> {
        let empty = DeTable::new();
        let t = match doc.get("search") {
            Some(v) => self.table(v, "search")?,
            None => &empty,
        };
        self.check_keys(t, SEARCH_KEYS, "[search]")?;
        let strategy = match t.get("strategy") {
            Some(v) => {
                let s = self.string(v, "search.strategy")?;
                Strategy::parse(&s).ok_or_else(|| {
                    self.err(
                        v.span(),
                        format!(
                            "unknown search.strategy '{}': allowed values are {}",
                            shown(&s),
                            Strategy::ALLOWED.join(", ")
                        ),
                    )
                })?
            }
            None => Strategy::OneAtATime,
        };
        let count = |name: &str, bound: &Bound, default: usize| match t.get(name) {
            Some(v) => self.count(v, &format!("search.{name}"), bound),
            None => Ok(default),
        };
        let repeats = count("repeats", &limits::REPEATS, 1)?;
        let timeout_s = count("timeout_s", &limits::TIMEOUT_S, 600)? as u64;
        let eta = count("eta", &limits::ETA, 3)?;
        let job_steps = count(
            "job_steps",
            &super::window::JOB_STEPS,
            super::window::DEFAULT_JOB_STEPS as usize,
        )? as u64;
        let executor = self.executor(t)?;
        let hardware_reruns = count("hardware_reruns", &limits::HARDWARE_RERUNS, 0)?;
        let confirm_repeats = match t.get("confirm_repeats") {
            Some(v) => Some(self.count(v, "search.confirm_repeats", &limits::CONFIRM_REPEATS)?),
            None => None,
        };
        let max_foreign_cpu_pct = match t.get("max_foreign_cpu_pct") {
            Some(v) => {
                Some(self.count(v, "search.max_foreign_cpu_pct", &limits::FOREIGN_CPU_PCT)? as u64)
            }
            None => None,
        };
        let budget_s = match t.get("budget_s") {
            Some(v) => Some(self.count(v, "search.budget_s", &limits::BUDGET_S)? as u64),
            None => None,
        };
        let mem_cap_mib = match t.get("mem_cap_mib") {
            Some(v) => Some(self.count(v, "search.mem_cap_mib", &limits::MEM_CAP_MIB)? as u64),
            None => None,
        };

        let mut baseline = Knobs::default();
        if let Workload::Engine(e) = workload {
            baseline.batch_size = e.batch_size;
            baseline.devices = e.devices;
        }
        for (name, values) in knobs {
            if let Some(first) = values.first() {
                first.apply(name, &mut baseline);
            }
        }
        for (name, values, _) in params {
            if let Some(first) = values.first() {
                baseline.params.insert(name.clone(), first.clone());
            }
        }
        let overrides = t.get("baseline");
        if let Some(bv) = overrides {
            for (k, v) in entries(self.table(bv, "search.baseline")?) {
                if let Some((name, listed, _)) = params.iter().find(|p| p.0 == k.get_ref().as_ref())
                {
                    let value = match v.get_ref() {
                        DeValue::String(s) => s.to_string(),
                        _ => self
                            .text
                            .get(v.span())
                            .unwrap_or_default()
                            .trim()
                            .to_string(),
                    };
                    if !listed.contains(&value) {
                        return Err(self.err(
                            v.span(),
                            format!(
                                "baseline {name} = {} is not one of the values listed in [params]: {}",
                                shown(&value),
                                listed.join(", ")
                            ),
                        ));
                    }
                    baseline.params.insert(name.clone(), value);
                    continue;
                }
                let name = self.knob_name(k)?;
                let value = self.knob_value(&name, v)?;
                if let Some((_, listed)) = knobs.iter().find(|(n, _)| *n == name) {
                    if !listed.contains(&value) {
                        return Err(self.err(
                            v.span(),
                            format!(
                                "baseline {name} = {value} is not one of the values listed in [knobs]: {}",
                                listed.iter().map(KnobValue::as_str).collect::<Vec<_>>().join(", ")
                            ),
                        ));
                    }
                }
                value.apply(&name, &mut baseline);
            }
        }
        baseline.validate().map_err(|e| {
            let span = overrides
                .map(|v| v.span())
                .or_else(|| doc.get_key_value("knobs").map(|(k, _)| k.span()))
                .or_else(|| doc.get_key_value("workload").map(|(k, _)| k.span()))
                .unwrap_or(0..0);
            self.err(span, format!("the baseline configuration is invalid: {e}"))
        })?;
        Ok(Search {
            strategy,
            repeats,
            timeout_s,
            eta,
            mem_cap_mib,
            executor,
            hardware_reruns,
            max_foreign_cpu_pct,
            baseline,
            job_steps,
            confirm_repeats,
            budget_s,
            cut_at: None,
        })
    }
}
