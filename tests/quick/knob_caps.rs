//! The knob table's "backends" column (what docs/knobs.md and `--help` tell users) and
//! the engine's capability tables (what a run actually admits) say the same thing: a
//! backend the table lists runs every non-default value of the knob, and a backend it
//! does not list refuses at least one of them. Two declarations of one fact stay
//! honest only if a test holds them together.

use tune::engine::caps::{self, Layout, Support};
use tune::engine::device::Backend;
use tune::engine::parallel::is_multi_device;
use tune::knobs::{Knobs, Values, TABLE};

/// Every non-default value worth trying for a knob, as text.
fn non_default_values(name: &str, values: &Values) -> Vec<String> {
    let default = Knobs::default().get(name).expect("a table knob");
    let mut out: Vec<String> = match values {
        Values::Switch => vec!["true".into(), "false".into()],
        Values::Words(words) => words.iter().map(|w| w.to_string()).collect(),
        Values::Count(b) => vec![b.min.to_string(), (b.min + 1).to_string(), "2".into()],
    };
    // Words like `every:K` are spelled with a placeholder in the allowed list.
    for w in &mut out {
        if let Some(stem) = w.strip_suffix(":K") {
            *w = format!("{stem}:2");
        }
    }
    out.retain(|v| *v != default);
    out.dedup();
    out
}

/// Settings a knob's value may need around it to mean anything: `devices = 2` means
/// something only under dp or ddp, `bucket_mb` and `sync_bn` only under ddp.
const CONTEXTS: [&[(&str, &str)]; 4] = [
    &[],
    &[("devices", "2")],
    &[("parallel", "dp"), ("devices", "2")],
    &[("parallel", "ddp"), ("devices", "2")],
];

/// Whether backend `b` honours `name = value` in some valid context: the run is
/// admitted and the knob's own row does not call it "not applicable".
fn honours(b: Backend, name: &str, value: &str) -> Option<bool> {
    let mut any_valid = false;
    for ctx in CONTEXTS {
        let mut k = Knobs::default();
        for (n, v) in ctx {
            k.set(n, v).ok()?;
        }
        if k.set(name, value).is_err() || k.validate().is_err() {
            continue;
        }
        any_valid = true;
        let layout = if is_multi_device(&k) {
            Layout::Multi
        } else {
            Layout::Single
        };
        let admitted = caps::table(b)
            .iter()
            .all(|c| !matches!((c.support)(&k, layout), Support::NotImplemented(_)));
        let own = caps::support(b, &k, layout, name);
        if admitted && own == Support::Supported {
            return Some(true);
        }
    }
    any_valid.then_some(false)
}

/// Values a backend listed for the knob runs as something else and records as "not
/// applicable", as PyTorch ignores them there: `allow_tf32` on a CPU does nothing.
const NOT_APPLICABLE_VALUES: &[(&str, &str, Backend)] = &[("amp", "tf32", Backend::Cpu)];

#[test]
fn the_knob_tables_backends_are_what_the_capability_tables_admit() {
    let mut bad = Vec::new();
    for knob in TABLE {
        for (backend, label) in [(Backend::Cpu, "cpu"), (Backend::Cuda, "cuda")] {
            let listed = knob.applies.backends.contains(&label);
            let runs: Vec<(String, bool)> = non_default_values(knob.name, &knob.values)
                .into_iter()
                .filter(|v| {
                    !NOT_APPLICABLE_VALUES
                        .iter()
                        .any(|(n, val, b)| *n == knob.name && val == v && *b == backend)
                })
                .filter_map(|v| honours(backend, knob.name, &v).map(|ok| (v, ok)))
                .collect();
            assert!(
                !runs.is_empty(),
                "{}: no valid non-default value to try",
                knob.name
            );
            let all = runs.iter().all(|(_, ok)| *ok);
            if listed && !all {
                let refused: Vec<_> = runs.iter().filter(|(_, ok)| !ok).map(|(v, _)| v).collect();
                bad.push(format!(
                    "{}: the knob table lists {label}, but its capability table does not honour {refused:?}",
                    knob.name
                ));
            }
            if !listed && all {
                bad.push(format!(
                    "{}: the knob table leaves out {label}, but its capability table honours every value",
                    knob.name
                ));
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// The exceptions above are what the capability tables say: run, recorded as not
/// applicable with a reason.
#[test]
fn the_not_applicable_values_are_recorded_as_such() {
    for (name, value, backend) in NOT_APPLICABLE_VALUES {
        let mut k = Knobs::default();
        k.set(name, value).unwrap();
        match caps::support(*backend, &k, Layout::Single, name) {
            Support::NotApplicable(why) => assert!(!why.is_empty()),
            other => panic!("{name} = {value} on {backend:?}: {other:?}"),
        }
    }
}
