//! The shared vocabulary: one `Knobs` value describes a training configuration for the
//! engine, the CLI flags, sweep specs and reports alike.
//!
//! Every knob is declared once, in the `knob_table!` invocation below: its field, type,
//! default, allowed values, where it applies, its doc line and its PyTorch equivalent.
//! The struct, its serde form, `set`/`get`, the bounds in `validate`, the clap flags
//! (`cli::KnobArgs`), the spec's `[knobs]` checks, the docs table (`table_markdown`) and
//! the advisor's PyTorch lines all read that one declaration.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{shown, Error, Result};
use crate::limits::{self, Bound};

mod checkpoint;
mod doc;
mod framework;
mod torch;
pub use doc::{table_markdown, TABLE_END, TABLE_START};
pub use framework::{framework_setting, script_lines, FRAMEWORK};
pub use torch::{name_optimizer, torch_line, torch_lines};

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
    /// f32 storage, f32 GEMMs on TF32 tensor cores (`allow_tf32`): no half storage.
    Tf32,
}

/// How the work is spread over devices.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Parallel {
    #[default]
    Single,
    Dp,
    Ddp,
}

/// Whether a PyTorch script's model is compiled (`torch.compile(model, mode=...)`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Compile {
    /// Eager: no graph compiler.
    #[default]
    Off,
    Default,
    /// CUDA graphs on top of the default compile, to cut launch overhead.
    ReduceOverhead,
    MaxAutotune,
    MaxAutotuneNoCudagraphs,
}

/// Which implementation of the update a PyTorch script's `torch.optim` optimizer runs:
/// PyTorch's choice, the multi-tensor (`foreach=True`), the fused kernel (`fused=True`) or
/// the per-parameter loop.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum OptimImpl {
    #[default]
    Default,
    Foreach,
    Fused,
    /// The per-parameter loop (`foreach=False`).
    Forloop,
}

/// Pointwise fusion in tune's engine, its side of `torch.compile`: off is eager (a pass
/// per op), on fuses bias+ReLU, batch norm+ReLU and the optimizer's update.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Fuse {
    #[default]
    Off,
    On,
}

/// A knob value's text form: how `set` reads it and `get` writes it. The error is the
/// part after the knob's name (`'fp8': allowed values are off, bf16, fp16`), so each
/// caller names the knob its own way (`invalid amp`, `--amp`, `file:line:col`).
pub(crate) trait KnobValue: Sized {
    fn parse_value(s: &str, values: &Values) -> std::result::Result<Self, String>;
    fn text(&self) -> String;
}

fn words_refusal(s: &str, allowed: &[&str]) -> String {
    format!("'{}': allowed values are {}", shown(s), allowed.join(", "))
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
        impl KnobValue for $ty {
            fn parse_value(s: &str, _: &Values) -> std::result::Result<Self, String> {
                match s.trim().to_ascii_lowercase().as_str() {
                    $($name => Ok($ty::$variant),)+
                    _ => Err(words_refusal(s.trim(), Self::ALLOWED)),
                }
            }
            fn text(&self) -> String {
                self.to_string()
            }
        }
        impl FromStr for $ty {
            type Err = Error;
            fn from_str(s: &str) -> Result<Self> {
                Self::parse_value(s, &Values::Words(Self::ALLOWED))
                    .map_err(|e| Error::Invalid(format!("invalid {} {e}", $what)))
            }
        }
    };
}

keyword_enum!(ZeroGrad, "zero_grad", [(Memset, "memset"), (None, "none")]);
keyword_enum!(
    Amp,
    "amp",
    [(Off, "off"), (Bf16, "bf16"), (Fp16, "fp16"), (Tf32, "tf32")]
);
keyword_enum!(
    Parallel,
    "parallel",
    [(Single, "single"), (Dp, "dp"), (Ddp, "ddp")]
);

keyword_enum!(
    Compile,
    "compile",
    [
        (Off, "off"),
        (Default, "default"),
        (ReduceOverhead, "reduce-overhead"),
        (MaxAutotune, "max-autotune"),
        (MaxAutotuneNoCudagraphs, "max-autotune-no-cudagraphs")
    ]
);

keyword_enum!(Fuse, "fuse", [(Off, "off"), (On, "on")]);
keyword_enum!(
    OptimImpl,
    "optim_impl",
    [
        (Default, "default"),
        (Foreach, "foreach"),
        (Fused, "fused"),
        (Forloop, "forloop")
    ]
);

impl KnobValue for usize {
    fn parse_value(s: &str, values: &Values) -> std::result::Result<Self, String> {
        let bound = match values {
            Values::Count(b) => Some(*b),
            _ => None,
        };
        let n = s.trim().parse::<usize>().map_err(|_| match bound {
            Some(b) => format!(
                "'{}': expected a non-negative integer from {} to {}",
                shown(s),
                b.min,
                b.max
            ),
            None => format!("'{}': expected a non-negative integer", shown(s)),
        })?;
        match bound {
            Some(b) => b.check_usize(n),
            None => Ok(n),
        }
    }
    fn text(&self) -> String {
        self.to_string()
    }
}

impl KnobValue for bool {
    fn parse_value(s: &str, _: &Values) -> std::result::Result<Self, String> {
        match s.trim() {
            "true" | "on" | "yes" | "1" => Ok(true),
            "false" | "off" | "no" | "0" => Ok(false),
            _ => Err(words_refusal(s, &["true", "false"])),
        }
    }
    fn text(&self) -> String {
        self.to_string()
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
serde_via_str!(ZeroGrad, Checkpoint, Amp, Parallel, Compile, Fuse, OptimImpl);

/// What a knob accepts.
#[derive(Clone, Copy, Debug)]
pub enum Values {
    /// An integer within the bound.
    Count(&'static Bound),
    /// `true` or `false`; a switch on the command line (`--pin-memory`).
    Switch,
    /// One of these spellings.
    Words(&'static [&'static str]),
}

/// Where a knob has an effect.
#[derive(Clone, Copy, Debug)]
pub struct Applies {
    /// Engine backends that honour a non-default value.
    pub backends: &'static [&'static str],
    /// A `[workload.command]` receives it through a `{name}` placeholder.
    pub command: bool,
    /// The PyTorch hooks apply it inside an unmodified script (`[workload.python]`).
    pub python: bool,
}

const EVERYWHERE: Applies = Applies {
    backends: &["cpu", "cuda"],
    command: true,
    python: true,
};
const CPU_CUDA: Applies = Applies {
    backends: &["cpu", "cuda"],
    command: true,
    python: false,
};
/// DataLoader and layout knobs with no counterpart in tune's engine (its loader threads
/// live for the whole run, its tensors are always channels-last): PyTorch scripts only.
const PYTHON_ONLY: Applies = Applies {
    backends: &[],
    command: true,
    python: true,
};

/// Knobs the PyTorch hooks can set to their baseline value over a script that does
/// otherwise (the DataLoader's arguments, `zero_grad`'s `set_to_none`, autocast,
/// `cudnn.benchmark`, the optimizer's `fused`/`foreach`), so a trial can measure the
/// spec's baseline value against the script's own (`Knobs::forced`): a script that asks
/// for `fused=True` under `optim_impl = ["default", "fused"]` ran fused twice and
/// PyTorch's default nowhere. `checkpoint = "off"` runs a script's
/// `torch.utils.checkpoint` calls as plain calls. Not `num_threads` (0 leaves the thread
/// count alone), nor `channels_last` and `compile`: the hooks cannot undo a script's own
/// layout or compile.
pub const FORCEABLE: &[&str] = &[
    "checkpoint",
    "num_workers",
    "pin_memory",
    "persistent_workers",
    "prefetch_factor",
    "batch_size",
    "zero_grad",
    "amp",
    "autotune",
    "optim_impl",
];

/// The PyTorch change that sets a knob. `{value}` is the knob's value (`True`/`False`
/// for switches) and `{device}` the backend (`cuda` or `cpu`).
#[derive(Clone, Copy, Debug)]
pub enum Torch {
    Line(&'static str),
    PerValue(&'static [(&'static str, &'static str)]),
}

/// One row of the knob table.
#[derive(Clone, Copy, Debug)]
pub struct Knob {
    pub name: &'static str,
    /// The `///` line as written (leading space included): read it through `help`.
    pub doc: &'static str,
    pub values: Values,
    pub applies: Applies,
    pub torch: Torch,
}

impl Knob {
    /// The one-line description: `--help` and the docs table.
    pub fn help(&self) -> &'static str {
        self.doc.trim()
    }

    /// The command-line flag (`--num-workers`).
    pub fn flag(&self) -> String {
        format!("--{}", self.name.replace('_', "-"))
    }

    /// The default value's text.
    pub fn default_text(&self) -> String {
        Knobs::default().get(self.name).unwrap_or_default()
    }

    /// The bound of a count knob.
    pub fn bound(&self) -> Option<&'static Bound> {
        match self.values {
            Values::Count(b) => Some(b),
            _ => None,
        }
    }

    /// The PyTorch line for `value` on `backend` (`cuda` or anything else for the CPU).
    pub fn torch_line(&self, value: &str, backend: &str) -> String {
        let template = match self.torch {
            Torch::Line(t) => t,
            Torch::PerValue(lines) => match lines
                .iter()
                .find(|(v, _)| *v == value)
                .or_else(|| lines.iter().find(|(v, _)| *v == "*"))
            {
                Some((_, t)) => t,
                None => return format!("# set {} = {value}", self.name),
            },
        };
        let py_value = match (self.values, value) {
            (Values::Switch, "true") => "True",
            (Values::Switch, "false") => "False",
            _ => value,
        };
        let device = if backend == "cuda" { "cuda" } else { "cpu" };
        template
            .replace("{value}", py_value)
            .replace("{device}", device)
    }
}

/// The knob of this name.
pub fn knob(name: &str) -> Option<&'static Knob> {
    TABLE.iter().find(|k| k.name == name)
}

/// Declares the knobs. Each entry: one `///` doc line, `field: Type = default`, then the
/// allowed values, where it applies and the PyTorch equivalent. Knobs in `later` were
/// added after trial ids were first stored in journals: they enter a trial's id only when
/// they differ from their default, so older journals still resume. A new knob goes at the
/// end of `later`.
macro_rules! knob_table {
    (
        first { $($(#[doc = $fdoc:literal])+ $fname:ident: $fty:ty = $fdef:expr,
            $fvalues:expr, $fapplies:expr, $ftorch:expr;)+ }
        later { $($(#[doc = $ldoc:literal])+ $lname:ident: $lty:ty = $ldef:expr,
            $lvalues:expr, $lapplies:expr, $ltorch:expr;)+ }
    ) => {
        /// One training configuration. Defaults match PyTorch's defaults.
        #[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(default, deny_unknown_fields)]
        pub struct Knobs {
            $($(#[doc = $fdoc])+ pub $fname: $fty,)+
            $($(#[doc = $ldoc])+ pub $lname: $lty,)+
            /// A command workload's own parameters (`[params]` in a spec), by name: text put
            /// in for `{name}` in its command line, swept like knobs. Empty for the engine,
            /// and then left out of JSON, so ids and records of knob-only sweeps are unchanged.
            #[serde(skip_serializing_if = "BTreeMap::is_empty")]
            pub params: BTreeMap<String, String>,
            /// Knobs a `[workload.python]` trial applies although their value is the
            /// baseline's: the baseline leaves them to the script, so the spec's own
            /// baseline value is measured in a trial of its own (`spec::plan`). Empty
            /// otherwise, and then left out of JSON and ids.
            #[serde(skip_serializing_if = "BTreeSet::is_empty")]
            pub forced: BTreeSet<String>,
        }

        impl Default for Knobs {
            fn default() -> Self {
                Knobs {
                    $($fname: $fdef,)+
                    $($lname: $ldef,)+
                    params: BTreeMap::new(),
                    forced: BTreeSet::new(),
                }
            }
        }

        /// Every knob, in `Knobs::NAMES` order.
        pub const TABLE: &[Knob] = &[
            $(Knob {
                name: stringify!($fname),
                doc: concat!($($fdoc),+),
                values: $fvalues,
                applies: $fapplies,
                torch: $ftorch,
            },)+
            $(Knob {
                name: stringify!($lname),
                doc: concat!($($ldoc),+),
                values: $lvalues,
                applies: $lapplies,
                torch: $ltorch,
            },)+
        ];

        impl Knobs {
            /// The knob names, as used in flags, specs and reports.
            pub const NAMES: &'static [&'static str] =
                &[$(stringify!($fname),)+ $(stringify!($lname),)+];

            /// Knobs added after trial ids were first stored in journals (see `knob_table!`).
            pub const LATER: &'static [&'static str] = &[$(stringify!($lname)),+];

            /// Sets one knob from its text; the error is the part after the knob's name.
            fn set_value(&mut self, name: &str, value: &str) -> Option<std::result::Result<(), String>> {
                let k = knob(name)?;
                Some(match name {
                    $(stringify!($fname) => KnobValue::parse_value(value, &k.values).map(|v| self.$fname = v),)+
                    $(stringify!($lname) => KnobValue::parse_value(value, &k.values).map(|v| self.$lname = v),)+
                    _ => return None,
                })
            }

            /// Copies one knob's typed value from `from`; false when `name` is no knob.
            pub fn take_knob(&mut self, name: &str, from: &Knobs) -> bool {
                match name {
                    $(stringify!($fname) => self.$fname = from.$fname.clone(),)+
                    $(stringify!($lname) => self.$lname = from.$lname.clone(),)+
                    _ => return false,
                }
                true
            }

            /// The value of one knob as text (the inverse of `set`).
            pub fn get(&self, name: &str) -> Option<String> {
                Some(match name {
                    $(stringify!($fname) => KnobValue::text(&self.$fname),)+
                    $(stringify!($lname) => KnobValue::text(&self.$lname),)+
                    _ => return None,
                })
            }
        }
    };
}

knob_table! {
    first {
        /// Loader threads (0 = load on the training thread).
        num_workers: usize = 0,
        Values::Count(&Bound {
            min: 0,
            max: 256,
            why: "each loader thread holds its own prefetched batches",
        }),
        EVERYWHERE,
        Torch::Line("DataLoader(dataset, num_workers={value})");

        /// Page-locked staging for host-to-device copies (not applicable on the CPU backend).
        pin_memory: bool = false,
        Values::Switch,
        // The CPU backend has no host-to-device copy: it records the knob as not
        // applicable (engine/caps.rs), so only CUDA honours it.
        Applies { backends: &["cuda"], command: true, python: true },
        Torch::Line("DataLoader(dataset, pin_memory={value})");

        /// Time candidate algorithms per shape and keep the fastest (like cudnn.benchmark).
        autotune: bool = false,
        Values::Switch,
        EVERYWHERE,
        Torch::Line("torch.backends.cudnn.benchmark = {value}");

        /// How gradients are cleared: memset zero-fills kept buffers, none releases them.
        zero_grad: ZeroGrad = ZeroGrad::Memset,
        Values::Words(ZeroGrad::ALLOWED),
        EVERYWHERE,
        Torch::PerValue(&[
            ("memset", "optimizer.zero_grad(set_to_none=False)"),
            ("none", "optimizer.zero_grad(set_to_none=True)"),
        ]);

        /// Activation checkpointing: keep segment inputs only, recompute in backward.
        checkpoint: Checkpoint = Checkpoint::Off,
        Values::Words(Checkpoint::ALLOWED),
        // In a script the hooks can only take checkpointing away (`off`: the script's
        // checkpoint calls run as plain calls); the spec refuses the other values there.
        EVERYWHERE,
        Torch::PerValue(&[
            (
                "off",
                "y = block(x)  # call the checkpointed blocks directly, not through \
                 torch.utils.checkpoint.checkpoint(block, x) or checkpoint_sequential",
            ),
            (
                "*",
                "torch.utils.checkpoint.checkpoint_sequential(model, segments, x, \
                 use_reentrant=False)",
            ),
        ]);

        /// Mixed precision: bf16/fp16 storage with f32 accumulation; tf32 = f32 GEMMs on
        /// TF32 tensor cores (CUDA only; the CPU backend runs f32 and records it).
        amp: Amp = Amp::Off,
        Values::Words(Amp::ALLOWED),
        // The PyTorch hooks wrap the model's forward in autocast (GradScaler for fp16).
        EVERYWHERE,
        Torch::PerValue(&[
            // A statement, not a comment: a comment swallowed the changes said after it.
            ("off", "with torch.autocast(\"{device}\", enabled=False): loss = model(x)"),
            ("bf16", "with torch.autocast(\"{device}\", dtype=torch.bfloat16): loss = model(x)"),
            (
                "fp16",
                "scaler = torch.amp.GradScaler(\"{device}\"); with torch.autocast(\"{device}\", \
                 dtype=torch.float16): loss = model(x); scaler.scale(loss).backward(); \
                 scaler.step(optimizer); scaler.update()",
            ),
            (
                "tf32",
                "torch.backends.cuda.matmul.allow_tf32 = True; torch.backends.cudnn.allow_tf32 = True",
            ),
        ]);

        /// How the work is spread over devices.
        parallel: Parallel = Parallel::Single,
        Values::Words(Parallel::ALLOWED),
        CPU_CUDA,
        Torch::PerValue(&[
            ("single", "# one device, no wrapper"),
            ("dp", "model = torch.nn.DataParallel(model)"),
            ("ddp", "model = DistributedDataParallel(model)  # launch with torchrun"),
        ]);

        /// Devices (virtual devices on the CPU backend; GPUs under ddp on the CUDA backend).
        devices: usize = 1,
        Values::Count(&limits::DEVICES),
        CPU_CUDA,
        Torch::Line("torchrun --nproc_per_node={value} train.py");

        /// Micro-batch size (the global batch under dp and ddp).
        batch_size: usize = 64,
        Values::Count(&limits::BATCH_SIZE),
        // The PyTorch hooks pass it to the script's DataLoader.
        EVERYWHERE,
        Torch::Line("DataLoader(dataset, batch_size={value})  # and scale the learning rate");

        /// Micro-batches accumulated per optimizer step.
        grad_accum: usize = 1,
        Values::Count(&Bound {
            min: 1,
            max: 65_536,
            why: "accumulation beyond this is a different experiment, not a speed knob",
        }),
        CPU_CUDA,
        Torch::Line(
            "loss = loss / {value}; loss.backward(); step the optimizer every {value} batches"
        );
    }
    later {
        /// DDP gradient bucket cap in MiB (PyTorch's bucket_cap_mb).
        bucket_mb: usize = 25,
        Values::Count(&Bound {
            min: 1,
            max: 65_536,
            why: "MiB per DDP gradient bucket",
        }),
        CPU_CUDA,
        Torch::Line("DistributedDataParallel(model, bucket_cap_mb={value})");

        /// SyncBatchNorm under DDP: batch statistics over the global batch.
        sync_bn: bool = false,
        Values::Switch,
        CPU_CUDA,
        Torch::Line("model = torch.nn.SyncBatchNorm.convert_sync_batchnorm(model)");

        /// Compute threads of a PyTorch script (torch.set_num_threads); 0 keeps the
        /// script's own.
        num_threads: usize = 0,
        Values::Count(&Bound {
            min: 0,
            max: 4096,
            why: "threads beyond the cores only contend for them",
        }),
        // The hooks set it in a script. The engine takes its threads from the workload
        // (`threads` under [workload], `tune train --threads`), so a non-default value is
        // "not applicable" there; named after PyTorch's call to stay apart from that flag.
        PYTHON_ONLY,
        Torch::Line("torch.set_num_threads({value})");

        /// Keep DataLoader worker processes alive between epochs (needs num_workers > 0).
        persistent_workers: bool = false,
        Values::Switch,
        PYTHON_ONLY,
        Torch::Line("DataLoader(dataset, persistent_workers={value})");

        /// Batches each DataLoader worker loads ahead (needs num_workers > 0).
        prefetch_factor: usize = 2,
        Values::Count(&Bound {
            min: 1,
            max: 64,
            why: "each prefetched batch is held in memory per worker",
        }),
        PYTHON_ONLY,
        Torch::Line("DataLoader(dataset, prefetch_factor={value})");

        /// NHWC memory layout for the model's 4-D weights and input batches.
        channels_last: bool = false,
        Values::Switch,
        PYTHON_ONLY,
        Torch::Line(
            "model = model.to(memory_format=torch.channels_last); \
             x = x.to(memory_format=torch.channels_last)"
        );

        /// torch.compile mode for a PyTorch script's model (off = eager).
        compile: Compile = Compile::Off,
        Values::Words(Compile::ALLOWED),
        // The hooks compile the module the optimizer trains, on its first forward. tune's
        // engine has no graph compiler (each layer runs its own kernels): a non-default
        // value is "not applicable" there (engine/caps.rs).
        PYTHON_ONLY,
        Torch::PerValue(&[
            ("off", "# eager: no torch.compile"),
            ("default", "model = torch.compile(model)"),
            ("reduce-overhead", "model = torch.compile(model, mode=\"reduce-overhead\")"),
            ("max-autotune", "model = torch.compile(model, mode=\"max-autotune\")"),
            (
                "max-autotune-no-cudagraphs",
                "model = torch.compile(model, mode=\"max-autotune-no-cudagraphs\")",
            ),
        ]);

        /// Fuse pointwise chains (bias+ReLU, batch norm+ReLU, the optimizer's update).
        fuse: Fuse = Fuse::Off,
        Values::Words(Fuse::ALLOWED),
        // Hand-written in the engine (ops/fused.rs); a script sweeps `compile` instead.
        CPU_CUDA,
        Torch::PerValue(&[
            ("off", "# eager: no torch.compile, optimizer not fused"),
            ("on", "model = torch.compile(model)  # and the optimizer with fused=True"),
        ]);

        /// The update's implementation in a PyTorch script's torch.optim optimizer.
        optim_impl: OptimImpl = OptimImpl::Default,
        Values::Words(OptimImpl::ALLOWED),
        // The hooks pass foreach/fused to torch.optim's constructors. The engine's update
        // is one pass per tensor already, fused by the fuse knob (engine/caps.rs).
        PYTHON_ONLY,
        Torch::PerValue(&[
            ("default", "optimizer = torch.optim.AdamW(params, ...)  # no fused= nor foreach=: PyTorch's own choice"),
            ("foreach", "optimizer = torch.optim.AdamW(params, ..., foreach=True)  # your optimizer's class"),
            ("fused", "optimizer = torch.optim.AdamW(params, ..., fused=True)  # your optimizer's class"),
            ("forloop", "optimizer = torch.optim.AdamW(params, ..., foreach=False)  # your optimizer's class"),
        ]);
    }
}

impl Knobs {
    /// Checks every value against the table, then the rules between knobs.
    pub fn validate(&self) -> Result<()> {
        for k in TABLE {
            if let (Some(bound), Some(v)) = (k.bound(), self.get(k.name)) {
                // Count knobs print as plain integers, so this parse cannot fail.
                let n = v.parse::<u64>().unwrap_or(u64::MAX);
                bound
                    .check(n)
                    .map_err(|e| Error::Invalid(format!("invalid {} {e}", k.name)))?;
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
        match self.set_value(name, value) {
            Some(r) => r.map_err(|e| Error::Invalid(format!("invalid {name} {e}"))),
            None => Err(unknown_knob(name)),
        }
    }

    /// [`Knobs::set`] for a command-line flag: the error names the flag (`--amp 'fp8': ...`).
    pub fn set_flag(&mut self, name: &str, value: &str) -> Result<()> {
        match self.set_value(name, value) {
            Some(r) => r.map_err(|e| {
                let flag = knob(name).map_or_else(|| name.to_string(), Knob::flag);
                Error::Invalid(format!("{flag} {e}"))
            }),
            None => Err(unknown_knob(name)),
        }
    }

    /// The knobs of one trial, as the runner hands them to `tune trial --knobs-json`:
    /// read with serde, then held to the same table and rules as flags and specs.
    pub fn from_json(text: &str) -> Result<Knobs> {
        let k: Knobs = serde_json::from_str(text).map_err(|e| {
            Error::Invalid(format!(
                "--knobs-json: {} (expected the JSON object of a Knobs value)",
                shown(&e.to_string())
            ))
        })?;
        k.validate()
            .map_err(|e| Error::Invalid(format!("--knobs-json: {e}")))?;
        Ok(k)
    }

    /// A knob's value, or a user parameter's (`params`) when `name` is no knob.
    pub fn value(&self, name: &str) -> Option<String> {
        self.get(name).or_else(|| self.params.get(name).cloned())
    }

    /// Whether knob `name` is a change between `self` and `base`: its values differ, or
    /// one of them applies it over a script's own value (`forced`) and the other does not.
    pub fn differs(&self, base: &Knobs, name: &str) -> bool {
        self.value(name) != base.value(name)
            || self.forced.contains(name) != base.forced.contains(name)
    }

    /// A short label naming only the knobs (then the user parameters, by name) that
    /// differ from `base` (`differs`).
    pub fn diff_label(&self, base: &Knobs) -> String {
        let parts: Vec<String> = Self::NAMES
            .iter()
            .filter(|n| self.differs(base, n))
            .filter_map(|n| Some(format!("{n}={}", self.get(n)?)))
            .chain(
                self.params
                    .iter()
                    .filter(|(n, v)| base.params.get(*n) != Some(*v))
                    .map(|(n, v)| format!("{n}={v}")),
            )
            .collect();
        if parts.is_empty() {
            "baseline".into()
        } else {
            parts.join(" ")
        }
    }
}

/// The message for a name that is no knob, listing the known ones.
pub fn unknown_knob(name: &str) -> Error {
    Error::Invalid(format!(
        "unknown knob '{}': known knobs are {}",
        shown(name),
        Knobs::NAMES.join(", ")
    ))
}

#[cfg(test)]
mod tests;
