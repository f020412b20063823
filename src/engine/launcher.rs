//! The one launcher. Every device that trains, whatever its backend and strategy, runs
//! one body, [`device`]: [`prepare`] (the model, the loss scaler, autotune's choices, the
//! executor), its [`GradSync`] around the one loop (`step::train_with`), then the memory
//! figures and, on the lead device, [`finish`] (evaluation, the algorithm choices),
//! handing back a [`Lead`]. What differs per backend is a [`Rig`] (`cpu::CpuRig`,
//! `cuda::train::GpuRig`); what differs per strategy is its `GradSync`: its setup on the
//! prepared device, its per-step hooks (`step::Strategy`) and its teardown:
//!
//! - [`single`]: one device of any backend with `Local`, on the caller's thread;
//! - `parallel::{dp, ddp}` (CPU) and `cuda::{dp, ddp}`: one thread per device or rank
//!   ([`spread`]), each running [`device`] with its strategy, the step reports merged by
//!   `parallel::collect` and summarised by `parallel::run_summary`, one path for both
//!   backends.

use std::sync::Arc;
use std::thread::{Scope, ScopedJoinHandle};
use std::time::Instant;

use crate::engine::amp::GradScaler;
use crate::engine::autotune::{AlgoChoice, Algos, ChoiceSource};
use crate::engine::collective::is_peer_stop;
use crate::engine::device::{Device, MemSnapshot};
use crate::engine::nn::model::{LayerOps, Model};
use crate::engine::parallel::summary::single_device_summary;
use crate::engine::step::{self, Exec, Local, Strategy, Trained};
use crate::engine::vocab::{Feed, Measured, Observer, RunSummary, Source, StepEvent, Workload};
use crate::error::{Error, Result};
use crate::knobs::Knobs;

/// What a backend contributes to a device's setup.
pub(crate) trait Rig {
    type E: Exec;
    /// The memory accounting the run's figures are read from.
    fn device(&self) -> &Arc<Device>;
    /// The backend as the summary names it (`cpu`, `cuda (NAME)`).
    fn label(&self) -> String;
    /// The model from the zoo and the seeded initial values (bit for bit the same on
    /// every backend), its layers fused as `k.fuse` says, with its parameter count.
    fn model(
        &self,
        w: &Workload,
        k: &Knobs,
        classes: usize,
    ) -> Result<(Model<LayerOf<Self>>, usize)>;
    /// The algorithm table the device's kernels choose from under `k` (`None`: the
    /// backend's fixed heuristics, nothing to record); autotune's cache note to `obs`.
    fn algos(&self, w: &Workload, k: &Knobs, obs: &mut dyn Observer) -> Result<Option<Arc<Algos>>>;
    /// The executor of the loop; `scale` is the loss scaler's start (1 without one).
    fn exec(
        &self,
        w: &Workload,
        k: &Knobs,
        classes: usize,
        algos: Option<&Arc<Algos>>,
        scale: f32,
    ) -> Result<Self::E>;
    /// Right before the loop's first step.
    fn before_loop(&self) {}
    /// Choices the backend made besides autotune's, for the record (CUDA: the conv path).
    fn path(&self, _w: &Workload, _classes: usize) -> Vec<AlgoChoice> {
        Vec::new()
    }
}

/// A rig's layer type.
pub(crate) type LayerOf<R> = <<R as Rig>::E as Exec>::L;

/// A device ready for the loop.
pub(crate) struct Prepared<R: Rig> {
    pub model: Model<LayerOf<R>>,
    pub exec: R::E,
    pub scaler: Option<GradScaler>,
    pub algos: Option<Arc<Algos>>,
    pub params: usize,
    /// How many algorithm decisions the first two training steps needed: later ones
    /// while training were for shapes they did not have (see `AlgoChoice::late`).
    pub early_keys: Option<usize>,
}

impl<R: Rig> Prepared<R> {
    /// The scaler's scale after the run, when loss scaling is on.
    pub(crate) fn loss_scale(&self) -> Option<f32> {
        self.scaler.as_ref().map(GradScaler::scale)
    }
}

/// The one setup path: model, loss scaler, autotune, executor, in that order on every
/// backend and strategy.
fn prepare<R: Rig>(
    rig: &R,
    w: &Workload,
    k: &Knobs,
    classes: usize,
    obs: &mut dyn Observer,
) -> Result<Prepared<R>> {
    let (model, params) = rig.model(w, k, classes)?;
    let scaler = w
        .scaler
        .active_for(k.amp)
        .then(|| GradScaler::new(w.scaler));
    let algos = rig.algos(w, k, obs)?;
    let exec = rig.exec(
        w,
        k,
        classes,
        algos.as_ref(),
        scaler.as_ref().map_or(1.0, GradScaler::scale),
    )?;
    Ok(Prepared {
        model,
        exec,
        scaler,
        algos,
        params,
        early_keys: None,
    })
}

/// How a device keeps its replica in step with its peers, for the whole of its run:
/// the strategy's setup on the prepared device (DDP: rank 0's parameters everywhere, the
/// gradient buckets, the communication thread or stream), its per-step hooks (the
/// `step::Strategy` it hands to [`Looper::run`]) and its teardown (hanging up on DP's
/// replicas, joining DDP's communication thread, draining its stream), whatever the
/// loop returned. `Local` is one device's: nothing around the loop.
pub(crate) trait GradSync<R: Rig> {
    /// What the strategy hands back besides the loop's result (DDP: its trace).
    type Out;
    fn around(self, p: &mut Prepared<R>, l: Looper<'_, R>) -> Result<Synced<Self::Out>>;
}

/// What a [`GradSync`] hands back.
pub(crate) struct Synced<O> {
    pub trained: Trained,
    /// Whether SyncBatchNorm had a batch norm to act on (read only under `sync_bn`).
    pub has_batch_norm: bool,
    pub out: O,
}

impl<O> Synced<O> {
    pub(crate) fn new(trained: Trained, has_batch_norm: bool, out: O) -> Synced<O> {
        Synced {
            trained,
            has_batch_norm,
            out,
        }
    }
}

impl<R: Rig> GradSync<R> for Local {
    type Out = ();
    fn around(mut self, p: &mut Prepared<R>, l: Looper<'_, R>) -> Result<Synced<()>> {
        Ok(Synced::new(l.run(p, &mut self)?, false, ()))
    }
}

/// The one loop of one device, handed to its [`GradSync`], which runs it once with its
/// strategy.
pub(crate) struct Looper<'a, R: Rig> {
    rig: &'a R,
    source: &'a mut Source,
    w: &'a Workload,
    k: &'a Knobs,
    obs: &'a mut dyn Observer,
    started: Instant,
}

impl<R: Rig> Looper<'_, R> {
    /// `step::train_with` under `strategy`, the same on every backend and strategy.
    pub(crate) fn run<S: Strategy<R::E>>(
        self,
        p: &mut Prepared<R>,
        strategy: &mut S,
    ) -> Result<Trained> {
        self.rig.before_loop();
        let algos = p.algos.clone();
        let mut obs = EarlySteps {
            inner: self.obs,
            algos: algos.as_deref(),
            steps: 0,
            keys: None,
        };
        let trained = step::train_with(
            &mut p.exec,
            strategy,
            &mut p.model,
            self.source,
            self.w,
            self.k,
            &mut p.scaler,
            &mut obs,
            self.started,
        );
        p.early_keys = obs.keys;
        trained
    }
}

/// Passes everything on, and counts the algorithm decisions made by the end of the second
/// step. A strategy that reports its steps elsewhere (a DDP rank to its launcher) leaves
/// the count unset: then no decision is marked late.
struct EarlySteps<'a> {
    inner: &'a mut dyn Observer,
    algos: Option<&'a Algos>,
    steps: usize,
    keys: Option<usize>,
}

impl Observer for EarlySteps<'_> {
    fn on_note(&mut self, note: &str) {
        self.inner.on_note(note);
    }
    fn on_step(&mut self, ev: &StepEvent) {
        self.steps += 1;
        if self.steps == 2 {
            self.keys = self.algos.map(Algos::decided);
        }
        self.inner.on_step(ev);
    }
    fn on_devices(&mut self, devices: &[Arc<Device>]) {
        self.inner.on_devices(devices);
    }
}

/// How a device's run ended, on every backend and strategy. Accuracy and choices only
/// on the lead device (the only one, DP's device 0, DDP's first rank of the process).
pub(crate) struct Lead {
    pub params: usize,
    /// Memory right after training: evaluation's bigger batches must not count.
    pub snap: MemSnapshot,
    pub accuracy: Option<f64>,
    /// Autotune's choices (its cache saved) and the backend's path choices.
    pub algorithms: Vec<AlgoChoice>,
    /// Whether SyncBatchNorm had a batch norm to act on (read only under `sync_bn`).
    pub has_batch_norm: bool,
    /// The loss scaler's skipped steps and final scale (the same on every rank: each
    /// checks the averaged gradients).
    pub skipped_steps: Vec<usize>,
    pub loss_scale: Option<f32>,
}

/// What [`device`] hands back: the device's end, what its loop measured (a single
/// device's run is summarised from it; several devices report each step instead), and
/// what its strategy handed back.
pub(crate) struct Ran<O> {
    pub lead: Lead,
    pub measured: Measured,
    pub out: O,
}

/// What a device trains on: its data (a shard per rank), the run's classes, and, on the
/// lead device (the only one, DP's device 0, DDP's first rank of the process), the run's
/// data, for evaluation.
pub(crate) struct Work<'a> {
    pub source: Source,
    pub classes: usize,
    pub lead: Option<&'a Feed>,
}

/// The one body of a device that trains, on every backend and strategy: single, DP's
/// driver, each DDP rank (in threads or processes). [`prepare`], the strategy around the
/// one loop, the memory figures, then [`finish`] on the lead device.
pub(crate) fn device<R: Rig, G: GradSync<R>>(
    rig: &R,
    sync: G,
    work: Work<'_>,
    (w, k): (&Workload, &Knobs),
    obs: &mut dyn Observer,
    started: Instant,
) -> Result<Ran<G::Out>> {
    let Work {
        mut source,
        classes,
        lead,
    } = work;
    let mut p = prepare(rig, w, k, classes, obs)?;
    let l = Looper {
        rig,
        source: &mut source,
        w,
        k,
        obs: &mut *obs,
        started,
    };
    let synced = sync.around(&mut p, l)?;
    // The loader's threads end before evaluation.
    drop(source);
    note_layer_times(&p.model, w.steps, obs);
    let snap = rig.device().mem().snapshot();
    let (accuracy, algorithms) = match lead {
        Some(feed) => finish(rig, &mut p, w, classes, feed)?,
        None => (None, Vec::new()),
    };
    Ok(Ran {
        lead: Lead {
            params: p.params,
            snap,
            accuracy,
            algorithms,
            has_batch_norm: synced.has_batch_norm,
            skipped_steps: synced.trained.skipped_steps,
            loss_scale: p.loss_scale(),
        },
        measured: synced.trained.measured,
        out: synced.out,
    })
}

/// On the lead device: held-out accuracy on `feed`'s test set and the choices
/// (autotune's cache saved once, the backend's path).
fn finish<R: Rig>(
    rig: &R,
    p: &mut Prepared<R>,
    w: &Workload,
    classes: usize,
    feed: &Feed,
) -> Result<(Option<f64>, Vec<AlgoChoice>)> {
    // Decisions logged from here on were first needed by the evaluation's batches.
    let trained = p.algos.as_ref().map(|a| a.decided());
    let accuracy = match (&feed.test, w.eval) {
        (Some(test), true) => Some(step::evaluate(
            &mut p.exec,
            &mut p.model,
            Arc::clone(test),
            &feed.norm,
        )?),
        _ => None,
    };
    let mut algorithms = Vec::new();
    if let Some(a) = &p.algos {
        a.save()?;
        algorithms = a.choices();
        let (first, trained) = (p.early_keys, trained.unwrap_or(0));
        for (i, c) in algorithms.iter_mut().enumerate() {
            c.eval = i >= trained;
            c.late = !c.eval && first.is_some_and(|f| i >= f);
        }
    }
    algorithms.extend(rig.path(w, classes));
    Ok((accuracy, algorithms))
}

/// A run on one device of any backend: the data, [`device`] with `Local`, the summary.
/// The caller has admitted the knobs and opened the device.
pub(crate) fn single<R: Rig>(
    rig: &R,
    w: &Workload,
    k: &Knobs,
    obs: &mut dyn Observer,
    not_applicable: std::collections::BTreeMap<String, String>,
    started: Instant,
) -> Result<RunSummary> {
    obs.on_devices(std::slice::from_ref(rig.device()));
    let feed = Feed::open(w, k)?;
    let work = Work {
        source: feed.source(w, k, 0, 1, k.batch_size)?,
        classes: feed.classes,
        lead: Some(&feed),
    };
    let Ran {
        lead, measured: m, ..
    } = device(rig, Local, work, (w, k), obs, started)?;
    note_choices(obs, &lead.algorithms);
    let busy_wall = m.after_warmup(w.warmup).iter().sum();
    let (devices, imbalance) =
        single_device_summary(rig.device().threads, &m.phase_sum, busy_wall, &lead.snap);
    Ok(RunSummary {
        accuracy: lead.accuracy,
        not_applicable,
        skipped_steps: lead.skipped_steps,
        loss_scale_final: lead.loss_scale,
        algorithms: lead.algorithms,
        ..RunSummary::from_measured(
            w,
            k,
            &rig.label(),
            lead.params,
            m,
            &lead.snap,
            devices,
            imbalance,
        )
    })
}

/// One device thread of a multi-device run: the thread's name and what it runs (DP's
/// driver or a replica, a DDP rank).
pub(crate) type DeviceThread<'env, T> = (String, Box<dyn FnOnce() -> Result<T> + Send + 'env>);

/// The multi-device launch, the same for every backend and strategy: one thread per
/// device in one scope; meanwhile the caller's thread turns the devices' step reports
/// into the run's events (`reports`, given the scope: `parallel::collect`, or
/// `parallel::dist::route`, which starts its readers there, across processes); then every
/// device thread is joined, in order. A thread that could not start explains the run
/// first (the others see its channels hang up), then the first device's own error, then
/// a peer's "someone else stopped".
pub(crate) fn spread<'env, T: Send + 'env, C>(
    devices: Vec<DeviceThread<'env, T>>,
    reports: impl for<'s> FnOnce(&'s Scope<'s, 'env>) -> C,
) -> (C, Result<Vec<T>>) {
    std::thread::scope(|s| {
        let mut hs = Vec::with_capacity(devices.len());
        let mut spawn_err = None;
        for (name, body) in devices {
            match std::thread::Builder::new()
                .name(name.clone())
                .spawn_scoped(s, body)
            {
                Ok(h) => hs.push((name, h)),
                Err(e) => {
                    spawn_err.get_or_insert(Error::Runtime(format!("cannot start {name}: {e}")));
                }
            }
        }
        let c = reports(s);
        let ends = first_error(
            hs.into_iter()
                .enumerate()
                .map(|(i, (name, h))| {
                    let r = h
                        .join()
                        .unwrap_or_else(|_| Err(Error::Runtime(format!("{name} panicked"))));
                    (i, Ok(r))
                })
                .collect(),
        );
        (c, spawn_err.map_or(ends, Err))
    })
}

/// The error that explains a failed run: a device's own error rather than a peer's
/// "someone else stopped", and a panic as an error.
pub(crate) fn first_error<T>(
    results: Vec<(usize, std::thread::Result<Result<T>>)>,
) -> Result<Vec<T>> {
    let mut oks = Vec::new();
    let mut primary: Option<Error> = None;
    let mut secondary: Option<Error> = None;
    for (i, r) in results {
        match r {
            Ok(Ok(v)) => oks.push(v),
            Ok(Err(e)) if is_peer_stop(&e) => {
                secondary.get_or_insert(e);
            }
            Ok(Err(e)) => {
                primary.get_or_insert(e);
            }
            Err(_) => {
                primary.get_or_insert(Error::Runtime(format!("device {i}'s thread panicked")));
            }
        }
    }
    match primary.or(secondary) {
        Some(e) => Err(e),
        None => Ok(oks),
    }
}

/// Joins device threads in index order.
pub(crate) fn join_all<T>(hs: Vec<ScopedJoinHandle<'_, Result<T>>>) -> Result<Vec<T>> {
    first_error(hs.into_iter().map(|h| h.join()).enumerate().collect())
}

/// One note per choice that was measured or read from autotune's cache, and the path.
pub(crate) fn note_choices(obs: &mut dyn Observer, choices: &[AlgoChoice]) {
    for c in choices {
        if c.key == "path" {
            obs.on_note(&format!("{} path: {}", c.op, c.algo));
        } else if c.source != ChoiceSource::Heuristic {
            obs.on_note(&format!(
                "autotune {} [{}]: {} ({:?})",
                c.op, c.key, c.algo, c.source
            ));
        }
    }
}

/// `TUNE_PROFILE_LAYERS`: each layer's time per step (host clock).
fn note_layer_times<L: LayerOps>(model: &Model<L>, steps: usize, obs: &mut dyn Observer) {
    let Some(lt) = &model.layer_times else { return };
    for (l, (f, b)) in model.layers.iter().zip(lt) {
        obs.on_note(&format!(
            "layer {:<28} forward {:8.2} ms/step  backward {:8.2} ms/step",
            l.name(),
            f * 1e3 / steps as f64,
            b * 1e3 / steps as f64
        ));
    }
}
