//! A model is a sequence of top-level layers, on any backend. Forward and backward walk
//! it explicitly, which is where activation checkpointing lives: a checkpointed segment
//! keeps only its input during forward and is recomputed just before its backward (Chen
//! et al. 2016). The CPU (`Box<dyn Layer>`) and CUDA (`GLayer`) layers both implement
//! [`LayerOps`], so segments, recompute and the gradient-ready hook exist once.

use std::time::{Duration, Instant};

use crate::engine::clock::{Clock, HostClock, Phase};
use crate::engine::ops::layer::{Ctx, Layer, Param};
use crate::error::{Error, Result};

/// What the model needs of one layer, whatever device it runs on.
pub trait LayerOps {
    /// The backend's tensor.
    type T: Clone;
    /// The backend's per-pass context.
    type Ctx: PassCtx;
    /// The backend's parameter (weights and gradient slot).
    type Param;
    fn name(&self) -> String;
    fn forward(&mut self, x: Self::T, ctx: &Self::Ctx) -> Result<Self::T>;
    fn backward(&mut self, dy: Self::T, need_dx: bool, ctx: &Self::Ctx) -> Result<Option<Self::T>>;
    fn clear_saved(&mut self);
    fn visit_params(&mut self, f: &mut dyn FnMut(&mut Self::Param));
}

/// The flags of a pass that checkpointing changes.
pub trait PassCtx: Clone {
    /// Whether this pass keeps what backward needs.
    fn saves(&self) -> bool;
    /// The same pass, keeping nothing (inside a checkpointed segment).
    fn without_save(&self) -> Self;
    /// The recompute of a checkpointed segment: keeps everything, and state updates
    /// (BN running statistics) already happened.
    fn for_recompute(&self) -> Self;
}

impl LayerOps for Box<dyn Layer> {
    type T = crate::engine::tensor::Tensor;
    type Ctx = Ctx;
    type Param = Param;
    fn name(&self) -> String {
        self.as_ref().name()
    }
    fn forward(&mut self, x: Self::T, ctx: &Ctx) -> Result<Self::T> {
        self.as_mut().forward(x, ctx)
    }
    fn backward(&mut self, dy: Self::T, need_dx: bool, ctx: &Ctx) -> Result<Option<Self::T>> {
        self.as_mut().backward(dy, need_dx, ctx)
    }
    fn clear_saved(&mut self) {
        self.as_mut().clear_saved()
    }
    fn visit_params(&mut self, f: &mut dyn FnMut(&mut Param)) {
        self.as_mut().visit_params(f)
    }
}

impl PassCtx for Ctx {
    fn saves(&self) -> bool {
        self.save
    }
    fn without_save(&self) -> Ctx {
        Ctx {
            save: false,
            ..self.clone()
        }
    }
    fn for_recompute(&self) -> Ctx {
        Ctx {
            save: true,
            recompute: true,
            ..self.clone()
        }
    }
}

pub struct Model<L: LayerOps = Box<dyn Layer>> {
    pub name: String,
    pub layers: Vec<L>,
    /// Input shape per sample (H, W, C).
    pub input: [usize; 3],
    pub classes: usize,
    /// Inputs of checkpointed segments, kept between forward and backward.
    boundaries: Vec<(usize, usize, L::T)>,
    /// Index of the first layer with parameters, fixed at construction. Below it nothing
    /// needs a gradient, and that layer's own input gradient is never computed (for the
    /// MLP that skips a 128x1024x784 GEMM, 14% of a step).
    first_param_layer: usize,
    /// Per-layer (forward, backward) seconds, accumulated when profiling is on (host
    /// clock: on a GPU it times the launches).
    pub layer_times: Option<Vec<(f64, f64)>>,
}

/// What a backward pass measured about itself.
#[derive(Clone, Copy, Debug, Default)]
pub struct BackwardStats {
    /// Time spent re-running checkpointed forwards inside backward.
    pub recompute: Duration,
}

/// Segment ranges of `n` layers for a given segment length; the last segment is never
/// checkpointed, since its activations are needed right away.
fn segments(n: usize, seg_len: Option<usize>) -> Vec<(usize, usize, bool)> {
    match seg_len {
        None => vec![(0, n, false)],
        Some(s) => {
            let s = s.max(1);
            let mut out = Vec::new();
            let mut i = 0;
            while i < n {
                let e = (i + s).min(n);
                out.push((i, e, e < n));
                i = e;
            }
            out
        }
    }
}

impl<L: LayerOps> Model<L> {
    pub fn new(name: &str, mut layers: Vec<L>, input: [usize; 3], classes: usize) -> Model<L> {
        let first_param_layer = layers
            .iter_mut()
            .position(|l| {
                let mut has = false;
                l.visit_params(&mut |_| has = true);
                has
            })
            .unwrap_or(0);
        Model {
            first_param_layer,
            name: name.into(),
            layers,
            input,
            classes,
            boundaries: Vec::new(),
            layer_times: None,
        }
    }

    /// Starts accumulating per-layer forward/backward times.
    pub fn enable_layer_times(&mut self) {
        self.layer_times = Some(vec![(0.0, 0.0); self.layers.len()]);
    }

    pub fn visit_params(&mut self, f: &mut dyn FnMut(&mut L::Param)) {
        for l in &mut self.layers {
            l.visit_params(f);
        }
    }

    /// Forward pass. With `seg_len`, every segment but the last keeps only its input.
    pub fn forward(&mut self, x: L::T, ctx: &L::Ctx, seg_len: Option<usize>) -> Result<L::T> {
        self.boundaries.clear();
        let mut h = x;
        for (start, end, ckpt) in segments(self.layers.len(), seg_len) {
            let seg_ctx;
            let c = if ckpt && ctx.saves() {
                self.boundaries.push((start, end, h.clone()));
                seg_ctx = ctx.without_save();
                &seg_ctx
            } else {
                ctx
            };
            for (i, l) in self.layers[start..end].iter_mut().enumerate() {
                let t = Instant::now();
                h = l.forward(h, c)?;
                if let Some(lt) = &mut self.layer_times {
                    if let Some(e) = lt.get_mut(start + i) {
                        e.0 += t.elapsed().as_secs_f64();
                    }
                }
            }
        }
        Ok(h)
    }

    /// Backward pass from the logits' gradient. The first layer's input gradient is
    /// never computed (the input needs none).
    pub fn backward(
        &mut self,
        dlogits: L::T,
        ctx: &L::Ctx,
        seg_len: Option<usize>,
    ) -> Result<BackwardStats> {
        self.backward_hooked(dlogits, ctx, seg_len, &mut |_, _| Ok(()))
    }

    /// `backward_timed` on the host clock, returning the recompute time.
    pub fn backward_hooked(
        &mut self,
        dlogits: L::T,
        ctx: &L::Ctx,
        seg_len: Option<usize>,
        grads_ready: &mut dyn FnMut(usize, &mut L) -> Result<()>,
    ) -> Result<BackwardStats> {
        let mut clock = HostClock::default();
        self.backward_timed(dlogits, ctx, seg_len, &mut clock, grads_ready)?;
        Ok(BackwardStats {
            recompute: Duration::from_secs_f64(clock.phases().recompute),
        })
    }

    /// Backward that times each checkpoint recompute on `clock` (CUDA events on a GPU,
    /// where a host clock would only time the launches) and calls `grads_ready(i, layer)`
    /// as soon as top-level layer `i` is done (every layer, in reverse order): its
    /// parameter gradients are final for this pass, which is when DDP launches a full
    /// bucket's all-reduce.
    pub fn backward_timed<C: Clock>(
        &mut self,
        dlogits: L::T,
        ctx: &L::Ctx,
        seg_len: Option<usize>,
        clock: &mut C,
        grads_ready: &mut dyn FnMut(usize, &mut L) -> Result<()>,
    ) -> Result<()> {
        let mut g = Some(dlogits);
        let first = self.first_param_layer;
        for (start, end, ckpt) in segments(self.layers.len(), seg_len).into_iter().rev() {
            if ckpt {
                let (s, e, x) = self.boundaries.pop().ok_or_else(|| {
                    Error::Runtime("checkpoint: no saved boundary for segment".into())
                })?;
                if (s, e) != (start, end) {
                    return Err(Error::Runtime(format!(
                        "checkpoint: boundary {s}..{e} does not match segment {start}..{end}"
                    )));
                }
                let mark = clock.mark()?;
                let rctx = ctx.for_recompute();
                let mut h = x;
                for l in &mut self.layers[start..end] {
                    h = l.forward(h, &rctx)?;
                }
                drop(h);
                clock.add(Phase::Recompute, mark)?;
            }
            for i in (start..end).rev() {
                if i < first {
                    // Below the first layer with parameters nothing needs a gradient.
                    self.layers[i].clear_saved();
                    grads_ready(i, &mut self.layers[i])?;
                    continue;
                }
                let dy = g.take().ok_or_else(|| {
                    Error::Runtime(format!("backward: layer {i} got no gradient"))
                })?;
                let t = Instant::now();
                g = self.layers[i].backward(dy, i > first, ctx)?;
                if let Some(e) = self.layer_times.as_mut().and_then(|lt| lt.get_mut(i)) {
                    e.1 += t.elapsed().as_secs_f64();
                }
                grads_ready(i, &mut self.layers[i])?;
            }
        }
        Ok(())
    }

    /// Drops everything forward saved (after an aborted step or for evaluation).
    pub fn clear_saved(&mut self) {
        self.boundaries.clear();
        for l in &mut self.layers {
            l.clear_saved();
        }
    }
}

impl Model {
    pub fn visit_buffers(&mut self, f: &mut dyn FnMut(&str, &mut Vec<f32>)) {
        for l in &mut self.layers {
            l.visit_buffers(f);
        }
    }

    pub fn num_params(&mut self) -> usize {
        let mut n = 0;
        self.visit_params(&mut |p| n += p.len());
        n
    }
}
