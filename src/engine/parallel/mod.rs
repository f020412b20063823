//! Multi-device training: DataParallel (`dp`) and DistributedDataParallel (`ddp`) over N
//! devices. On the CPU backend a device is virtual: a thread with its own compute
//! threads (a rayon pool), its own memory arena (a `MemTracker`) and a busy/comm clock,
//! so per-device utilisation and peak memory are measurements of what each device did.
//!
//! Neither has a step loop of its own: both run the one loop (`step::train_with`) with a
//! `step::Strategy` that hooks the forward, the gradient-ready hook and the update.
//!
//! - `dp.rs`: device 0 drives every step as `nn.DataParallel` does (broadcast parameters,
//!   scatter the batch, gather outputs, loss, reduce gradients, optimizer), which is
//!   where DP's imbalance really comes from. The other devices are workers that run
//!   forward and backward on command.
//! - `ddp.rs`: every device is a rank with its own replica, data shard and optimizer,
//!   running the loop in its own thread; gradients are averaged in buckets (`bucket.rs`)
//!   that all-reduce on a communication thread while backward goes on.
//! - `collective.rs`: the CPU `Collective`s (the trait is `engine/collective.rs`): a ring
//!   over channels or TCP; the GPU backend's collectives are NCCL's, in `cuda::ddp` and
//!   `cuda::dp`.
//! - `launch.rs`, `tcp.rs`: multi-process DDP as torchrun and srun launch it: the
//!   environment, the rendezvous on `MASTER_ADDR:MASTER_PORT`, the ring's TCP links.
//!   Each process is one rank of the same DDP strategy; rank 0 gathers every rank's
//!   step reports and builds the summary one process with N devices would. `dist.rs`
//!   routes those reports, for this backend and for DDP on GPUs across processes
//!   (`cuda::ddp`, whose NCCL unique id crosses this rendezvous).
//! - SyncBatchNorm statistics over the global batch are `ops/sync_bn.rs` (a layer's work).
//! - `summary.rs`: the per-device summary and imbalance figures.
//!
//! Each device that trains runs the launcher's one body (`launcher::device`) with its
//! strategy's `launcher::GradSync`; this module owns the CPU run around them: the data,
//! the device threads, their per-step reports turned into the run's `StepEvent`s, and
//! the `RunSummary` (`run_summary`, the one ending for both backends).

pub mod bucket;
pub mod collective;
mod ddp;
pub(crate) mod dist;
mod dp;
pub mod launch;
pub mod summary;
pub(crate) mod tcp;

use std::collections::BTreeMap;
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::Instant;

pub use bucket::BucketSpan;
pub use summary::{DeviceSummary, Imbalance};

use crate::engine::caps::{self, Layout};
use crate::engine::clock::Phases;
use crate::engine::device::{Backend, Device, MemCategory, MemSnapshot};
pub(crate) use crate::engine::launcher::join_all;
use crate::engine::launcher::{note_choices, Lead};
use crate::engine::nn::model::Model;
use crate::engine::parallel::summary::{summarize, DeviceStep, DeviceTotals};
use crate::engine::vocab::{Feed, Measured, Observer, RunSummary, StepEvent, Workload};
use crate::error::{Error, Result};
use crate::knobs::{Knobs, Parallel};

pub use crate::limits::MAX_DEVICES;

pub use crate::engine::device::is_multi_device;

/// What to record beyond the summary (tests and traces).
#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    /// DDP: digest every rank's parameters after every step and fail the run if two
    /// ranks differ in a single bit.
    pub verify_replicas: bool,
}

/// One timed interval of one step, in seconds since the run started.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Span {
    pub step: usize,
    pub start_s: f64,
    pub end_s: f64,
}

/// What one DDP rank did when.
#[derive(Clone, Debug, Default)]
pub struct RankTrace {
    /// The backward pass that launches the buckets (the last micro-batch's), per step:
    /// from its start to the moment its last gradient was computed (before that
    /// gradient's copy into its bucket and the hand-over).
    pub backward: Vec<Span>,
    /// Every bucket's all-reduce, per step, bucket 0 first.
    pub allreduce: Vec<BucketSpan>,
    /// Digest of the parameters' bits after each step (with `verify_replicas`).
    pub digests: Vec<u64>,
}

/// The timing trace of a multi-device run.
#[derive(Clone, Debug, Default)]
pub struct Trace {
    /// DDP: elements per gradient bucket, in launch order.
    pub bucket_lens: Vec<usize>,
    /// DDP: one per rank.
    pub ranks: Vec<RankTrace>,
}

/// Trains on `k.devices` devices.
pub fn run(w: &Workload, k: &Knobs, obs: &mut dyn Observer) -> Result<RunSummary> {
    run_traced(w, k, obs, Options::default()).map(|(s, _)| s)
}

/// `run`, also returning the trace. Runs the strategy `k.parallel` names even on one
/// device (`single` runs as DP on one device: device 0 alone).
pub fn run_traced(
    w: &Workload,
    k: &Knobs,
    obs: &mut dyn Observer,
    opts: Options,
) -> Result<(RunSummary, Trace)> {
    k.validate()?;
    if k.devices > MAX_DEVICES {
        return Err(Error::Invalid(format!(
            "invalid devices {}: at most {MAX_DEVICES} virtual devices",
            k.devices
        )));
    }
    if w.steps == 0 || w.threads == 0 {
        return Err(Error::Invalid(
            "steps and threads must be at least 1".into(),
        ));
    }
    let started = Instant::now();
    let dist = w.launch.as_ref().filter(|l| l.world > 1);
    if let Some(l) = dist {
        dist::check_knobs(l, k)?;
    }
    // Devices this process runs: all of them, or its one rank.
    let n = if dist.is_some() { 1 } else { k.devices };
    let per = (w.threads / n).max(1);
    let not_applicable = caps::admit(Backend::Cpu, k, Layout::Multi, obs)?;
    let group = match dist {
        Some(l) => {
            let j = tcp::join(l, w.threads, settings(w, k))?;
            obs.on_note(&format!(
                "ddp: rank {} of {} ({}, rendezvous at {}:{})",
                l.rank, l.world, l.launcher, l.master, l.port
            ));
            ddp::Group::Dist(Box::new(j))
        }
        None => ddp::Group::Local,
    };
    if dist.is_some() {
        // One rank per process: its threads are its own.
    } else if w.threads < n {
        obs.on_note(&format!(
            "{n} devices on {} compute threads: devices share cores, so their busy times \
             include waiting for a core",
            w.threads
        ));
    } else if !w.threads.is_multiple_of(n) {
        obs.on_note(&format!(
            "{} compute threads do not split evenly over {n} devices: {per} each, {} unused",
            w.threads,
            w.threads - per * n
        ));
    }
    let feed = Feed::open(w, k)?;
    let first = dist.map_or(0, |l| l.rank);
    let devs: Vec<Arc<Device>> = (0..n).map(|i| Device::cpu(first + i, per)).collect();
    let (out, trace) = match k.parallel {
        Parallel::Ddp => ddp::run(w, k, obs, &feed, &devs, opts, group)?,
        Parallel::Dp | Parallel::Single => dp::run(w, k, obs, &feed, &devs)?,
    };
    let mut snaps = out.snaps;
    snaps.extend(out.remote_mem);
    let c = out.collected;
    // A rank other than 0 summarises only its own device.
    let totals = match dist {
        Some(l) if l.rank > 0 => c.totals.get(l.rank..=l.rank).unwrap_or(&[]).to_vec(),
        _ => c.totals.clone(),
    };
    let summary = run_summary(
        w,
        k,
        obs,
        "cpu",
        out.lead,
        c,
        &totals,
        &snaps,
        started,
        not_applicable,
    )?;
    Ok((summary, trace))
}

/// A rayon pool for one device's compute.
fn pool(threads: usize, name: &str) -> Result<rayon::ThreadPool> {
    let name = name.to_string();
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(move |i| format!("{name}-{i}"))
        .build()
        .map_err(|e| Error::Runtime(format!("cannot start {threads} compute threads: {e}")))
}

/// What a reporting thread (the DP driver, or every DDP rank) sends after each step.
pub(crate) struct StepReport {
    pub rank: usize,
    pub step: usize,
    pub loss: f32,
    pub samples: usize,
    pub step_s: f64,
    pub phases: Phases,
    pub mem_after: MemSnapshot,
    pub devices: Vec<DeviceStep>,
    pub digest: Option<u64>,
}

impl StepReport {
    /// `ev` as `rank` reports it, with its devices' figures.
    pub(crate) fn of(
        rank: usize,
        ev: &StepEvent,
        devices: Vec<DeviceStep>,
        digest: Option<u64>,
    ) -> StepReport {
        StepReport {
            rank,
            step: ev.step,
            loss: ev.loss,
            samples: ev.samples,
            step_s: ev.step_s,
            phases: ev.phases,
            mem_after: ev.mem_after.clone(),
            devices,
            digest,
        }
    }
}

/// FNV-1a over 32-bit words, carried on from `h`: equal digests after a step mean
/// bit-identical replicas, short of a 64-bit collision.
pub(crate) fn digest_words(mut h: u64, words: impl IntoIterator<Item = u32>) -> u64 {
    for x in words {
        h ^= u64::from(x);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// The digest's starting value.
pub(crate) const DIGEST_START: u64 = 0xcbf2_9ce4_8422_2325;

/// The run's per-step record, merged over the reporting threads.
#[derive(Default)]
pub(crate) struct Collected {
    pub step_times: Vec<f64>,
    pub losses: Vec<f32>,
    pub phase_sum: Phases,
    pub totals: Vec<DeviceTotals>,
    pub grad_between: u64,
    /// First step at which two ranks' parameter digests differed.
    pub mismatch: Option<String>,
}

/// The summary of a multi-device run: its steps as `collect` merged them, each device's
/// totals and memory at the end; the peak is the fullest device's.
#[allow(clippy::too_many_arguments)]
pub(crate) fn multi_summary(
    w: &Workload,
    k: &Knobs,
    backend: &str,
    params: usize,
    c: Collected,
    totals: &[DeviceTotals],
    snaps: &[MemSnapshot],
    started: Instant,
) -> RunSummary {
    let m = Measured {
        step_times: c.step_times,
        losses: c.losses,
        phase_sum: c.phase_sum,
        grad_between: c.grad_between,
        started,
    };
    let (devices, imbalance) = summarize(totals, snaps, m.after_warmup(w.warmup).iter().sum());
    let top = snaps
        .iter()
        .max_by_key(|s| s.total_peak)
        .cloned()
        .unwrap_or_default();
    RunSummary::from_measured(w, k, backend, params, m, &top, devices, imbalance)
}

/// Whether a CPU model holds a batch norm (a layer with buffers).
pub(crate) fn has_batch_norm(model: &mut Model) -> bool {
    let mut bn = false;
    model.visit_buffers(&mut |_, _| bn = true);
    bn
}

/// The one ending of a multi-device run, CPU or CUDA, DP or DDP, threads or processes:
/// a replica mismatch fails the run, `sync_bn` without a batch norm is said to be not
/// applicable, the lead's choices become notes, and the summary is built from the
/// merged steps (`c`), each device's `totals` and memory (`snaps`).
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_summary(
    w: &Workload,
    k: &Knobs,
    obs: &mut dyn Observer,
    backend: &str,
    lead: Lead,
    c: Collected,
    totals: &[DeviceTotals],
    snaps: &[MemSnapshot],
    started: Instant,
    mut not_applicable: BTreeMap<String, String>,
) -> Result<RunSummary> {
    if let Some(m) = &c.mismatch {
        return Err(Error::Runtime(m.clone()));
    }
    if k.sync_bn && !lead.has_batch_norm {
        let why = format!("{} has no batch norm", w.model);
        obs.on_note(&format!("sync_bn: not applicable ({why})"));
        not_applicable.insert("sync_bn".into(), why);
    }
    note_choices(obs, &lead.algorithms);
    Ok(RunSummary {
        accuracy: lead.accuracy,
        algorithms: lead.algorithms,
        skipped_steps: lead.skipped_steps,
        loss_scale_final: lead.loss_scale,
        not_applicable,
        ..multi_summary(w, k, backend, lead.params, c, totals, snaps, started)
    })
}

/// DDP's note on its gradient buckets (`lens`: elements per bucket, launch order).
pub(crate) fn note_buckets(
    obs: &mut dyn Observer,
    world: usize,
    lens: &[usize],
    cap_mb: usize,
    how: &str,
) {
    if let Some(b) = lens.first() {
        obs.on_note(&format!(
            "ddp: {world} ranks, {} gradient bucket(s) of cap {cap_mb} MiB (first {:.2} MiB), {how}",
            lens.len(),
            (*b * 4) as f64 / (1 << 20) as f64
        ));
    }
}

/// What the CPU strategies hand back to the launcher.
pub(crate) struct Outcome {
    pub lead: Lead,
    pub collected: Collected,
    /// This process's devices' memory as training left them, device 0 first.
    pub snaps: Vec<MemSnapshot>,
    /// Rank 0 of a multi-process job: the other ranks' memory, rank 1 first.
    pub remote_mem: Vec<MemSnapshot>,
}

/// What every rank of a multi-process job must agree on: the workload and the knobs
/// (not the compute threads nor paths, which may differ per node), and tune's version.
pub(crate) fn settings(w: &Workload, k: &Knobs) -> serde_json::Value {
    let mut wl = serde_json::to_value(w).unwrap_or_default();
    if let Some(o) = wl.as_object_mut() {
        for local in ["threads", "cache_dir", "autotune_cache"] {
            o.remove(local);
        }
    }
    serde_json::json!({
        "tune": env!("CARGO_PKG_VERSION"),
        "workload": wl,
        "knobs": serde_json::to_value(k).unwrap_or_default(),
    })
}

/// Receives step reports until every reporter has hung up; each step is emitted once
/// all `reporters` have reported it. Loss is the mean over reporters (every DDP rank's
/// local mean over equal shards), step time the slowest one's, phases the mean.
pub(crate) fn collect(
    rx: Receiver<StepReport>,
    reporters: usize,
    threads: &[usize],
    ddp: bool,
    w: &Workload,
    obs: &mut dyn Observer,
) -> Collected {
    let mut c = Collected {
        totals: threads
            .iter()
            .map(|&t| DeviceTotals {
                threads: t,
                ddp,
                ..DeviceTotals::default()
            })
            .collect(),
        ..Collected::default()
    };
    let mut pending: BTreeMap<usize, Vec<StepReport>> = BTreeMap::new();
    for r in rx {
        let step = r.step;
        let slot = pending.entry(step).or_default();
        slot.push(r);
        if slot.len() < reporters {
            continue;
        }
        let Some(mut reps) = pending.remove(&step) else {
            continue;
        };
        reps.sort_by_key(|r| r.rank);
        let n = reps.len() as f32;
        let loss = reps.iter().map(|r| r.loss).sum::<f32>() / n;
        let step_s = reps.iter().map(|r| r.step_s).fold(0.0, f64::max);
        let mut phases = Phases::default();
        for r in &reps {
            phases.add(&r.phases);
        }
        let phases = phases.scaled(1.0 / reps.len() as f64);
        if c.mismatch.is_none() {
            if let Some(d0) = reps[0].digest {
                if let Some(bad) = reps.iter().find(|r| r.digest != Some(d0)) {
                    c.mismatch = Some(format!(
                        "ddp: after step {step}, rank {}'s parameters differ from rank 0's",
                        bad.rank
                    ));
                }
            }
        }
        // The same window as the summary's step times: all steps when there are no more
        // than the warm-up.
        if step >= w.warmup || w.steps <= w.warmup {
            c.phase_sum.add(&phases);
            for r in &reps {
                for d in &r.devices {
                    if let Some(t) = c.totals.get_mut(d.index) {
                        t.add(d);
                    }
                }
            }
        }
        let first = reps.swap_remove(0);
        c.grad_between = first.mem_after.current_of(MemCategory::Grads);
        c.step_times.push(step_s);
        c.losses.push(loss);
        obs.on_step(&StepEvent {
            step,
            steps: w.steps,
            loss,
            samples: first.samples,
            step_s,
            phases,
            mem_after: first.mem_after,
            loss_scale: None,
            skipped: false,
        });
    }
    c
}

/// Digest of every parameter's bits (FNV-1a over 32-bit words): equal digests after a
/// step mean bit-identical replicas, short of a 64-bit collision.
pub(crate) fn param_digest(model: &mut Model) -> Result<u64> {
    let mut h = DIGEST_START;
    let mut res = Ok(());
    model.visit_params(&mut |p| match p.w.f32() {
        Ok(v) => h = digest_words(h, v.iter().map(|x| x.to_bits())),
        Err(e) => res = Err(e),
    });
    res.map(|_| h)
}
