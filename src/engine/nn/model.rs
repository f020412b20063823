//! A model is a sequence of top-level layers. Forward and backward walk it explicitly,
//! which is where activation checkpointing lives: a checkpointed segment keeps only its
//! input during forward and is recomputed just before its backward (Chen et al. 2016).

use std::time::{Duration, Instant};

use crate::engine::nn::layer::{Ctx, Layer, Param};
use crate::engine::tensor::Tensor;
use crate::error::{Error, Result};

pub struct Model {
    pub name: String,
    pub layers: Vec<Box<dyn Layer>>,
    /// Input shape per sample (H, W, C).
    pub input: [usize; 3],
    pub classes: usize,
    /// Inputs of checkpointed segments, kept between forward and backward.
    boundaries: Vec<(usize, usize, Tensor)>,
    /// Index of the first layer with parameters, fixed at construction. Below it nothing
    /// needs a gradient, and that layer's own input gradient is never computed (for the
    /// MLP that skips a 128x1024x784 GEMM, 14% of a step).
    first_param_layer: usize,
    /// Per-layer (forward, backward) seconds, accumulated when profiling is on.
    pub layer_times: Option<Vec<(f64, f64)>>,
}

/// What a backward pass measured about itself.
#[derive(Clone, Copy, Debug, Default)]
pub struct BackwardStats {
    /// Time spent re-running checkpointed forwards inside backward.
    pub recompute: Duration,
}

impl Model {
    pub fn new(
        name: &str,
        mut layers: Vec<Box<dyn Layer>>,
        input: [usize; 3],
        classes: usize,
    ) -> Model {
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

    pub fn visit_params(&mut self, f: &mut dyn FnMut(&mut Param)) {
        for l in &mut self.layers {
            l.visit_params(f);
        }
    }

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

    /// Segment ranges for a given segment length; the last segment is never
    /// checkpointed, since its activations are needed right away.
    fn segments(&self, seg_len: Option<usize>) -> Vec<(usize, usize, bool)> {
        let n = self.layers.len();
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

    /// Forward pass. With `seg_len`, every segment but the last keeps only its input.
    pub fn forward(&mut self, x: Tensor, ctx: &Ctx, seg_len: Option<usize>) -> Result<Tensor> {
        self.boundaries.clear();
        let mut h = x;
        for (start, end, ckpt) in self.segments(seg_len) {
            let seg_ctx;
            let c = if ckpt && ctx.save {
                self.boundaries.push((start, end, h.clone()));
                seg_ctx = Ctx {
                    save: false,
                    ..ctx.clone()
                };
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
        dlogits: Tensor,
        ctx: &Ctx,
        seg_len: Option<usize>,
    ) -> Result<BackwardStats> {
        self.backward_hooked(dlogits, ctx, seg_len, &mut |_, _| Ok(()))
    }

    /// Backward that calls `grads_ready(i, layer)` as soon as top-level layer `i` is done
    /// (every layer, in reverse order): its parameter gradients are final for this pass,
    /// which is when DDP launches a full bucket's all-reduce.
    pub fn backward_hooked(
        &mut self,
        dlogits: Tensor,
        ctx: &Ctx,
        seg_len: Option<usize>,
        grads_ready: &mut dyn FnMut(usize, &mut dyn Layer) -> Result<()>,
    ) -> Result<BackwardStats> {
        let mut stats = BackwardStats::default();
        let mut g = Some(dlogits);
        let first = self.first_param_layer;
        for (start, end, ckpt) in self.segments(seg_len).into_iter().rev() {
            if ckpt {
                let (s, e, x) = self.boundaries.pop().ok_or_else(|| {
                    Error::Runtime("checkpoint: no saved boundary for segment".into())
                })?;
                if (s, e) != (start, end) {
                    return Err(Error::Runtime(format!(
                        "checkpoint: boundary {s}..{e} does not match segment {start}..{end}"
                    )));
                }
                let t = Instant::now();
                let rctx = Ctx {
                    save: true,
                    recompute: true,
                    ..ctx.clone()
                };
                let mut h = x;
                for l in &mut self.layers[start..end] {
                    h = l.forward(h, &rctx)?;
                }
                drop(h);
                stats.recompute += t.elapsed();
            }
            for i in (start..end).rev() {
                if i < first {
                    // Below the first layer with parameters nothing needs a gradient.
                    self.layers[i].clear_saved();
                    grads_ready(i, self.layers[i].as_mut())?;
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
                grads_ready(i, self.layers[i].as_mut())?;
            }
        }
        Ok(stats)
    }

    /// Drops everything forward saved (after an aborted step or for evaluation).
    pub fn clear_saved(&mut self) {
        self.boundaries.clear();
        for l in &mut self.layers {
            l.clear_saved();
        }
    }
}
