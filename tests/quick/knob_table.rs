//! Issue #16, the knob table: every knob is declared once (`tune::knobs::TABLE`), and
//! the struct, the flags, spec validation, the trial hand-over and the docs table all
//! follow it. Each test walks the whole table, so a knob added to it is checked here
//! without touching this file.

use std::process::Command;

use clap::{Args, CommandFactory, Parser};
use tune::commands::cli::{Cli, KnobArgs};
use tune::knobs::{self, Knob, Knobs, Torch, Values, TABLE};
use tune::spec::Spec;

/// Values of `k` other than its default that `set` must accept.
fn samples(k: &Knob) -> Vec<String> {
    match k.values {
        Values::Count(b) => vec![b.min.to_string(), b.max.to_string()],
        Values::Switch => vec!["true".into(), "false".into()],
        // Words that are patterns (`every:K (K >= 1)`) get a concrete instance.
        Values::Words(w) => w
            .iter()
            .map(|v| match v.split_once(':') {
                Some((head, _)) => format!("{head}:3"),
                None => (*v).to_string(),
            })
            .collect(),
    }
}

/// A value of `k` that the table refuses, and what the refusal must name.
fn refused(k: &Knob) -> (String, String) {
    match k.values {
        Values::Count(b) => ((b.max + 1).to_string(), format!("at most {}", b.max)),
        Values::Switch => ("sometimes".into(), "true, false".into()),
        Values::Words(w) => ("warp9".into(), w.join(", ")),
    }
}

#[test]
fn the_docs_table_is_the_generated_one() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/knobs.md");
    let text = std::fs::read_to_string(path).unwrap();
    let fresh = knobs::table_markdown();
    let inside = text
        .split_once(knobs::TABLE_START)
        .and_then(|(_, rest)| rest.split_once(knobs::TABLE_END))
        .map(|(table, _)| table.trim());
    assert!(
        inside == Some(fresh.trim()),
        "docs/knobs.md's knob table differs from the knob table in src/knobs.rs; put this \
         between the markers\n{}\n{}\n{}",
        knobs::TABLE_START,
        fresh.trim(),
        knobs::TABLE_END
    );
}

#[test]
fn every_knob_round_trips_through_text_and_json() {
    let names: Vec<&str> = TABLE.iter().map(|k| k.name).collect();
    assert_eq!(names, Knobs::NAMES, "NAMES is the table's order");
    // The struct's JSON form has exactly the table's fields, in order.
    let json = serde_json::to_value(Knobs::default()).unwrap();
    let keys: Vec<&str> = json
        .as_object()
        .unwrap()
        .keys()
        .map(|s| s.as_str())
        .collect();
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(keys, sorted, "serde fields (serde_json sorts keys)");
    for k in TABLE {
        assert!(
            !k.help().is_empty() && !k.help().contains('\n'),
            "{}",
            k.name
        );
        let default = Knobs::default().get(k.name).unwrap();
        assert_eq!(k.default_text(), default);
        let mut x = Knobs::default();
        x.set(k.name, &default).unwrap();
        assert_eq!(x, Knobs::default(), "{}: default -> text -> set", k.name);
        for v in samples(k) {
            let mut x = Knobs::default();
            x.set(k.name, &v)
                .unwrap_or_else(|e| panic!("{} = {v}: {e}", k.name));
            assert_eq!(x.get(k.name).unwrap(), v, "{}: set -> get", k.name);
            let back: Knobs = serde_json::from_str(&serde_json::to_string(&x).unwrap()).unwrap();
            assert_eq!(back, x, "{} = {v}: JSON", k.name);
        }
        // A word without its PyTorch line (or a "*" line for the rest) would fall back
        // to "# set ..." in advice.
        if let Torch::PerValue(lines) = k.torch {
            for v in samples(k) {
                assert!(
                    lines.iter().any(|(w, _)| *w == v || *w == "*"),
                    "{} = {v}: no PyTorch line",
                    k.name
                );
            }
        }
        let (bad, says) = refused(k);
        let e = Knobs::default().set(k.name, &bad).unwrap_err().to_string();
        assert!(e.contains(k.name) && e.contains(&says), "{}: {e}", k.name);
    }
}

#[test]
fn trial_ids_take_only_new_knobs_conditionally() {
    // Journals store ids hashed over these ten knobs; a knob added to this group would
    // change every stored id and break `--resume`. New knobs belong in `later`.
    let first: Vec<&str> = Knobs::NAMES
        .iter()
        .copied()
        .filter(|n| !Knobs::LATER.contains(n))
        .collect();
    assert_eq!(
        first,
        [
            "num_workers",
            "pin_memory",
            "autotune",
            "zero_grad",
            "checkpoint",
            "amp",
            "parallel",
            "devices",
            "batch_size",
            "grad_accum"
        ]
    );
}

#[test]
fn clap_exposes_exactly_the_table_knobs() {
    let alone = KnobArgs::augment_args(clap::Command::new("knobs"));
    let mut longs: Vec<String> = alone
        .get_arguments()
        .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
        .collect();
    let mut flags: Vec<String> = TABLE.iter().map(Knob::flag).collect();
    longs.sort();
    flags.sort();
    assert_eq!(longs, flags);
    let cli = Cli::command();
    for sub in ["train", "trial"] {
        let cmd = cli.find_subcommand(sub).unwrap();
        for k in TABLE {
            let arg = cmd
                .get_arguments()
                .find(|a| a.get_long().map(|l| format!("--{l}")) == Some(k.flag()))
                .unwrap_or_else(|| panic!("{sub} lacks {}", k.flag()));
            let help = arg.get_help().unwrap().to_string();
            assert!(
                help.starts_with(k.help().trim_end_matches('.')),
                "{sub} {}: help '{help}'",
                k.flag()
            );
        }
    }
    // Each flag sets its knob, and a refused value names the flag.
    for k in TABLE {
        for v in samples(k) {
            let mut argv = vec!["tune".to_string(), "train".into(), k.flag()];
            match (k.values, v.as_str()) {
                // A switch has no value: absent is false.
                (Values::Switch, "false") => argv.truncate(2),
                (Values::Switch, _) => {}
                _ => argv.push(v.clone()),
            }
            let Cli {
                command: tune::commands::cli::Command::Train(a),
            } = Cli::try_parse_from(&argv).unwrap()
            else {
                panic!("not train");
            };
            let got = a.run.knobs.each_knob().unwrap();
            assert_eq!(got.get(k.name), Some(v.clone()), "{argv:?}");
        }
        if matches!(k.values, Values::Switch) {
            continue;
        }
        let (bad, says) = refused(k);
        let argv = ["tune", "train", &k.flag(), &bad];
        let Cli {
            command: tune::commands::cli::Command::Train(a),
        } = Cli::try_parse_from(argv).unwrap()
        else {
            panic!("not train");
        };
        let e = a.run.knobs.knobs().unwrap_err().to_string();
        assert!(
            e.starts_with(&format!("{} ", k.flag())) && e.contains(&says),
            "{argv:?}: {e}"
        );
    }
}

#[test]
fn the_spec_refuses_each_knobs_bad_value_with_the_table_bounds() {
    for k in TABLE {
        let (bad, says) = refused(k);
        let value = match k.values {
            Values::Count(_) => bad.clone(),
            _ => format!("\"{bad}\""),
        };
        let text = format!(
            "[workload]\nmodel = \"mlp\"\ndataset = \"synthetic\"\n[knobs]\n{} = [{value}]\n",
            k.name
        );
        let e = Spec::parse(&text, "s.toml").unwrap_err().to_string();
        let col = k.name.len() + 5;
        assert!(
            e.starts_with(&format!("s.toml:5:{col}: invalid {} ", k.name)) && e.contains(&says),
            "{}: {e}",
            k.name
        );
    }
    let e = Spec::parse(
        "[workload]\nmodel = \"mlp\"\ndataset = \"synthetic\"\n[knobs]\nwarp = [1]\n",
        "s.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("s.toml:5:1: unknown knob 'warp'") && e.contains(&Knobs::NAMES.join(", ")),
        "{e}"
    );
}

fn trial(knobs_json: &str) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tune"))
        .args([
            "trial",
            "--json",
            "--model",
            "mlp",
            "--dataset",
            "synthetic",
        ])
        .args([
            "--steps",
            "2",
            "--warmup",
            "1",
            "--threads",
            "1",
            "--no-eval",
        ])
        .args(["--knobs-json", knobs_json])
        .env_remove("TUNE_TRIAL_FAULT")
        .env_remove("TUNE_TRIAL_MEM_CAP_BYTES")
        .env_remove("TUNE_LIVE_FILE")
        .output()
        .unwrap()
}

/// The trial child reads its knobs as one JSON value, checked by the same table: a value
/// the table refuses is exit 2 with one `invalid` line, and a good one is the run's knobs.
#[test]
fn trial_knobs_json_is_checked_by_the_table() {
    for (json, says) in [
        (
            r#"{"batch_size":0}"#,
            "invalid batch_size 0: must be at least 1",
        ),
        (r#"{"num_workers":100000}"#, "at most 256"),
        (r#"{"amp":"fp8"}"#, "off, bf16, fp16"),
        (r#"{"warp":1}"#, "unknown field"),
        (r#"{"sync_bn":true}"#, "sync_bn needs parallel = ddp"),
    ] {
        let o = trial(json);
        let out = String::from_utf8_lossy(&o.stdout);
        assert_eq!(o.status.code(), Some(2), "{json}: {out}");
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines.len(), 1, "{json}: {out}");
        let v: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
        assert_eq!(v["error"]["kind"], "invalid", "{json}: {out}");
        let msg = v["error"]["message"].as_str().unwrap();
        assert!(
            msg.starts_with("--knobs-json") && msg.contains(says),
            "{json}: {msg}"
        );
    }
    let k = Knobs {
        batch_size: 8,
        zero_grad: tune::knobs::ZeroGrad::None,
        checkpoint: tune::knobs::Checkpoint::Every(2),
        ..Knobs::default()
    };
    let o = trial(&serde_json::to_string(&k).unwrap());
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}");
    let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    let ran: Knobs = serde_json::from_value(v["ok"]["knobs"].clone()).unwrap();
    assert_eq!(ran, k);
}

/// The hooks get the knobs the table marks `python`, in their JSON spelling (numbers,
/// booleans, words), and only those a sweep names.
#[test]
fn the_hooks_get_the_python_knobs_in_json_form() {
    let spec = Spec::parse(
        "[workload.python]\nrun = \"python t.py\"\n[knobs]\nnum_workers = [0, 2]\n\
         pin_memory = [false, true]\nzero_grad = [\"memset\", \"none\"]\namp = [\"off\", \"bf16\"]\n\
         [search]\nbaseline = { autotune = true }\n",
        "s.toml",
    )
    .unwrap();
    let k = Knobs {
        num_workers: 2,
        pin_memory: true,
        zero_grad: tune::knobs::ZeroGrad::None,
        amp: tune::knobs::Amp::Bf16,
        autotune: true,
        ..Knobs::default()
    };
    let m = tune::bridge::knob_values(&spec, &k);
    let got = serde_json::Value::Object(m);
    assert_eq!(
        got,
        serde_json::json!({"num_workers": 2, "pin_memory": true, "zero_grad": "none", "amp": "bf16", "autotune": true})
    );
    for t in TABLE {
        assert_eq!(
            tune::bridge::injected(t.name),
            t.applies.python,
            "{}",
            t.name
        );
    }
}

/// A script's checkpointing can be swept off (`checkpoint = ["off"]`), never on: the
/// hooks cannot choose segments in a model they did not build. Any other value, in
/// `[knobs]` or the baseline, is refused where it is written; a `{checkpoint}`
/// placeholder hands any value to the script itself.
#[test]
fn a_script_is_swept_only_to_checkpointing_off() {
    let parse = |tail: &str, run: &str| {
        Spec::parse(
            &format!("[workload.python]\nrun = \"{run}\"\n{tail}"),
            "s.toml",
        )
    };
    let ok = parse("[knobs]\ncheckpoint = [\"off\"]\n", "python t.py").unwrap();
    assert_eq!(ok.knobs[0].0, "checkpoint");
    for (tail, at) in [
        ("[knobs]\ncheckpoint = [\"off\", \"sqrt\"]\n", "s.toml:4:"),
        (
            "[knobs]\nnum_workers = [0]\n[search]\nbaseline = { checkpoint = \"every:2\" }\n",
            "s.toml:6:",
        ),
    ] {
        let e = parse(tail, "python t.py").unwrap_err().to_string();
        assert!(
            e.contains(at) && e.contains("can only be \"off\""),
            "{tail}: {e}"
        );
    }
    parse(
        "[knobs]\ncheckpoint = [\"off\", \"sqrt\"]\n",
        "python t.py --ckpt {checkpoint}",
    )
    .unwrap();
}

/// The advisor's rules take every flag they print from the table (`advisor::flag`,
/// `Knob::flag`): a flag written by hand in a rule (`"--num-workers {n}"`) would keep
/// its old spelling if a knob were renamed (#29). Unit tests may spell flags out.
#[test]
fn the_advisor_writes_no_flag_by_hand() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/advisor");
    let mut hand = Vec::new();
    let mut read = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_none_or(|x| x != "rs") || p.ends_with("testkit.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap();
        let code = text.split("#[cfg(test)]\nmod tests").next().unwrap_or("");
        read += 1;
        for (i, line) in code.lines().enumerate() {
            let line = line.split("//").next().unwrap_or("");
            // A `--` followed by a letter inside a string literal.
            let in_string = line.split('"').skip(1).step_by(2).any(|s| {
                s.match_indices("--")
                    .any(|(j, _)| s[j + 2..].starts_with(|c: char| c.is_ascii_lowercase()))
            });
            if in_string {
                hand.push(format!("{}:{}: {}", p.display(), i + 1, line.trim()));
            }
        }
    }
    assert!(read > 10, "read only {read} advisor files");
    assert!(
        hand.is_empty(),
        "flags written by hand in the advisor's rules (use advisor::flag):\n{}",
        hand.join("\n")
    );
}

/// A spec's knob values are parsed once, when the spec is read, whatever it is read
/// from: a journal's header (`--resume`) holding a value the table refuses is refused on
/// read, naming the knob and the value, where the plan used to parse the text again and
/// quietly leave the knob at its baseline (#29). The stored form stays text.
#[test]
fn a_spec_holds_its_knob_values_typed_from_every_source() {
    let spec = Spec::parse(
        "name = \"t\"\n[workload]\nmodel = \"mlp\"\ndataset = \"synthetic\"\n[knobs]\namp = [\"off\", \"bf16\"]\n\
         num_workers = [0, 2]\n",
        "t.toml",
    )
    .unwrap();
    let mut v = serde_json::to_value(&spec).unwrap();
    assert_eq!(
        v["knobs"],
        serde_json::json!([["amp", ["off", "bf16"]], ["num_workers", ["0", "2"]]])
    );
    let back: Spec = serde_json::from_value(v.clone()).unwrap();
    let ids = |s: &Spec| -> Vec<String> {
        tune::spec::plan::plan(s)
            .trials
            .into_iter()
            .map(|t| t.id)
            .collect()
    };
    assert_eq!(ids(&back), ids(&spec));
    assert_eq!(ids(&spec).len(), 3, "{:?}", ids(&spec));
    v["knobs"][0][1][1] = "fp8".into();
    let e = serde_json::from_value::<Spec>(v)
        .expect_err("a journal's spec with amp = fp8 was read")
        .to_string();
    assert!(e.contains("amp") && e.contains("fp8"), "{e}");
}
