//! DistributedDataParallel: one rank per device, each with its own replica, optimizer and
//! DistributedSampler shard of the data (`batch_size / devices` samples per step).
//!
//! As in PyTorch: rank 0's parameters and buffers are broadcast when the replicas are
//! built, buffers (BN running statistics) again before every step (`broadcast_buffers`),
//! and gradients are averaged in buckets launched from backward as soon as they fill, on
//! a communication thread per rank (NCCL's communication stream). With gradient
//! accumulation only the last micro-batch synchronises (`no_sync` for the others).
//! Every rank applies the same averaged gradients, so replicas stay bit-identical.

use std::sync::mpsc::{channel, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::engine::device::{Device, MemCategory};
use crate::engine::nn::layer::Ctx;
use crate::engine::nn::model::Model;
use crate::engine::nn::zoo;
use crate::engine::ops::loss::softmax_cross_entropy;
use crate::engine::optim::Optimizer;
use crate::engine::parallel::bucket::{comm_loop, ParamLayout, Reducer};
use crate::engine::parallel::collective::{ring, Collective, Ring, Timed};
use crate::engine::parallel::summary::{DeviceClock, DeviceStep};
use crate::engine::parallel::{
    collect, join_all, optim_config, param_digest, pool, Feed, Options, Outcome, RankTrace, Span,
    StepReport, Trace,
};
use crate::engine::tensor::Tensor;
use crate::engine::train::{Observer, Phases, Source, Workload};
use crate::error::{Error, Result};
use crate::knobs::{Knobs, ZeroGrad};

/// Everything one rank's thread owns.
struct Rank<'a> {
    w: &'a Workload,
    k: &'a Knobs,
    rank: usize,
    dev: Arc<Device>,
    classes: usize,
    source: Source,
    grad_ring: Ring,
    sync_ring: Ring,
    t0: Instant,
    reports: Sender<StepReport>,
    verify: bool,
}

struct RankEnd {
    model: Model,
    trace: RankTrace,
    bucket_lens: Vec<usize>,
    has_bn: bool,
}

pub(super) fn run(
    w: &Workload,
    k: &Knobs,
    obs: &mut dyn Observer,
    feed: &Feed,
    devs: &[Arc<Device>],
    opts: Options,
) -> Result<(Outcome, Trace)> {
    let n = devs.len();
    let per_rank = k.batch_size / n;
    let mut sources = Vec::with_capacity(n);
    for r in 0..n {
        sources.push(feed.source(w, k, r, n, per_rank)?);
    }
    let t0 = Instant::now();
    let (tx, rx) = channel();
    let threads: Vec<usize> = devs.iter().map(|d| d.threads).collect();
    let (collected, ends) = std::thread::scope(|s| {
        let mut handles = Vec::with_capacity(n);
        for (((rank, source), (grad_ring, sync_ring)), dev) in sources
            .into_iter()
            .enumerate()
            .zip(ring(n).into_iter().zip(ring(n)))
            .zip(devs)
        {
            let r = Rank {
                w,
                k,
                rank,
                dev: Arc::clone(dev),
                classes: feed.classes,
                source,
                grad_ring,
                sync_ring,
                t0,
                reports: tx.clone(),
                verify: opts.verify_replicas,
            };
            handles.push(
                std::thread::Builder::new()
                    .name(format!("tune-ddp-rank{rank}"))
                    .spawn_scoped(s, move || rank_main(r))
                    .map_err(|e| Error::Runtime(format!("cannot start rank {rank}: {e}"))),
            );
        }
        drop(tx);
        let collected = collect(rx, n, &threads, true, w, obs);
        let mut hs = Vec::with_capacity(n);
        let mut spawn_err = None;
        for h in handles {
            match h {
                Ok(h) => hs.push(h),
                Err(e) => spawn_err = Some(e),
            }
        }
        let ends = join_all(hs);
        match spawn_err {
            Some(e) => (collected, Err(e)),
            None => (collected, ends),
        }
    });
    let mut ends = ends?;
    if let Some(m) = &collected.mismatch {
        return Err(Error::Runtime(m.clone()));
    }
    let bucket_lens = ends
        .first()
        .map(|e| e.bucket_lens.clone())
        .unwrap_or_default();
    let has_bn = ends.first().is_some_and(|e| e.has_bn);
    let trace = Trace {
        bucket_lens,
        ranks: ends
            .iter_mut()
            .map(|e| std::mem::take(&mut e.trace))
            .collect(),
    };
    let first = ends
        .into_iter()
        .next()
        .ok_or_else(|| Error::Runtime("ddp: no rank finished".into()))?;
    if let Some(b) = trace.bucket_lens.first() {
        obs.on_note(&format!(
            "ddp: {n} ranks, {} gradient bucket(s) of cap {} MiB (first {:.2} MiB), {} ring \
             all-reduce",
            trace.bucket_lens.len(),
            k.bucket_mb,
            (*b * 4) as f64 / (1 << 20) as f64,
            "in-process"
        ));
    }
    Ok((
        Outcome {
            model: first.model,
            collected,
            has_batch_norm: has_bn,
        },
        trace,
    ))
}

fn rank_main(r: Rank<'_>) -> Result<RankEnd> {
    let p = pool(r.dev.threads, &format!("tune-dev{}", r.rank))?;
    p.install(|| rank_inner(r))
}

fn visit_result(
    model: &mut Model,
    mut f: impl FnMut(&mut crate::engine::nn::layer::Param) -> Result<()>,
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

fn rank_inner(r: Rank<'_>) -> Result<RankEnd> {
    let Rank {
        w,
        k,
        rank,
        dev,
        classes,
        mut source,
        grad_ring,
        sync_ring,
        t0,
        reports,
        verify,
    } = r;
    let clock = Arc::new(DeviceClock::default());
    let sync: Arc<dyn Collective> = Arc::new(Timed {
        inner: Arc::new(sync_ring),
        clock: Arc::clone(&clock),
    });
    let mut model = zoo::build(w.model, classes, w.seed, &dev)?;
    visit_result(&mut model, |p| sync.broadcast(&mut p.w, 0))?;
    broadcast_buffers(&mut model, sync.as_ref(), &dev)?;
    let mut has_bn = false;
    model.visit_buffers(&mut |_, _| has_bn = true);
    let layout = ParamLayout::of(&mut model);
    let ctx = Ctx {
        amp: k.amp,
        sync_bn: k.sync_bn.then(|| Arc::clone(&sync)),
        ..Ctx::train(&dev)
    };
    let seg = k.checkpoint.segment_len(model.layers.len());
    let mut opt = Optimizer::new(optim_config(w))?;
    let (job_tx, job_rx) = channel();
    let (done_tx, done_rx) = channel();
    let grad: Arc<dyn Collective> = Arc::new(grad_ring);
    let cap = k.bucket_mb.saturating_mul(1 << 20);
    let mut reducer = Reducer::new(layout, cap, &dev, job_tx, done_rx, t0);
    let bucket_lens = reducer.bucket_lens();
    let mut trace = RankTrace::default();
    std::thread::scope(|s| {
        let comm_clock = Arc::clone(&clock);
        let comm = std::thread::Builder::new()
            .name(format!("tune-ddp-comm{rank}"))
            .spawn_scoped(s, move || comm_loop(grad, job_rx, done_tx, comm_clock, t0))
            .map_err(|e| Error::Runtime(format!("cannot start rank {rank}'s comm thread: {e}")))?;
        let res = State {
            w,
            k,
            rank,
            dev: &dev,
            classes,
            source: &mut source,
            model: &mut model,
            opt: &mut opt,
            reducer: &mut reducer,
            ctx: &ctx,
            seg,
            sync: sync.as_ref(),
            clock: &clock,
            t0,
            reports: &reports,
            verify,
            trace: &mut trace,
        }
        .train();
        // Hanging up ends the communication thread's loop.
        drop(reducer);
        let comm_res = comm
            .join()
            .map_err(|_| Error::Runtime(format!("rank {rank}'s comm thread panicked")))?;
        // A failed collective shows first as a hang-up to the reducer: report the cause.
        match (res, comm_res) {
            (Err(_), Err(e)) => Err(e),
            (res, _) => res,
        }
    })?;
    Ok(RankEnd {
        model,
        trace,
        bucket_lens,
        has_bn,
    })
}

struct State<'a, 'w> {
    w: &'w Workload,
    k: &'w Knobs,
    rank: usize,
    dev: &'a Arc<Device>,
    classes: usize,
    source: &'a mut Source,
    model: &'a mut Model,
    opt: &'a mut Optimizer,
    reducer: &'a mut Reducer,
    ctx: &'a Ctx,
    seg: Option<usize>,
    sync: &'a dyn Collective,
    clock: &'a DeviceClock,
    t0: Instant,
    reports: &'a Sender<StepReport>,
    verify: bool,
    trace: &'a mut RankTrace,
}

impl State<'_, '_> {
    fn train(mut self) -> Result<()> {
        for step in 0..self.w.steps {
            self.step(step)?;
        }
        Ok(())
    }

    fn step(&mut self, step: usize) -> Result<()> {
        let (k, accum) = (self.k, self.k.grad_accum);
        let t_step = Instant::now();
        let c0 = self.clock.read();
        let mut ph = Phases::default();
        let mut busy = Duration::ZERO;
        let mut loss_sum = 0.0f32;

        let t = Instant::now();
        if k.zero_grad == ZeroGrad::Memset {
            visit_result(self.model, |p| {
                if let Some(g) = &mut p.g {
                    g.f32_mut()?.fill(0.0);
                }
                Ok(())
            })?;
        }
        let d = t.elapsed();
        ph.zero_grad += d.as_secs_f64();
        busy += d;

        let t = Instant::now();
        broadcast_buffers(self.model, self.sync, self.dev)?;
        ph.comm += t.elapsed().as_secs_f64();

        let sync_before = self.clock.read().sync_s;
        let mut bwd = Span {
            step,
            start_s: 0.0,
            end_s: 0.0,
        };
        for micro in 0..accum {
            let t = Instant::now();
            let batch = self.source.next()?;
            ph.data_wait += t.elapsed().as_secs_f64();
            let t = Instant::now();
            let x = Tensor::from_vec(
                &[batch.n, batch.shape.h, batch.shape.w, batch.shape.c],
                batch.x,
                MemCategory::Activations,
                self.dev.mem(),
            )?;
            ph.h2d += t.elapsed().as_secs_f64();

            let t = Instant::now();
            let logits = self.model.forward(x, self.ctx, self.seg)?;
            let mut dlogits = self.ctx.alloc(logits.shape());
            let (loss, _) = softmax_cross_entropy(
                logits.f32()?,
                &batch.y,
                self.classes,
                1.0 / accum as f32,
                Some(dlogits.f32_mut()?),
            )?;
            drop(logits);
            let d = t.elapsed();
            ph.forward += d.as_secs_f64();
            busy += d;
            if !loss.is_finite() {
                self.model.clear_saved();
                return Err(Error::Diverged { step, loss });
            }
            loss_sum += loss / accum as f32;

            let t = Instant::now();
            let bs = if micro + 1 == accum {
                bwd.start_s = self.t0.elapsed().as_secs_f64();
                let reducer = &mut *self.reducer;
                let bs = self
                    .model
                    .backward_hooked(dlogits, self.ctx, self.seg, &mut |i, l| {
                        reducer.layer_ready(i, l.as_mut())
                    })?;
                bwd.end_s = reducer.grads_done_s();
                bs
            } else {
                self.model.backward(dlogits, self.ctx, self.seg)?
            };
            let d = t.elapsed();
            ph.backward += d.as_secs_f64();
            ph.recompute += bs.recompute.as_secs_f64();
            busy += d;
        }
        // SyncBatchNorm waits inside forward/backward are communication, not work.
        let sync_fb = self.clock.read().sync_s - sync_before;
        busy = busy.saturating_sub(Duration::from_secs_f64(sync_fb.max(0.0)));

        let t = Instant::now();
        let (waited, spans) = self.reducer.finish(self.model, step)?;
        let d = t.elapsed();
        ph.comm += d.as_secs_f64();
        busy += d.saturating_sub(waited);

        let t = Instant::now();
        self.opt.begin_step();
        let mut idx = 0;
        let opt = &mut *self.opt;
        visit_result(self.model, |p| {
            let r = opt.update(idx, p, 1.0);
            idx += 1;
            r
        })?;
        if k.zero_grad == ZeroGrad::None {
            self.model.visit_params(&mut |p| p.g = None);
        }
        let d = t.elapsed();
        ph.optimizer += d.as_secs_f64();
        busy += d;

        let digest = if self.verify {
            let d = param_digest(self.model)?;
            self.trace.digests.push(d);
            Some(d)
        } else {
            None
        };
        let step_s = t_step.elapsed().as_secs_f64();
        let dc = self.clock.read().since(&c0);
        let mut dev_step = DeviceStep {
            index: self.rank,
            busy_s: busy.as_secs_f64(),
            comm_s: dc.comm_s + dc.sync_s,
            ..DeviceStep::default()
        };
        for s in &spans {
            dev_step.allreduce_s += s.end_s - s.start_s;
            dev_step.allreduce_overlapped_s += (s.end_s.min(bwd.end_s) - s.start_s).max(0.0);
        }
        self.trace.backward.push(bwd);
        self.trace.allreduce.extend(spans);
        let rep = StepReport {
            rank: self.rank,
            step,
            loss: loss_sum,
            samples: k.batch_size * accum,
            step_s,
            phases: ph,
            mem_after: self.dev.mem().snapshot(),
            devices: vec![dev_step],
            digest,
        };
        // The launcher only hangs up if it is gone; training on would be pointless.
        self.reports
            .send(rep)
            .map_err(|_| Error::Runtime("ddp: the launcher stopped listening".into()))
    }
}
