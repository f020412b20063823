//! Unit tests of spec parsing: positions and wording of every kind of error.

use std::path::Path;

use super::*;
use crate::error::Error;

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

    // cwd must exist, relative to the spec's folder.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("bench")).unwrap();
    let command = r#"[workload.command]
run = "python train.py --workers {num_workers} --amp {amp} --x '{{}}'"
metric_regex = 'samples/s: ([0-9.]+)'
cwd = "bench"
[knobs]
num_workers = [0, 4]
amp = "bf16"
"#;
    let s = Spec::parse(command, dir.path().join("s.toml")).unwrap();
    let (line, col, msg) = spec_err(command);
    assert_eq!((line, col), (4, 7), "{msg}");
    assert!(msg.contains("sweeps/bench' does not exist"), "{msg}");
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
        &[
            "unknown key 'serach'",
            "name, workload, knobs, params, search",
        ],
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
        &["search.repeats 0: must be at least 1 and at most 1000"],
    );
    assert_err(
        &format!("{ENGINE}[search]\nbudget_s = 30\n"),
        5,
        12,
        &[
            "search.budget_s 30: must be at least 60",
            "the whole sweep's time",
        ],
    );
    assert_err(
        &format!(
            "{ENGINE}[knobs]\nnum_workers = [0, 2]\n[search]\nbaseline = {{ num_workers = 4 }}\n"
        ),
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
        &[
            "placeholder {workers} is neither a knob nor a parameter",
            "[params]",
            "num_workers",
        ],
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

#[test]
fn deep_nesting_is_an_error_not_a_stack_overflow() {
    for open in ["[", "{a="] {
        let text = format!("x = {}", open.repeat(100_000));
        assert!(parse(&text).is_err());
    }
}

#[test]
fn the_executor_defaults_to_local_and_the_slurm_table_is_read() {
    let s = parse(GOOD).unwrap();
    assert_eq!(s.search.executor, ExecutorKind::Local);
    assert_eq!(s.slurm.time_limit_min, 2, "timeout_s = 120 is two minutes");
    let s = parse(&format!(
        "{ENGINE}[search]\nexecutor = \"slurm\"\ntimeout_s = 61\n[slurm]\npartition = \"gpu\"\ngres = \"gpu:a100:1\"\nmax_parallel = 8\nextra_args = [\"--qos=short\"]\n"
    ))
    .unwrap();
    assert_eq!(s.search.executor, ExecutorKind::Slurm);
    assert_eq!(s.slurm.partition.as_deref(), Some("gpu"));
    assert_eq!(s.slurm.max_parallel, 8);
    assert_eq!(s.slurm.time_limit_min, 2);
    assert_eq!(s.slurm.extra_args, ["--qos=short"]);
}

#[test]
fn slurm_errors_point_at_the_key() {
    assert_err(
        &format!("{ENGINE}[search]\nexecutor = \"k8s\"\n"),
        5,
        12,
        &["search.executor", "local, slurm"],
    );
    assert_err(
        &format!("{ENGINE}[slurm]\nmax_parallel = 0\n"),
        5,
        16,
        &["slurm.max_parallel"],
    );
    assert_err(
        &format!("{ENGINE}[slurm]\npartition = \"a b\"\n"),
        5,
        13,
        &["whitespace"],
    );
    assert_err(
        &format!("{ENGINE}[slurm]\nqueue = \"x\"\n"),
        5,
        1,
        &["unknown key 'queue' in [slurm]", "partition"],
    );
    assert_err(
        "[workload.command]\nrun = \"x\"\nmetric_json_key = \"sps\"\n[search]\nexecutor = \"slurm\"\n",
        5,
        12,
        &["engine workloads"],
    );
}

const PARAMS: &str = r#"[workload.command]
run = "python train.py --lr {lr} --model {model} --workers {num_workers} --fast={fast}"
metric_json_key = "samples_per_s"
[knobs]
num_workers = [0, 2]
[params]
lr = [0.1, 1e-3]
model = ["resnet18", "vit-tiny"]
fast = true
"#;

#[test]
fn params_are_swept_like_knobs_and_fill_their_placeholders() {
    let s = parse(PARAMS).unwrap();
    assert_eq!(
        s.params,
        [
            (
                "lr".to_string(),
                vec!["0.1".to_string(), "1e-3".to_string()]
            ),
            ("model".into(), vec!["resnet18".into(), "vit-tiny".into()]),
            ("fast".into(), vec!["true".into()]),
        ]
    );
    assert_eq!(s.search.baseline.params["lr"], "0.1");
    let p = plan::plan(&s);
    let labels: Vec<&str> = p.trials.iter().map(|t| t.label.as_str()).collect();
    assert_eq!(
        labels,
        ["baseline", "num_workers=2", "lr=1e-3", "model=vit-tiny"]
    );
    let Workload::Command(c) = &s.workload else {
        panic!("{:?}", s.workload)
    };
    assert_eq!(
        c.render(&p.trials[2].knobs),
        "python train.py --lr 1e-3 --model resnet18 --workers 0 --fast=true"
    );
    // A parameter's value is part of the trial's id, so a journal never confuses two.
    let ids: std::collections::HashSet<&str> = p.trials.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids.len(), 4);
    // A knob-only trial keeps the id it had before parameters existed.
    assert_eq!(
        plan::trial_id(&Knobs::default(), &Knobs::default()),
        "baseline#8649f191"
    );
    // A constant parameter changed between two runs of the spec makes a different
    // baseline: its id differs, so --resume never reuses the other's measurement.
    let other = parse(&PARAMS.replace("fast = true", "fast = false")).unwrap();
    assert_ne!(plan::plan(&other).trials[0].id, p.trials[0].id);
    // The baseline can name a parameter's value, and the grid crosses parameters too.
    let grid = PARAMS.replace(
        "fast = true\n",
        "fast = true\n[search]\nstrategy = \"grid\"\nbaseline = { lr = 1e-3 }\n",
    );
    let s = parse(&grid).unwrap();
    assert_eq!(s.search.baseline.params["lr"], "1e-3");
    let p = plan::plan(&s);
    assert_eq!(p.trials.len(), 8);
    assert!(p
        .trials
        .iter()
        .any(|t| t.label == "num_workers=2 lr=0.1 model=vit-tiny"));
    // Round trip through JSON (journal headers and report.json carry the spec).
    let j = serde_json::to_string(&s).unwrap();
    assert_eq!(serde_json::from_str::<Spec>(&j).unwrap(), s);
    let k = serde_json::to_string(&p.trials[1].knobs).unwrap();
    assert_eq!(Knobs::from_json(&k).unwrap(), p.trials[1].knobs);
}

#[test]
fn params_errors() {
    // An undeclared placeholder, at its position, naming what is declared.
    assert_err(
        &PARAMS.replace("--fast={fast}", "--fast={fast} --seed {seed}"),
        2,
        95,
        &["placeholder {seed}", "parameters declared: lr, model, fast"],
    );
    assert_err(
        &PARAMS.replace("fast = true", "fast = true\nextra = 1"),
        10,
        1,
        &[
            "parameter extra is declared under [params]",
            "has no {extra}",
        ],
    );
    assert_err(
        &PARAMS.replace("fast = true", "amp = [\"bf16\"]"),
        9,
        1,
        &["parameter amp is a knob", "[knobs]"],
    );
    assert_err(
        &PARAMS.replace("lr = [0.1, 1e-3]", "lr = [0.1, 0.1]"),
        7,
        12,
        &["parameter lr lists '0.1' twice"],
    );
    assert_err(
        &PARAMS.replace("fast = true", "fast = { a = 1 }"),
        9,
        8,
        &["parameter fast: expected a string, number or boolean"],
    );
    assert_err(
        &PARAMS.replace("lr = [0.1, 1e-3]", "lr = []"),
        7,
        6,
        &["parameter lr has no values"],
    );
    assert_err(
        &PARAMS.replace(
            "fast = true\n",
            "fast = true\n[search]\nbaseline = { lr = 0.5 }\n",
        ),
        11,
        19,
        &["baseline lr = 0.5 is not one of the values listed in [params]: 0.1, 1e-3"],
    );
    assert_err(
        &format!("{ENGINE}[params]\nlr = [0.1]\n"),
        ENGINE.lines().count() + 1,
        2,
        &["[params] is for a [workload.command]"],
    );
}
