//! The shared vocabulary: one `Knobs` value describes a training configuration for the
//! engine, the CLI flags, sweep specs and reports alike.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{shown, Error, Result};

/// How gradients are cleared between steps (`optimizer.zero_grad(set_to_none=...)`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ZeroGrad {
    /// Gradient buffers stay allocated, are zero-filled each step, backward accumulates.
    #[default]
    Memset,
    /// Gradient buffers are released after the step; the first backward writes them.
    None,
}

/// Activation checkpointing policy (Chen et al. 2016).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Checkpoint {
    #[default]
    Off,
    /// Segments of about sqrt(n) top-level layers.
    Sqrt,
    /// Segments of K top-level layers.
    Every(usize),
}

/// Mixed precision policy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Amp {
    #[default]
    Off,
    Bf16,
    Fp16,
}

/// How the work is spread over devices.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Parallel {
    #[default]
    Single,
    Dp,
    Ddp,
}

macro_rules! keyword_enum {
    ($ty:ident, $what:literal, [$(($variant:ident, $name:literal)),+ $(,)?]) => {
        impl $ty {
            pub const ALLOWED: &'static [&'static str] = &[$($name),+];
        }
        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                match self { $($ty::$variant => f.write_str($name)),+ }
            }
        }
        impl FromStr for $ty {
            type Err = Error;
            fn from_str(s: &str) -> Result<Self> {
                match s.trim().to_ascii_lowercase().as_str() {
                    $($name => Ok($ty::$variant),)+
                    other => Err(Error::Invalid(format!(
                        "invalid {} '{}': allowed values are {}",
                        $what, shown(other), Self::ALLOWED.join(", ")
                    ))),
                }
            }
        }
    };
}

keyword_enum!(ZeroGrad, "zero_grad", [(Memset, "memset"), (None, "none")]);
keyword_enum!(Amp, "amp", [(Off, "off"), (Bf16, "bf16"), (Fp16, "fp16")]);
keyword_enum!(
    Parallel,
    "parallel",
    [(Single, "single"), (Dp, "dp"), (Ddp, "ddp")]
);

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

impl FromStr for Checkpoint {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        let t = s.trim().to_ascii_lowercase();
        let bad = || {
            Error::Invalid(format!(
                "invalid checkpoint '{}': allowed values are {}",
                shown(s.trim()),
                Self::ALLOWED.join(", ")
            ))
        };
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
}

macro_rules! serde_via_str {
    ($($ty:ident),+) => {$(
        impl Serialize for $ty {
            fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                s.parse().map_err(serde::de::Error::custom)
            }
        }
    )+};
}
serde_via_str!(ZeroGrad, Checkpoint, Amp, Parallel);

/// One training configuration. Defaults match PyTorch's defaults.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Knobs {
    pub num_workers: usize,
    pub pin_memory: bool,
    pub autotune: bool,
    pub zero_grad: ZeroGrad,
    pub checkpoint: Checkpoint,
    pub amp: Amp,
    pub parallel: Parallel,
    pub devices: usize,
    pub batch_size: usize,
    pub grad_accum: usize,
    /// DDP gradient bucket cap in MiB (`DistributedDataParallel(bucket_cap_mb=...)`).
    pub bucket_mb: usize,
    /// SyncBatchNorm under DDP: batch statistics over the global batch.
    pub sync_bn: bool,
}

impl Default for Knobs {
    fn default() -> Self {
        Knobs {
            num_workers: 0,
            pin_memory: false,
            autotune: false,
            zero_grad: ZeroGrad::Memset,
            checkpoint: Checkpoint::Off,
            amp: Amp::Off,
            parallel: Parallel::Single,
            devices: 1,
            batch_size: 64,
            grad_accum: 1,
            bucket_mb: 25,
            sync_bn: false,
        }
    }
}

impl Knobs {
    /// The knob names, as used in flags, specs and reports.
    pub const NAMES: &'static [&'static str] = &[
        "num_workers",
        "pin_memory",
        "autotune",
        "zero_grad",
        "checkpoint",
        "amp",
        "parallel",
        "devices",
        "batch_size",
        "grad_accum",
        "bucket_mb",
        "sync_bn",
    ];

    /// Knobs added after trial ids were first stored in journals: they enter a trial's id
    /// only when they differ from their default, so older journals still resume.
    pub const LATER: &'static [&'static str] = &["bucket_mb", "sync_bn"];

    pub fn validate(&self) -> Result<()> {
        if self.batch_size == 0 {
            return Err(Error::Invalid(
                "invalid batch_size 0: must be at least 1".into(),
            ));
        }
        if self.grad_accum == 0 {
            return Err(Error::Invalid(
                "invalid grad_accum 0: must be at least 1".into(),
            ));
        }
        if self.devices == 0 {
            return Err(Error::Invalid(
                "invalid devices 0: must be at least 1".into(),
            ));
        }
        if self.bucket_mb == 0 {
            return Err(Error::Invalid(
                "invalid bucket_mb 0: must be at least 1 (MiB per DDP gradient bucket; default 25)"
                    .into(),
            ));
        }
        for name in Self::NAMES {
            if let (Some(bound), Some(v)) = (crate::limits::knob(name), self.get(name)) {
                // Numeric knobs print as plain integers, so this parse cannot fail.
                let n = v.parse::<u64>().unwrap_or(u64::MAX);
                bound
                    .check(n)
                    .map_err(|e| Error::Invalid(format!("invalid {name} {e}")))?;
            }
        }
        if self.sync_bn && self.parallel != Parallel::Ddp {
            return Err(Error::Invalid(format!(
                "sync_bn needs parallel = ddp (parallel is {}): SyncBatchNorm synchronises \
                 batch statistics across DDP replicas",
                self.parallel
            )));
        }
        if self.parallel == Parallel::Single && self.devices > 1 {
            return Err(Error::Invalid(format!(
                "devices = {} needs parallel = dp or ddp (parallel is single)",
                self.devices
            )));
        }
        if !self.batch_size.is_multiple_of(self.devices) {
            return Err(Error::Invalid(format!(
                "batch_size {} is not divisible by devices {}",
                self.batch_size, self.devices
            )));
        }
        Ok(())
    }

    /// Sets one knob from its textual value, as given in a spec or on the command line.
    pub fn set(&mut self, name: &str, value: &str) -> Result<()> {
        fn num(name: &str, v: &str) -> Result<usize> {
            let n = v.trim().parse::<usize>().map_err(|_| {
                Error::Invalid(format!(
                    "invalid {name} '{}': expected a non-negative integer",
                    shown(v)
                ))
            })?;
            match crate::limits::knob(name) {
                Some(b) => b
                    .check_usize(n)
                    .map_err(|e| Error::Invalid(format!("invalid {name} {e}"))),
                None => Ok(n),
            }
        }
        fn flag(name: &str, v: &str) -> Result<bool> {
            match v.trim() {
                "true" | "on" | "yes" | "1" => Ok(true),
                "false" | "off" | "no" | "0" => Ok(false),
                _ => Err(Error::Invalid(format!(
                    "invalid {name} '{}': allowed values are true, false",
                    shown(v)
                ))),
            }
        }
        match name {
            "num_workers" => self.num_workers = num(name, value)?,
            "pin_memory" => self.pin_memory = flag(name, value)?,
            "autotune" => self.autotune = flag(name, value)?,
            "zero_grad" => self.zero_grad = value.parse()?,
            "checkpoint" => self.checkpoint = value.parse()?,
            "amp" => self.amp = value.parse()?,
            "parallel" => self.parallel = value.parse()?,
            "devices" => self.devices = num(name, value)?,
            "batch_size" => self.batch_size = num(name, value)?,
            "grad_accum" => self.grad_accum = num(name, value)?,
            "bucket_mb" => self.bucket_mb = num(name, value)?,
            "sync_bn" => self.sync_bn = flag(name, value)?,
            other => {
                return Err(Error::Invalid(format!(
                    "unknown knob '{}': known knobs are {}",
                    shown(other),
                    Self::NAMES.join(", ")
                )))
            }
        }
        Ok(())
    }

    /// The value of one knob as text (the inverse of `set`).
    pub fn get(&self, name: &str) -> Option<String> {
        Some(match name {
            "num_workers" => self.num_workers.to_string(),
            "pin_memory" => self.pin_memory.to_string(),
            "autotune" => self.autotune.to_string(),
            "zero_grad" => self.zero_grad.to_string(),
            "checkpoint" => self.checkpoint.to_string(),
            "amp" => self.amp.to_string(),
            "parallel" => self.parallel.to_string(),
            "devices" => self.devices.to_string(),
            "batch_size" => self.batch_size.to_string(),
            "grad_accum" => self.grad_accum.to_string(),
            "bucket_mb" => self.bucket_mb.to_string(),
            "sync_bn" => self.sync_bn.to_string(),
            _ => return None,
        })
    }

    /// A short label naming only the knobs that differ from `base`.
    pub fn diff_label(&self, base: &Knobs) -> String {
        let parts: Vec<String> = Self::NAMES
            .iter()
            .filter_map(|n| {
                let (a, b) = (self.get(n)?, base.get(n)?);
                (a != b).then(|| format!("{n}={a}"))
            })
            .collect();
        if parts.is_empty() {
            "baseline".into()
        } else {
            parts.join(" ")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_display_round_trip() {
        for s in ["off", "sqrt", "every:3"] {
            assert_eq!(s.parse::<Checkpoint>().unwrap().to_string(), s);
        }
        assert!("every:0".parse::<Checkpoint>().is_err());
        let e = "fp8".parse::<Amp>().unwrap_err().to_string();
        assert!(e.contains("off, bf16, fp16"), "{e}");
    }

    #[test]
    fn set_get_round_trip_and_unknown_knob() {
        let mut k = Knobs::default();
        for (n, v) in [
            ("amp", "bf16"),
            ("num_workers", "2"),
            ("checkpoint", "every:2"),
        ] {
            k.set(n, v).unwrap();
            assert_eq!(k.get(n).unwrap(), v);
        }
        assert!(k
            .set("warp_speed", "9")
            .unwrap_err()
            .to_string()
            .contains("unknown knob"));
        assert_eq!(
            k.diff_label(&Knobs::default()),
            "num_workers=2 checkpoint=every:2 amp=bf16"
        );
    }

    #[test]
    fn serde_uses_the_flag_spelling() {
        let k = Knobs {
            zero_grad: ZeroGrad::None,
            ..Knobs::default()
        };
        let j = serde_json::to_string(&k).unwrap();
        assert!(j.contains("\"zero_grad\":\"none\""), "{j}");
        let back: Knobs = serde_json::from_str(&j).unwrap();
        assert_eq!(back, k);
    }

    #[test]
    fn validate_rejects_zero_bucket_and_sync_bn_without_ddp() {
        let k = Knobs {
            bucket_mb: 0,
            ..Knobs::default()
        };
        assert!(k
            .validate()
            .unwrap_err()
            .to_string()
            .contains("bucket_mb 0"));
        let k = Knobs {
            sync_bn: true,
            parallel: Parallel::Dp,
            devices: 2,
            ..Knobs::default()
        };
        assert!(k
            .validate()
            .unwrap_err()
            .to_string()
            .contains("parallel = ddp"));
        let k = Knobs {
            sync_bn: true,
            parallel: Parallel::Ddp,
            devices: 2,
            ..Knobs::default()
        };
        k.validate().unwrap();
    }

    #[test]
    fn validate_rejects_zero_batch() {
        let k = Knobs {
            batch_size: 0,
            ..Knobs::default()
        };
        assert!(k.validate().unwrap_err().to_string().contains("batch_size"));
    }
}
