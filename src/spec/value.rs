//! A knob's value as a spec lists it: parsed once, when the spec is read (from TOML, or
//! from a journal's header on `--resume`), and held typed, so the plan sets it on each
//! trial's knobs without parsing text again. Its text (as `Knobs::get` writes it) is
//! what report.json and the journal store, unchanged.

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
