//! Issue #27, placeholders: a `{param}` or `{knob}` value reaches the command as exactly
//! that value, one word, whatever it holds and wherever the user put the placeholder
//! (bare, in single or double quotes, inside `$(...)`), so a value never runs as shell
//! code; a placeholder where tune cannot quote (backticks, `${...}`, arithmetic, a
//! comment, a here-document, after a backslash or a `$`) is refused when the spec is
//! read. Checked against the real `sh -c`, byte for byte.

use crate::cli;

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use proptest::prelude::*;
use tune::knobs::Knobs;
use tune::spec::{CommandWorkload, Metric, Spec, Workload};

use cli::{output_within, refused, show, tune};

/// A TOML basic string holding exactly `v`.
fn toml_str(v: &str) -> String {
    let mut s = String::from("\"");
    for c in v.chars() {
        match c {
            '"' => s.push_str("\\\""),
            '\\' => s.push_str("\\\\"),
            c if c.is_control() => s.push_str(&format!("\\u{:04X}", c as u32)),
            c => s.push(c),
        }
    }
    s.push('"');
    s
}

/// Templates that print the placeholder's value, each in another quoting context, and
/// what they print around it.
const CONTEXTS: &[(&str, &str, &str)] = &[
    ("printf '%s' {v}", "", ""),
    ("printf '%s' '{v}'", "", ""),
    ("printf '%s' \"{v}\"", "", ""),
    ("printf '%s' \"<{v}>\"", "<", ">"),
    ("printf '%s' '<'{v}'>'", "<", ">"),
    ("printf '%s' pre{v}post", "pre", "post"),
    ("printf '%s' --flag={v}", "--flag=", ""),
    ("x={v}; printf '%s' \"$x\"", "", ""),
    ("printf '%s' \"$(printf '%s' {v})\"", "", ""),
    ("printf '%s' \"$(printf '%s' \"[{v}]\")\"", "[", "]"),
    ("printf '%s' {{{v}}}", "{", "}"),
    ("printf '%s' 'it''s:'{v}", "its:", ""),
];

/// What `sh -c line` prints, run in `dir`.
fn sh(line: &str, dir: &Path) -> Vec<u8> {
    let o = output_within(
        Command::new("sh").arg("-c").arg(line).current_dir(dir),
        Duration::from_secs(20),
    );
    assert!(o.status.success(), "`{line}`: {}", show(&o));
    o.stdout
}

fn check_value(value: &str, dir: &Path) -> Result<(), TestCaseError> {
    for (run, before, after) in CONTEXTS {
        let text = format!(
            "[workload.command]\nrun = {}\nmetric_json_key = \"k\"\n[params]\nv = [{}]\n",
            toml_str(run),
            toml_str(value)
        );
        let spec = Spec::parse(&text, dir.join("s.toml"))
            .map_err(|e| TestCaseError::fail(format!("{run}: {e}")))?;
        let Workload::Command(c) = &spec.workload else {
            unreachable!()
        };
        let line = c.render(&spec.search.baseline);
        let got = sh(&line, dir);
        let want = format!("{before}{value}{after}");
        prop_assert_eq!(
            String::from_utf8_lossy(&got),
            want.as_str(),
            "run = {} became `{}`",
            run,
            line
        );
        prop_assert_eq!(got, want.into_bytes());
    }
    // Nothing the value could have run left a trace.
    prop_assert!(
        std::fs::read_dir(dir).unwrap().next().is_none(),
        "the value ran as code"
    );
    Ok(())
}

fn shell_char() -> impl Strategy<Value = char> {
    prop_oneof![
        any::<char>(),
        prop::sample::select(vec![
            '\'',
            '"',
            '$',
            '`',
            '\\',
            ' ',
            '\t',
            '*',
            '?',
            '[',
            ']',
            '{',
            '}',
            '(',
            ')',
            ';',
            '&',
            '|',
            '<',
            '>',
            '~',
            '#',
            '!',
            '=',
            '%',
            '-',
            '\u{e9}',
            '\u{1f600}',
            '\u{85}',
        ]),
    ]
}

/// A value a spec can hold: anything but NUL and line breaks (a label is one line).
fn spec_value() -> impl Strategy<Value = String> {
    proptest::collection::vec(shell_char(), 0..24).prop_map(|cs| {
        cs.into_iter()
            .filter(|c| !matches!(c, '\0' | '\n' | '\r'))
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn every_value_reaches_the_shell_as_itself(value in spec_value()) {
        let d = tempfile::tempdir().unwrap();
        let work = d.path().join("work");
        std::fs::create_dir(&work).unwrap();
        check_value(&value, &work)?;
    }

    /// The quoting itself holds for values a spec refuses too (line breaks), should a
    /// configuration ever be built another way.
    #[test]
    fn rendering_quotes_line_breaks_too(
        value in proptest::collection::vec(prop_oneof![Just('\n'), Just('\r'), shell_char()], 0..16)
            .prop_map(|cs| cs.into_iter().filter(|c| *c != '\0').collect::<String>())
    ) {
        let d = tempfile::tempdir().unwrap();
        for (run, before, after) in CONTEXTS.iter().filter(|c| !c.0.contains("$(")) {
            let c = CommandWorkload {
                run: run.to_string(),
                metric: Metric::JsonKey("k".into()),
                cwd: None,
                window: None,
            };
            let mut k = Knobs::default();
            k.params.insert("v".into(), value.clone());
            let line = c.render(&k);
            let got = sh(&line, d.path());
            prop_assert_eq!(got, format!("{before}{value}{after}").into_bytes(), "`{}`", line);
        }
        prop_assert!(std::fs::read_dir(d.path()).unwrap().next().is_none());
    }
}

#[test]
fn a_sweep_runs_hostile_values_as_data() {
    let d = tempfile::tempdir().unwrap();
    let spec = d.path().join("s.toml");
    let values = [
        "$(touch PWNED)",
        "a'b; touch PWNED2",
        "x\"y`touch PWNED3`",
        "*",
    ];
    let list: Vec<String> = values.iter().map(|v| toml_str(v)).collect();
    std::fs::write(
        &spec,
        format!(
            "name = \"hostile\"\n[workload.command]\n\
             run = \"printf '%s|%s|%s\\\\n' {{tag}} '{{tag}}' \\\"{{tag}}\\\" >> got.txt; echo samples/s: 10\"\n\
             metric_regex = 'samples/s: ([0-9.]+)'\n[params]\ntag = [{}]\n[search]\nstrategy = \"grid\"\n",
            list.join(", ")
        ),
    )
    .unwrap();
    let o = output_within(
        tune()
            .arg("sweep")
            .arg(&spec)
            .arg("--out")
            .arg(d.path().join("out"))
            .current_dir(d.path()),
        Duration::from_secs(120),
    );
    assert_eq!(o.status.code(), Some(0), "{}", show(&o));
    for f in ["PWNED", "PWNED2", "PWNED3"] {
        assert!(!d.path().join(f).exists(), "a value ran as code: {f}");
    }
    let got = std::fs::read_to_string(d.path().join("got.txt")).unwrap();
    let want: String = values.iter().map(|v| format!("{v}|{v}|{v}\n")).collect();
    assert_eq!(got, want);
}

#[test]
fn placeholders_tune_cannot_quote_are_refused_where_they_stand() {
    let d = tempfile::tempdir().unwrap();
    for (i, run) in [
        "echo `echo {tag}`",
        "echo ${{HOME:-{tag}}}",
        "echo $(( {tag} + 1 ))",
        "echo hi # {tag}",
        "cat <<EOF\n{tag}\nEOF",
        "echo \\{tag}",
        "echo ${tag}",
        "echo \"\\{tag}\"",
        "echo '{tag}",
        "echo \"{tag}",
    ]
    .into_iter()
    .enumerate()
    {
        let spec = d.path().join(format!("s{i}.toml"));
        let text = format!(
            "[workload.command]\nrun = {}\nmetric_json_key = \"k\"\n[params]\ntag = [\"a\", \"b\"]\n",
            toml_str(run)
        );
        std::fs::write(&spec, &text).unwrap();
        let out = d.path().join(format!("out{i}"));
        let o = output_within(
            tune().arg("sweep").arg(&spec).arg("--out").arg(&out),
            Duration::from_secs(60),
        );
        let line = refused(&o);
        assert!(
            line.contains(&format!("{}:2:", spec.display())),
            "{run:?}: {line}"
        );
        assert!(line.contains("workload.command.run"), "{run:?}: {line}");
        assert!(!out.exists(), "{run:?}: output written");
    }
}
