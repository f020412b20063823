//! DataParallel on GPUs as `torch.nn.DataParallel` runs it, driven by GPU 0 every step
//! (the one step loop on GPU 0 with the [`GpuDp`] strategy; the other GPUs run replica
//! threads that forward and backward on command):
//!
//! 1. `replicate`: GPU 0's parameters and buffers are broadcast to every replica (NCCL,
//!    as `comm.broadcast_coalesced`);
//! 2. `scatter`: each replica copies its rows of the batch GPU 0 loaded (peer copies);
//! 3. every GPU runs forward on its rows;
//! 4. `gather`: GPU 0 copies every replica's outputs next to its own and computes the
//!    loss over the whole batch;
//! 5. each replica copies its rows of the output gradient from GPU 0 and runs backward;
//! 6. `reduce_add`: the replicas' gradients are summed into GPU 0's (NCCL reduce), and
//!    GPU 0 alone steps the optimizer, whose state lives there only.
//!
//! GPU 0 holds the whole batch, the gathered outputs, the loss and the optimizer: DP's
//! imbalance, measured per device. BN running statistics come from GPU 0's rows only.
//!
//! AMP as under `torch.autocast` with DataParallel: every replica computes in the half
//! type, outputs cross GPUs widened to f32 (as torch's gather upcasts nothing but copies
//! what the replicas made; f32 keeps the row copies whole-word), the loss scale rides on
//! the output gradient GPU 0 scatters, and GPU 0's scaler checks the reduced gradients.
//! Autotune: every GPU times its own GEMMs (reading the cache first); GPU 0 records its
//! choices and writes the cache.
//! Every stream order across GPUs comes from cudarc's per-buffer events (a copy on a
//! replica's stream waits for GPU 0's last write of its source, and a buffer is freed
//! only after its last reader), plus the explicit waits below.

use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, CudaSlice, CudaStream, DevicePtr, DevicePtrMut};

use cudarc::nccl::safe::{group_end, group_start, Comm, Id, ReduceOp};

use crate::engine::amp;
use crate::engine::caps::{self, Layout};
use crate::engine::cuda::gpu::{cuda_err, nccl_err, GTensor, Gpu};
use crate::engine::cuda::libs;
use crate::engine::cuda::train::{autotune_on, build_model, open_gpus, GpuExec, GpuRig};
use crate::engine::device::{Backend, MemCategory};
use crate::engine::launcher::{self, DeviceThread, GradSync, Lead, Looper, Prepared, Synced, Work};
use crate::engine::nn::model::Model;
use crate::engine::nn::model_cuda::{GCtx, GLayer};
use crate::engine::ops::layer_cuda::Pass;
use crate::engine::parallel::summary::DeviceStep;
use crate::engine::parallel::{collect, run_summary, StepReport};
use crate::engine::step::Strategy;
use crate::engine::tensor::DType;
use crate::engine::vocab::{Feed, NoObserver, Observer, RunSummary, StepEvent, Workload};
use crate::error::{Error, Result};
use crate::knobs::{Amp, Knobs};

fn event(s: &CudaStream) -> Result<CudaEvent> {
    s.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(|e| cuda_err("event", e))
}

fn secs(a: &CudaEvent, b: &CudaEvent) -> Result<f64> {
    let ms = a.elapsed_ms(b).map_err(|e| cuda_err("event time", e))?;
    Ok((f64::from(ms) / 1e3).max(0.0))
}

/// Copies `src[s0..s0 + n]` (on any GPU of this process) into `dst[d0..d0 + n]`, a
/// buffer of `gpu`, queued on `gpu`'s stream. cudarc's per-buffer events cannot order a
/// read from another context (recording the source's event on this stream fails with
/// `CUDA_ERROR_INVALID_CONTEXT`), so the order is made here: this stream waits for
/// `ready`, recorded by the producer right after it wrote the source (an event recorded
/// here instead could fall after the producer's next collective, which waits for this
/// stream's: a deadlock), and the source's stream waits for this copy before anything
/// it queues later (a write, or the buffer's free) through the event this returns,
/// waited on by the producer's thread at a point where that cannot deadlock (see the
/// strategy: the producer keeps the source alive until then).
fn copy_rows(
    gpu: &Gpu,
    dst: &mut CudaSlice<f32>,
    d0: usize,
    src: &CudaSlice<f32>,
    s0: usize,
    n: usize,
    ready: &CudaEvent,
) -> Result<CudaEvent> {
    if s0 + n > src.len() || d0 + n > dst.len() {
        return Err(Error::Runtime(format!(
            "dp: copy of {n} floats from {s0} of {} into {d0} of {}",
            src.len(),
            dst.len()
        )));
    }
    let (dctx, sctx) = (dst.context().cu_ctx(), src.context().cu_ctx());
    let home = src.stream();
    gpu.stream
        .wait(ready)
        .map_err(|e| cuda_err("stream wait", e))?;
    let sp = {
        let (p, _read) = src.device_ptr(home);
        p + (s0 * 4) as u64
    };
    {
        let mut out = dst.slice_mut(d0..d0 + n);
        let (dp, _write) = out.device_ptr_mut(&gpu.stream);
        gpu.ctx
            .bind_to_thread()
            .map_err(|e| cuda_err("context", e))?;
        // SAFETY: both ranges lie inside live allocations of their contexts (checked
        // above), the destination is ordered by its guard, the source by the waits
        // before and after this copy.
        unsafe {
            cudarc::driver::result::memcpy_peer_async(
                dctx,
                dp,
                sctx,
                sp,
                n * 4,
                gpu.stream.cu_stream(),
            )
        }
        .map_err(|e| cuda_err("peer copy", e))?;
    }
    gpu.stream
        .record_event(None)
        .map_err(|e| cuda_err("event", e))
}

/// Rows `[r0, r0 + n)` of `src` (on another GPU, or this one) as a new tensor on `gpu`.
/// With the event of the copy's end.
fn rows_to(
    gpu: &Gpu,
    src: &GTensor,
    r0: usize,
    n: usize,
    ready: &CudaEvent,
) -> Result<(GTensor, CudaEvent)> {
    if src.dt != DType::F32 {
        // Half tensors pack two elements to a word: rows could split one.
        return Err(Error::Runtime(format!(
            "dp: a {:?} tensor cannot cross GPUs; widen it on its own GPU first",
            src.dt
        )));
    }
    let per: usize = src.shape[1..].iter().product();
    let mut out = gpu.alloc(n * per, MemCategory::Activations)?;
    let done = copy_rows(gpu, &mut out.s, 0, src.s(), r0 * per, n * per, ready)?;
    let mut shape = src.shape.clone();
    shape[0] = n;
    Ok((GTensor::new(&shape, out)?, done))
}

enum Cmd {
    /// The batch on GPU 0, and an event recorded once it is written there.
    Forward {
        x: GTensor,
        ready: CudaEvent,
        seg: Option<usize>,
    },
    Backward {
        dy: GTensor,
        ready: CudaEvent,
        seg: Option<usize>,
    },
    /// The step is over: report busy and communication seconds.
    Times,
}

enum Reply {
    /// The replica's outputs with the event of their end, and the event of the end of
    /// its copy of the batch (GPU 0 keeps the batch until then).
    Logits(GTensor, CudaEvent, CudaEvent),
    /// The replica's copy of the output gradient ended at this event.
    Reduced(CudaEvent),
    Times {
        busy_s: f64,
        comm_s: f64,
    },
}

/// One replica GPU's thread.
struct Replica {
    index: usize,
    gpu: Arc<Gpu>,
    comm: Comm,
    model: Model<GLayer>,
    ctx: GCtx,
    rows: usize,
    /// (start, end, is communication) of this step's work on the stream.
    spans: Vec<(CudaEvent, CudaEvent, bool)>,
}

/// rank 0's parameters and buffers to every rank, in one group; the same call on GPU 0.
fn replicate(comm: &Comm, model: &mut Model<GLayer>) -> Result<()> {
    group_start().map_err(|e| nccl_err("group start", e))?;
    let mut res = Ok(());
    for l in &mut model.layers {
        l.visit_params(&mut |p| {
            if res.is_ok() {
                res = comm
                    .broadcast_in_place(&mut p.w.s, 0)
                    .map(|_| ())
                    .map_err(|e| nccl_err("replicate parameters", e));
            }
        });
        l.visit_buffers(&mut |b| {
            if res.is_ok() {
                res = comm
                    .broadcast_in_place(&mut b.s, 0)
                    .map(|_| ())
                    .map_err(|e| nccl_err("replicate buffers", e));
            }
        });
    }
    group_end().map_err(|e| nccl_err("group end", e))?;
    res
}

/// Every rank's gradients summed into rank 0's, in one group.
fn reduce_add(comm: &Comm, model: &mut Model<GLayer>) -> Result<()> {
    group_start().map_err(|e| nccl_err("group start", e))?;
    let mut res = Ok(());
    model.visit_params(&mut |p| {
        if res.is_err() {
            return;
        }
        res = match &mut p.g {
            Some(g) => comm
                .reduce_in_place(&mut g.s, &ReduceOp::Sum, 0)
                .map(|_| ())
                .map_err(|e| nccl_err("reduce_add", e)),
            None => Err(Error::Runtime(format!(
                "dp: {} has no gradient after backward",
                p.name
            ))),
        };
    });
    group_end().map_err(|e| nccl_err("group end", e))?;
    res
}

impl Replica {
    fn run(mut self, cmds: Receiver<Cmd>, out: Sender<Result<Reply>>) -> Result<()> {
        self.gpu
            .ctx
            .bind_to_thread()
            .map_err(|e| cuda_err("context", e))?;
        for cmd in cmds {
            let r = self.serve(cmd);
            let failed = r.is_err();
            if out.send(r).is_err() || failed {
                break;
            }
        }
        // cudarc's Comm aborts when dropped: nothing of this replica's may be queued.
        self.gpu.sync()
    }

    fn serve(&mut self, cmd: Cmd) -> Result<Reply> {
        let s = &self.gpu.stream;
        match cmd {
            Cmd::Forward { x, ready, seg } => {
                let a = event(s)?;
                replicate(&self.comm, &mut self.model)?;
                let b = event(s)?;
                let b2 = event(s)?;
                let (xi, copied) =
                    rows_to(&self.gpu, &x, self.index * self.rows, self.rows, &ready)?;
                // GPU 0 holds the batch until `copied`: this clone is never the last.
                drop(x);
                let logits = self.gpu.widen(&self.model.forward(xi, &self.ctx, seg)?)?;
                let c = event(s)?;
                self.spans.push((a, b, true));
                self.spans.push((b2, c, false));
                let done = self
                    .gpu
                    .stream
                    .record_event(None)
                    .map_err(|e| cuda_err("event", e))?;
                Ok(Reply::Logits(logits, done, copied))
            }
            Cmd::Backward { dy, ready, seg } => {
                let a = event(s)?;
                let (dyi, copied) =
                    rows_to(&self.gpu, &dy, self.index * self.rows, self.rows, &ready)?;
                drop(dy);
                self.model.backward(dyi, &self.ctx, seg)?;
                let b = event(s)?;
                let b2 = event(s)?;
                reduce_add(&self.comm, &mut self.model)?;
                let c = event(s)?;
                // A replica's gradients live for one backward, as torch's replicas do.
                self.model.visit_params(&mut |p| p.g = None);
                self.spans.push((a, b, false));
                self.spans.push((b2, c, true));
                Ok(Reply::Reduced(copied))
            }
            Cmd::Times => {
                let (mut busy_s, mut comm_s) = (0.0, 0.0);
                for (a, b, comm) in std::mem::take(&mut self.spans) {
                    let t = secs(&a, &b)?;
                    if comm {
                        comm_s += t;
                    } else {
                        busy_s += t;
                    }
                }
                Ok(Reply::Times { busy_s, comm_s })
            }
        }
    }
}

/// The DataParallel strategy on GPU 0.
struct GpuDp<'a> {
    gpu: &'a Arc<Gpu>,
    comm: Comm,
    rows: usize,
    to: Vec<Sender<Cmd>>,
    from: Vec<Receiver<Result<Reply>>>,
    reports: Sender<StepReport>,
    seg: Option<usize>,
    /// The output gradient, alive until every replica has copied its rows.
    dy: Option<GTensor>,
    /// GPU 0's communication spans this step (replicate, gather, scatter, reduce).
    comm_spans: Vec<(CudaEvent, CudaEvent)>,
}

impl GpuDp<'_> {
    fn stopped(i: usize) -> Error {
        Error::Runtime(format!(
            "{} (dp: GPU {i} stopped)",
            crate::engine::collective::PEER_STOPPED
        ))
    }

    fn send(&self, i: usize, c: Cmd) -> Result<()> {
        self.to[i - 1].send(c).map_err(|_| Self::stopped(i))
    }

    fn recv(&self, i: usize) -> Result<Reply> {
        self.from[i - 1].recv().map_err(|_| Self::stopped(i))?
    }

    fn devices(&self) -> usize {
        self.to.len() + 1
    }
}

impl Strategy<GpuExec> for GpuDp<'_> {
    fn forward(
        &mut self,
        model: &mut Model<GLayer>,
        x: GTensor,
        ctx: &GCtx,
        seg: Option<usize>,
    ) -> Result<GTensor> {
        self.seg = seg;
        let s = &self.gpu.stream;
        let a = event(s)?;
        for i in 1..self.devices() {
            let ready = x
                .s()
                .stream()
                .record_event(None)
                .map_err(|e| cuda_err("event", e))?;
            self.send(
                i,
                Cmd::Forward {
                    x: x.clone(),
                    ready,
                    seg,
                },
            )?;
        }
        replicate(&self.comm, model)?;
        let ready = x
            .s()
            .stream()
            .record_event(None)
            .map_err(|e| cuda_err("event", e))?;
        let (x0, _) = rows_to(self.gpu, &x, 0, self.rows, &ready)?;
        self.comm_spans.push((a, event(s)?));
        let logits0 = self.gpu.widen(&model.forward(x0, ctx, seg)?)?;
        let mut outs = Vec::with_capacity(self.devices() - 1);
        for i in 1..self.devices() {
            match self.recv(i)? {
                Reply::Logits(l, done, copied) => {
                    // The replica has read its rows of the batch before anything GPU 0
                    // queues from here on (the batch's free included).
                    s.wait(&copied).map_err(|e| cuda_err("stream wait", e))?;
                    outs.push((l, done));
                }
                _ => return Err(Error::Runtime(format!("dp: GPU {i} answered out of turn"))),
            }
        }
        // `gather`: GPU 0's rows first, then each replica's, into one tensor.
        let a = event(s)?;
        let classes = logits0.shape[1];
        let len = self.rows * classes;
        let mut full = self
            .gpu
            .alloc(len * self.devices(), MemCategory::Activations)?;
        let own = event(s)?;
        copy_rows(self.gpu, &mut full.s, 0, logits0.s(), 0, len, &own)?;
        for (i, (part, done)) in outs.iter().enumerate() {
            let read = copy_rows(self.gpu, &mut full.s, (i + 1) * len, part.s(), 0, len, done)?;
            // The replica's outputs are freed on its stream only after this copy; its
            // stream has nothing queued after them yet, so this wait cannot deadlock.
            part.s()
                .stream()
                .wait(&read)
                .map_err(|e| cuda_err("stream wait", e))?;
        }
        drop(x);
        drop(outs);
        let out = GTensor::new(&[len * self.devices() / classes, classes], full)?;
        self.comm_spans.push((a, event(s)?));
        Ok(out)
    }

    fn before_backward(&mut self, _last: bool, dy: GTensor) -> Result<GTensor> {
        let s = &self.gpu.stream;
        let a = event(s)?;
        let dy = self.gpu.widen(&dy)?;
        let ready = dy
            .s()
            .stream()
            .record_event(None)
            .map_err(|e| cuda_err("event", e))?;
        for i in 1..self.devices() {
            let ready = dy
                .s()
                .stream()
                .record_event(None)
                .map_err(|e| cuda_err("event", e))?;
            self.send(
                i,
                Cmd::Backward {
                    dy: dy.clone(),
                    ready,
                    seg: self.seg,
                },
            )?;
        }
        let (dy0, _) = rows_to(self.gpu, &dy, 0, self.rows, &ready)?;
        // Kept until every replica has copied its rows (`after_backward`).
        self.dy = Some(dy);
        self.comm_spans.push((a, event(s)?));
        Ok(dy0)
    }

    fn after_backward(&mut self, _last: bool, model: &mut Model<GLayer>) -> Result<()> {
        let s = &self.gpu.stream;
        let a = event(s)?;
        reduce_add(&self.comm, model)?;
        for i in 1..self.devices() {
            match self.recv(i)? {
                Reply::Reduced(copied) => {
                    s.wait(&copied).map_err(|e| cuda_err("stream wait", e))?;
                }
                _ => return Err(Error::Runtime(format!("dp: GPU {i} answered out of turn"))),
            }
        }
        self.dy = None;
        self.comm_spans.push((a, event(s)?));
        Ok(())
    }

    fn end_step(
        &mut self,
        _: &mut Model<GLayer>,
        ev: &StepEvent,
        _: &mut dyn Observer,
    ) -> Result<()> {
        // After the step's host sync: GPU 0's events have completed.
        let mut comm0 = 0.0;
        for (a, b) in std::mem::take(&mut self.comm_spans) {
            comm0 += secs(&a, &b)?;
        }
        let ph = &ev.phases;
        let work0 = ph.zero_grad + ph.forward + ph.backward + ph.optimizer;
        let mut devices = vec![DeviceStep {
            index: 0,
            busy_s: (work0 - comm0).max(0.0),
            comm_s: comm0,
            ..DeviceStep::default()
        }];
        for i in 1..self.devices() {
            self.send(i, Cmd::Times)?;
            match self.recv(i)? {
                Reply::Times { busy_s, comm_s } => devices.push(DeviceStep {
                    index: i,
                    busy_s,
                    comm_s,
                    ..DeviceStep::default()
                }),
                _ => return Err(Error::Runtime(format!("dp: GPU {i} answered out of turn"))),
            }
        }
        let mut phases = ev.phases;
        phases.forward = (phases.forward - comm0).max(0.0);
        phases.comm += comm0;
        let mut rep = StepReport::of(0, ev, devices, None);
        rep.phases = phases;
        self.reports
            .send(rep)
            .map_err(|_| Error::Runtime("dp: the launcher stopped listening".into()))
    }
}

impl GradSync<GpuRig> for GpuDp<'_> {
    type Out = ();
    fn around(mut self, p: &mut Prepared<GpuRig>, l: Looper<'_, GpuRig>) -> Result<Synced<()>> {
        let res = l.run(p, &mut self);
        self.gpu.sync()?;
        // Hanging up ends the replicas' loops.
        drop(self);
        // sync_bn needs DDP: nothing for it to act on here.
        Ok(Synced::new(res?, false, ()))
    }
}

/// Trains `w` under `k` with `parallel = dp` on `k.devices` GPUs of this machine.
pub(crate) fn run(w: &Workload, k: &Knobs, obs: &mut dyn Observer) -> Result<RunSummary> {
    let not_applicable = caps::admit(Backend::Cuda, k, Layout::Multi, obs)?;
    libs::require(&libs::TRAINING)?;
    libs::require_nccl()?;
    let started = Instant::now();
    let n = k.devices;
    let (gpus, devs) = open_gpus(w, n, k.amp == Amp::Tf32)?;
    obs.on_note(&format!(
        "CUDA backend: DataParallel on {n} GPU(s) driven by GPU 0 (NCCL broadcast and \
         reduce, peer copies)"
    ));
    obs.on_devices(&devs);
    let feed = Feed::open(w, k)?;
    let source = feed.source(w, k, 0, 1, k.batch_size)?;
    let rows = k.batch_size / n;
    let id = Id::new().map_err(|e| nccl_err("unique id", e))?;
    let (tx, rx) = channel();
    let threads = vec![1; n];
    let (gpus, devs) = (&gpus, &devs);
    let mut to = Vec::new();
    let mut from = Vec::new();
    let mut replicas: Vec<DeviceThread<'_, Option<Lead>>> = Vec::new();
    for (i, gpu) in gpus.iter().enumerate().skip(1) {
        let (ctx_tx, ctx_rx) = channel();
        let (rep_tx, rep_rx) = channel();
        to.push(ctx_tx);
        from.push(rep_rx);
        let gpu = Arc::clone(gpu);
        let feed = &feed;
        replicas.push((
            format!("tune-gpu-dp{i}"),
            Box::new(move || -> Result<Option<Lead>> {
                gpu.ctx
                    .bind_to_thread()
                    .map_err(|e| cuda_err("context", e))?;
                let comm = Comm::from_rank(Arc::clone(&gpu.stream), i, n, id)
                    .map_err(|e| nccl_err(&format!("GPU {i} joining {n}"), e))?;
                let (model, _, _) = build_model(w, k, feed.classes, &gpu)?;
                autotune_on(w, k, &gpu, &mut NoObserver)?;
                let ctx = GCtx {
                    gpu: Arc::clone(&gpu),
                    pass: Pass {
                        train: true,
                        save: true,
                        recompute: false,
                        half: amp::half_dtype(k.amp),
                    },
                };
                Replica {
                    index: i,
                    gpu,
                    comm,
                    model,
                    ctx,
                    rows,
                    spans: Vec::new(),
                }
                .run(ctx_rx, rep_tx)
                .map(|()| None)
            }),
        ));
    }
    let feed = &feed;
    let driver = move || -> Result<Option<Lead>> {
        let gpu = &gpus[0];
        gpu.ctx
            .bind_to_thread()
            .map_err(|e| cuda_err("context", e))?;
        let comm = Comm::from_rank(Arc::clone(&gpu.stream), 0, n, id)
            .map_err(|e| nccl_err(&format!("GPU 0 joining {n}"), e))?;
        let rig = GpuRig {
            gpu: Arc::clone(gpu),
            dev: Arc::clone(&devs[0]),
        };
        let dp = GpuDp {
            gpu,
            comm,
            rows,
            to,
            from,
            reports: tx,
            seg: None,
            dy: None,
            comm_spans: Vec::new(),
        };
        let work = Work {
            source,
            classes: feed.classes,
            lead: Some(feed),
        };
        launcher::device(&rig, dp, work, (w, k), &mut NoObserver, Instant::now())
            .map(|r| Some(r.lead))
    };
    // GPU 0 first: the replicas end when it hangs up, so their errors matter only if it
    // reports none of its own.
    let mut all: Vec<DeviceThread<'_, Option<Lead>>> =
        vec![("tune-gpu-dp0".into(), Box::new(driver))];
    all.extend(replicas);
    let (collected, outcome) = launcher::spread(all, |_| collect(rx, 1, &threads, false, w, obs));
    let outcome = outcome.and_then(|ends| {
        ends.into_iter()
            .flatten()
            .next()
            .ok_or_else(|| Error::Runtime("dp: GPU 0's driver returned nothing".into()))
    });
    let lead = outcome?;
    let mut snaps = vec![lead.snap.clone()];
    snaps.extend(devs.iter().skip(1).map(|d| d.mem().snapshot()));
    let label = crate::engine::cuda::backend_label(&gpus[0].name);
    let totals = collected.totals.clone();
    run_summary(
        w,
        k,
        obs,
        label,
        lead,
        collected,
        &totals,
        &snaps,
        started,
        not_applicable,
    )
}
