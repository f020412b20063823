//! The layer contract. Each layer has an explicit forward that keeps what its backward
//! needs and an explicit backward that consumes it (llm.c style, no autograd tape), so
//! activation memory, checkpoint segments and gradient readiness are all visible here.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use crate::engine::amp;
use crate::engine::autotune::Algos;
use crate::engine::collective::Collective;
use crate::engine::device::{Device, MemCategory, MemTracker};
use crate::engine::ops::desc::CpuOnly;
pub use crate::engine::ops::desc::LayerDesc;
use crate::engine::ops::gemm::Mat;
use crate::engine::ops::gemm_amp::{native_half, WeightB};
use crate::engine::ops::gemm_bf16::PackedB;
use crate::engine::tensor::{DType, Tensor};
use crate::error::{Error, Result};
use crate::knobs::Amp;

/// A trainable parameter with its gradient. `g == None` means "no gradient buffer":
/// the state `zero_grad(set_to_none=True)` leaves behind, where the next backward writes
/// instead of accumulating.
#[derive(Debug)]
pub struct Param {
    pub name: String,
    pub w: Tensor,
    pub g: Option<Tensor>,
    /// Whether weight decay applies (not to biases and norm parameters, as usual).
    pub decay: bool,
    /// What the kernels take of `w` under this step's precision, derived once per
    /// change of `w` ([`Param::kernel_weights`]).
    derived: Arc<Derived>,
}

/// Copies of a parameter's weights made for the kernels: rounded to the half grid, and
/// packed for the native bf16 GEMM as `W^T` (forward) and `W` (input gradient). Each is
/// made on first use and kept while `w`'s contents stay those named by `id`: the
/// optimizer's write gives `w` a new content id, so they are made again once per step,
/// not once per GEMM call. Packed copies are charged as workspace while kept.
#[derive(Default)]
struct Derived {
    id: u64,
    dt: Option<DType>,
    native: bool,
    rounded: OnceLock<Tensor>,
    wt: OnceLock<PackedB>,
    w: OnceLock<PackedB>,
    mem: Option<Arc<MemTracker>>,
    charged: AtomicUsize,
}

impl std::fmt::Debug for Derived {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Derived")
            .field("id", &self.id)
            .field("dt", &self.dt)
            .finish_non_exhaustive()
    }
}

impl Drop for Derived {
    fn drop(&mut self) {
        if let Some(mem) = &self.mem {
            mem.free(MemCategory::Workspace, *self.charged.get_mut());
            for p in [self.wt.take(), self.w.take()].into_iter().flatten() {
                p.recycle(mem);
            }
        }
    }
}

/// `cell`'s value, made by `make` when empty.
fn get_or_make<T>(cell: &OnceLock<T>, make: impl FnOnce() -> Result<T>) -> Result<&T> {
    if cell.get().is_none() {
        // Another thread may have filled it meanwhile; either value is the same.
        let _ = cell.set(make()?);
    }
    cell.get()
        .ok_or_else(|| Error::Runtime("kernel weights: cache empty after filling".into()))
}

/// A parameter's weights as this step's kernels take them (see [`Derived`]).
pub struct KernelWeights {
    w: Tensor,
    d: Arc<Derived>,
}

impl KernelWeights {
    /// The weights in f32, on the half grid under AMP.
    pub fn f32(&self) -> Result<&[f32]> {
        match self.d.dt {
            None => self.w.f32(),
            Some(dt) => get_or_make(&self.d.rounded, || {
                Tensor::from_vec(
                    self.w.shape(),
                    amp::round_to_grid_reusing(
                        self.w.f32()?,
                        dt,
                        self.w.tracker().take_recycled(self.w.len()),
                    ),
                    MemCategory::Workspace,
                    self.w.tracker(),
                )
            })?
            .f32(),
        }
    }

    /// `(rows, cols)` of the weights seen as a matrix (`[out, in...]`).
    fn dims(&self) -> (usize, usize) {
        let rows = self.w.shape().first().copied().unwrap_or(0).max(1);
        (rows, self.w.len() / rows)
    }

    fn packed(&self, transposed: bool) -> Result<&PackedB> {
        let cell = if transposed { &self.d.wt } else { &self.d.w };
        get_or_make(cell, || {
            let (r, c) = self.dims();
            let m = Mat::rm(self.w.f32()?, r, c);
            let p = PackedB::new_in(if transposed { m.t() } else { m }, self.w.tracker())?;
            self.w.tracker().alloc(MemCategory::Workspace, p.bytes());
            self.d.charged.fetch_add(p.bytes(), Ordering::Relaxed);
            Ok(p)
        })
    }

    /// `W^T` as a GEMM's right-hand operand (`y = x W^T`). The native bf16 kernel
    /// rounds the f32 master weights while packing, exactly as rounding first would.
    pub fn t(&self) -> Result<WeightB<'_>> {
        if self.d.native {
            return Ok(WeightB::Packed(self.packed(true)?));
        }
        let (r, c) = self.dims();
        Ok(WeightB::Mat(Mat::rm(self.f32()?, r, c).t()))
    }

    /// `W` as a GEMM's right-hand operand (`dx = dy W`).
    pub fn n(&self) -> Result<WeightB<'_>> {
        if self.d.native {
            return Ok(WeightB::Packed(self.packed(false)?));
        }
        let (r, c) = self.dims();
        Ok(WeightB::Mat(Mat::rm(self.f32()?, r, c)))
    }
}

impl Param {
    pub fn new(
        name: impl Into<String>,
        shape: &[usize],
        init: Vec<f32>,
        decay: bool,
        dev: &Device,
    ) -> Result<Param> {
        Ok(Param {
            name: name.into(),
            w: Tensor::from_vec(shape, init, MemCategory::Params, dev.mem())?,
            g: None,
            decay,
            derived: Arc::default(),
        })
    }

    /// The weights as kernels under `amp` take them, made once per change of `w`. Drop
    /// it before the optimizer writes `w` (it shares `w`'s storage, so a write while it
    /// is held would copy the weights).
    pub fn kernel_weights(&mut self, amp: Amp) -> KernelWeights {
        let (id, dt, native) = (self.w.content_id(), amp::half_dtype(amp), native_half(amp));
        let d = &self.derived;
        if d.id != id || d.dt != dt || d.native != native {
            self.derived = Arc::new(Derived {
                id,
                dt,
                native,
                rounded: OnceLock::new(),
                wt: OnceLock::new(),
                w: OnceLock::new(),
                mem: Some(Arc::clone(self.w.tracker())),
                charged: AtomicUsize::new(0),
            });
        }
        KernelWeights {
            w: self.w.clone(),
            d: Arc::clone(&self.derived),
        }
    }

    /// The gradient buffer to write into and whether backward must accumulate (`+=`)
    /// rather than overwrite (`=`). Allocates it when absent; the fill is needed anyway
    /// because some kernels write only part of it.
    pub fn grad_slot(&mut self) -> Result<(&mut [f32], bool)> {
        let accumulate = self.g.is_some();
        let g = match &mut self.g {
            Some(g) => g,
            slot @ None => slot.insert(Tensor::zeros(
                self.w.shape(),
                MemCategory::Grads,
                self.w.tracker(),
            )),
        };
        Ok((g.f32_mut()?, accumulate))
    }

    pub fn len(&self) -> usize {
        self.w.len()
    }

    pub fn is_empty(&self) -> bool {
        self.w.is_empty()
    }
}

/// Per-call context of a forward or backward pass.
#[derive(Clone)]
pub struct Ctx {
    pub dev: Arc<Device>,
    /// Training mode (batch statistics in BN) vs evaluation.
    pub train: bool,
    /// Keep what backward needs. Off for checkpointed segments outside their recompute
    /// and for evaluation.
    pub save: bool,
    /// This forward recomputes a checkpointed segment: state updates (BN running
    /// statistics) already happened and must not happen twice.
    pub recompute: bool,
    pub amp: Amp,
    /// Algorithm selection (autotuning or the fixed heuristic).
    pub algos: Arc<Algos>,
    /// SyncBatchNorm: batch-norm statistics are reduced over these ranks (DDP).
    pub sync_bn: Option<Arc<dyn Collective>>,
}

impl Ctx {
    pub fn train(dev: &Arc<Device>) -> Ctx {
        Ctx {
            dev: Arc::clone(dev),
            train: true,
            save: true,
            recompute: false,
            amp: Amp::Off,
            algos: Algos::heuristic(),
            sync_bn: None,
        }
    }

    pub fn eval(dev: &Arc<Device>) -> Ctx {
        Ctx {
            train: false,
            save: false,
            ..Ctx::train(dev)
        }
    }

    /// A new f32 output buffer on this context's device. Under AMP it is a compute
    /// temporary (the kernel's f32 accumulator, narrowed by `store` before it is kept or
    /// passed on), so it is charged as workspace; otherwise it is the activation itself.
    pub fn alloc(&self, shape: &[usize]) -> Tensor {
        let cat = if amp::half_dtype(self.amp).is_none() {
            MemCategory::Activations
        } else {
            MemCategory::Workspace
        };
        Tensor::zeros(shape, cat, self.dev.mem())
    }

    /// [`Ctx::alloc`] for a kernel that writes every element: the contents are
    /// unspecified ([`Tensor::scratch`]), so no zero fill.
    pub fn scratch(&self, shape: &[usize]) -> Tensor {
        let cat = if amp::half_dtype(self.amp).is_none() {
            MemCategory::Activations
        } else {
            MemCategory::Workspace
        };
        Tensor::scratch(shape, cat, self.dev.mem())
    }

    pub fn from_vec(&self, shape: &[usize], v: Vec<f32>) -> Result<Tensor> {
        Tensor::from_vec(shape, v, MemCategory::Activations, self.dev.mem())
    }

    /// How a tensor leaves a layer (output, input gradient) or is kept for backward:
    /// in the mixed-precision storage type when AMP is on, untouched otherwise.
    pub fn store(&self, t: Tensor) -> Result<Tensor> {
        match amp::half_dtype(self.amp) {
            // Charged as activations whatever buffer it came from: a widened compute
            // copy (workspace) turns back into a stored activation here.
            Some(dt) if t.dtype() == DType::F32 => t.to_dtype(dt, MemCategory::Activations),
            _ => Ok(t),
        }
    }

    /// The storage type name used in algorithm keys.
    pub fn dtype_name(&self) -> &'static str {
        match self.amp {
            // The CPU has no TF32 mode: tf32 runs (and is keyed as) f32 here.
            Amp::Off | Amp::Tf32 => "f32",
            Amp::Bf16 => "bf16",
            Amp::Fp16 => "f16",
        }
    }
}

pub trait Layer: Send {
    fn name(&self) -> String;

    /// What the layer is, for every backend to build the same model (`ops/desc.rs`).
    fn describe(&self) -> LayerDesc {
        Box::new(CpuOnly(self.name()))
    }

    /// Forward pass. Takes the input by value so a layer that needs it for backward keeps
    /// it without a copy, and an in-place layer can reuse its buffer.
    fn forward(&mut self, x: Tensor, ctx: &Ctx) -> Result<Tensor>;

    /// Backward pass: consumes what forward saved, adds parameter gradients into their
    /// slots, and returns the input gradient when `need_dx`.
    fn backward(&mut self, dy: Tensor, need_dx: bool, ctx: &Ctx) -> Result<Option<Tensor>>;

    /// Drops whatever forward saved (checkpointing, or an aborted step).
    fn clear_saved(&mut self);

    fn visit_params(&mut self, _f: &mut dyn FnMut(&mut Param)) {}

    /// Non-trainable state that must travel with the parameters (BN running statistics).
    fn visit_buffers(&mut self, _f: &mut dyn FnMut(&str, &mut Vec<f32>)) {}
}

/// Takes a saved tensor or reports that backward ran without its forward.
pub fn take_saved(slot: &mut Option<Tensor>, layer: &str) -> Result<Tensor> {
    slot.take()
        .ok_or_else(|| Error::Runtime(format!("{layer}: backward called without a saved forward")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::ops::gemm_amp::native_half;

    fn packed_ptr(w: &KernelWeights) -> Option<*const PackedB> {
        match w.t().unwrap() {
            WeightB::Packed(p) => Some(p as *const PackedB),
            WeightB::Mat(_) => None,
        }
    }

    /// The kernels' copy of the weights is made once while the weights stay the same
    /// (the same packed operand, or the same rounded copy, on every call of a step) and
    /// again after a write to them (the optimizer's update): never stale.
    #[test]
    fn kernel_weights_are_made_once_per_change_and_never_stale() {
        let dev = Device::cpu(0, 1);
        let init: Vec<f32> = (0..64 * 40)
            .map(|i| (i % 17) as f32 * 0.01 - 0.08)
            .collect();
        let mut p = Param::new("weight", &[40, 64], init, true, &dev).unwrap();
        for amp in [Amp::Bf16, Amp::Fp16] {
            let a = p.kernel_weights(amp);
            let b = p.kernel_weights(amp);
            let (ra, rb) = (a.f32().unwrap().as_ptr(), b.f32().unwrap().as_ptr());
            assert_eq!(ra, rb, "{amp:?}: rounded twice for unchanged weights");
            if native_half(amp) {
                assert_eq!(packed_ptr(&a), packed_ptr(&b), "packed twice");
                assert!(packed_ptr(&a).is_some());
            }
            let before = a.f32().unwrap()[5];
            drop((a, b));
            // What the optimizer does: a write through the master weights.
            p.w.f32_mut().unwrap()[5] += 0.5;
            let c = p.kernel_weights(amp);
            let after = c.f32().unwrap()[5];
            assert!(
                after > before + 0.4,
                "{amp:?}: stale rounded weights ({before} -> {after})"
            );
            if native_half(amp) {
                let x = vec![1.0f32; 64];
                let mut y = vec![0.0f32; 40];
                let none = gemm::Parallelism::None;
                crate::engine::ops::gemm_amp::matmul_w(
                    &mut y,
                    Mat::rm(&x, 1, 64),
                    c.t().unwrap(),
                    false,
                    none,
                    amp,
                )
                .unwrap();
                let want: f32 = c.f32().unwrap()[..64].iter().sum();
                assert!(
                    (y[0] - want).abs() < 1e-3,
                    "stale packed weights: {} vs {want}",
                    y[0]
                );
            }
        }
    }

    /// Packed and rounded copies are charged as workspace while kept, and released when
    /// the weights change and the copies are made again.
    #[test]
    fn kernel_weight_copies_are_charged_and_released() {
        let dev = Device::cpu(0, 1);
        let mut p = Param::new("weight", &[32, 64], vec![0.25; 32 * 64], true, &dev).unwrap();
        let ws = || dev.mem().current(MemCategory::Workspace);
        let base = ws();
        let w = p.kernel_weights(Amp::Bf16);
        w.f32().unwrap();
        w.t().unwrap();
        let held = ws();
        assert!(
            held >= base + 32 * 64 * 2,
            "copies not charged: {base} -> {held}"
        );
        drop(w);
        p.w.f32_mut().unwrap()[0] = 1.0;
        let w = p.kernel_weights(Amp::Bf16);
        w.f32().unwrap();
        w.t().unwrap();
        assert_eq!(ws(), held, "the stale copies were not released");
    }
}
