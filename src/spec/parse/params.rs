//! `[params]` and the command templates that use them: every placeholder names a knob
//! or a parameter, stands where tune can quote its value (`crate::spec::shell`), and the
//! command line stays one argument the kernel accepts.

use std::collections::HashSet;

use toml::de::{DeTable, DeValue};

use super::{entries, Cx, Key, Param, Val};
use crate::error::{shown, Result};
use crate::knobs::Knobs;
use crate::limits;
use crate::spec::shell;
use crate::spec::{template_pieces, Piece};

impl Cx<'_> {
    /// Every `{name}` in a command template names a knob or a `[params]` entry, and every
    /// parameter is used (an unused one would only make identical trials).
    pub(super) fn placeholders(
        &self,
        run_v: &Val<'_>,
        run: &str,
        what: &str,
        params: &[Param],
    ) -> Result<()> {
        let raw = self.text.get(run_v.span()).unwrap_or("");
        let mut used = Vec::new();
        for piece in template_pieces(run) {
            let (name, at_byte) = match piece {
                Piece::Placeholder { name, at } => (name, at),
                Piece::Unclosed(at) => {
                    return Err(self.err(
                        self.locate(run_v, raw, &run[at..]),
                        format!("unclosed '{{' in {what} (write {{{{ for a literal brace)"),
                    ))
                }
                _ => continue,
            };
            used.push(name);
            if !Knobs::NAMES.contains(&name) && !params.iter().any(|p| p.0 == name) {
                let needle = &run[at_byte..at_byte + name.len() + 2];
                let declared: Vec<&str> = params.iter().map(|p| p.0.as_str()).collect();
                return Err(self.err(
                    self.locate(run_v, raw, needle),
                    format!(
                        "placeholder {{{}}} is neither a knob nor a parameter: declare it under [params] \
                         (e.g. {} = [\"a\", \"b\"]); parameters declared: {}; knobs: {} (write {{{{ for a literal brace)",
                        shown(name),
                        shown(name),
                        if declared.is_empty() { "none".into() } else { declared.join(", ") },
                        Knobs::NAMES.join(", ")
                    ),
                ));
            }
        }
        let spots = shell::spots(run).map_err(|r| {
            self.err(
                self.locate(run_v, raw, &run[r.at..]),
                format!("{what}: {}", r.why),
            )
        })?;
        self.command_bytes(run_v, run, &spots, what, params)?;
        if let Some(p) = params.iter().find(|p| !used.contains(&p.0.as_str())) {
            return Err(self.err(
                p.2.clone(),
                format!(
                    "parameter {} is declared under [params] but {what} has no {{{}}}: every trial would run the same command",
                    p.0, p.0
                ),
            ));
        }
        Ok(())
    }

    /// `[params]`: a command's own parameters, `name = [values]` or `name = value`.
    /// Values keep their source spelling (`1e-3` stays `1e-3`): they reach the command
    /// line as written, quoted for where they stand (`crate::spec::shell`).
    pub(super) fn params(&self, key: &Key<'_>, t: &DeTable<'_>) -> Result<Vec<Param>> {
        let mut out: Vec<Param> = Vec::new();
        for (k, v) in entries(t) {
            let name = k.get_ref().to_string();
            let ident = name
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !ident {
                return Err(self.err(
                    k.span(),
                    format!(
                        "parameter name '{}' is not a plain name: use letters, digits and '_', not starting with a digit",
                        shown(&name)
                    ),
                ));
            }
            if Knobs::NAMES.contains(&name.as_str()) {
                return Err(self.err(
                    k.span(),
                    format!("parameter {name} is a knob: list it under [knobs], where its values are checked"),
                ));
            }
            let items = self.items(v, &format!("parameter {name}"))?;
            let mut values: Vec<String> = Vec::new();
            let mut seen = HashSet::new();
            for item in items {
                let value = match item.get_ref() {
                    DeValue::String(s) => s.to_string(),
                    DeValue::Integer(_) | DeValue::Float(_) | DeValue::Boolean(_) => self
                        .text
                        .get(item.span())
                        .unwrap_or_default()
                        .trim()
                        .to_string(),
                    _ => {
                        return Err(self.wrong_type(
                            item,
                            &format!("parameter {name}"),
                            "a string, number or boolean",
                        ))
                    }
                };
                if value.contains(['\n', '\r', '\0']) {
                    return Err(self.err(
                        item.span(),
                        format!("parameter {name}: a value cannot hold a line break or NUL"),
                    ));
                }
                let b = &limits::PARAM_VALUE_BYTES;
                b.check_usize(value.len()).map_err(|_| {
                    let n = format!("{} bytes", value.len());
                    self.err(
                        item.span(),
                        format!("parameter {name}: a value of {}", b.refusal(&n)),
                    )
                })?;
                if !seen.insert(value.clone()) {
                    return Err(self.err(
                        item.span(),
                        format!("parameter {name} lists '{}' twice", shown(&value)),
                    ));
                }
                values.push(value);
            }
            out.push((name, values, k.span()));
        }
        if out.is_empty() {
            return Err(self.err(
                key.span(),
                "[params] is empty: declare name = [values] or remove it",
            ));
        }
        Ok(out)
    }

    /// The longest command line `run` can become, every placeholder holding its longest
    /// value quoted: `sh -c` takes it as one argument, which Linux caps at 128 KiB.
    fn command_bytes(
        &self,
        run_v: &Val<'_>,
        run: &str,
        spots: &[shell::Spot],
        what: &str,
        params: &[Param],
    ) -> Result<()> {
        let values = |name: &str| params.iter().find(|p| p.0 == name).map(|p| p.1.as_slice());
        // A knob's values are short words and numbers.
        let total = shell::longest_line(run, spots, values, 32);
        limits::COMMAND_BYTES
            .check_usize(total)
            .map(|_| ())
            .map_err(|_| {
                self.err(
                    run_v.span(),
                    format!(
                        "{what}: with its longest values the command line is {}",
                        limits::COMMAND_BYTES.refusal(&format!("{total} bytes"))
                    ),
                )
            })
    }
}
