//! The step loop. Per step, in order: data, host-to-device, zero-grad, forward (with
//! checkpoint segments), loss, backward, optimizer. Every phase is timed and reported
//! through the `Observer`, which is the only way anything outside sees a run.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::engine::amp::{GradScaler, ScalerConfig};
use crate::engine::autotune::{AlgoChoice, Algos, ChoiceSource};
use crate::engine::caps::{self, Layout};
use crate::engine::data::{self, Batch, ImageShape, Loader, LoaderConfig};
use crate::engine::device::{Backend, Device, MemCategory, MemSnapshot};
use crate::engine::nn::layer::{Ctx, Layer};
use crate::engine::nn::model::Model;
use crate::engine::nn::zoo::{self, ModelKind};
use crate::engine::ops::loss::softmax_cross_entropy;
use crate::engine::optim::{OptimConfig, OptimKind, Optimizer};
use crate::engine::parallel::{self, DeviceSummary, Imbalance};
use crate::engine::step::{self, Exec, HostClock};
use crate::engine::tensor::Tensor;
use crate::error::{Error, Result};
use crate::knobs::{Amp, Knobs};
use crate::stats::median;

/// Which device a run asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceChoice {
    Cpu,
    Cuda,
    Auto,
}

impl std::str::FromStr for DeviceChoice {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim() {
            "cpu" => Ok(DeviceChoice::Cpu),
            "cuda" => Ok(DeviceChoice::Cuda),
            "auto" => Ok(DeviceChoice::Auto),
            o => Err(Error::Invalid(format!(
                "invalid device '{o}': allowed values are cpu, cuda, auto"
            ))),
        }
    }
}

/// What to train, independent of the knobs.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Workload {
    pub model: ModelKind,
    /// Dataset spec (`shapes`, `shapes:N`, `mnist:DIR`, `cifar10:DIR`) or `synthetic`
    /// (one fixed random batch in memory: pure engine speed, no loader).
    pub dataset: String,
    pub steps: usize,
    /// Steps excluded from throughput figures.
    pub warmup: usize,
    pub lr: f32,
    pub optimizer: OptimKind,
    pub seed: u64,
    /// Compute threads (GEMM and op kernels).
    pub threads: usize,
    /// Measure held-out accuracy after training.
    pub eval: bool,
    pub cache_dir: PathBuf,
    pub device: DeviceChoice,
    /// Dynamic loss scaling under mixed precision.
    #[serde(default)]
    pub scaler: ScalerConfig,
    /// Autotuning's disk cache (default: `autotune.json` in `cache_dir`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autotune_cache: Option<PathBuf>,
    /// Fault injection for tests: poisons one gradient with +inf after this step's
    /// backward, as a real fp16 overflow would.
    #[serde(skip)]
    pub inject_overflow_at: Option<usize>,
    /// This process's rank in a multi-process DDP job (torchrun/srun's environment,
    /// read by `tune train`); `None` for one process.
    #[serde(skip)]
    pub launch: Option<crate::engine::parallel::launch::Launch>,
}

impl Workload {
    pub fn new(model: ModelKind, dataset: &str) -> Workload {
        Workload {
            model,
            dataset: dataset.into(),
            steps: 200,
            warmup: 5,
            lr: 0.05,
            optimizer: OptimKind::Sgd,
            seed: 0,
            threads: default_threads(),
            eval: true,
            cache_dir: default_cache_dir(),
            device: DeviceChoice::Cpu,
            scaler: ScalerConfig::default(),
            autotune_cache: None,
            inject_overflow_at: None,
            launch: None,
        }
    }
}

pub fn default_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// `$TUNE_CACHE_DIR`, else `$XDG_CACHE_HOME/tune`, else `~/.cache/tune`, else a temp dir.
pub fn default_cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("TUNE_CACHE_DIR") {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("tune");
    }
    if let Some(h) = std::env::var_os("HOME") {
        return PathBuf::from(h).join(".cache").join("tune");
    }
    std::env::temp_dir().join("tune-cache")
}

/// Seconds spent in each phase of one step (summed over micro-batches).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Phases {
    pub data_wait: f64,
    pub h2d: f64,
    pub zero_grad: f64,
    pub forward: f64,
    pub backward: f64,
    /// Part of `backward` spent recomputing checkpointed segments.
    pub recompute: f64,
    pub comm: f64,
    pub optimizer: f64,
}

impl Phases {
    pub const NAMES: [&'static str; 8] = [
        "data_wait",
        "h2d",
        "zero_grad",
        "forward",
        "backward",
        "recompute",
        "comm",
        "optimizer",
    ];

    pub fn get(&self, name: &str) -> f64 {
        match name {
            "data_wait" => self.data_wait,
            "h2d" => self.h2d,
            "zero_grad" => self.zero_grad,
            "forward" => self.forward,
            "backward" => self.backward,
            "recompute" => self.recompute,
            "comm" => self.comm,
            "optimizer" => self.optimizer,
            _ => 0.0,
        }
    }

    pub(crate) fn add(&mut self, o: &Phases) {
        self.data_wait += o.data_wait;
        self.h2d += o.h2d;
        self.zero_grad += o.zero_grad;
        self.forward += o.forward;
        self.backward += o.backward;
        self.recompute += o.recompute;
        self.comm += o.comm;
        self.optimizer += o.optimizer;
    }

    pub(crate) fn scaled(&self, f: f64) -> Phases {
        Phases {
            data_wait: self.data_wait * f,
            h2d: self.h2d * f,
            zero_grad: self.zero_grad * f,
            forward: self.forward * f,
            backward: self.backward * f,
            recompute: self.recompute * f,
            comm: self.comm * f,
            optimizer: self.optimizer * f,
        }
    }
}

/// One finished optimizer step.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StepEvent {
    pub step: usize,
    pub steps: usize,
    pub loss: f32,
    pub samples: usize,
    pub step_s: f64,
    pub phases: Phases,
    /// Bytes per category right after the step (gradients held between steps show here).
    pub mem_after: MemSnapshot,
    /// The loss scale this step ran with (fp16 loss scaling), if scaling is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_scale: Option<f32>,
    /// The optimizer step was skipped because a gradient overflowed.
    #[serde(default)]
    pub skipped: bool,
}

/// Receives the run's events. The CLI progress line, trial records and the TUI are all
/// observers.
pub trait Observer: Send {
    fn on_note(&mut self, _note: &str) {}
    fn on_step(&mut self, _ev: &StepEvent) {}
    /// The run's devices, once, before the first step: lets a sampler read their
    /// memory trackers between steps (`engine::probe`).
    fn on_devices(&mut self, _devices: &[Arc<Device>]) {}
}

/// An observer that ignores everything.
pub struct NoObserver;
impl Observer for NoObserver {}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RunSummary {
    pub model: String,
    pub dataset: String,
    pub knobs: Knobs,
    pub threads: usize,
    pub backend: String,
    pub params: usize,
    pub steps: usize,
    pub warmup: usize,
    pub samples_per_step: usize,
    /// Median throughput over the steps after warm-up.
    pub samples_per_s: f64,
    pub step_ms_median: f64,
    /// Wall time of every step, seconds.
    pub step_times: Vec<f64>,
    pub losses: Vec<f32>,
    pub final_loss: f32,
    /// Held-out accuracy in [0, 1], when evaluated.
    pub accuracy: Option<f64>,
    /// Mean seconds per step in each phase, after warm-up.
    pub phases_mean: Phases,
    pub peak_bytes: BTreeMap<String, u64>,
    pub peak_total_bytes: u64,
    /// Gradient bytes held between steps (after the optimizer), last step.
    pub grad_bytes_between_steps: u64,
    /// Knobs that do not apply on this backend, with the reason (never faked).
    pub not_applicable: BTreeMap<String, String>,
    pub wall_s: f64,
    /// Steps whose optimizer update the loss scaler skipped (gradient overflow).
    #[serde(default)]
    pub skipped_steps: Vec<usize>,
    /// The loss scale after the last step, when loss scaling is on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_scale_final: Option<f32>,
    /// The algorithm each (op, shape, dtype) key ran with, and how it was chosen.
    #[serde(default)]
    pub algorithms: Vec<AlgoChoice>,
    /// Per device over the measured steps: busy fraction, peak bytes, time in
    /// communication. With several devices, `peak_bytes` and `peak_total_bytes` above
    /// are those of the device with the highest peak.
    #[serde(default)]
    pub devices: Vec<DeviceSummary>,
    /// max/mean over the devices of busy fraction and of peak bytes.
    #[serde(default)]
    pub imbalance: Option<Imbalance>,
    /// A script's (`[workload.python]`) explicit settings that tune replaced for the
    /// trial, in words: applied, so never "not applicable".
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub overrides: BTreeMap<String, String>,
    /// What a script does by itself for a knob (its own argument or PyTorch's default),
    /// read by the hooks.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub script_knobs: BTreeMap<String, String>,
}

/// What a step loop measured. Every backend's summary is built from it the same way
/// (`RunSummary::from_measured`), so throughput and phase figures mean one thing.
pub(crate) struct Measured {
    pub step_times: Vec<f64>,
    pub losses: Vec<f32>,
    /// Phases summed over the steps after warm-up.
    pub phase_sum: Phases,
    pub grad_between: u64,
    pub started: Instant,
}

impl Measured {
    /// Step times after warm-up (all of them when the run is no longer than warm-up).
    pub(crate) fn after_warmup(&self, warmup: usize) -> &[f64] {
        self.step_times
            .get(warmup..)
            .filter(|s| !s.is_empty())
            .unwrap_or(&self.step_times)
    }
}

impl RunSummary {
    /// The fields every backend fills alike; the caller adds accuracy, notes and its
    /// backend's extras with struct update syntax. `peak` is the memory snapshot the
    /// peaks are reported from (the highest device's under multi-device).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn from_measured(
        w: &Workload,
        k: &Knobs,
        backend: &str,
        params: usize,
        m: Measured,
        peak: &MemSnapshot,
        devices: Vec<DeviceSummary>,
        imbalance: Imbalance,
    ) -> RunSummary {
        let measured = m.after_warmup(w.warmup);
        let med = median(measured);
        let phases_mean = m.phase_sum.scaled(1.0 / measured.len().max(1) as f64);
        let samples_per_step = k.batch_size * k.grad_accum;
        RunSummary {
            model: w.model.to_string(),
            dataset: w.dataset.clone(),
            knobs: k.clone(),
            threads: w.threads,
            backend: backend.into(),
            params,
            steps: w.steps,
            warmup: w.warmup,
            samples_per_step,
            samples_per_s: samples_per_step as f64 / med,
            step_ms_median: med * 1e3,
            final_loss: m.losses.last().copied().unwrap_or(f32::NAN),
            losses: m.losses,
            accuracy: None,
            phases_mean,
            peak_bytes: peak.peak.clone(),
            peak_total_bytes: peak.total_peak,
            grad_bytes_between_steps: m.grad_between,
            not_applicable: BTreeMap::new(),
            step_times: m.step_times,
            wall_s: m.started.elapsed().as_secs_f64(),
            skipped_steps: Vec::new(),
            loss_scale_final: None,
            algorithms: Vec::new(),
            devices,
            imbalance: Some(imbalance),
            overrides: BTreeMap::new(),
            script_knobs: BTreeMap::new(),
        }
    }
}

/// Where batches come from.
pub(crate) enum Source {
    Loader(Loader),
    /// One fixed batch, reused every step (the peers' benchmark protocol).
    Fixed(Batch),
}

impl Source {
    pub(crate) fn next(&mut self) -> Result<Batch> {
        match self {
            Source::Loader(l) => l.next_batch(),
            Source::Fixed(b) => Ok(b.clone()),
        }
    }
}

pub(crate) fn synthetic_batch(shape: ImageShape, n: usize, classes: usize, seed: u64) -> Batch {
    let mut rng = data::Rng::from_keys(&[seed, 0x5359_4e54]);
    Batch {
        x: (0..n * shape.len()).map(|_| rng.normal()).collect(),
        y: (0..n).map(|_| rng.below(classes) as u32).collect(),
        n,
        shape,
        epoch: 0,
        index: 0,
    }
}

/// Where a run's batches come from, its held-out set, class count and normalisation:
/// the same for every backend.
pub(crate) type Opened = (
    Source,
    Option<Arc<dyn data::Dataset>>,
    usize,
    data::Normalize,
);

pub(crate) fn open_source(w: &Workload, k: &Knobs, want: ImageShape) -> Result<Opened> {
    if w.dataset == "synthetic" {
        let classes = 10;
        let b = synthetic_batch(want, k.batch_size, classes, w.seed);
        Ok((
            Source::Fixed(b),
            None,
            classes,
            data::default_normalize(want),
        ))
    } else {
        let splits = data::open(&w.dataset, want, &w.cache_dir)?;
        let classes = splits.train.num_classes();
        let norm = data::default_normalize(want);
        let loader = Loader::new(
            Arc::clone(&splits.train),
            norm.clone(),
            LoaderConfig {
                batch_size: k.batch_size,
                num_workers: k.num_workers,
                prefetch: 2,
                seed: w.seed,
                shuffle: true,
                augment: true,
                drop_last: true,
                rank: 0,
                world_size: 1,
            },
        )?;
        Ok((Source::Loader(loader), Some(splits.test), classes, norm))
    }
}

/// Trains `w` under `k`, reporting each step to `obs`.
pub fn run(w: &Workload, k: &Knobs, obs: &mut dyn Observer) -> Result<RunSummary> {
    k.validate()?;
    if w.steps == 0 {
        return Err(Error::Invalid("invalid steps 0: must be at least 1".into()));
    }
    if w.threads == 0 {
        return Err(Error::Invalid(
            "invalid threads 0: must be at least 1".into(),
        ));
    }
    w.scaler.validate()?;
    match w.device {
        DeviceChoice::Cuda => return crate::engine::cuda::train::run(w, k, obs),
        DeviceChoice::Auto => match crate::engine::cuda::usable() {
            Ok(name) => {
                obs.on_note(&format!("device auto: CUDA backend ({name})"));
                return crate::engine::cuda::train::run(w, k, obs);
            }
            Err(why) => obs.on_note(&format!("device auto: CPU backend ({why})")),
        },
        DeviceChoice::Cpu => {}
    }
    if parallel::is_multi_device(k) {
        return parallel::run(w, k, obs);
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(w.threads)
        .build()
        .map_err(|e| Error::Runtime(format!("cannot start {} compute threads: {e}", w.threads)))?;
    pool.install(|| run_inner(w, k, obs))
}

/// The CPU backend of the step loop: the model computes where the loader left the
/// batch, on this thread's rayon pool, timed by the host clock.
pub(crate) struct CpuExec {
    pub(crate) ctx: Ctx,
    pub(crate) dev: Arc<Device>,
    pub(crate) opt: Optimizer,
    pub(crate) classes: usize,
}

impl Exec for CpuExec {
    type L = Box<dyn Layer>;
    type Clock = HostClock;
    type Labels = Vec<u32>;
    type Loss = f32;

    fn ctx(&self) -> &Ctx {
        &self.ctx
    }

    fn clock(&self) -> HostClock {
        HostClock::default()
    }

    fn phases(&self, clock: HostClock) -> Result<Phases> {
        Ok(clock.phases())
    }

    fn zero_grads(&mut self, model: &mut Model) -> Result<()> {
        let mut res = Ok(());
        model.visit_params(&mut |p| {
            if let Some(g) = &mut p.g {
                match g.f32_mut() {
                    Ok(d) => d.fill(0.0),
                    Err(e) => res = Err(e),
                }
            }
        });
        res
    }

    fn upload(&mut self, batch: Batch) -> Result<(Tensor, Vec<u32>)> {
        // Taking ownership of the loader's buffer is the whole "transfer".
        let x = Tensor::from_vec(
            &[batch.n, batch.shape.h, batch.shape.w, batch.shape.c],
            batch.x,
            MemCategory::Activations,
            self.dev.mem(),
        )?;
        Ok((x, batch.y))
    }

    fn loss(&mut self, logits: Tensor, labels: &Vec<u32>, scale: f32) -> Result<(f32, Tensor)> {
        let logits = logits.into_f32()?;
        let mut dlogits = self.ctx.alloc(logits.shape());
        let (loss, _) = softmax_cross_entropy(
            logits.f32()?,
            labels,
            self.classes,
            scale,
            Some(dlogits.f32_mut()?),
        )?;
        drop(logits);
        Ok((loss, self.ctx.store(dlogits)?))
    }

    fn diverged_now(&self, loss: &f32) -> Option<f32> {
        (!loss.is_finite()).then_some(*loss)
    }

    fn grads_finite(&mut self, model: &mut Model) -> Result<bool> {
        grads_finite(model)
    }

    fn poison_one_grad(&mut self, model: &mut Model) -> Result<()> {
        poison_one_grad(model)
    }

    fn update(&mut self, model: &mut Model, loss_scale: f32) -> Result<()> {
        self.opt.begin_step();
        let mut idx = 0;
        let mut res = Ok(());
        model.visit_params(&mut |p| {
            if res.is_ok() {
                res = self.opt.update(idx, p, loss_scale);
            }
            idx += 1;
        });
        res
    }

    fn release_grads(&mut self, model: &mut Model) {
        model.visit_params(&mut |p| p.g = None);
    }

    fn read_loss(&mut self, losses: Vec<f32>, accum: usize) -> Result<f32> {
        Ok(losses
            .into_iter()
            .fold(0.0f32, |sum, l| sum + l / accum as f32))
    }

    fn mem(&self) -> MemSnapshot {
        self.dev.mem().snapshot()
    }

    fn eval_ctx(&self) -> Ctx {
        Ctx {
            amp: self.ctx.amp,
            ..Ctx::eval(&self.dev)
        }
    }

    fn correct(&mut self, logits: Tensor, labels: &Vec<u32>) -> Result<usize> {
        let logits = logits.into_f32()?;
        let (_, c) = softmax_cross_entropy(logits.f32()?, labels, self.classes, 1.0, None)?;
        Ok(c)
    }
}

fn run_inner(w: &Workload, k: &Knobs, obs: &mut dyn Observer) -> Result<RunSummary> {
    let started = Instant::now();
    let dev = Device::cpu(0, w.threads);
    obs.on_devices(std::slice::from_ref(&dev));
    let [h, wd, c] = w.model.input();
    let want = ImageShape { h, w: wd, c };
    let not_applicable = caps::admit(Backend::Cpu, k, Layout::Single, obs)?;
    let (mut source, test, classes, norm) = open_source(w, k, want)?;

    let mut model = zoo::build(w.model, classes, w.seed, &dev)?;
    let params = model.num_params();
    if std::env::var_os("TUNE_PROFILE_LAYERS").is_some() {
        model.enable_layer_times();
    }
    let opt = Optimizer::new(OptimConfig::of(w.optimizer, w.lr)?)?;
    let algos = if k.autotune {
        Algos::for_workload(w, &format!("cpu:{}t", w.threads), obs)?
    } else {
        Algos::heuristic()
    };
    let ctx = Ctx {
        amp: k.amp,
        algos: Arc::clone(&algos),
        ..Ctx::train(&dev)
    };
    let mut scaler = w
        .scaler
        .active_for(k.amp)
        .then(|| GradScaler::new(w.scaler));
    let mut exec = CpuExec {
        ctx,
        dev: Arc::clone(&dev),
        opt,
        classes,
    };
    let trained = step::train(
        &mut exec,
        &mut model,
        &mut source,
        w,
        k,
        &mut scaler,
        obs,
        started,
    )?;
    drop(source);
    if let Some(lt) = &model.layer_times {
        for (l, (f, b)) in model.layers.iter().zip(lt) {
            obs.on_note(&format!(
                "layer {:<28} forward {:8.2} ms/step  backward {:8.2} ms/step",
                l.name(),
                f * 1e3 / w.steps as f64,
                b * 1e3 / w.steps as f64
            ));
        }
    }

    algos.save()?;
    let algorithms = algos.choices();
    for c in algorithms
        .iter()
        .filter(|c| c.source != ChoiceSource::Heuristic)
    {
        obs.on_note(&format!(
            "autotune {} [{}]: {} ({:?})",
            c.op, c.key, c.algo, c.source
        ));
    }

    // Memory figures describe training; evaluation's bigger batches must not count.
    let snap = dev.mem().snapshot();
    let accuracy = match (&test, w.eval) {
        (Some(test), true) => Some(step::evaluate(
            &mut exec,
            &mut model,
            Arc::clone(test),
            &norm,
        )?),
        _ => None,
    };
    let m = trained.measured;
    let busy_wall = m.after_warmup(w.warmup).iter().sum();
    let (devices, imbalance) =
        parallel::single_device_summary(w.threads, &m.phase_sum, busy_wall, &snap);
    Ok(RunSummary {
        accuracy,
        not_applicable,
        skipped_steps: trained.skipped_steps,
        loss_scale_final: scaler.as_ref().map(GradScaler::scale),
        algorithms,
        ..RunSummary::from_measured(w, k, "cpu", params, m, &snap, devices, imbalance)
    })
}

/// True when every gradient is finite (the scaler's inf/nan check).
fn grads_finite(model: &mut Model) -> Result<bool> {
    let mut ok = true;
    let mut res = Ok(());
    model.visit_params(&mut |p| {
        if let (true, Some(g)) = (ok, &p.g) {
            match g.f32() {
                Ok(d) => ok = d.iter().all(|v| v.is_finite()),
                Err(e) => res = Err(e),
            }
        }
    });
    res.map(|()| ok)
}

fn poison_one_grad(model: &mut Model) -> Result<()> {
    let mut done = false;
    let mut res = Ok(());
    model.visit_params(&mut |p| {
        if done {
            return;
        }
        if let Some(g) = &mut p.g {
            match g.f32_mut() {
                Ok(d) if !d.is_empty() => {
                    d[0] = f32::INFINITY;
                    done = true;
                }
                Ok(_) => {}
                Err(e) => res = Err(e),
            }
        }
    });
    res
}

/// Held-out accuracy of a trained CPU model (the multi-device launcher's device 0),
/// through the one `step::evaluate`. Evaluation never steps the optimizer; `CpuExec`
/// carries one only because training does.
pub fn evaluate(
    model: &mut Model,
    test: Arc<dyn data::Dataset>,
    norm: &data::Normalize,
    dev: &Arc<Device>,
    classes: usize,
    amp: Amp,
) -> Result<f64> {
    let mut exec = CpuExec {
        ctx: Ctx {
            amp,
            ..Ctx::train(dev)
        },
        dev: Arc::clone(dev),
        opt: Optimizer::new(OptimConfig::sgd(0.01))?,
        classes,
    };
    step::evaluate(&mut exec, model, test, norm)
}
