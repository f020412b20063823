//! The sweep spec: a TOML file naming a workload, the knob values to try and how to
//! search them. Parsing keeps TOML's source spans so that every error points at a line
//! and column, and lists the allowed values where there is a fixed set.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use toml::de::{DeString, DeTable, DeValue};
use toml::Spanned;

use crate::error::{Error, Result};
use crate::knobs::Knobs;

/// Models of the built-in engine.
pub const MODELS: &[&str] = &["mlp", "cnn-small", "resnet-mini"];
/// Values of `workload.device`.
pub const DEVICES: &[&str] = &["cpu", "cuda", "auto"];

const TOP_KEYS: &[&str] = &["name", "workload", "knobs", "search"];
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
const COMMAND_KEYS: &[&str] = &["run", "metric_regex", "metric_json_key", "cwd"];
const SEARCH_KEYS: &[&str] = &[
    "strategy",
    "repeats",
    "timeout_s",
    "eta",
    "baseline",
    "mem_cap_mib",
];

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Spec {
    /// Names the report folder, `reports/<name>/`.
    pub name: String,
    pub workload: Workload,
    /// Knob name and its values in the spelling `Knobs::set` accepts and `Knobs::get`
    /// gives back, in file order. Values within a knob are distinct.
    pub knobs: Vec<(String, Vec<String>)>,
    pub search: Search,
    /// The file it was read from; relative paths in the spec are relative to its folder.
    pub path: PathBuf,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Workload {
    Engine(EngineWorkload),
    Command(CommandWorkload),
}

/// A workload trained by the built-in engine.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EngineWorkload {
    /// One of `MODELS`.
    pub model: String,
    /// A dataset spec for the engine's data module, e.g. `shapes:4000`.
    pub dataset: String,
    /// Batch size when `batch_size` is not a swept knob.
    pub batch_size: usize,
    /// Measured steps per trial, after warm-up.
    pub steps: usize,
    /// Steps run before measuring.
    pub warmup: usize,
    /// One of `DEVICES`.
    pub device: String,
    pub devices: usize,
    /// Compute threads per trial; None lets the engine decide.
    pub threads: Option<usize>,
    pub lr: Option<f64>,
}

/// An external training command whose throughput is read from its output.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CommandWorkload {
    /// Command template; `{knob}` is replaced by the knob's value, `{{` and `}}` are
    /// literal braces.
    pub run: String,
    pub metric: Metric,
    /// Working folder as written; relative to the spec's folder (`Spec::dir`).
    pub cwd: Option<PathBuf>,
}

/// How a command reports samples per second.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// A pattern whose single capture group is the number. Only the subset
    /// `literal prefix([0-9.]+)` is supported (see `runner::metric`).
    Regex(String),
    /// A key in JSON lines printed by the command.
    JsonKey(String),
    /// `[workload.python]`: the step events of tune's PyTorch hooks (`crate::bridge`),
    /// which also inject the trial's knobs into the unmodified script.
    Hooks,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Strategy {
    #[serde(rename = "grid")]
    Grid,
    #[serde(rename = "one-at-a-time")]
    OneAtATime,
    #[serde(rename = "halving")]
    Halving,
}

impl Strategy {
    pub const ALLOWED: &'static [&'static str] = &["grid", "one-at-a-time", "halving"];

    fn parse(s: &str) -> Option<Strategy> {
        match s {
            "grid" => Some(Strategy::Grid),
            "one-at-a-time" => Some(Strategy::OneAtATime),
            "halving" => Some(Strategy::Halving),
            _ => None,
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Strategy::Grid => "grid",
            Strategy::OneAtATime => "one-at-a-time",
            Strategy::Halving => "halving",
        })
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Search {
    pub strategy: Strategy,
    /// Repeats of each trial, for the noise floor.
    pub repeats: usize,
    /// Per-trial time limit in seconds.
    pub timeout_s: u64,
    /// Halving's reduction factor: each round keeps 1/eta of the configurations.
    pub eta: usize,
    /// Per-trial resident-memory cap in MiB; a trial above it ends as `oom`.
    #[serde(default)]
    pub mem_cap_mib: Option<u64>,
    /// The configuration every other is compared with: workload defaults, then the first
    /// value of each knob list, then `[search] baseline` overrides.
    pub baseline: Knobs,
}

impl Spec {
    pub fn load(path: impl AsRef<Path>) -> Result<Spec> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        Spec::parse(&text, path)
    }

    pub fn parse(text: &str, path: impl AsRef<Path>) -> Result<Spec> {
        let cx = Cx {
            text,
            path: path.as_ref(),
        };
        let doc = DeTable::parse(text).map_err(|e| {
            let span = e.span().unwrap_or(0..0);
            let mut msg = e.message().trim_end().to_string();
            // TOML's message does not say which key; the span does.
            if msg == "duplicate key" {
                if let Some(key) = text.get(span.clone()) {
                    msg = format!("duplicate key '{}'", key.trim());
                }
            }
            cx.err(span, msg)
        })?;
        cx.spec(doc.get_ref())
    }

    /// The folder that relative paths in the spec are relative to.
    pub fn dir(&self) -> &Path {
        match self.path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        }
    }

    /// The values listed for one knob.
    pub fn values(&self, knob: &str) -> Option<&[String]> {
        self.knobs
            .iter()
            .find(|(n, _)| n == knob)
            .map(|(_, v)| v.as_slice())
    }
}

impl CommandWorkload {
    /// The command line for one configuration.
    pub fn render(&self, knobs: &Knobs) -> String {
        let mut out = String::new();
        for piece in template_pieces(&self.run) {
            match piece {
                Piece::Text(t) => out.push_str(t),
                Piece::Brace(c) => out.push(c),
                Piece::Placeholder { name, .. } => {
                    out.push_str(&knobs.get(name).unwrap_or_default())
                }
                // Rejected when the spec was parsed; kept verbatim if built by hand.
                Piece::Unclosed(at) => out.push_str(&self.run[at..]),
            }
        }
        out
    }
}

enum Piece<'a> {
    Text(&'a str),
    /// `{{` or `}}`.
    Brace(char),
    /// `{name}` starting at byte `at` of the template.
    Placeholder {
        name: &'a str,
        at: usize,
    },
    /// A `{` with no `}` after it.
    Unclosed(usize),
}

fn template_pieces(s: &str) -> Vec<Piece<'_>> {
    let mut out = Vec::new();
    let mut text_start = 0;
    let mut i = 0;
    let b = s.as_bytes();
    while i < b.len() {
        let two = b.get(i + 1).copied();
        if (b[i] == b'{' && two == Some(b'{')) || (b[i] == b'}' && two == Some(b'}')) {
            out.push(Piece::Text(&s[text_start..i]));
            out.push(Piece::Brace(b[i] as char));
            i += 2;
            text_start = i;
        } else if b[i] == b'{' {
            out.push(Piece::Text(&s[text_start..i]));
            match s[i..].find('}') {
                Some(len) => {
                    out.push(Piece::Placeholder {
                        name: &s[i + 1..i + len],
                        at: i,
                    });
                    i += len + 1;
                    text_start = i;
                }
                None => {
                    out.push(Piece::Unclosed(i));
                    return out;
                }
            }
        } else {
            i += 1;
        }
    }
    out.push(Piece::Text(&s[text_start..]));
    out
}

/// Capture groups in a regex, counted loosely: unescaped `(` outside character classes
/// that is not `(?:`, a lookaround or a flag group. Enough to catch a missing or extra
/// group without a regex engine.
fn capture_groups(re: &str) -> usize {
    let mut n = 0;
    let mut in_class = false;
    let mut chars = re.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                chars.next();
            }
            '[' if !in_class => in_class = true,
            ']' if in_class => in_class = false,
            '(' if !in_class => {
                if chars.peek() != Some(&'?') {
                    n += 1;
                } else {
                    let rest: String = chars.clone().take(4).collect();
                    // (?P<name>...) and (?<name>...) capture; (?<= and (?<! look behind.
                    let named = rest.starts_with("?P<")
                        || (rest.starts_with("?<")
                            && !rest.starts_with("?<=")
                            && !rest.starts_with("?<!"));
                    n += usize::from(named);
                }
            }
            _ => {}
        }
    }
    n
}

type Val<'i> = Spanned<DeValue<'i>>;
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
                    k.get_ref(),
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
                    "unknown {what} '{s}': allowed values are {}",
                    allowed.join(", ")
                ),
            ))
        }
    }

    /// A non-negative integer, at least `min`.
    fn count(&self, v: &Val<'_>, what: &str, min: usize) -> Result<usize> {
        let DeValue::Integer(i) = v.get_ref() else {
            return Err(self.wrong_type(v, what, "an integer"));
        };
        let n = u64::from_str_radix(i.as_str(), i.radix())
            .ok()
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| {
                self.err(
                    v.span(),
                    format!("{what}: expected a non-negative integer, found {i}"),
                )
            })?;
        if n < min {
            return Err(self.err(v.span(), format!("{what} must be at least {min}")));
        }
        Ok(n)
    }

    fn positive_float(&self, v: &Val<'_>, what: &str) -> Result<f64> {
        let x = match v.get_ref() {
            DeValue::Float(f) => f.as_str().parse::<f64>().ok(),
            DeValue::Integer(i) => i64::from_str_radix(i.as_str(), i.radix())
                .ok()
                .map(|n| n as f64),
            _ => return Err(self.wrong_type(v, what, "a number")),
        };
        match x {
            Some(x) if x.is_finite() && x > 0.0 => Ok(x),
            _ => Err(self.err(v.span(), format!("{what} must be a positive number"))),
        }
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
                            "name '{name}' is not a folder name: use letters, digits, '-', '_' and '.', not starting with '.'"
                        ),
                    ));
                }
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
        let workload = self.workload(wkey, wval)?;
        let knobs = match doc.get("knobs") {
            Some(v) => self.knobs(self.table(v, "knobs")?)?,
            None => Vec::new(),
        };
        let search = self.search(doc, &workload, &knobs)?;
        Ok(Spec {
            name,
            workload,
            knobs,
            search,
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

    fn workload(&self, key: &Key<'_>, v: &Val<'_>) -> Result<Workload> {
        let t = self.table(v, "workload")?;
        if let Some((k, py)) = t.get_key_value("python") {
            return self.python(t, k, py);
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
                Ok(Workload::Command(self.command(ct, cmd)?))
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
        let dataset = self.string(
            required("dataset", "e.g. dataset = \"shapes:4000\"")?,
            "workload.dataset",
        )?;
        let count = |name: &str, min: usize, default: usize| match t.get(name) {
            Some(v) => self.count(v, &format!("workload.{name}"), min),
            None => Ok(default),
        };
        let defaults = Knobs::default();
        Ok(EngineWorkload {
            model,
            dataset,
            batch_size: count("batch_size", 1, defaults.batch_size)?,
            steps: count("steps", 1, 50)?,
            warmup: count("warmup", 0, 5)?,
            device: match t.get("device") {
                Some(v) => self.choice(v, "workload.device", DEVICES)?,
                None => "auto".into(),
            },
            devices: count("devices", 1, 1)?,
            threads: match t.get("threads") {
                Some(v) => Some(self.count(v, "workload.threads", 1)?),
                None => None,
            },
            lr: match t.get("lr") {
                Some(v) => Some(self.positive_float(v, "workload.lr")?),
                None => None,
            },
        })
    }

    /// `[workload.python]`: an unmodified PyTorch script, measured and tuned through the
    /// hooks (`crate::bridge`); `{knob}` placeholders still work.
    fn python(&self, w: &DeTable<'_>, key: &Key<'_>, v: &Val<'_>) -> Result<Workload> {
        if let Some((k, _)) = entries(w)
            .into_iter()
            .find(|(k, _)| k.get_ref() != "python")
        {
            return Err(self.err(
                k.span(),
                format!("workload.{} given together with [workload.python]: a workload is one of the engine, a command or a python script", k.get_ref()),
            ));
        }
        let t = self.table(v, "workload.python")?;
        self.check_keys(t, &["run", "cwd"], "[workload.python]")?;
        let run_v = t.get("run").ok_or_else(|| {
            self.err(
                key.span(),
                "missing workload.python.run, e.g. run = \"python train.py --epochs 1\"",
            )
        })?;
        let cwd = match t.get("cwd") {
            Some(c) => Some(PathBuf::from(self.string(c, "workload.python.cwd")?)),
            None => None,
        };
        Ok(Workload::Command(CommandWorkload {
            run: self.string(run_v, "workload.python.run")?,
            metric: Metric::Hooks,
            cwd,
        }))
    }

    fn command(&self, t: &DeTable<'_>, at: &Val<'_>) -> Result<CommandWorkload> {
        self.check_keys(t, COMMAND_KEYS, "[workload.command]")?;
        let run_v = t.get("run").ok_or_else(|| {
            self.err(
                at.span(),
                "missing workload.command.run, e.g. run = \"python train.py --workers {num_workers}\"",
            )
        })?;
        let run = self.string(run_v, "workload.command.run")?;
        let raw = self.text.get(run_v.span()).unwrap_or("");
        for piece in template_pieces(&run) {
            let (name, at_byte) = match piece {
                Piece::Placeholder { name, at } => (name, at),
                Piece::Unclosed(at) => {
                    return Err(self.err(
                        self.locate(run_v, raw, &run[at..]),
                        "unclosed '{' in workload.command.run (write {{ for a literal brace)",
                    ))
                }
                _ => continue,
            };
            if !Knobs::NAMES.contains(&name) {
                let needle = &run[at_byte..at_byte + name.len() + 2];
                return Err(self.err(
                    self.locate(run_v, raw, needle),
                    format!(
                        "placeholder {{{name}}} is not a knob: known knobs are {} (write {{{{ for a literal brace)",
                        Knobs::NAMES.join(", ")
                    ),
                ));
            }
        }
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
                crate::runner::metric::NumberPattern::parse(&re)
                    .map_err(|msg| self.err(r.span(), msg))?;
                Metric::Regex(re)
            }
            (None, Some(j)) => Metric::JsonKey(self.string(j, "workload.command.metric_json_key")?),
        };
        let cwd = match t.get("cwd") {
            Some(v) => Some(PathBuf::from(self.string(v, "workload.command.cwd")?)),
            None => None,
        };
        Ok(CommandWorkload { run, metric, cwd })
    }

    /// Span of `needle` inside a string literal's source, or the literal's start when
    /// escapes make the source differ from the value.
    fn locate(&self, v: &Val<'_>, raw: &str, needle: &str) -> Range<usize> {
        let start = v.span().start + raw.find(needle).unwrap_or(0);
        start..start + needle.len()
    }

    /// One knob value in its canonical spelling.
    fn knob_value(&self, name: &str, v: &Val<'_>) -> Result<String> {
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
        let mut k = Knobs::default();
        k.set(name, &raw)
            .map_err(|e| self.err(v.span(), e.to_string()))?;
        let canon = k.get(name).unwrap_or(raw);
        if canon == "0" && ["batch_size", "grad_accum", "devices", "bucket_mb"].contains(&name) {
            return Err(self.err(v.span(), format!("invalid {name} 0: must be at least 1")));
        }
        Ok(canon)
    }

    fn knob_name(&self, k: &Key<'_>) -> Result<String> {
        let name = k.get_ref().to_string();
        if Knobs::NAMES.contains(&name.as_str()) {
            Ok(name)
        } else {
            Err(self.err(
                k.span(),
                format!(
                    "unknown knob '{name}': known knobs are {}",
                    Knobs::NAMES.join(", ")
                ),
            ))
        }
    }

    fn knobs(&self, t: &DeTable<'_>) -> Result<Vec<(String, Vec<String>)>> {
        let mut out = Vec::new();
        for (k, v) in entries(t) {
            let name = self.knob_name(k)?;
            let items: Vec<&Val<'_>> = match v.get_ref() {
                DeValue::Array(a) => a.iter().collect(),
                _ => vec![v],
            };
            if items.is_empty() {
                return Err(self.err(
                    v.span(),
                    format!("knob {name} has no values: list at least one"),
                ));
            }
            let mut values: Vec<String> = Vec::new();
            for item in items {
                let value = self.knob_value(&name, item)?;
                if values.contains(&value) {
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
        knobs: &[(String, Vec<String>)],
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
                            "unknown search.strategy '{s}': allowed values are {}",
                            Strategy::ALLOWED.join(", ")
                        ),
                    )
                })?
            }
            None => Strategy::OneAtATime,
        };
        let count = |name: &str, min: usize, default: usize| match t.get(name) {
            Some(v) => self.count(v, &format!("search.{name}"), min),
            None => Ok(default),
        };
        let repeats = count("repeats", 1, 1)?;
        let timeout_s = count("timeout_s", 1, 600)? as u64;
        let eta = count("eta", 2, 3)?;
        let mem_cap_mib = match t.get("mem_cap_mib") {
            Some(v) => Some(self.count(v, "search.mem_cap_mib", 1)? as u64),
            None => None,
        };

        let mut baseline = Knobs::default();
        if let Workload::Engine(e) = workload {
            baseline.batch_size = e.batch_size;
            baseline.devices = e.devices;
        }
        for (name, values) in knobs {
            if let Some(first) = values.first() {
                baseline
                    .set(name, first)
                    .map_err(|e| Error::Invalid(e.to_string()))?;
            }
        }
        let overrides = t.get("baseline");
        if let Some(bv) = overrides {
            for (k, v) in entries(self.table(bv, "search.baseline")?) {
                let name = self.knob_name(k)?;
                let value = self.knob_value(&name, v)?;
                if let Some((_, listed)) = knobs.iter().find(|(n, _)| *n == name) {
                    if !listed.contains(&value) {
                        return Err(self.err(
                            v.span(),
                            format!(
                                "baseline {name} = {value} is not one of the values listed in [knobs]: {}",
                                listed.join(", ")
                            ),
                        ));
                    }
                }
                baseline
                    .set(&name, &value)
                    .map_err(|e| self.err(v.span(), e.to_string()))?;
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
            baseline,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
name = "quickstart"
[workload]
model = "cnn-small"
dataset = "shapes:4000"
batch_size = 32
steps = 60
warmup = 10
device = "cpu"
threads = 2
lr = 0.05

[knobs]
num_workers = [0, 2]
zero_grad = ["memset", "none"]
checkpoint = ["off", "sqrt"]
amp = ["OFF", "bf16"]
autotune = [false, true]
pin_memory = "on"

[search]
strategy = "grid"
repeats = 2
timeout_s = 120
baseline = { num_workers = 2 }
"#;

    fn parse(text: &str) -> Result<Spec> {
        Spec::parse(text, "sweeps/quick.toml")
    }

    /// The (line, col, message) of a spec error.
    fn spec_err(text: &str) -> (usize, usize, String) {
        match parse(text) {
            Err(Error::Spec {
                line,
                col,
                msg,
                path,
            }) => {
                assert_eq!(path, Path::new("sweeps/quick.toml"));
                (line, col, msg)
            }
            other => panic!("expected a spec error, got {other:?}"),
        }
    }

    fn assert_err(text: &str, line: usize, col: usize, needles: &[&str]) {
        let (l, c, msg) = spec_err(text);
        assert_eq!((l, c), (line, col), "{msg}");
        for n in needles {
            assert!(msg.contains(n), "'{msg}' lacks '{n}'");
        }
    }

    const ENGINE: &str = "[workload]\nmodel = \"mlp\"\ndataset = \"shapes:100\"\n";

    #[test]
    fn parses_the_quickstart_spec() {
        let s = parse(GOOD).unwrap();
        assert_eq!(s.name, "quickstart");
        let Workload::Engine(e) = &s.workload else {
            panic!("{:?}", s.workload)
        };
        assert_eq!(
            (
                e.model.as_str(),
                e.batch_size,
                e.steps,
                e.warmup,
                e.threads,
                e.lr
            ),
            ("cnn-small", 32, 60, 10, Some(2), Some(0.05))
        );
        let names: Vec<&str> = s.knobs.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "num_workers",
                "zero_grad",
                "checkpoint",
                "amp",
                "autotune",
                "pin_memory"
            ]
        );
        // Normalised to Knobs' spelling.
        assert_eq!(s.values("amp").unwrap(), ["off", "bf16"]);
        assert_eq!(s.values("autotune").unwrap(), ["false", "true"]);
        assert_eq!(s.values("pin_memory").unwrap(), ["true"]);
        assert_eq!(s.search.strategy, Strategy::Grid);
        assert_eq!((s.search.repeats, s.search.timeout_s), (2, 120));
        let b = &s.search.baseline;
        assert_eq!((b.num_workers, b.batch_size, b.pin_memory), (2, 32, true));
        // Serialises and reads back, for report.json.
        let j = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<Spec>(&j).unwrap(), s);
    }

    #[test]
    fn defaults_and_command_workloads() {
        let s = parse(ENGINE).unwrap();
        assert_eq!(s.name, "quick");
        assert_eq!(s.search.strategy, Strategy::OneAtATime);
        assert_eq!(s.search.baseline, Knobs::default());
        assert!(s.knobs.is_empty());
        assert_eq!(s.dir(), Path::new("sweeps"));

        let s = parse(
            r#"[workload.command]
run = "python train.py --workers {num_workers} --amp {amp} --x '{{}}'"
metric_regex = 'samples/s: ([0-9.]+)'
cwd = "bench"
[knobs]
num_workers = [0, 4]
amp = "bf16"
"#,
        )
        .unwrap();
        let Workload::Command(c) = &s.workload else {
            panic!("{:?}", s.workload)
        };
        assert_eq!(c.metric, Metric::Regex("samples/s: ([0-9.]+)".into()));
        assert_eq!(
            c.render(&s.search.baseline),
            "python train.py --workers 0 --amp bf16 --x '{}'"
        );
        assert_eq!(c.cwd.as_deref(), Some(Path::new("bench")));
    }

    #[test]
    fn capture_groups_are_counted_loosely() {
        assert_eq!(capture_groups(r"samples/s: ([0-9.]+)"), 1);
        assert_eq!(capture_groups(r"(?:a|b) (?P<x>\d+)"), 1);
        assert_eq!(capture_groups(r"\(x\) [(] (\d+)"), 1);
        assert_eq!(capture_groups(r"(?<=a)(\d)(\d)"), 2);
        assert_eq!(capture_groups(r"samples/s: [0-9.]+"), 0);
    }

    #[test]
    fn toml_syntax_errors_carry_position() {
        // Duplicate key: TOML rejects it, we surface its span.
        assert_err(
            &format!("{ENGINE}steps = 5\nsteps = 6\n"),
            5,
            1,
            &["duplicate key 'steps'"],
        );
        assert_err("[workload\nmodel = 1\n", 1, 10, &["expected `]`"]);
    }

    #[test]
    fn unknown_top_level_key() {
        assert_err(
            &format!("{ENGINE}[serach]\nrepeats = 2\n"),
            4,
            2,
            &["unknown key 'serach'", "name, workload, knobs, search"],
        );
    }

    #[test]
    fn unknown_knob_lists_known_ones() {
        assert_err(
            &format!("{ENGINE}[knobs]\nnum_wrokers = [0, 2]\n"),
            5,
            1,
            &["unknown knob 'num_wrokers'", "num_workers, pin_memory"],
        );
    }

    #[test]
    fn bad_knob_value_lists_allowed_ones() {
        assert_err(
            &format!("{ENGINE}[knobs]\namp = [\"off\", \"fp8\"]\n"),
            5,
            15,
            &["invalid amp 'fp8'", "off, bf16, fp16"],
        );
        assert_err(
            &format!("{ENGINE}[knobs]\nnum_workers = [0, -2]\n"),
            5,
            19,
            &["num_workers", "non-negative integer"],
        );
        assert_err(
            &format!("{ENGINE}[knobs]\nbatch_size = [0]\n"),
            5,
            15,
            &["batch_size 0", "at least 1"],
        );
        assert_err(
            &format!("{ENGINE}[knobs]\nbucket_mb = [25, 0]\n"),
            5,
            18,
            &["bucket_mb 0", "at least 1"],
        );
    }

    #[test]
    fn wrong_types() {
        assert_err(
            &format!("{ENGINE}[knobs]\nnum_workers = [1.5]\n"),
            5,
            16,
            &["knob num_workers", "integer, boolean or string", "float"],
        );
        assert_err(
            &format!("{ENGINE}steps = \"60\"\n"),
            4,
            9,
            &["workload.steps", "expected an integer", "found string"],
        );
        assert_err("workload = 3\n", 1, 12, &["workload", "a table"]);
    }

    #[test]
    fn missing_or_doubled_workload() {
        assert_err("[knobs]\namp = \"bf16\"\n", 1, 1, &["missing [workload]"]);
        assert_err(
            "[workload]\ndataset = \"x\"\n",
            1,
            2,
            &["missing workload.model", "mlp, cnn-small, resnet-mini"],
        );
        assert_err(
            &format!("{ENGINE}[workload.command]\nrun = \"x\"\nmetric_json_key = \"k\"\n"),
            2,
            1,
            &["workload.model", "not both"],
        );
    }

    #[test]
    fn empty_value_list_and_duplicates() {
        assert_err(
            &format!("{ENGINE}[knobs]\nzero_grad = []\n"),
            5,
            13,
            &["zero_grad has no values"],
        );
        assert_err(
            &format!("{ENGINE}[knobs]\namp = [\"bf16\", \"BF16\"]\n"),
            5,
            16,
            &["'bf16' twice"],
        );
    }

    #[test]
    fn search_errors() {
        assert_err(
            &format!("{ENGINE}[search]\nstrategy = \"random\"\n"),
            5,
            12,
            &[
                "unknown search.strategy 'random'",
                "grid, one-at-a-time, halving",
            ],
        );
        assert_err(
            &format!("{ENGINE}[search]\nrepeats = 0\n"),
            5,
            11,
            &["search.repeats must be at least 1"],
        );
        assert_err(
            &format!("{ENGINE}[knobs]\nnum_workers = [0, 2]\n[search]\nbaseline = {{ num_workers = 4 }}\n"),
            7,
            28,
            &["baseline num_workers = 4", "0, 2"],
        );
        assert_err(
            &format!("{ENGINE}[search]\nbaseline = {{ devices = 2 }}\n"),
            5,
            12,
            &["baseline configuration is invalid", "parallel"],
        );
    }

    #[test]
    fn unknown_model_and_device() {
        assert_err(
            "[workload]\nmodel = \"vgg\"\ndataset = \"x\"\n",
            2,
            9,
            &[
                "unknown workload.model 'vgg'",
                "mlp, cnn-small, resnet-mini",
            ],
        );
        assert_err(
            &format!("{ENGINE}device = \"tpu\"\n"),
            4,
            10,
            &["cpu, cuda, auto"],
        );
    }

    #[test]
    fn command_errors() {
        assert_err(
            "[workload.command]\nrun = \"python t.py --w {workers}\"\nmetric_json_key = \"k\"\n",
            2,
            24,
            &["placeholder {workers} is not a knob", "num_workers"],
        );
        assert_err(
            "[workload.command]\nrun = \"python t.py\"\nmetric_regex = 'samples/s: [0-9.]+'\n",
            3,
            16,
            &["exactly one capture group", "found 0"],
        );
        assert_err(
            "[workload.command]\nrun = \"python t.py\"\nmetric_regex = '(x)'\nmetric_json_key = \"k\"\n",
            4,
            19,
            &["exactly one of metric_regex and metric_json_key"],
        );
        assert_err(
            "[workload.command]\nrun = \"python t.py\"\nmetric = 'x'\n",
            3,
            1,
            &[
                "unknown key 'metric'",
                "run, metric_regex, metric_json_key, cwd",
            ],
        );
    }

    #[test]
    fn bad_name() {
        assert_err(
            &format!("name = \"../x\"\n{ENGINE}"),
            1,
            8,
            &["not a folder name"],
        );
    }
}
