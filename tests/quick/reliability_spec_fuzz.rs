//! The spec parser under fuzzing (issue #15, extended for issue #27): random bytes,
//! mutations of every spec in experiments/ and of command specs, and specs assembled from
//! the real sections and keys with edge values. On any text the parser gives a spec whose
//! plan lies within the bounds, or one `file:line:col` line; it never panics and never
//! hangs. Proptest seeds with fixed case counts, run as a normal test in a few seconds.

use std::path::Path;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use tune::spec::Spec;
use tune::Error;

/// The longest one parse may take: a 1 MiB spec parses in milliseconds, so this only
/// catches a hang (or a plan built to be counted), never a slow machine.
const PARSE_LIMIT: Duration = Duration::from_secs(10);

/// The parser's contract on any text: a spec whose plan lies within the bounds, or one
/// `Error::Spec` line whose position lies inside the text; never a panic, never a hang.
fn check_parse(text: &str) -> std::result::Result<(), TestCaseError> {
    let (tx, rx) = std::sync::mpsc::channel();
    let owned = text.to_string();
    std::thread::spawn(move || {
        let _ = tx.send(contract(&owned));
    });
    let started = Instant::now();
    match rx.recv_timeout(PARSE_LIMIT) {
        Ok(r) => r.map_err(TestCaseError::fail),
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => Err(TestCaseError::fail(format!(
            "no answer in {:?}",
            started.elapsed()
        ))),
        Err(_) => Err(TestCaseError::fail("the parser panicked")),
    }
}

fn contract(text: &str) -> std::result::Result<(), String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments/fuzz.toml");
    let fail = |what: String| Err(format!("{what}\n--- spec:\n{text}"));
    match Spec::parse(text, &path) {
        Ok(spec) => {
            let n = tune::spec::plan::plan(&spec).trials.len();
            if n > 100_000 {
                return fail(format!("accepted a plan of {n} configurations"));
            }
            Ok(())
        }
        Err(Error::Spec { line, col, msg, .. }) => {
            let lines: Vec<&str> = text.split('\n').collect();
            if !(line >= 1 && line <= lines.len()) {
                return fail(format!("line {line} of {}", lines.len()));
            }
            if !(col >= 1 && col <= lines[line - 1].chars().count() + 1) {
                return fail(format!("col {col} past line {line}"));
            }
            if msg.contains('\n') || msg.chars().any(char::is_control) {
                return fail(format!("{msg:?}"));
            }
            if msg.len() >= 2000 {
                return fail(format!("{} bytes", msg.len()));
            }
            Ok(())
        }
        Err(e) => fail(format!("not a spec error: {e:?}")),
    }
}

/// Command and python specs beside the engine ones in experiments/: the mutations then
/// reach `[params]`, templates and their quoting.
const COMMAND_SEEDS: &[&str] = &[
    "name = \"cmd\"\n[workload.command]\nrun = \"python train.py --lr {lr} --tag '{tag}' --w \\\"{num_workers}\\\" $(date)\"\n\
     metric_regex = 'samples/s: ([0-9.]+)'\ncwd = \".\"\n\n[knobs]\nnum_workers = [0, 2]\n\n\
     [params]\nlr = [0.1, 1e-3]\ntag = [\"a b\", \"it's\"]\n\n[search]\nstrategy = \"grid\"\nrepeats = 2\n\
     baseline = { lr = 1e-3 }\n",
    "[workload.python]\nrun = \"python t.py --bs {bs}\"\n[params]\nbs = [16, 32]\n[knobs]\n\
     zero_grad = [\"memset\", \"none\"]\n[search]\nstrategy = \"halving\"\neta = 2\n",
];

fn examples() -> &'static [String] {
    static EXAMPLES: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    EXAMPLES.get_or_init(read_examples)
}

fn read_examples() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments");
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .map(|p| std::fs::read_to_string(p).unwrap())
        .chain(COMMAND_SEEDS.iter().map(|s| s.to_string()))
        .collect();
    v.sort();
    v
}

/// Pieces a mutation splices in: giant numbers, control characters, nesting, TOML syntax.
const SPLICES: &[&str] = &[
    "99999999999999999999999999",
    "-9223372036854775808",
    "1e308",
    "5e-324",
    "nan",
    "-inf",
    "\0",
    "\u{1b}[2J",
    "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
    "{a={b={c={d={e={f={g={h={}}}}}}}}",
    "\"",
    "'''",
    "\n[knobs]\n",
    "\n[search]\nbaseline = { batch_size = 0 }\n",
    "= [",
    "\u{feff}",
    "\r\n",
    "`",
    "$(",
    "${",
    " # ",
    "<<E\n",
    "{lr}",
    "'",
    "\\",
    "\n[params]\nz = [1, 2]\n",
];

fn mutated() -> impl Strategy<Value = String> {
    let n = examples().len();
    (
        0..n,
        proptest::collection::vec(
            (any::<prop::sample::Index>(), 0..SPLICES.len(), 0..3u8),
            1..6,
        ),
    )
        .prop_map(|(which, edits)| {
            let mut s = examples()[which].clone().into_bytes();
            for (at, piece, kind) in edits {
                let i = at.index(s.len() + 1);
                match kind {
                    0 => {
                        let p = SPLICES[piece].as_bytes();
                        s.splice(i..i, p.iter().copied());
                    }
                    1 => {
                        let end = (i + 1 + piece * 3).min(s.len());
                        s.drain(i.min(end)..end);
                    }
                    _ => {
                        let deep = "[".repeat(10_000);
                        s.splice(i..i, deep.bytes());
                    }
                }
            }
            String::from_utf8_lossy(&s).into_owned()
        })
}

/// Integers at and around every bound a spec key has.
const EDGE_INTS: &[&str] = &[
    "0",
    "1",
    "2",
    "3",
    "64",
    "65",
    "255",
    "256",
    "1000",
    "1001",
    "10000",
    "65536",
    "65537",
    "604800",
    "604801",
    "10000000",
    "10000001",
    "16777216",
    "16777217",
    "-1",
    "9223372036854775807",
    "0x7fffffff",
    "1_000",
];

/// Strings with what a shell, TOML or a terminal treats specially.
const EDGE_STRS: &[&str] = &[
    "",
    "a",
    "a b",
    "it's",
    "\\\"q\\\"",
    "$(touch x)",
    "`x`",
    "${x}",
    "\\n",
    "\\u001b[2J",
    "{a}",
    "shapes:0",
    "shapes:100",
    "shapes:10@2048",
    "shapes:1000000@1024",
    "synthetic",
    "mlp",
    "cnn-small",
    "cpu",
    "grid",
    "halving",
    "one-at-a-time",
    "local",
    "slurm",
    "memset",
    "bf16",
];

/// Pieces of a `run` template: placeholders in every quoting context, and the shell
/// syntax around them.
const RUN_PIECES: &[&str] = &[
    "echo ",
    "{a}",
    "'{a}'",
    "\\\"{b}\\\"",
    "$(",
    ")",
    "`",
    "${",
    "}",
    " # ",
    "<<E\\n",
    "\\\\",
    "'",
    "\\\"",
    " ",
    "{b}",
    "{{",
    "}}",
    "{num_workers}",
    "x",
    ";",
    "$((",
    "))",
];

fn pick(from: &'static [&'static str]) -> impl Strategy<Value = String> {
    prop::sample::select(from).prop_map(str::to_string)
}

/// A scalar TOML value: an edge integer, an edge string, a float or a boolean.
fn scalar() -> impl Strategy<Value = String> {
    prop_oneof![
        pick(EDGE_INTS),
        pick(EDGE_STRS).prop_map(|s| format!("\"{s}\"")),
        pick(&["1e-3", "1e308", "5e-324", "nan", "-inf", "0.5"]),
        pick(&["true", "false"]),
    ]
}

/// A value: a scalar, or an array of up to 60 (so products pass the plan's bound).
fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => scalar(),
        2 => proptest::collection::vec(scalar(), 0..6).prop_map(|v| format!("[{}]", v.join(", "))),
        1 => list_of(0..60),
    ]
}

/// `key = value\n` with probability `p`, else nothing.
fn line(key: &'static str, val: BoxedStrategy<String>, p: f64) -> BoxedStrategy<String> {
    proptest::option::weighted(p, val)
        .prop_map(move |v| v.map_or(String::new(), |v| format!("{key} = {v}\n")))
        .boxed()
}

/// Lines for `keys`, each present with probability 0.4, values from `val`.
fn lines(
    keys: &'static [&'static str],
    val: fn() -> BoxedStrategy<String>,
) -> BoxedStrategy<String> {
    let parts: Vec<BoxedStrategy<String>> = keys.iter().map(|k| line(k, val(), 0.4)).collect();
    parts.prop_map(|v| v.concat()).boxed()
}

/// Mostly an edge integer, sometimes any scalar.
fn int() -> BoxedStrategy<String> {
    prop_oneof![6 => pick(EDGE_INTS), 1 => scalar()].boxed()
}

/// Mostly a quoted word from `words`, sometimes any value.
fn word(words: &'static [&'static str]) -> BoxedStrategy<String> {
    prop_oneof![6 => pick(words).prop_map(|w| format!("\"{w}\"")), 1 => value()].boxed()
}

/// `n` quoted values `v0`, `v1`, ...: lists of 40 to 60 for a, b and c are often past the
/// plan's bound together.
fn list_of(n: std::ops::Range<usize>) -> impl Strategy<Value = String> {
    n.prop_map(|n| {
        let v: Vec<String> = (0..n).map(|i| format!("\"v{i}\"")).collect();
        format!("[{}]", v.join(", "))
    })
}

/// A spec assembled from the real sections and keys with edge values: it reaches the
/// checks past the syntax that random bytes rarely get through.
fn structured() -> impl Strategy<Value = String> {
    let engine = (
        line(
            "model",
            word(&["mlp", "cnn-small", "resnet-mini", "vgg"]),
            0.95,
        ),
        line("dataset", word(EDGE_STRS), 0.3),
        line("device", word(&["cpu", "cuda", "auto", "tpu"]), 0.3),
        lines(
            &["batch_size", "steps", "warmup", "devices", "threads"],
            int,
        ),
        line(
            "lr",
            pick(&["1e-3", "1e308", "5e-324", "0", "-1"]).boxed(),
            0.2,
        ),
        line("colour", value().boxed(), 0.03),
    )
        .prop_map(|(m, d, dev, counts, lr, junk)| {
            let d = if d.is_empty() {
                "dataset = \"synthetic\"\n".to_string()
            } else {
                d
            };
            format!("[workload]\n{m}{d}{dev}{counts}{lr}{junk}")
        });
    let param = || prop_oneof![value(), list_of(40..60)];
    let command = (
        proptest::collection::vec(pick(RUN_PIECES), 0..10),
        [param(), param(), param()],
        prop::bool::ANY,
        prop::bool::weighted(0.9),
    )
        .prop_map(|(run, [a, b, c], python, use_all)| {
            let kind = if python { "python" } else { "command" };
            let metric = if python { "" } else { "metric_json_key = \"k\"\n" };
            let all = if use_all { " {a} {b} {c}" } else { "" };
            format!(
                "[workload.{kind}]\nrun = \"echo {}{all}\"\n{metric}[params]\na = {a}\nb = {b}\nc = {c}\n",
                run.concat()
            )
        });
    fn counts() -> BoxedStrategy<String> {
        prop_oneof![
            proptest::collection::vec(pick(EDGE_INTS), 1..5)
                .prop_map(|v| format!("[{}]", v.join(", "))),
            (1..60usize).prop_map(|n| format!(
                "[{}]",
                (1..=n)
                    .map(|i| i.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
            value(),
        ]
        .boxed()
    }
    let knobs = (
        lines(&["num_workers", "batch_size", "grad_accum"], counts),
        line("zero_grad", word(&["memset", "none", "zero"]), 0.3),
        line("no_such_knob", value().boxed(), 0.03),
    )
        .prop_map(|(a, b, c)| format!("{a}{b}{c}"));
    let search = (
        line(
            "strategy",
            word(&["grid", "one-at-a-time", "halving", "random"]),
            0.6,
        ),
        lines(&["repeats", "timeout_s", "eta", "mem_cap_mib"], int),
        line("executor", word(&["local", "slurm", "k8s"]), 0.1),
        line("baseline", value().boxed(), 0.05),
    )
        .prop_map(|(a, b, c, d)| format!("{a}{b}{c}{d}"));
    let slurm = proptest::option::weighted(
        0.1,
        lines(
            &[
                "nodes",
                "max_parallel",
                "gpus_per_trial",
                "time_limit_min",
                "poll_s",
            ],
            int,
        ),
    );
    (prop_oneof![engine, command], knobs, search, slurm).prop_map(|(w, k, s, slurm)| {
        let slurm = slurm.map_or(String::new(), |t| format!("[slurm]\n{t}"));
        format!("name = \"f\"\n{w}\n[knobs]\n{k}\n[search]\n{s}\n{slurm}")
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn spec_parser_survives_structured_specs(text in structured()) {
        check_parse(&text)?;
    }

    #[test]
    fn spec_parser_survives_mutated_examples(text in mutated()) {
        check_parse(&text)?;
    }

    #[test]
    fn spec_parser_survives_random_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..2000)) {
        check_parse(&String::from_utf8_lossy(&bytes))?;
    }
}
