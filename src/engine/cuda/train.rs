//! The step loop on one GPU: the CPU loop's phases and knobs, with device work timed by
//! CUDA events on the compute stream (host clocks would only time the launches).
//!
//! One host sync per step, at its end, to read the loss; everything else is queued.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, CudaSlice, PinnedHostSlice};

use crate::cuda_launch;
use crate::engine::cuda::gpu::{cuda_err, DBuf, GTensor, Gpu};
use crate::engine::cuda::kernels::{elementwise, per_item};
use crate::engine::cuda::layers::{self, GLayer, GParam, Pass};
use crate::engine::data::{self, Batch, ImageShape, Loader};
use crate::engine::device::{Device, MemCategory};
use crate::engine::nn::zoo;
use crate::engine::optim::{OptimConfig, OptimKind};
use crate::engine::parallel;
use crate::engine::train::{
    open_source, Measured, Observer, Phases, RunSummary, StepEvent, Workload,
};
use crate::error::{Error, Result};
use crate::knobs::{Amp, Knobs, ZeroGrad};

/// Knobs the GPU loop does not implement yet: refused with one line, never run as
/// something else.
fn check_supported(k: &Knobs) -> Result<()> {
    if k.amp != Amp::Off {
        return Err(Error::Unavailable(format!(
            "amp = {} on the CUDA backend: mixed precision is not implemented on GPUs yet",
            k.amp
        )));
    }
    if k.autotune {
        return Err(Error::Unavailable(
            "autotune on the CUDA backend: timing cuBLASLt's candidates is not implemented yet"
                .into(),
        ));
    }
    if parallel::is_multi_device(k) {
        return Err(Error::Unavailable(format!(
            "parallel = {} on the CUDA backend: multi-GPU training is not implemented yet",
            k.parallel
        )));
    }
    Ok(())
}

/// The GPU model: layers plus checkpoint boundaries, as `nn::Model` on the CPU.
pub struct GModel {
    pub layers: Vec<GLayer>,
    first_param_layer: usize,
    boundaries: Vec<(usize, usize, GTensor)>,
}

impl GModel {
    pub fn new(mut layers: Vec<GLayer>) -> GModel {
        let first_param_layer = layers.iter_mut().position(|l| l.has_params()).unwrap_or(0);
        GModel {
            layers,
            first_param_layer,
            boundaries: Vec::new(),
        }
    }

    fn segments(&self, seg_len: Option<usize>) -> Vec<(usize, usize, bool)> {
        let n = self.layers.len();
        match seg_len {
            None => vec![(0, n, false)],
            Some(s) => {
                let s = s.max(1);
                (0..n)
                    .step_by(s)
                    .map(|i| (i, (i + s).min(n), i + s < n))
                    .collect()
            }
        }
    }

    pub fn forward(
        &mut self,
        x: GTensor,
        gpu: &Gpu,
        p: Pass,
        seg_len: Option<usize>,
    ) -> Result<GTensor> {
        self.boundaries.clear();
        let mut h = x;
        for (start, end, ckpt) in self.segments(seg_len) {
            let mut pass = p;
            if ckpt && p.save {
                self.boundaries.push((start, end, h.clone()));
                pass.save = false;
            }
            for l in &mut self.layers[start..end] {
                h = l.forward(h, gpu, pass)?;
            }
        }
        Ok(h)
    }

    pub fn backward(&mut self, dlogits: GTensor, gpu: &Gpu, seg_len: Option<usize>) -> Result<()> {
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
                let rp = Pass {
                    train: true,
                    save: true,
                    recompute: true,
                };
                let mut h = x;
                for l in &mut self.layers[start..end] {
                    h = l.forward(h, gpu, rp)?;
                }
            }
            for i in (start..end).rev() {
                if i < first {
                    self.layers[i].clear_saved();
                    continue;
                }
                let dy = g.take().ok_or_else(|| {
                    Error::Runtime(format!("backward: layer {i} got no gradient"))
                })?;
                g = self.layers[i].backward(dy, i > first, gpu)?;
            }
        }
        Ok(())
    }

    pub fn visit_params(&mut self, f: &mut dyn FnMut(&mut GParam)) {
        for l in &mut self.layers {
            l.visit_params(f);
        }
    }

    pub fn clear_saved(&mut self) {
        self.boundaries.clear();
        for l in &mut self.layers {
            l.clear_saved();
        }
    }
}

/// Loss, correct predictions per row, and the logits' gradient.
pub struct LossOut {
    pub loss: DBuf,
    pub correct: DBuf,
    pub dlogits: Option<GTensor>,
}

/// Softmax cross-entropy on the GPU; `scale` as on the CPU (loss scale / accumulation).
pub fn softmax_xent(
    gpu: &Gpu,
    logits: &GTensor,
    labels: &CudaSlice<u32>,
    want_grad: bool,
    scale: f32,
) -> Result<LossOut> {
    let (n, k) = match *logits.shape.as_slice() {
        [n, k] if n == labels.len() => (n, k),
        _ => {
            return Err(Error::Shape {
                op: "softmax_cross_entropy",
                msg: format!("logits {:?} for {} labels", logits.shape, labels.len()),
            })
        }
    };
    let mut loss = gpu.alloc(n, MemCategory::Workspace)?;
    let mut correct = gpu.alloc(n, MemCategory::Workspace)?;
    let (ni, ki) = (n as i32, k as i32);
    let mut d = if want_grad {
        Some(gpu.alloc(n * k, MemCategory::Activations)?)
    } else {
        None
    };
    let null = 0u64;
    {
        use cudarc::driver::PushKernelArg;
        let f = gpu.kernels.get("softmax_xent")?;
        let mut b = gpu.stream.launch_builder(f);
        match &mut d {
            Some(d) => b.arg(&mut d.s),
            None => b.arg(&null),
        };
        b.arg(&mut loss.s)
            .arg(&mut correct.s)
            .arg(logits.s())
            .arg(labels)
            .arg(&ni)
            .arg(&ki)
            .arg(&scale);
        // SAFETY: softmax_xent(dlogits|null, loss, correct, logits, labels, n, k, scale)
        // in that order; buffers hold n*k, n, n, n*k and n elements.
        unsafe { b.launch(per_item(n)) }.map_err(|e| cuda_err("kernel softmax_xent", e))?;
    }
    let dlogits = d.map(|d| GTensor::new(&[n, k], d)).transpose()?;
    Ok(LossOut {
        loss,
        correct,
        dlogits,
    })
}

/// Per-parameter optimizer state on the device. `pub` (hidden) only so that
/// tests/gpu_optim.rs can drive the same host code and kernels against the CPU optimizer.
#[doc(hidden)]
pub struct GOptim {
    cfg: OptimConfig,
    state: Vec<Vec<DBuf>>,
    step: u64,
}

impl GOptim {
    pub fn new(cfg: OptimConfig) -> GOptim {
        GOptim {
            cfg,
            state: Vec::new(),
            step: 0,
        }
    }

    /// Starts a new optimizer step; `update` is then called once per parameter.
    pub fn begin_step(&mut self) {
        self.step += 1;
    }

    /// One parameter's update. `amp` is `[loss scale, found_inf, growth tracker]` on the
    /// device: the kernels divide the gradient by the scale and do nothing when found_inf.
    pub fn update(&mut self, gpu: &Gpu, idx: usize, p: &mut GParam, amp: &DBuf) -> Result<()> {
        if self.state.len() <= idx {
            self.state.resize_with(idx + 1, Vec::new);
        }
        let Some(g) = &p.g else { return Ok(()) };
        let c = self.cfg.clone();
        let slots = match c.kind {
            OptimKind::Sgd => usize::from(c.momentum != 0.0),
            OptimKind::Adamw => 2,
        };
        let st = &mut self.state[idx];
        while st.len() < slots {
            st.push(gpu.zeros(p.w.len(), MemCategory::OptimizerState)?);
        }
        let n = p.w.len() as u64;
        let wd = if p.decay { c.weight_decay } else { 0.0 };
        let cfg = elementwise(p.w.len());
        match c.kind {
            OptimKind::Sgd => {
                let first = i32::from(self.step == 1);
                match st.first_mut() {
                    Some(buf) => cuda_launch!(
                        gpu,
                        "sgd_step",
                        cfg,
                        &mut p.w.s,
                        &g.s,
                        &mut buf.s,
                        &amp.s,
                        &n,
                        &c.lr,
                        &c.momentum,
                        &wd,
                        &first
                    ),
                    None => {
                        let null = 0u64;
                        cuda_launch!(
                            gpu,
                            "sgd_step",
                            cfg,
                            &mut p.w.s,
                            &g.s,
                            &null,
                            &amp.s,
                            &n,
                            &c.lr,
                            &c.momentum,
                            &wd,
                            &first
                        )
                    }
                }
            }
            OptimKind::Adamw => {
                let t = self.step as i32;
                let bc1 = 1.0 - c.betas.0.powi(t);
                let bc2 = 1.0 - c.betas.1.powi(t);
                let (m, v) = st.split_at_mut(1);
                cuda_launch!(
                    gpu,
                    "adamw_step",
                    cfg,
                    &mut p.w.s,
                    &g.s,
                    &mut m[0].s,
                    &mut v[0].s,
                    &amp.s,
                    &n,
                    &c.lr,
                    &c.betas.0,
                    &c.betas.1,
                    &c.eps,
                    &wd,
                    &bc1,
                    &bc2
                )
            }
        }
    }
}

/// Host-to-device input copies. Pinned: a page-locked staging buffer per slot of a
/// two-slot ring and an asynchronous copy on the copy stream (cudarc orders the compute
/// stream after it through the buffer's events). Pageable: a plain synchronous copy.
struct Uploader {
    pinned: Option<Vec<PinnedHostSlice<f32>>>,
    next: usize,
}

impl Uploader {
    fn new(pin: bool) -> Uploader {
        Uploader {
            pinned: pin.then(Vec::new),
            next: 0,
        }
    }

    fn upload(&mut self, gpu: &Gpu, x: &[f32]) -> Result<DBuf> {
        let Some(ring) = &mut self.pinned else {
            return gpu.upload(x, MemCategory::Activations);
        };
        let slot = self.next % 2;
        self.next += 1;
        if ring.len() <= slot || ring[slot].len() < x.len() {
            // SAFETY: page-locked host memory of this context, written below before
            // any copy reads it.
            let p = unsafe { gpu.ctx.alloc_pinned::<f32>(x.len()) }
                .map_err(|e| cuda_err("pinned host buffer", e))?;
            if ring.len() <= slot {
                ring.push(p);
            } else {
                ring[slot] = p;
            }
        }
        let host = &mut ring[slot];
        // Waits for this slot's previous copy to finish before overwriting it.
        host.as_mut_slice()
            .map_err(|e| cuda_err("pinned host buffer", e))?[..x.len()]
            .copy_from_slice(x);
        // SAFETY: filled by the copy below before any kernel reads it.
        let mut s =
            unsafe { gpu.copy.alloc::<f32>(x.len()) }.map_err(|e| cuda_err("input buffer", e))?;
        gpu.copy
            .memcpy_htod(&*host, &mut s)
            .map_err(|e| cuda_err("async host-to-device copy", e))?;
        Ok(gpu.wrap(s, MemCategory::Activations))
    }
}

/// Events around each device phase of one step, turned into seconds after the sync.
struct Timeline {
    marks: Vec<(&'static str, CudaEvent, CudaEvent)>,
}

impl Timeline {
    fn mark(gpu: &Gpu) -> Result<CudaEvent> {
        gpu.stream
            .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(|e| cuda_err("event", e))
    }

    fn add(&mut self, phase: &'static str, start: CudaEvent, gpu: &Gpu) -> Result<()> {
        let end = Self::mark(gpu)?;
        self.marks.push((phase, start, end));
        Ok(())
    }

    fn into_phases(self, ph: &mut Phases) -> Result<()> {
        for (phase, a, b) in self.marks {
            let s = f64::from(a.elapsed_ms(&b).map_err(|e| cuda_err("event time", e))?) / 1e3;
            match phase {
                "h2d" => ph.h2d += s,
                "zero_grad" => ph.zero_grad += s,
                "forward" => ph.forward += s,
                "backward" => ph.backward += s,
                _ => ph.optimizer += s,
            }
        }
        Ok(())
    }
}

fn input(gpu: &Gpu, up: &mut Uploader, b: &Batch) -> Result<(GTensor, CudaSlice<u32>)> {
    let x = up.upload(gpu, &b.x)?;
    let x = GTensor::new(&[b.n, b.shape.h, b.shape.w, b.shape.c], x)?;
    Ok((x, gpu.upload_u32(&b.y)?))
}

/// Trains `w` under `k` on GPU 0.
pub fn run(w: &Workload, k: &Knobs, obs: &mut dyn Observer) -> Result<RunSummary> {
    check_supported(k)?;
    let started = Instant::now();
    let dev = Device::cuda(0);
    let gpu = Gpu::open(0, &w.cache_dir, false, Arc::clone(dev.mem()))?;
    obs.on_note(&format!(
        "CUDA backend on {} (kernels {})",
        gpu.name,
        if gpu.kernels.from_cache {
            "from the PTX cache"
        } else {
            "compiled by NVRTC"
        }
    ));
    obs.on_devices(std::slice::from_ref(&dev));
    let [h, wd, c] = w.model.input();
    let (mut source, test, classes, norm) = open_source(w, k, ImageShape { h, w: wd, c })?;
    let mut not_applicable = BTreeMap::new();
    for (knob, why) in parallel::single_device_notes(k) {
        obs.on_note(&format!("{knob}: {why}"));
        not_applicable.insert(knob.to_string(), why);
    }
    // Weights are initialised on the CPU (same seed, same values as the CPU backend)
    // and copied over; that host model is dropped right after.
    let host = Device::cpu(0, 1);
    let mut cpu_model = zoo::build(w.model, classes, w.seed, &host)?;
    let params = cpu_model.num_params();
    let mut model = GModel::new(layers::from_cpu(&mut cpu_model, &gpu)?);
    let seg = k.checkpoint.segment_len(cpu_model.layers.len());
    drop(cpu_model);
    let cfg = match w.optimizer {
        OptimKind::Sgd => OptimConfig::sgd(w.lr),
        OptimKind::Adamw => OptimConfig::adamw(w.lr),
    };
    // The CPU optimizer's constructor is where the learning rate is validated.
    crate::engine::optim::Optimizer::new(cfg.clone())?;
    let mut opt = GOptim::new(cfg);
    // [loss scale, found_inf, growth tracker]: no scaler on this path, scale 1.
    let amp_state = gpu.upload(&[1.0, 0.0, 0.0], MemCategory::Workspace)?;
    let mut up = Uploader::new(k.pin_memory);
    let accum = k.grad_accum;
    let train = Pass {
        train: true,
        save: true,
        recompute: false,
    };
    dev.mem().reset_peaks();

    let mut step_times = Vec::with_capacity(w.steps);
    let mut losses = Vec::with_capacity(w.steps);
    let mut phase_sum = Phases::default();
    let mut grad_between = 0;
    for step in 0..w.steps {
        let t_step = Instant::now();
        let mut ph = Phases::default();
        let mut tl = Timeline { marks: Vec::new() };
        let e = Timeline::mark(&gpu)?;
        if k.zero_grad == ZeroGrad::Memset {
            let mut res = Ok(());
            model.visit_params(&mut |p| {
                if let (Some(g), true) = (&mut p.g, res.is_ok()) {
                    res = gpu.fill(g, 0.0);
                }
            });
            res?;
        }
        tl.add("zero_grad", e, &gpu)?;
        let mut row_losses = Vec::with_capacity(accum);
        for _ in 0..accum {
            let t = Instant::now();
            let batch = source.next()?;
            ph.data_wait += t.elapsed().as_secs_f64();
            let e = Timeline::mark(&gpu)?;
            let (x, labels) = input(&gpu, &mut up, &batch)?;
            tl.add("h2d", e, &gpu)?;
            let e = Timeline::mark(&gpu)?;
            let logits = model.forward(x, &gpu, train, seg)?;
            let out = softmax_xent(&gpu, &logits, &labels, true, 1.0 / accum as f32)?;
            drop(logits);
            tl.add("forward", e, &gpu)?;
            let e = Timeline::mark(&gpu)?;
            let d = out
                .dlogits
                .ok_or_else(|| Error::Runtime("loss gave no gradient".into()))?;
            model.backward(d, &gpu, seg)?;
            tl.add("backward", e, &gpu)?;
            row_losses.push(out.loss);
        }
        let e = Timeline::mark(&gpu)?;
        opt.begin_step();
        let mut idx = 0;
        let mut res = Ok(());
        model.visit_params(&mut |p| {
            if res.is_ok() {
                res = opt.update(&gpu, idx, p, &amp_state);
            }
            idx += 1;
        });
        res?;
        tl.add("optimizer", e, &gpu)?;
        if k.zero_grad == ZeroGrad::None {
            model.visit_params(&mut |p| p.g = None);
        }
        // The step's one sync: the loss is needed on the host.
        let mut loss_sum = 0.0f32;
        for l in &row_losses {
            let v = gpu.download(&l.s)?;
            loss_sum += v.iter().sum::<f32>() / v.len().max(1) as f32 / accum as f32;
        }
        let step_s = t_step.elapsed().as_secs_f64();
        tl.into_phases(&mut ph)?;
        if !loss_sum.is_finite() {
            model.clear_saved();
            return Err(Error::Diverged {
                step,
                loss: loss_sum,
            });
        }
        let mem_after = dev.mem().snapshot();
        grad_between = mem_after.current_of(MemCategory::Grads);
        step_times.push(step_s);
        losses.push(loss_sum);
        if step >= w.warmup {
            phase_sum.add(&ph);
        }
        obs.on_step(&StepEvent {
            step,
            steps: w.steps,
            loss: loss_sum,
            samples: k.batch_size * accum,
            step_s,
            phases: ph,
            mem_after,
            loss_scale: None,
            skipped: false,
        });
    }
    drop(source);
    let snap = dev.mem().snapshot();
    let accuracy = match (&test, w.eval) {
        (Some(test), true) => Some(evaluate(&mut model, &gpu, Arc::clone(test), &norm)?),
        _ => None,
    };
    let m = Measured {
        step_times,
        losses,
        phase_sum,
        grad_between,
        started,
    };
    let busy_wall = m.after_warmup(w.warmup).iter().sum();
    let (devices, imbalance) = parallel::single_device_summary(1, &m.phase_sum, busy_wall, &snap);
    Ok(RunSummary {
        accuracy,
        not_applicable,
        ..RunSummary::from_measured(w, k, "cuda", params, m, &snap, devices, imbalance)
    })
}

/// Held-out accuracy on the GPU, BN in evaluation mode.
pub fn evaluate(
    model: &mut GModel,
    gpu: &Gpu,
    test: Arc<dyn data::Dataset>,
    norm: &data::Normalize,
) -> Result<f64> {
    let eval = Pass {
        train: false,
        save: false,
        recompute: false,
    };
    let mut up = Uploader::new(false);
    let (mut correct, mut total) = (0.0f64, 0usize);
    for b in Loader::eval_batches(test, norm, 256) {
        let b = b?;
        let (x, labels) = input(gpu, &mut up, &b)?;
        let logits = model.forward(x, gpu, eval, None)?;
        let out = softmax_xent(gpu, &logits, &labels, false, 1.0)?;
        correct += gpu
            .download(&out.correct.s)?
            .iter()
            .map(|&v| f64::from(v))
            .sum::<f64>();
        total += b.n;
    }
    if total == 0 {
        return Err(Error::Invalid("the held-out set is empty".into()));
    }
    Ok(correct / total as f64)
}
