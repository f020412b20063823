//! What each backend can honour, knob by knob. A setting is supported, not applicable
//! (it runs, and the knob is recorded as doing nothing here, with the reason: never
//! faked), or not implemented (refused with one line instead of silently running
//! something else). Every backend's entry point goes through [`admit`], the one place
//! a knob is refused or noted.

use std::collections::BTreeMap;

use crate::engine::device::Backend;
use crate::engine::vocab::Observer;
use crate::error::{Error, Result};
use crate::knobs::{Amp, Knobs, Parallel};

/// How a backend treats one knob's setting.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Support {
    Supported,
    /// Runs; the knob does nothing here, for this reason.
    NotApplicable(String),
    /// Refused, with the one-line reason.
    NotImplemented(String),
}

/// Whether the run goes through the multi-device launcher (`parallel = ddp`, or DP on
/// several devices) or trains on one device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    Single,
    Multi,
}

/// One knob's row in a backend's table.
#[derive(Clone, Copy)]
pub struct Capability {
    pub knob: &'static str,
    pub support: fn(&Knobs, Layout) -> Support,
}

const NO_PINNING: &str = "CPU backend: there is no host-to-device copy to pin memory for";

fn cpu_pin_memory(k: &Knobs, _: Layout) -> Support {
    if k.pin_memory {
        Support::NotApplicable(NO_PINNING.into())
    } else {
        Support::Supported
    }
}

/// TF32 is a mode of tensor-core GEMMs; PyTorch accepts `allow_tf32` on a CPU and does
/// nothing with it, so the CPU backend runs f32 and says so.
const NO_TF32: &str = "CPU backend: TF32 is a tensor-core GEMM mode; ran in f32";

fn cpu_amp(k: &Knobs, l: Layout) -> Support {
    if k.amp == Amp::Tf32 {
        return Support::NotApplicable(NO_TF32.into());
    }
    if l == Layout::Multi && k.amp != Amp::Off {
        return Support::NotImplemented(format!(
            "amp = {} with parallel = {}: mixed precision is not implemented for multi-device runs yet",
            k.amp, k.parallel
        ));
    }
    Support::Supported
}

fn cpu_autotune(k: &Knobs, l: Layout) -> Support {
    if l == Layout::Multi && k.autotune {
        return Support::NotImplemented(format!(
            "autotune with parallel = {}: not implemented for multi-device runs yet",
            k.parallel
        ));
    }
    Support::Supported
}

/// DP on one device, on the single-device path (the launcher runs `single` as DP on
/// device 0 and says nothing).
fn dp_on_one_device(k: &Knobs, l: Layout) -> Support {
    if l == Layout::Single && k.parallel == Parallel::Dp && k.devices == 1 {
        return Support::NotApplicable(
            "DP on one device is single-device training (DataParallel calls the module \
             directly); ran as parallel = single"
                .into(),
        );
    }
    Support::Supported
}

fn bucket_mb(k: &Knobs, _: Layout) -> Support {
    if k.bucket_mb != Knobs::default().bucket_mb && k.parallel != Parallel::Ddp {
        return Support::NotApplicable(format!(
            "only DDP buckets gradients (parallel is {})",
            k.parallel
        ));
    }
    Support::Supported
}

fn cuda_parallel(k: &Knobs, l: Layout) -> Support {
    dp_on_one_device(k, l)
}

/// Knobs for PyTorch scripts only (the knob table's `PYTHON_ONLY` rows): the engine runs,
/// and records that the setting means nothing to it, on every backend.
fn python_only(k: &Knobs, _: Layout, knob: &str, why: &str) -> Support {
    if k.get(knob) == Knobs::default().get(knob) {
        Support::Supported
    } else {
        Support::NotApplicable(why.into())
    }
}

fn persistent_workers(k: &Knobs, l: Layout) -> Support {
    python_only(
        k,
        l,
        "persistent_workers",
        "tune's engine keeps its loader threads for the whole run already",
    )
}

fn prefetch_factor(k: &Knobs, l: Layout) -> Support {
    python_only(
        k,
        l,
        "prefetch_factor",
        "tune's engine loader has its own fixed prefetch depth; this knob is for PyTorch's DataLoader",
    )
}

fn channels_last(k: &Knobs, l: Layout) -> Support {
    python_only(
        k,
        l,
        "channels_last",
        "tune's engine is always channels-last (NHWC activations, [out, kh, kw, in] weights); this knob is for PyTorch models",
    )
}

fn num_threads(k: &Knobs, l: Layout) -> Support {
    python_only(
        k,
        l,
        "num_threads",
        "tune's engine takes its threads from the workload (threads under [workload], tune train --threads); this knob is torch.set_num_threads in a PyTorch script",
    )
}

fn compile(k: &Knobs, l: Layout) -> Support {
    python_only(
        k,
        l,
        "compile",
        "tune's engine has no graph compiler; its side of torch.compile is the fuse knob (fuse = on: bias+ReLU, batch norm+ReLU and the optimizer in fused passes); this knob is torch.compile in a PyTorch script",
    )
}

fn optim_impl(k: &Knobs, l: Layout) -> Support {
    python_only(
        k,
        l,
        "optim_impl",
        "tune's engine updates each tensor in one pass already, fused with the rest by the fuse knob; this knob is foreach/fused in a PyTorch script's torch.optim optimizer",
    )
}

const PYTHON_ONLY: [Capability; 6] = [
    Capability {
        knob: "persistent_workers",
        support: persistent_workers,
    },
    Capability {
        knob: "prefetch_factor",
        support: prefetch_factor,
    },
    Capability {
        knob: "channels_last",
        support: channels_last,
    },
    Capability {
        knob: "num_threads",
        support: num_threads,
    },
    Capability {
        knob: "compile",
        support: compile,
    },
    Capability {
        knob: "optim_impl",
        support: optim_impl,
    },
];

const CPU: &[Capability] = &[
    Capability {
        knob: "pin_memory",
        support: cpu_pin_memory,
    },
    Capability {
        knob: "amp",
        support: cpu_amp,
    },
    Capability {
        knob: "autotune",
        support: cpu_autotune,
    },
    Capability {
        knob: "parallel",
        support: dp_on_one_device,
    },
    Capability {
        knob: "bucket_mb",
        support: bucket_mb,
    },
    PYTHON_ONLY[0],
    PYTHON_ONLY[1],
    PYTHON_ONLY[2],
    PYTHON_ONLY[3],
    PYTHON_ONLY[4],
    PYTHON_ONLY[5],
];

const CUDA: &[Capability] = &[
    Capability {
        knob: "parallel",
        support: cuda_parallel,
    },
    Capability {
        knob: "bucket_mb",
        support: bucket_mb,
    },
    PYTHON_ONLY[0],
    PYTHON_ONLY[1],
    PYTHON_ONLY[2],
    PYTHON_ONLY[3],
    PYTHON_ONLY[4],
    PYTHON_ONLY[5],
];

/// The backend's table; a knob it does not list is supported.
pub fn table(b: Backend) -> &'static [Capability] {
    match b {
        Backend::Cpu => CPU,
        Backend::Cuda => CUDA,
    }
}

/// How `b` treats `k`'s setting of `knob`.
pub fn support(b: Backend, k: &Knobs, layout: Layout, knob: &str) -> Support {
    table(b)
        .iter()
        .find(|c| c.knob == knob)
        .map_or(Support::Supported, |c| (c.support)(k, layout))
}

/// Refuses the first knob `b` cannot honour, or returns the knobs that do not apply
/// here with their reasons, each also told to `obs` as a note.
pub fn admit(
    b: Backend,
    k: &Knobs,
    layout: Layout,
    obs: &mut dyn Observer,
) -> Result<BTreeMap<String, String>> {
    let mut notes = Vec::new();
    for c in table(b) {
        match (c.support)(k, layout) {
            Support::Supported => {}
            Support::NotImplemented(why) => return Err(Error::Unavailable(why)),
            Support::NotApplicable(why) => notes.push((c.knob, why)),
        }
    }
    let mut not_applicable = BTreeMap::new();
    for (knob, why) in notes {
        obs.on_note(&format!("{knob}: not applicable ({why})"));
        not_applicable.insert(knob.to_string(), why);
    }
    Ok(not_applicable)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_refusal_is_one_line_and_every_row_is_named_once() {
        for b in [Backend::Cpu, Backend::Cuda] {
            let mut seen = std::collections::BTreeSet::new();
            for c in table(b) {
                assert!(seen.insert(c.knob), "{b:?}: {} twice", c.knob);
            }
        }
        let k = Knobs {
            amp: Amp::Bf16,
            autotune: true,
            parallel: Parallel::Ddp,
            ..Knobs::default()
        };
        for b in [Backend::Cpu, Backend::Cuda] {
            for c in table(b) {
                if let Support::NotImplemented(why) = (c.support)(&k, Layout::Multi) {
                    assert!(!why.contains('\n') && why.contains(c.knob), "{why}");
                }
            }
        }
    }

    /// The refusals reach the caller of `engine::run` from the table, before any device
    /// is opened (so the CUDA ones are the same line on a machine without a GPU), and
    /// keep the meaning of the messages they replace.
    #[test]
    fn run_refuses_from_the_table_with_one_line() {
        use crate::engine::device::DeviceChoice;
        use crate::engine::nn::zoo::ModelKind;
        use crate::engine::train::run;
        use crate::engine::vocab::{NoObserver, Workload};
        let cache = tempfile::tempdir().unwrap();
        let w = |device| Workload {
            steps: 1,
            device,
            cache_dir: cache.path().to_path_buf(),
            ..Workload::new(ModelKind::Mlp, "synthetic")
        };
        let cases = [
            (
                DeviceChoice::Cpu,
                Knobs {
                    amp: Amp::Bf16,
                    parallel: Parallel::Ddp,
                    devices: 2,
                    ..Knobs::default()
                },
                "mixed precision is not implemented for multi-device runs yet",
            ),
            (
                DeviceChoice::Cpu,
                Knobs {
                    autotune: true,
                    parallel: Parallel::Ddp,
                    devices: 2,
                    ..Knobs::default()
                },
                "autotune with parallel = ddp: not implemented for multi-device runs yet",
            ),
        ];
        for (device, k, want) in cases {
            match run(&w(device), &k, &mut NoObserver) {
                Err(Error::Unavailable(m)) => {
                    assert!(m.contains(want) && !m.contains('\n'), "{device:?}: {m}")
                }
                other => panic!("{device:?} {k:?}: {:?}", other.map(|s| s.backend)),
            }
        }
    }
}
