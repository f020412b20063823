//! The run vocabulary: what a run is asked to do (`Workload`), what it tells its
//! observer on the way (`StepEvent`), what it measured (`Measured`) and returns
//! (`RunSummary`), and where its batches come from (`Source`). Every backend, launcher
//! and strategy speaks these; nothing here runs a step.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::engine::amp::ScalerConfig;
use crate::engine::autotune::{AlgoChoice, Algos};
pub use crate::engine::clock::Phases;
use crate::engine::data::{self, Batch, ImageShape, Loader, LoaderConfig, Normalize};
pub use crate::engine::device::DeviceChoice;
use crate::engine::device::{Device, MemSnapshot};
pub use crate::engine::host::{default_cache_dir, default_threads};
use crate::engine::nn::zoo::ModelKind;
use crate::engine::optim::OptimKind;
use crate::engine::parallel::summary::{DeviceSummary, Imbalance};
use crate::error::Result;
use crate::knobs::Knobs;
use crate::stats::median;

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
    /// The workload's autotune cache (its `autotune_cache`, else `autotune.json` in its
    /// cache folder) for `device`, with the cache's note handed to `obs`: the one way
    /// every backend opens it.
    pub(crate) fn autotune_algos(
        &self,
        device: &str,
        obs: &mut dyn Observer,
    ) -> Result<Arc<Algos>> {
        let file = self
            .autotune_cache
            .clone()
            .unwrap_or_else(|| self.cache_dir.join("autotune.json"));
        let (a, note) = Algos::tuned(device, Some(file))?;
        if let Some(n) = note {
            obs.on_note(&n);
        }
        Ok(a)
    }

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
    /// A script's compile time beyond its steady step time, seconds (`compile` knob or
    /// the script's own torch.compile); None when nothing was compiled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compile_s: Option<f64>,
    /// What the PyTorch hooks said at run time (a script's torch.save redirected, a
    /// warm-up that never settled), in their words; for the engine's CPU backend, an
    /// `amp` that computes in f32 here (`gemm_amp::amp_cpu_notice`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notices: Vec<String>,
    /// Tokens in a step where a script's batch is integer token ids (`[B, T]`), the
    /// median over the steady steps; None for the engine and other batches (#31).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_per_step: Option<f64>,
    /// A script's steps had no batch the hooks could count (its model called through
    /// `.forward()` directly, no DataLoader): a sample is a step, and `samples_per_s` is
    /// steps/s, said so wherever it is shown (#31). Before, a sweep printed "0.9
    /// samples/s" where its watch had said "0.91 steps/s (batch size unknown)".
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub batch_unknown: bool,
    /// Each step's phases, index-aligned with `step_times`, where the steps' events
    /// carried them (a script's hooks); empty for the engine, whose summary keeps means.
    /// A sweep's trace.json nests them in their steps.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub step_phases: Vec<Phases>,
    /// Seconds a script spent evaluating its model between the steps (its validation
    /// passes, left out of `step_times`); None for the engine and a script that did not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eval_s: Option<f64>,
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
            compile_s: None,
            notices: match backend {
                "cpu" => crate::engine::ops::gemm_amp::amp_cpu_notice(k.amp)
                    .into_iter()
                    .collect(),
                _ => Vec::new(),
            },
            tokens_per_step: None,
            batch_unknown: false,
            step_phases: Vec::new(),
            eval_s: None,
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

/// The training data of a run, from which each device's batches are cut: the same for
/// every backend and strategy (one device takes rank 0 of 1).
pub(crate) struct Feed {
    pub classes: usize,
    pub norm: Normalize,
    pub test: Option<Arc<dyn data::Dataset>>,
    kind: FeedKind,
}

enum FeedKind {
    /// The global synthetic batch; each rank takes its rows.
    Synthetic(Batch),
    Dataset(Arc<dyn data::Dataset>),
}

impl Feed {
    pub(crate) fn open(w: &Workload, k: &Knobs) -> Result<Feed> {
        let [h, wd, c] = w.model.input();
        let want = ImageShape { h, w: wd, c };
        let norm = data::default_normalize(want);
        if w.dataset == "synthetic" {
            let classes = 10;
            return Ok(Feed {
                classes,
                norm,
                test: None,
                kind: FeedKind::Synthetic(synthetic_batch(want, k.batch_size, classes, w.seed)),
            });
        }
        let splits = data::open(&w.dataset, want, &w.cache_dir)?;
        Ok(Feed {
            classes: splits.train.num_classes(),
            norm,
            test: Some(splits.test),
            kind: FeedKind::Dataset(splits.train),
        })
    }

    /// Batches of `batch` samples for `rank` of `world`: a DistributedSampler shard of
    /// the dataset, or this rank's rows of the synthetic batch.
    pub(crate) fn source(
        &self,
        w: &Workload,
        k: &Knobs,
        rank: usize,
        world: usize,
        batch: usize,
    ) -> Result<Source> {
        match &self.kind {
            FeedKind::Synthetic(g) => {
                let len = g.shape.len();
                let rows = rank * batch..(rank + 1) * batch;
                Ok(Source::Fixed(Batch {
                    x: g.x[rows.start * len..rows.end * len].to_vec(),
                    y: g.y[rows.clone()].to_vec(),
                    n: batch,
                    shape: g.shape,
                    epoch: g.epoch,
                    index: g.index,
                }))
            }
            FeedKind::Dataset(train) => Ok(Source::Loader(Loader::new(
                Arc::clone(train),
                self.norm.clone(),
                LoaderConfig {
                    batch_size: batch,
                    num_workers: k.num_workers,
                    prefetch: 2,
                    seed: w.seed,
                    shuffle: true,
                    augment: true,
                    drop_last: true,
                    rank,
                    world_size: world,
                },
            )?)),
        }
    }
}
