//! `checkpoint`'s values: `off`, `sqrt` or `every:K`, the one knob whose words carry a
//! number.

use std::fmt;
use std::str::FromStr;

use super::{words_refusal, Checkpoint, KnobValue, Values};
use crate::error::{Error, Result};

impl Checkpoint {
    pub const ALLOWED: &'static [&'static str] = &["off", "sqrt", "every:K (K >= 1)"];

    /// Segment length for a model of `n` top-level layers; `None` when checkpointing is off.
    pub fn segment_len(self, n: usize) -> Option<usize> {
        match self {
            Checkpoint::Off => None,
            Checkpoint::Sqrt => Some(((n as f64).sqrt().ceil() as usize).max(1)),
            Checkpoint::Every(k) => Some(k.max(1)),
        }
    }
}

impl fmt::Display for Checkpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Checkpoint::Off => f.write_str("off"),
            Checkpoint::Sqrt => f.write_str("sqrt"),
            Checkpoint::Every(k) => write!(f, "every:{k}"),
        }
    }
}

impl KnobValue for Checkpoint {
    fn parse_value(s: &str, _: &Values) -> std::result::Result<Self, String> {
        let t = s.trim().to_ascii_lowercase();
        let bad = || words_refusal(s.trim(), Self::ALLOWED);
        match t.as_str() {
            "off" => Ok(Checkpoint::Off),
            "sqrt" => Ok(Checkpoint::Sqrt),
            _ => match t.strip_prefix("every:") {
                Some(k) => match k.parse::<usize>() {
                    Ok(k) if k >= 1 => Ok(Checkpoint::Every(k)),
                    _ => Err(bad()),
                },
                None => Err(bad()),
            },
        }
    }
    fn text(&self) -> String {
        self.to_string()
    }
}

impl FromStr for Checkpoint {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Self::parse_value(s, &Values::Words(Self::ALLOWED))
            .map_err(|e| Error::Invalid(format!("invalid checkpoint {e}")))
    }
}
