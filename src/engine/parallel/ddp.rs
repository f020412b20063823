//! DistributedDataParallel: one rank per device, each with its own replica, optimizer and
//! DistributedSampler shard of the data (`batch_size / devices` samples per step).
//!
//! As in PyTorch: rank 0's parameters and buffers are broadcast when the replicas are
//! built, buffers (BN running statistics) again before every step (`broadcast_buffers`),
//! and gradients are averaged in buckets launched from backward as soon as they fill, on
//! a communication thread per rank (NCCL's communication stream). With gradient
//! accumulation only the last micro-batch synchronises (`no_sync` for the others).
//! Every rank applies the same averaged gradients, so replicas stay bit-identical.
//! Each rank is the one step loop with the `Ddp` strategy.

use std::sync::mpsc::{channel, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::engine::clock::{Clock, HostClock, Phase};
use crate::engine::collective::Collective;
use crate::engine::cpu::{CpuExec, CpuRig};
use crate::engine::device::{Device, MemCategory, MemSnapshot};
use crate::engine::launcher::{self, DeviceThread, GradSync, Looper, Prepared, Ran, Synced, Work};
use crate::engine::nn::model::Model;
use crate::engine::ops::layer::Layer;
use crate::engine::parallel::bucket::{comm_loop, BucketSpan, ParamLayout, Reducer};
use crate::engine::parallel::collective::{ring, Ring, Timed};
use crate::engine::parallel::dist;
use crate::engine::parallel::summary::{ClockReading, DeviceClock, DeviceStep};
use crate::engine::parallel::tcp::Joined;
use crate::engine::parallel::{
    has_batch_norm, note_buckets, param_digest, pool, Options, Outcome, RankTrace, Span,
    StepReport, Trace,
};
use crate::engine::step::Strategy;
use crate::engine::tensor::Tensor;
use crate::engine::vocab::{Feed, NoObserver, Observer, StepEvent, Workload};
use crate::error::{Error, Result};
use crate::knobs::Knobs;

/// Who this process's ranks are: all of them, or one of a multi-process job.
pub(super) enum Group {
    Local,
    Dist(Box<Joined>),
}

pub(super) fn run(
    w: &Workload,
    k: &Knobs,
    obs: &mut dyn Observer,
    feed: &Feed,
    devs: &[Arc<Device>],
    opts: Options,
    group: Group,
) -> Result<(Outcome, Trace)> {
    let n = devs.len();
    let (world, first, rings, threads, role) = match group {
        Group::Local => (
            n,
            0,
            ring(n).into_iter().zip(ring(n)).collect::<Vec<_>>(),
            devs.iter().map(|d| d.threads).collect::<Vec<_>>(),
            None,
        ),
        Group::Dist(j) => (
            j.world,
            j.rank,
            vec![(j.grad, j.sync)],
            j.threads,
            Some(j.role),
        ),
    };
    let per_rank = k.batch_size / world;
    let t0 = Instant::now();
    let (tx, rx) = channel();
    let mut ranks: Vec<DeviceThread<'_, Ran<DdpOut>>> = Vec::with_capacity(n);
    for (i, ((grad_ring, sync_ring), dev)) in rings.into_iter().zip(devs).enumerate() {
        let rank = first + i;
        let work = Work {
            source: feed.source(w, k, rank, world, per_rank)?,
            classes: feed.classes,
            // The first rank of this process evaluates and records the choices.
            lead: (i == 0).then_some(feed),
        };
        let clock = Arc::new(DeviceClock::default());
        let sync: Arc<dyn Collective> = Arc::new(Timed {
            inner: Arc::new(sync_ring),
            clock: Arc::clone(&clock),
        });
        let rig = CpuRig {
            dev: Arc::clone(dev),
            sync_bn: k.sync_bn.then(|| Arc::clone(&sync)),
        };
        let setup = DdpSetup {
            rank,
            dev: Arc::clone(dev),
            bucket_mb: k.bucket_mb,
            grad_ring,
            sync,
            clock,
            t0,
            reports: tx.clone(),
            verify: opts.verify_replicas,
        };
        ranks.push((
            format!("tune-ddp-rank{rank}"),
            Box::new(move || {
                // No scaler: mixed precision is refused for multi-device runs.
                pool(rig.dev.threads, &format!("tune-dev{rank}"))?
                    .install(|| launcher::device(&rig, setup, work, (w, k), &mut NoObserver, t0))
            }),
        ));
    }
    let ((collected, tail), ends) = launcher::spread(ranks, |s| {
        dist::route(s, role, tx, rx, (n, world), &threads, w, obs)
    });
    let ends = ends.map(|e| (e, tail));
    let (mut ends, tail) = ends?;
    let snaps: Vec<MemSnapshot> = ends.iter().map(|e| e.lead.snap.clone()).collect();
    let remote_mem = dist::finish(tail, first, &snaps[0])?;
    let bucket_lens = ends.first().map(|e| e.out.1.clone()).unwrap_or_default();
    let trace = Trace {
        bucket_lens,
        ranks: ends
            .iter_mut()
            .map(|e| std::mem::take(&mut e.out.0))
            .collect(),
    };
    let first_end = ends
        .into_iter()
        .next()
        .ok_or_else(|| Error::Runtime("ddp: no rank finished".into()))?;
    if collected.mismatch.is_none() {
        let how = if first == 0 && n == world {
            "in-process ring all-reduce"
        } else {
            "TCP ring all-reduce"
        };
        note_buckets(obs, world, &trace.bucket_lens, k.bucket_mb, how);
    }
    Ok((
        Outcome {
            lead: first_end.lead,
            collected,
            snaps,
            remote_mem,
        },
        trace,
    ))
}

fn visit_result(
    model: &mut Model,
    mut f: impl FnMut(&mut crate::engine::ops::layer::Param) -> Result<()>,
) -> Result<()> {
    let mut res = Ok(());
    model.visit_params(&mut |p| {
        if res.is_ok() {
            res = f(p);
        }
    });
    res
}

/// PyTorch's `broadcast_buffers`: rank 0's buffers (BN running statistics) to every rank.
fn broadcast_buffers(model: &mut Model, coll: &dyn Collective, dev: &Device) -> Result<()> {
    let mut flat = Vec::new();
    model.visit_buffers(&mut |_, b| flat.extend_from_slice(b));
    if flat.is_empty() || coll.world_size() == 1 {
        return Ok(());
    }
    let n = flat.len();
    let mut t = Tensor::from_vec(&[n], flat, MemCategory::Activations, dev.mem())?;
    coll.broadcast(&mut t, 0)?;
    let v = t.f32()?;
    let mut off = 0;
    model.visit_buffers(&mut |_, b| {
        let len = b.len();
        b.copy_from_slice(&v[off..off + len]);
        off += len;
    });
    Ok(())
}

/// What a CPU rank's DDP needs before its loop: the rings, the device clock the
/// collectives charge, and where its step reports go.
struct DdpSetup {
    rank: usize,
    dev: Arc<Device>,
    bucket_mb: usize,
    grad_ring: Ring,
    /// Broadcasts and SyncBatchNorm's statistics, timed.
    sync: Arc<dyn Collective>,
    clock: Arc<DeviceClock>,
    t0: Instant,
    reports: Sender<StepReport>,
    verify: bool,
}

/// A CPU rank's trace and its elements per gradient bucket, in launch order.
type DdpOut = (RankTrace, Vec<usize>);

impl GradSync<CpuRig> for DdpSetup {
    type Out = DdpOut;

    /// DDP's constructor (rank 0's parameters and buffers everywhere, the buckets), the
    /// communication thread for the loop's duration, then its join: a failed collective
    /// shows first as a hang-up to the reducer, so the thread's error explains the run.
    fn around(self, p: &mut Prepared<CpuRig>, l: Looper<'_, CpuRig>) -> Result<Synced<Self::Out>> {
        let DdpSetup {
            rank,
            dev,
            bucket_mb,
            grad_ring,
            sync,
            clock,
            t0,
            reports,
            verify,
        } = self;
        let model = &mut p.model;
        visit_result(model, |p| sync.broadcast(&mut p.w, 0))?;
        broadcast_buffers(model, sync.as_ref(), &dev)?;
        let layout = ParamLayout::of(model);
        let (job_tx, job_rx) = channel();
        let (done_tx, done_rx) = channel();
        let grad: Arc<dyn Collective> = Arc::new(grad_ring);
        let cap = bucket_mb.saturating_mul(1 << 20);
        let reducer = Reducer::new(layout, cap, &dev, job_tx, done_rx, t0);
        let bucket_lens = reducer.bucket_lens();
        let (trace, trained) = std::thread::scope(|s| {
            let comm_clock = Arc::clone(&clock);
            let comm = std::thread::Builder::new()
                .name(format!("tune-ddp-comm{rank}"))
                .spawn_scoped(s, move || comm_loop(grad, job_rx, done_tx, comm_clock, t0))
                .map_err(|e| {
                    Error::Runtime(format!("cannot start rank {rank}'s comm thread: {e}"))
                })?;
            let mut ddp = Ddp {
                rank,
                dev: &dev,
                reducer,
                sync: sync.as_ref(),
                clock: &clock,
                t0,
                reports: &reports,
                verify,
                trace: RankTrace::default(),
                at: StepMarks::default(),
            };
            let res = l.run(p, &mut ddp);
            let Ddp { reducer, trace, .. } = ddp;
            // Hanging up ends the communication thread's loop.
            drop(reducer);
            let comm_res = comm
                .join()
                .map_err(|_| Error::Runtime(format!("rank {rank}'s comm thread panicked")))?;
            match (res, comm_res) {
                (Err(_), Err(e)) => Err(e),
                (Err(e), Ok(())) => Err(e),
                (Ok(t), _) => Ok((trace, t)),
            }
        })?;
        let bn = has_batch_norm(&mut p.model);
        Ok(Synced::new(trained, bn, (trace, bucket_lens)))
    }
}

/// What one step's hooks measured, for the rank's report at its end.
#[derive(Default)]
struct StepMarks {
    /// The device clock when the step began.
    c0: ClockReading,
    /// SyncBatchNorm wait before the first micro-batch.
    sync_before: f64,
    /// SyncBatchNorm waits inside forward/backward: communication, not work.
    sync_fb: f64,
    /// Copying averaged gradients back, not counting the wait for the buckets.
    finish_work: Duration,
    backward: Span,
    spans: Vec<BucketSpan>,
}

/// The DDP strategy of one rank: buffers broadcast at the start of a step, gradient
/// buckets filled and launched from the last micro-batch's gradient-ready hook (the
/// others run as under `no_sync`), and waited for before the update.
struct Ddp<'a> {
    rank: usize,
    dev: &'a Arc<Device>,
    reducer: Reducer,
    sync: &'a dyn Collective,
    clock: &'a DeviceClock,
    t0: Instant,
    reports: &'a Sender<StepReport>,
    verify: bool,
    trace: RankTrace,
    at: StepMarks,
}

impl Strategy<CpuExec> for Ddp<'_> {
    fn begin_step(&mut self, model: &mut Model, clock: &mut HostClock) -> Result<()> {
        self.at.c0 = self.clock.read();
        let m = clock.mark()?;
        broadcast_buffers(model, self.sync, self.dev)?;
        clock.add(Phase::Comm, m)?;
        self.at.sync_before = self.clock.read().sync_s;
        Ok(())
    }

    fn before_backward(&mut self, last: bool, dy: Tensor) -> Result<Tensor> {
        if last {
            self.at.backward.start_s = self.t0.elapsed().as_secs_f64();
        }
        Ok(dy)
    }

    fn grads_ready(&mut self, last: bool, i: usize, layer: &mut Box<dyn Layer>) -> Result<()> {
        if last {
            self.reducer.layer_ready(i, layer.as_mut())
        } else {
            Ok(())
        }
    }

    fn before_update(
        &mut self,
        model: &mut Model,
        step: usize,
        clock: &mut HostClock,
    ) -> Result<()> {
        self.at.sync_fb = (self.clock.read().sync_s - self.at.sync_before).max(0.0);
        self.at.backward.step = step;
        self.at.backward.end_s = self.reducer.grads_done_s();
        let m = clock.mark()?;
        let t = Instant::now();
        let (waited, spans) = self.reducer.finish(model, step)?;
        self.at.finish_work = t.elapsed().saturating_sub(waited);
        clock.add(Phase::Comm, m)?;
        self.at.spans = spans;
        Ok(())
    }

    fn end_step(&mut self, model: &mut Model, ev: &StepEvent, _: &mut dyn Observer) -> Result<()> {
        let at = std::mem::take(&mut self.at);
        let ph = &ev.phases;
        let compute = (ph.zero_grad + ph.forward + ph.backward - at.sync_fb).max(0.0);
        let busy_s = compute + at.finish_work.as_secs_f64() + ph.optimizer;
        let digest = if self.verify {
            let d = param_digest(model)?;
            self.trace.digests.push(d);
            Some(d)
        } else {
            None
        };
        let dc = self.clock.read().since(&at.c0);
        let mut dev_step = DeviceStep {
            index: self.rank,
            busy_s,
            comm_s: dc.comm_s + dc.sync_s,
            ..DeviceStep::default()
        };
        for s in &at.spans {
            dev_step.allreduce_s += s.end_s - s.start_s;
            dev_step.allreduce_overlapped_s +=
                (s.end_s.min(at.backward.end_s) - s.start_s).max(0.0);
        }
        self.trace.backward.push(at.backward);
        self.trace.allreduce.extend(at.spans);
        let rep = StepReport::of(self.rank, ev, vec![dev_step], digest);
        // The launcher only hangs up if it is gone; training on would be pointless.
        self.reports
            .send(rep)
            .map_err(|_| Error::Runtime("ddp: the launcher stopped listening".into()))
    }
}
