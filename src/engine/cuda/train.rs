//! The CUDA backend of the step loop (`engine::step`): uploads through a pinned or
//! pageable path, the loss and optimizer kernels, and device work timed by CUDA events
//! on the compute stream (host clocks would only time the launches).
//!
//! One host sync per step, at its end, to read the loss; everything else is queued.

use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, CudaSlice, PinnedHostSlice};

use crate::cuda_launch;
use crate::engine::amp::{self, GradScaler, ScalerConfig};
use crate::engine::autotune::{AlgoChoice, Algos, ChoiceSource};
use crate::engine::caps::{self, Layout};
use crate::engine::clock::Phases;
use crate::engine::clock::{Clock, Phase};
use crate::engine::cuda::gpu::{cuda_err, DBuf, GTensor, Gpu};
use crate::engine::cuda::kernels::{elementwise, per_item};
use crate::engine::data::Batch;
use crate::engine::device::{Backend, Device, MemCategory, MemSnapshot};
use crate::engine::launcher::{self, Rig};
use crate::engine::nn::init::Initial;
use crate::engine::nn::model::Model;
use crate::engine::nn::model_cuda::{self, GCtx, GLayer};
use crate::engine::nn::zoo;
use crate::engine::ops::layer::LayerDesc;
use crate::engine::ops::layer_cuda::{self, GParam, Pass};
use crate::engine::optim::{OptimConfig, OptimKind};
use crate::engine::step::Exec;
use crate::engine::vocab::{Observer, RunSummary, Workload};
use crate::error::{Error, Result};
use crate::knobs::{Amp, Knobs};

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
}

/// The device's `[loss scale, found_inf, growth tracker, optimizer steps]` at the start.
pub fn amp_state(gpu: &Gpu, scale: f32) -> Result<DBuf> {
    gpu.upload(&[scale, 0.0, 0.0, 0.0], MemCategory::Workspace)
}

impl GOptim {
    pub fn new(cfg: OptimConfig) -> GOptim {
        GOptim {
            cfg,
            state: Vec::new(),
        }
    }

    /// Starts a new optimizer step; `update` is then called once per parameter. The step
    /// is counted on the device unless its gradients overflowed (`amp_state[1]`), so
    /// AdamW's bias correction skips skipped steps as the CPU optimizer does.
    pub fn begin_step(&mut self, gpu: &Gpu, amp: &mut DBuf) -> Result<()> {
        cuda_launch!(gpu, "opt_begin_step", per_item(1), &mut amp.s)
    }

    /// One parameter's update. `amp` is `[loss scale, found_inf, growth tracker, steps]`
    /// on the device: the kernels divide the gradient by the scale and do nothing when
    /// found_inf.
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
            OptimKind::Sgd => match st.first_mut() {
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
                    &wd
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
                        &wd
                    )
                }
            },
            OptimKind::Adamw => {
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
                    &wd
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
        // Exactly the batch's length: the copy moves the whole staging buffer (cudarc's
        // pinned slice has no sub-slice), so a slot left longer by a larger batch would
        // overrun a smaller one's device buffer: the evaluation's remainder batch after
        // batches of 256 crashed the first H200 session's pin_memory trial. A slot is
        // re-made only when the length changes: at the run's first two steps, then for the
        // evaluation's batches.
        if ring.len() <= slot || ring[slot].len() != x.len() {
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
pub(crate) struct GpuClock {
    gpu: Arc<Gpu>,
    marks: Vec<(Phase, CudaEvent, CudaEvent)>,
}

impl Clock for GpuClock {
    type Mark = CudaEvent;

    fn mark(&mut self) -> Result<CudaEvent> {
        self.gpu
            .stream
            .record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
            .map_err(|e| cuda_err("event", e))
    }

    fn add(&mut self, phase: Phase, from: CudaEvent) -> Result<()> {
        let end = self.mark()?;
        self.marks.push((phase, from, end));
        Ok(())
    }
}

impl GpuClock {
    fn into_phases(self) -> Result<Phases> {
        let mut ph = Phases::default();
        for (phase, a, b) in self.marks {
            let s = f64::from(a.elapsed_ms(&b).map_err(|e| cuda_err("event time", e))?) / 1e3;
            ph.add_to(phase, s);
        }
        Ok(ph)
    }
}

fn input(gpu: &Gpu, up: &mut Uploader, b: &Batch) -> Result<(GTensor, CudaSlice<u32>)> {
    let x = up.upload(gpu, &b.x)?;
    let x = GTensor::new(&[b.n, b.shape.h, b.shape.w, b.shape.c], x)?;
    Ok((x, gpu.upload_u32(&b.y)?))
}

/// The CUDA backend of the step loop.
pub(crate) struct GpuExec {
    pub(super) gpu: Arc<Gpu>,
    ctx: GCtx,
    pub(super) dev: Arc<Device>,
    opt: GOptim,
    /// [loss scale, found_inf, growth tracker, optimizer steps] (see kernels.cu): scale 1
    /// and never a skip without a loss scaler.
    amp_state: DBuf,
    /// The last step's skip flag, written by `scaler_update`.
    skipped: DBuf,
    scaler: ScalerConfig,
    up: Uploader,
}

impl GpuExec {
    /// The executor of one GPU for `w` under `k`; `scale` is the loss scaler's start (1
    /// without one).
    pub(super) fn new(
        gpu: &Arc<Gpu>,
        dev: &Arc<Device>,
        w: &Workload,
        k: &Knobs,
        scale: f32,
    ) -> Result<GpuExec> {
        Ok(GpuExec {
            ctx: GCtx {
                gpu: Arc::clone(gpu),
                pass: Pass {
                    train: true,
                    save: true,
                    recompute: false,
                    half: amp::half_dtype(k.amp),
                },
            },
            gpu: Arc::clone(gpu),
            dev: Arc::clone(dev),
            opt: GOptim::new(OptimConfig::of(w.optimizer, w.lr)?),
            amp_state: amp_state(gpu, scale)?,
            skipped: gpu.zeros(1, MemCategory::Workspace)?,
            scaler: w.scaler,
            up: Uploader::new(k.pin_memory),
        })
    }

    fn each_grad(
        &mut self,
        model: &mut Model<GLayer>,
        f: &mut dyn FnMut(&Gpu, &mut DBuf, &DBuf) -> Result<()>,
    ) -> Result<()> {
        let mut res = Ok(());
        let (gpu, amp) = (&self.gpu, &mut self.amp_state);
        model.visit_params(&mut |p| {
            if let (Some(g), true) = (&p.g, res.is_ok()) {
                res = f(gpu, amp, g);
            }
        });
        res
    }
}

impl Exec for GpuExec {
    type L = GLayer;
    type Clock = GpuClock;
    type Labels = CudaSlice<u32>;
    type Loss = DBuf;

    fn ctx(&self) -> &GCtx {
        &self.ctx
    }

    fn clock(&self) -> GpuClock {
        GpuClock {
            gpu: Arc::clone(&self.gpu),
            marks: Vec::new(),
        }
    }

    fn phases(&self, clock: GpuClock) -> Result<Phases> {
        clock.into_phases()
    }

    fn zero_grads(&mut self, model: &mut Model<GLayer>) -> Result<()> {
        let mut res = Ok(());
        model.visit_params(&mut |p| {
            if let (Some(g), true) = (&mut p.g, res.is_ok()) {
                res = self.gpu.fill(g, 0.0);
            }
        });
        res
    }

    fn upload(&mut self, batch: Batch) -> Result<(GTensor, CudaSlice<u32>)> {
        input(&self.gpu, &mut self.up, &batch)
    }

    fn loss(
        &mut self,
        logits: GTensor,
        labels: &CudaSlice<u32>,
        scale: f32,
    ) -> Result<(DBuf, GTensor)> {
        // The loss runs in f32 (as under autocast); its gradient is stored like any
        // activation gradient, which is where fp16 would underflow without scaling.
        let out = softmax_xent(&self.gpu, &self.gpu.widen(&logits)?, labels, true, scale)?;
        drop(logits);
        let d = out
            .dlogits
            .ok_or_else(|| Error::Runtime("loss gave no gradient".into()))?;
        Ok((out.loss, layer_cuda::store(&self.gpu, d, self.ctx.pass)?))
    }

    fn grads_finite(&mut self, model: &mut Model<GLayer>) -> Result<bool> {
        let mut ok = true;
        let mut res = Ok(());
        model.visit_params(&mut |p| {
            if let (true, Some(g)) = (ok && res.is_ok(), &p.g) {
                match self.gpu.download(&g.s) {
                    Ok(v) => ok = v.iter().all(|x| x.is_finite()),
                    Err(e) => res = Err(e),
                }
            }
        });
        res.map(|()| ok)
    }

    fn poison_one_grad(&mut self, model: &mut Model<GLayer>) -> Result<()> {
        let mut done = false;
        let mut res = Ok(());
        model.visit_params(&mut |p| {
            let Some(g) = &mut p.g else { return };
            if done || g.is_empty() || res.is_err() {
                return;
            }
            res = self.gpu.download(&g.s).and_then(|mut v| {
                v[0] = f32::INFINITY;
                *g = self.gpu.upload(&v, MemCategory::Grads)?;
                Ok(())
            });
            done = true;
        });
        res
    }

    fn update(&mut self, model: &mut Model<GLayer>, _loss_scale: f32) -> Result<()> {
        // The scale the kernels divide by is `amp_state[0]`, on the device.
        self.opt.begin_step(&self.gpu, &mut self.amp_state)?;
        let mut idx = 0;
        let mut res = Ok(());
        model.visit_params(&mut |p| {
            if res.is_ok() {
                res = self.opt.update(&self.gpu, idx, p, &self.amp_state);
            }
            idx += 1;
        });
        res
    }

    /// GradScaler on the device, no host sync: flag any non-finite gradient, step (the
    /// kernels skip on the flag and unscale by the device's scale), then update the
    /// scale and record the skip for `scaler_outcome`.
    fn scaled_update(
        &mut self,
        model: &mut Model<GLayer>,
        _scaler: &mut GradScaler,
    ) -> Result<Option<bool>> {
        self.each_grad(model, &mut |gpu, amp, g| {
            let n = g.len() as u64;
            cuda_launch!(
                gpu,
                "find_nonfinite",
                elementwise(g.len()),
                &mut amp.s,
                &g.s,
                &n
            )
        })?;
        self.update(model, 1.0)?;
        let c = self.scaler;
        let (step, interval) = (0i32, c.growth_interval.min(i32::MAX as u32) as i32);
        cuda_launch!(
            self.gpu,
            "scaler_update",
            per_item(1),
            &mut self.amp_state.s,
            &mut self.skipped.s,
            &step,
            &c.growth_factor,
            &c.backoff_factor,
            &interval
        )?;
        Ok(None)
    }

    fn scaler_outcome(&mut self, scaler: &mut GradScaler) -> Result<bool> {
        // The stream is idle after `read_loss`: these copies wait for nothing.
        let state = self.gpu.download(&self.amp_state.s)?;
        let skipped = self.gpu.download(&self.skipped.s)?;
        let applied = skipped.first().is_some_and(|&f| f == 0.0);
        scaler.update(applied);
        match state.first() {
            Some(&s) if s == scaler.scale() => Ok(applied),
            other => Err(Error::Runtime(format!(
                "the device's loss scaler ({other:?}) disagrees with GradScaler's rules ({})",
                scaler.scale()
            ))),
        }
    }

    fn release_grads(&mut self, model: &mut Model<GLayer>) {
        model.visit_params(&mut |p| p.g = None);
    }

    fn read_loss(&mut self, losses: Vec<DBuf>, accum: usize) -> Result<f32> {
        let mut sum = 0.0f32;
        for l in &losses {
            let v = self.gpu.download(&l.s)?;
            sum += v.iter().sum::<f32>() / v.len().max(1) as f32 / accum as f32;
        }
        Ok(sum)
    }

    fn mem(&self) -> MemSnapshot {
        self.dev.mem().snapshot()
    }

    fn eval_ctx(&self) -> GCtx {
        GCtx {
            gpu: Arc::clone(&self.gpu),
            pass: Pass {
                train: false,
                save: false,
                recompute: false,
                half: self.ctx.pass.half,
            },
        }
    }

    fn correct(&mut self, logits: GTensor, labels: &CudaSlice<u32>) -> Result<usize> {
        let out = softmax_xent(&self.gpu, &self.gpu.widen(&logits)?, labels, false, 1.0)?;
        // The kernel writes 1.0 per correct row: an exact small integer in f32.
        let hits: f64 = self
            .gpu
            .download(&out.correct.s)?
            .iter()
            .map(|&v| f64::from(v))
            .sum();
        Ok(hits.round() as usize)
    }
}

/// The CUDA backend's setup of one GPU (`launcher::Rig`).
pub(crate) struct GpuRig {
    pub(crate) gpu: Arc<Gpu>,
    pub(crate) dev: Arc<Device>,
}

impl Rig for GpuRig {
    type E = GpuExec;

    fn device(&self) -> &Arc<Device> {
        &self.dev
    }

    fn label(&self) -> String {
        crate::engine::cuda::backend_label(&self.gpu.name).to_string()
    }

    fn model(&self, w: &Workload, k: &Knobs, classes: usize) -> Result<(Model<GLayer>, usize)> {
        let (model, params, _) = build_model(w, k, classes, &self.gpu)?;
        Ok((model, params))
    }

    /// With autotune, the GPU's GEMMs (and cuDNN's convolutions) time their candidates,
    /// reading the versioned cache first; without, the libraries' heuristics, unrecorded.
    fn algos(&self, w: &Workload, k: &Knobs, obs: &mut dyn Observer) -> Result<Option<Arc<Algos>>> {
        autotune_on(w, k, &self.gpu, obs)
    }

    fn exec(
        &self,
        w: &Workload,
        k: &Knobs,
        _classes: usize,
        _algos: Option<&Arc<Algos>>,
        scale: f32,
    ) -> Result<GpuExec> {
        GpuExec::new(&self.gpu, &self.dev, w, k, scale)
    }

    /// Peaks count from the loop: the model's upload and autotune's scratch are not
    /// training's memory.
    fn before_loop(&self) {
        self.dev.mem().reset_peaks();
    }

    fn path(&self, w: &Workload, classes: usize) -> Vec<AlgoChoice> {
        if has_conv(&zoo::describe(w.model, classes)) {
            conv_path(&self.gpu)
        } else {
            Vec::new()
        }
    }
}

/// Trains `w` under `k` on GPU 0 (`train::run` sends DP and DDP to `dp` and `ddp`).
pub fn run(w: &Workload, k: &Knobs, obs: &mut dyn Observer) -> Result<RunSummary> {
    let not_applicable = caps::admit(Backend::Cuda, k, Layout::Single, obs)?;
    let started = Instant::now();
    let dev = Device::cuda(0);
    let tf32 = k.amp == Amp::Tf32;
    let gpu = Arc::new(Gpu::open(0, &w.cache_dir, tf32, Arc::clone(dev.mem()))?);
    obs.on_note(&format!(
        "CUDA backend on {} (kernels {})",
        gpu.name,
        if gpu.kernels.from_cache {
            "from the PTX cache"
        } else {
            "compiled by NVRTC"
        }
    ));
    launcher::single(&GpuRig { gpu, dev }, w, k, obs, not_applicable, started)
}

/// GPUs and their accounting devices, index for index.
pub(super) type Gpus = (Vec<Arc<Gpu>>, Vec<Arc<Device>>);

/// GPUs 0..n with their memory accounting, for the multi-GPU strategies.
pub(super) fn open_gpus(w: &Workload, n: usize, tf32: bool) -> Result<Gpus> {
    let mut gpus = Vec::with_capacity(n);
    let mut devs = Vec::with_capacity(n);
    for r in 0..n {
        let dev = Device::cuda(r);
        gpus.push(Arc::new(Gpu::open(
            r,
            &w.cache_dir,
            tf32,
            Arc::clone(dev.mem()),
        )?));
        devs.push(dev);
    }
    Ok((gpus, devs))
}

/// The model on `gpu` from its description and seeded initial values (the CPU model's
/// bit for bit), with its parameter count.
pub(super) fn build_model(
    w: &Workload,
    k: &Knobs,
    classes: usize,
    gpu: &Arc<Gpu>,
) -> Result<(Model<GLayer>, usize, Vec<LayerDesc>)> {
    let init = Initial::of(w.model, classes, w.seed)?;
    let params = init.params.iter().map(|p| p.values.len()).sum();
    let descs = zoo::describe_with(w.model, classes, k.fuse);
    let glayers = model_cuda::from_desc(&descs, init, gpu)?;
    let model = Model::new(&w.model.to_string(), glayers, w.model.input(), classes);
    Ok((model, params, descs))
}

/// With `autotune`, `gpu`'s GEMMs time their candidates (reading the versioned cache
/// first); the choices, for the record.
pub(super) fn autotune_on(
    w: &Workload,
    k: &Knobs,
    gpu: &Gpu,
    obs: &mut dyn Observer,
) -> Result<Option<Arc<Algos>>> {
    if !k.autotune {
        return Ok(None);
    }
    let a = w.autotune_algos(&format!("cuda:{}", gpu.name), obs)?;
    gpu.blas.autotune_with(Arc::clone(&a))?;
    if let Ok(d) = &gpu.dnn {
        d.autotune_with(Arc::clone(&a))?;
    }
    Ok(Some(a))
}

pub(super) fn has_conv(descs: &[LayerDesc]) -> bool {
    descs.iter().any(|d| d.holds("conv2d"))
}

/// Which conv2d path ran, for the trial record: first the path (cuDNN with its version,
/// or im2col + cuBLASLt and why), then, with autotune off, the algorithm cuDNN's heuristic
/// gave each shape and direction (with autotune on, those are among the autotune
/// choices), and each shape cuDNN could not run (im2col + cuBLASLt, and why). A record
/// never implies cuDNN ran where it did not.
pub(super) fn conv_path(gpu: &Gpu) -> Vec<AlgoChoice> {
    let (algo, mut rest) = match &gpu.dnn {
        Ok(d) => (
            format!(
                "cudnn {}.{}.{}",
                d.version / 10000,
                d.version / 100 % 100,
                d.version % 100
            ),
            d.choices(),
        ),
        Err(why) => (format!("im2col+cublasLt ({why})"), Vec::new()),
    };
    rest.insert(
        0,
        AlgoChoice {
            op: "conv2d".into(),
            key: "path".into(),
            algo,
            source: ChoiceSource::Heuristic,
            timings_ms: std::collections::BTreeMap::new(),
            late: false,
            eval: false,
        },
    );
    rest
}
