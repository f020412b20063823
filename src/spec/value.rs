//! A knob's value as a spec lists it: parsed once, when the spec is read (from TOML, or
//! from a journal's header on `--resume`), and held typed, so the plan sets it on each
//! trial's knobs without parsing text again. Its text (as `Knobs::get` writes it) is
//! what report.json and the journal store, unchanged.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Deref;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::Result;
use crate::knobs::Knobs;

#[derive(Clone, Debug)]
pub struct KnobValue {
    text: String,
    /// The default knobs with this one knob set: its typed value.
    typed: Knobs,
}

impl KnobValue {
    /// `text` as a value of knob `name`, checked by the knob table; the error names both.
    pub fn parse(name: &str, text: &str) -> Result<KnobValue> {
        let mut typed = Knobs::default();
        typed.set(name, text)?;
        let text = typed.get(name).unwrap_or_else(|| text.to_string());
        Ok(KnobValue { text, typed })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Sets knob `name` of `to` to this value (`name` is the knob it was parsed for).
    pub(crate) fn apply(&self, name: &str, to: &mut Knobs) {
        to.take_knob(name, &self.typed);
    }
}

impl Deref for KnobValue {
    type Target = str;
    fn deref(&self) -> &str {
        &self.text
    }
}

impl fmt::Display for KnobValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl PartialEq for KnobValue {
    fn eq(&self, o: &KnobValue) -> bool {
        self.text == o.text
    }
}

impl PartialEq<str> for KnobValue {
    fn eq(&self, o: &str) -> bool {
        self.text == o
    }
}

impl PartialEq<&str> for KnobValue {
    fn eq(&self, o: &&str) -> bool {
        self.text == *o
    }
}

impl PartialEq<String> for KnobValue {
    fn eq(&self, o: &String) -> bool {
        &self.text == o
    }
}

impl Serialize for KnobValue {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

/// A spec's `knobs` as stored (`[[name, [values]]]`), each value parsed for its knob.
pub(crate) fn knob_axes<'de, D: Deserializer<'de>>(
    d: D,
) -> std::result::Result<Vec<(String, Vec<KnobValue>)>, D::Error> {
    let raw: Vec<(String, Vec<String>)> = Vec::deserialize(d)?;
    raw.into_iter()
        .map(|(name, values)| {
            let typed = values
                .iter()
                .map(|v| KnobValue::parse(&name, v))
                .collect::<Result<Vec<_>>>()
                .map_err(serde::de::Error::custom)?;
            Ok((name, typed))
        })
        .collect()
}

impl KnobValue {
    /// Knob `name`'s value in `from`, typed as it is: nothing is parsed. None for a name
    /// that is no knob.
    pub fn of(name: &str, from: &Knobs) -> Option<KnobValue> {
        let text = from.get(name)?;
        let mut typed = Knobs::default();
        typed.take_knob(name, from);
        Some(KnobValue { text, typed })
    }
}

/// One value of a `Change`: a knob's, typed, or a `[params]` entry's text (a parameter
/// is text: it fills a `{name}` placeholder).
#[derive(Clone, Debug, PartialEq)]
enum Setting {
    Knob(KnobValue),
    Param(String),
}

impl Setting {
    fn text(&self) -> &str {
        match self {
            Setting::Knob(v) => v.as_str(),
            Setting::Param(t) => t,
        }
    }
}

/// What a recommendation changes: knob and `[params]` names, each with its value, held
/// typed. The advisor takes the values from a measured trial's knobs and the
/// confirmation applies them to the baseline's, so no value is parsed from text again
/// (#29); a report read back parses each once, when it is read, and a value its knob does
/// not take makes the report invalid. Stored as `{"name": "value"}`, as before.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Change {
    values: BTreeMap<String, Setting>,
}

impl Change {
    /// The values of `names` in `from` (a knob's, else a `[params]` entry's); a name
    /// `from` has neither of is left out.
    pub fn of<'n>(names: impl IntoIterator<Item = &'n str>, from: &Knobs) -> Change {
        let mut c = Change::default();
        for n in names {
            c.take(n, from);
        }
        c
    }

    /// Adds (or replaces) `name` with its value in `from`.
    pub fn take(&mut self, name: &str, from: &Knobs) {
        let value = match KnobValue::of(name, from) {
            Some(v) => Setting::Knob(v),
            None => match from.params.get(name) {
                Some(t) => Setting::Param(t.clone()),
                None => return,
            },
        };
        self.values.insert(name.to_string(), value);
    }

    /// Sets every value of the change on `to`. A knob the hooks can force whose value
    /// `to` already has is a change only as a forced one (a `[workload.python]` trial of
    /// the spec's baseline value against the script's own, `Knobs::forced`), so it is
    /// forced: the configuration is that trial's, and the hooks apply it.
    pub fn apply(&self, to: &mut Knobs) {
        for (name, v) in &self.values {
            match v {
                Setting::Knob(k)
                    if crate::knobs::FORCEABLE.contains(&name.as_str())
                        && KnobValue::of(name, to).as_ref() == Some(k) =>
                {
                    to.forced.insert(name.clone());
                }
                Setting::Knob(k) => k.apply(name, to),
                Setting::Param(t) => {
                    to.params.insert(name.clone(), t.clone());
                }
            }
        }
    }

    /// `name`'s value as text (as `Knobs::value` writes it).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.values.get(name).map(Setting::text)
    }

    pub fn contains_key(&self, name: &str) -> bool {
        self.values.contains_key(name)
    }

    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.values.keys().map(String::as_str)
    }

    /// Names and values as text, by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.values.iter().map(|(n, v)| (n.as_str(), v.text()))
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }
}

impl Serialize for Change {
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.collect_map(self.iter())
    }
}

impl<'de> Deserialize<'de> for Change {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Change, D::Error> {
        let raw: BTreeMap<String, String> = BTreeMap::deserialize(d)?;
        let mut values = BTreeMap::new();
        for (name, text) in raw {
            let v = if crate::knobs::knob(&name).is_some() {
                Setting::Knob(KnobValue::parse(&name, &text).map_err(serde::de::Error::custom)?)
            } else {
                Setting::Param(text)
            };
            values.insert(name, v);
        }
        Ok(Change { values })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::knobs::{Amp, Knobs};

    #[test]
    fn a_change_carries_typed_values_and_reads_back_checked() {
        let mut from = Knobs {
            amp: Amp::Bf16,
            num_workers: 2,
            ..Knobs::default()
        };
        from.params.insert("lr".into(), "0.010".into());
        let c = Change::of(["amp", "lr", "nothing"], &from);
        assert_eq!(c.len(), 2);
        assert_eq!((c.get("amp"), c.get("lr")), (Some("bf16"), Some("0.010")));
        // Applied as typed values: num_workers, not in the change, stays the base's.
        let mut base = Knobs::default();
        c.apply(&mut base);
        assert_eq!(base.amp, Amp::Bf16);
        assert_eq!(base.num_workers, 0);
        assert_eq!(base.params["lr"], "0.010");
        // Stored as {name: text}, read back equal; a value its knob does not take is
        // refused when read, a parameter's text is kept as written.
        let text = serde_json::to_string(&c).unwrap();
        assert_eq!(text, r#"{"amp":"bf16","lr":"0.010"}"#);
        assert_eq!(serde_json::from_str::<Change>(&text).unwrap(), c);
        let bad = serde_json::from_str::<Change>(r#"{"amp":"fp8"}"#).unwrap_err();
        assert!(bad.to_string().contains("amp"), "{bad}");
    }
}
