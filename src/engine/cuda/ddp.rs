//! DistributedDataParallel on GPUs over NCCL: one thread per GPU in this process, each a
//! rank with its own replica, optimizer and `DistributedSampler` shard, running the one
//! step loop (`step::train_with`) with the [`NcclDdp`] strategy, as the CPU backend's
//! ranks run it with theirs (`parallel::ddp`).
//!
//! As in PyTorch: rank 0's parameters are broadcast when the replicas are built, buffers
//! (BN running statistics) before every step (`broadcast_buffers`), and gradients are
//! averaged in buckets of `bucket_mb` filled in reverse layer order. A layer's gradients
//! are copied into their bucket on a communication stream as soon as backward has
//! computed them (the stream waits on an event of the compute stream), and a full bucket
//! is all-reduced there while backward goes on; before the optimizer the compute stream
//! waits for the communication stream and copies the averages back. With gradient
//! accumulation only the last micro-batch synchronises (`no_sync` for the others).
//!
//! Under torchrun or srun (`dist.rs`) each process is one rank on its GPU `LOCAL_RANK`,
//! and rank 0's NCCL unique id reaches the others over the CPU backend's rendezvous.

use std::rc::Rc;
use std::sync::mpsc::{channel, Sender};
use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::sys::CUevent_flags;
use cudarc::driver::{CudaEvent, CudaStream};
use cudarc::nccl::safe::{group_end, group_start, Comm, Id, ReduceOp};

use crate::engine::caps::{self, Layout};
use crate::engine::clock::{Clock, Phase};
use crate::engine::cuda::gpu::{cuda_err, nccl_err, DBuf, Gpu};
use crate::engine::cuda::libs;
use crate::engine::cuda::sync_bn::NcclSync;
use crate::engine::cuda::train::{open_gpus, GpuClock, GpuExec, GpuRig};
use crate::engine::device::{Backend, MemCategory, MemSnapshot};
use crate::engine::launcher::{self, DeviceThread, GradSync, Looper, Prepared, Ran, Synced, Work};
use crate::engine::nn::model::Model;
use crate::engine::nn::model_cuda::GLayer;
use crate::engine::parallel::summary::DeviceStep;
use crate::engine::parallel::{
    collect, digest_words, note_buckets, run_summary, Collected, StepReport, DIGEST_START,
};
use crate::engine::step::Strategy;
use crate::engine::vocab::{Feed, NoObserver, Observer, RunSummary, StepEvent, Workload};
use crate::error::{Error, Result};
use crate::knobs::{Amp, Knobs};

mod dist;

/// One bucket: a flat f32 buffer over the gradients of whole top-level layers.
struct Bucket {
    buf: DBuf,
    /// (layer index, offset of its first gradient), in the order the layers fill it.
    layers: Vec<(usize, usize)>,
    /// Layers still to report this step.
    pending: usize,
}

/// Buckets of at most `cap` bytes (a layer larger than the cap gets its own), filled
/// from the last layer back as backward produces gradients; layers without parameters
/// belong to none.
fn plan_buckets(
    model: &mut Model<GLayer>,
    cap: usize,
    gpu: &Gpu,
) -> Result<(Vec<Bucket>, Vec<Option<usize>>)> {
    let cap_elems = (cap / 4).max(1);
    let mut owner = vec![None; model.layers.len()];
    let mut plans: Vec<(Vec<(usize, usize)>, usize)> = Vec::new();
    for i in (0..model.layers.len()).rev() {
        let mut n = 0;
        model.layers[i].visit_params(&mut |p| n += p.w.len());
        if n == 0 {
            continue;
        }
        let open = plans.last().is_some_and(|(_, len)| *len < cap_elems);
        if !open {
            plans.push((Vec::new(), 0));
        }
        let b = plans.len() - 1;
        let (layers, len) = &mut plans[b];
        layers.push((i, *len));
        *len += n;
        owner[i] = Some(b);
    }
    let mut buckets = Vec::with_capacity(plans.len());
    for (layers, len) in plans {
        buckets.push(Bucket {
            buf: gpu.zeros(len, MemCategory::Workspace)?,
            pending: layers.len(),
            layers,
        });
    }
    Ok((buckets, owner))
}

/// Events of one step, read after its host sync.
#[derive(Default)]
struct StepMarks {
    start: Option<CudaEvent>,
    backward_end: Option<CudaEvent>,
    spans: Vec<(CudaEvent, CudaEvent)>,
}

/// The DDP strategy of one GPU rank.
struct NcclDdp<'a> {
    rank: usize,
    gpu: &'a Arc<Gpu>,
    comm: &'a Comm,
    cs: Arc<CudaStream>,
    buckets: Vec<Bucket>,
    owner: Vec<Option<usize>>,
    has_buffers: bool,
    reports: &'a Sender<StepReport>,
    verify: bool,
    at: StepMarks,
}

fn timing_event(s: &CudaStream) -> Result<CudaEvent> {
    s.record_event(Some(CUevent_flags::CU_EVENT_DEFAULT))
        .map_err(|e| cuda_err("event", e))
}

impl NcclDdp<'_> {
    /// Rank 0's buffers to every rank, in place, ordered after the compute stream's
    /// work and before its next.
    fn broadcast_buffers(&mut self, model: &mut Model<GLayer>) -> Result<()> {
        self.cs
            .join(&self.gpu.stream)
            .map_err(|e| cuda_err("stream wait", e))?;
        group_start().map_err(|e| nccl_err("group start", e))?;
        let mut res = Ok(());
        for l in &mut model.layers {
            l.visit_buffers(&mut |b| {
                if res.is_ok() {
                    res = self
                        .comm
                        .broadcast_in_place(&mut b.s, 0)
                        .map(|_| ())
                        .map_err(|e| nccl_err("broadcast of buffers", e));
                }
            });
        }
        group_end().map_err(|e| nccl_err("group end", e))?;
        res?;
        self.gpu
            .stream
            .join(&self.cs)
            .map_err(|e| cuda_err("stream wait", e))
    }

    fn launch(&mut self, b: usize) -> Result<()> {
        let start = timing_event(&self.cs)?;
        self.comm
            .all_reduce_in_place(&mut self.buckets[b].buf.s, &ReduceOp::Avg)
            .map_err(|e| nccl_err("all-reduce", e))?;
        let end = timing_event(&self.cs)?;
        self.at.spans.push((start, end));
        Ok(())
    }

    /// Seconds from the step's start event to `e`.
    fn since_start(&self, e: &CudaEvent) -> Result<f64> {
        match &self.at.start {
            Some(s) => Ok(f64::from(s.elapsed_ms(e).map_err(|e| cuda_err("event time", e))?) / 1e3),
            None => Ok(0.0),
        }
    }
}

impl Strategy<GpuExec> for NcclDdp<'_> {
    fn begin_step(&mut self, model: &mut Model<GLayer>, clock: &mut GpuClock) -> Result<()> {
        self.at.start = Some(timing_event(&self.gpu.stream)?);
        if self.has_buffers {
            let m = clock.mark()?;
            self.broadcast_buffers(model)?;
            clock.add(Phase::Comm, m)?;
        }
        Ok(())
    }

    fn grads_ready(&mut self, last: bool, i: usize, layer: &mut GLayer) -> Result<()> {
        let Some(b) = self.owner.get(i).copied().flatten().filter(|_| last) else {
            return Ok(());
        };
        // The communication stream copies this layer's gradients only once backward
        // has written them: the wait NCCL's stream makes in PyTorch's reducer.
        let ready = timing_event(&self.gpu.stream)?;
        self.cs
            .wait(&ready)
            .map_err(|e| cuda_err("stream wait", e))?;
        self.at.backward_end = Some(ready);
        let bucket = &mut self.buckets[b];
        let mut off = bucket
            .layers
            .iter()
            .find(|(l, _)| *l == i)
            .map(|(_, o)| *o)
            .ok_or_else(|| Error::Runtime(format!("ddp: layer {i} is not in bucket {b}")))?;
        let mut res = Ok(());
        let cs = &self.cs;
        layer.visit_params(&mut |p| {
            if res.is_err() {
                return;
            }
            let n = p.w.len();
            res = match &p.g {
                Some(g) => cs
                    .memcpy_dtod(&g.s, &mut bucket.buf.s.slice_mut(off..off + n))
                    .map_err(|e| cuda_err("gradient into its bucket", e)),
                None => Err(Error::Runtime(format!(
                    "ddp: {} has no gradient after backward",
                    p.name
                ))),
            };
            off += n;
        });
        res?;
        bucket.pending = bucket.pending.saturating_sub(1);
        if bucket.pending == 0 {
            self.launch(b)?;
        }
        Ok(())
    }

    fn before_update(
        &mut self,
        model: &mut Model<GLayer>,
        _step: usize,
        clock: &mut GpuClock,
    ) -> Result<()> {
        if let Some((b, _)) = self.buckets.iter().enumerate().find(|(_, b)| b.pending > 0) {
            return Err(Error::Runtime(format!(
                "ddp: bucket {b} was never filled this step ({} layer(s) reported no \
                 gradient)",
                self.buckets[b].pending
            )));
        }
        let m = clock.mark()?;
        self.gpu
            .stream
            .join(&self.cs)
            .map_err(|e| cuda_err("stream wait", e))?;
        for bucket in &mut self.buckets {
            for &(i, mut off) in &bucket.layers {
                let mut res = Ok(());
                let (stream, buf) = (&self.gpu.stream, &bucket.buf);
                model.layers[i].visit_params(&mut |p| {
                    let n = p.w.len();
                    if let (Some(g), true) = (&mut p.g, res.is_ok()) {
                        res = stream
                            .memcpy_dtod(&buf.s.slice(off..off + n), &mut g.s)
                            .map_err(|e| cuda_err("averaged gradient back", e));
                    }
                    off += n;
                });
                res?;
            }
            bucket.pending = bucket.layers.len();
        }
        clock.add(Phase::Comm, m)
    }

    fn end_step(
        &mut self,
        model: &mut Model<GLayer>,
        ev: &StepEvent,
        _: &mut dyn Observer,
    ) -> Result<()> {
        // After the step's host sync: every event below has completed.
        let bw_end = match &self.at.backward_end {
            Some(e) => self.since_start(e)?,
            None => 0.0,
        };
        let mut dev = DeviceStep {
            index: self.rank,
            busy_s: ev.phases.zero_grad
                + ev.phases.forward
                + ev.phases.backward
                + ev.phases.optimizer,
            comm_s: ev.phases.comm,
            ..DeviceStep::default()
        };
        for (a, b) in &self.at.spans {
            let (s, e) = (self.since_start(a)?, self.since_start(b)?);
            dev.allreduce_s += (e - s).max(0.0);
            dev.allreduce_overlapped_s += (e.min(bw_end) - s).max(0.0);
        }
        self.at = StepMarks::default();
        let digest = if self.verify {
            Some(digest(self.gpu, model)?)
        } else {
            None
        };
        self.reports
            .send(StepReport::of(self.rank, ev, vec![dev], digest))
            .map_err(|_| Error::Runtime("ddp: the launcher stopped listening".into()))
    }
}

/// `parallel::param_digest` of a GPU model.
fn digest(gpu: &Gpu, model: &mut Model<GLayer>) -> Result<u64> {
    let mut h = DIGEST_START;
    let mut res = Ok(());
    model.visit_params(&mut |p| {
        if res.is_ok() {
            match gpu.download(&p.w.s) {
                Ok(v) => h = digest_words(h, v.iter().map(|x| x.to_bits())),
                Err(e) => res = Err(e),
            }
        }
    });
    res.map(|()| h)
}

/// Who a GPU rank is, and where its step reports go.
struct Rank {
    rank: usize,
    world: usize,
    id: Id,
    reports: Sender<StepReport>,
    verify: bool,
}

/// A GPU rank's thread: its communicator joined (blocking until every rank has, as
/// ncclCommInitRank does) before its model is built, then the launcher's one body.
fn rank_main(
    rig: GpuRig,
    r: Rank,
    work: Work<'_>,
    (w, k): (&Workload, &Knobs),
) -> Result<Ran<Vec<usize>>> {
    let gpu = &rig.gpu;
    gpu.ctx
        .bind_to_thread()
        .map_err(|e| cuda_err("context", e))?;
    let cs = gpu
        .ctx
        .new_stream()
        .map_err(|e| cuda_err("communication stream", e))?;
    let comm = Comm::from_rank(Arc::clone(&cs), r.rank, r.world, r.id)
        .map_err(|e| nccl_err(&format!("rank {} joining {}", r.rank, r.world), e))?;
    // Outlives the run: cudarc's Comm aborts when dropped.
    let comm = Rc::new(comm);
    // Every rank times its own GEMM candidates (reading the cache first) and only rank 0
    // writes the cache. Ranks may pick different algorithms; the gradients they average
    // are then not bit-equal, but every rank applies the same average, so the replicas
    // still are.
    let setup = NcclSetup {
        r,
        comm: Rc::clone(&comm),
        cs,
        sync_bn: k.sync_bn,
        bucket_mb: k.bucket_mb,
    };
    launcher::device(&rig, setup, work, (w, k), &mut NoObserver, Instant::now())
}

/// A joined GPU rank's DDP: its communicator and the communication stream it runs on.
struct NcclSetup {
    r: Rank,
    comm: Rc<Comm>,
    cs: Arc<CudaStream>,
    sync_bn: bool,
    bucket_mb: usize,
}

impl GradSync<GpuRig> for NcclSetup {
    /// Elements per gradient bucket, in launch order.
    type Out = Vec<usize>;

    /// DDP's constructor (SyncBatchNorm on the communicator, rank 0's parameters
    /// everywhere, the buckets), the loop, then the communication stream drained:
    /// cudarc's `Comm` aborts when dropped, so nothing of this rank's may still be queued.
    fn around(self, p: &mut Prepared<GpuRig>, l: Looper<'_, GpuRig>) -> Result<Synced<Vec<usize>>> {
        let NcclSetup {
            r:
                Rank {
                    rank,
                    reports,
                    verify,
                    ..
                },
            comm,
            cs,
            sync_bn,
            bucket_mb,
        } = self;
        let gpu = Arc::clone(&p.exec.gpu);
        let model = &mut p.model;
        let mut has_bn = false;
        if sync_bn {
            let sync = Rc::new(NcclSync::new(Rc::clone(&comm), Arc::clone(&cs)));
            for layer in &mut model.layers {
                has_bn |= layer.use_sync_bn(&sync);
            }
        }
        // DDP's constructor: rank 0's parameters everywhere.
        cs.join(&gpu.stream)
            .map_err(|e| cuda_err("stream wait", e))?;
        group_start().map_err(|e| nccl_err("group start", e))?;
        let mut res = Ok(());
        model.visit_params(&mut |p| {
            if res.is_ok() {
                res = comm
                    .broadcast_in_place(&mut p.w.s, 0)
                    .map(|_| ())
                    .map_err(|e| nccl_err("broadcast of parameters", e));
            }
        });
        group_end().map_err(|e| nccl_err("group end", e))?;
        res?;
        gpu.stream
            .join(&cs)
            .map_err(|e| cuda_err("stream wait", e))?;
        let mut has_buffers = false;
        for layer in &mut model.layers {
            layer.visit_buffers(&mut |_| has_buffers = true);
        }
        let (buckets, owner) = plan_buckets(model, bucket_mb.saturating_mul(1 << 20), &gpu)?;
        let bucket_lens = buckets.iter().map(|b| b.buf.len()).collect();
        let mut ddp = NcclDdp {
            rank,
            gpu: &gpu,
            comm: &comm,
            cs: Arc::clone(&cs),
            buckets,
            owner,
            has_buffers,
            reports: &reports,
            verify,
            at: StepMarks::default(),
        };
        let trained = l.run(p, &mut ddp)?;
        drop(ddp);
        drop(reports);
        cs.synchronize()
            .map_err(|e| cuda_err("communication stream", e))?;
        Ok(Synced::new(trained, has_bn, bucket_lens))
    }
}

/// Trains `w` under `k` with `parallel = ddp` on `k.devices` GPUs of this machine.
pub(crate) fn run(w: &Workload, k: &Knobs, obs: &mut dyn Observer) -> Result<RunSummary> {
    run_verified(w, k, obs, false)
}

/// `run`; with `verify`, every rank's parameters are digested after every step and the
/// run fails if two ranks differ in a single bit.
pub fn run_verified(
    w: &Workload,
    k: &Knobs,
    obs: &mut dyn Observer,
    verify: bool,
) -> Result<RunSummary> {
    let not_applicable = caps::admit(Backend::Cuda, k, Layout::Multi, obs)?;
    if let Some(l) = w.launch.as_ref().filter(|l| l.world > 1) {
        return dist::run(w, k, obs, l, verify, not_applicable);
    }
    libs::require(&libs::TRAINING)?;
    libs::require_nccl()?;
    let started = Instant::now();
    let world = k.devices;
    let (gpus, devs) = open_gpus(w, world, k.amp == Amp::Tf32)?;
    let version = nccl_version();
    obs.on_note(&format!(
        "CUDA backend: DDP over NCCL {version} on {world} GPU(s) ({}), one thread per GPU",
        gpus.iter()
            .map(|g| g.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    ));
    obs.on_devices(&devs);
    let feed = Feed::open(w, k)?;
    let per_rank = k.batch_size / world;
    let id = Id::new().map_err(|e| nccl_err("unique id", e))?;
    let (tx, rx) = channel();
    let mut ranks: Vec<DeviceThread<'_, Ran<Vec<usize>>>> = Vec::with_capacity(world);
    for (r, (gpu, dev)) in gpus.iter().zip(&devs).enumerate() {
        let rig = GpuRig {
            gpu: Arc::clone(gpu),
            dev: Arc::clone(dev),
        };
        let rank = Rank {
            rank: r,
            world,
            id,
            reports: tx.clone(),
            verify,
        };
        let work = Work {
            source: feed.source(w, k, r, world, per_rank)?,
            classes: feed.classes,
            // Rank 0 evaluates the trained replica and records the choices.
            lead: (r == 0).then_some(&feed),
        };
        ranks.push((
            format!("tune-gpu-rank{r}"),
            Box::new(move || rank_main(rig, rank, work, (w, k))),
        ));
    }
    drop(tx);
    let threads = vec![1; world];
    let (collected, ends) = launcher::spread(ranks, |_| collect(rx, world, &threads, true, w, obs));
    let ends = ends?;
    let snaps: Vec<MemSnapshot> = ends.iter().map(|e| e.lead.snap.clone()).collect();
    let first = ends
        .into_iter()
        .next()
        .ok_or_else(|| Error::Runtime("ddp: no rank finished".into()))?;
    summarize(
        w,
        k,
        obs,
        &gpus[0].name,
        first,
        collected,
        &snaps,
        started,
        not_applicable,
    )
}

fn nccl_version() -> String {
    cudarc::nccl::result::get_nccl_version()
        .map(|v| crate::engine::cuda::versions::decode_version(v.max(0) as u64))
        .unwrap_or_else(|_| "?".into())
}

/// The run's summary from rank 0's end and every rank's steps (`collected`) and memory
/// (`snaps`, one per rank), with DDP's note on its buckets.
#[allow(clippy::too_many_arguments)]
fn summarize(
    w: &Workload,
    k: &Knobs,
    obs: &mut dyn Observer,
    gpu_name: &str,
    first: Ran<Vec<usize>>,
    collected: Collected,
    snaps: &[MemSnapshot],
    started: Instant,
    not_applicable: std::collections::BTreeMap<String, String>,
) -> Result<RunSummary> {
    if collected.mismatch.is_none() {
        note_buckets(
            obs,
            k.devices,
            &first.out,
            k.bucket_mb,
            "NCCL all-reduce on a communication stream",
        );
    }
    let totals = collected.totals.clone();
    run_summary(
        w,
        k,
        obs,
        crate::engine::cuda::backend_label(gpu_name),
        first.lead,
        collected,
        &totals,
        snaps,
        started,
        not_applicable,
    )
}
