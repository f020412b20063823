//! DataParallel as `torch.nn.DataParallel` does it, driven by device 0 every step (the
//! one step loop with the `Dp` strategy; steps 1-2 and 4 are its forward hook, 5 its
//! `before_backward`, 6 its `after_backward`):
//!
//! 1. device 0 copies the parameters (and BN buffers) into every other device's arena
//!    (`replicate`); replicas hold them only for the step, as torch's do;
//! 2. it loads the whole batch and copies each device its rows (`scatter`);
//! 3. every device runs forward on its rows, in parallel;
//! 4. device 0 copies the outputs into one tensor (`gather`) and computes the loss;
//! 5. it copies each device its rows of the output gradient, every device runs backward;
//! 6. device 0 adds the replicas' gradients into its own (`reduce_add`) and steps the
//!    optimizer, whose state lives on device 0 only.
//!
//! Device 0 makes every copy and holds the whole batch, the gathered outputs and the
//! optimizer state: that is DP's imbalance, measured here rather than assumed. BN
//! running statistics come from device 0's rows only (the replicas' updates are thrown
//! away with the replicas, as in torch).

use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::engine::clock::HostClock;
use crate::engine::collective::PEER_STOPPED;
use crate::engine::cpu::{CpuExec, CpuRig};
use crate::engine::device::{Device, MemCategory};
use crate::engine::launcher::{self, DeviceThread, GradSync, Lead, Looper, Prepared, Synced, Work};
use crate::engine::nn::model::Model;
use crate::engine::nn::zoo;
use crate::engine::ops::layer::Ctx;
use crate::engine::parallel::summary::{ClockReading, DeviceClock, DeviceStep};
use crate::engine::parallel::{collect, has_batch_norm, pool, Outcome, StepReport, Trace};
use crate::engine::step::Strategy;
use crate::engine::tensor::Tensor;
use crate::engine::vocab::{Feed, NoObserver, Observer, StepEvent, Workload};
use crate::error::{Error, Result};
use crate::knobs::Knobs;

enum Cmd {
    /// Parameters and input rows already in the replica's arena, buffers by value.
    Forward {
        params: Vec<Tensor>,
        buffers: Vec<Vec<f32>>,
        x: Tensor,
    },
    Backward {
        dy: Tensor,
    },
}

enum Reply {
    Logits(Tensor),
    /// Gradients in parameter order, still in the replica's arena.
    Grads(Vec<Tensor>),
}

pub(super) fn run(
    w: &Workload,
    k: &Knobs,
    obs: &mut dyn Observer,
    feed: &Feed,
    devs: &[Arc<Device>],
) -> Result<(Outcome, Trace)> {
    let n = devs.len();
    let source = feed.source(w, k, 0, 1, k.batch_size)?;
    let clocks: Vec<Arc<DeviceClock>> = (0..n).map(|_| Arc::default()).collect();
    let threads: Vec<usize> = devs.iter().map(|d| d.threads).collect();
    let (tx, rx) = channel();
    let mut to = Vec::new();
    let mut from = Vec::new();
    let mut replicas: Vec<DeviceThread<'_, Option<Lead>>> = Vec::new();
    for i in 1..n {
        let (cmd_tx, cmd_rx) = channel::<Cmd>();
        let (rep_tx, rep_rx) = channel::<Result<Reply>>();
        let (dev, clock) = (Arc::clone(&devs[i]), Arc::clone(&clocks[i]));
        replicas.push((
            format!("tune-dp-dev{i}"),
            Box::new(move || {
                replica_main(w, k, feed.classes, dev, clock, cmd_rx, rep_tx).map(|_| None)
            }),
        ));
        to.push(cmd_tx);
        from.push(rep_rx);
    }
    let rig = CpuRig {
        dev: Arc::clone(&devs[0]),
        sync_bn: None,
    };
    let dp = Dp {
        devs,
        clocks: &clocks,
        rows: k.batch_size / n,
        to,
        from,
        reports: tx,
        at: DpMarks::default(),
    };
    let work = Work {
        source,
        classes: feed.classes,
        lead: Some(feed),
    };
    // Device 0 runs the one loop on the whole batch with the DP strategy, then evaluates
    // the module. No scaler: mixed precision is refused for multi-device runs.
    let driver = move || {
        pool(rig.dev.threads, "tune-dev0")?
            .install(|| launcher::device(&rig, dp, work, (w, k), &mut NoObserver, Instant::now()))
            .map(|r| Some(r.lead))
    };
    // Device 0 first: replicas end when the driver hangs up, so their errors matter only
    // if the driver reports none of its own.
    let mut threads_of: Vec<DeviceThread<'_, Option<Lead>>> =
        vec![("tune-dp-dev0".into(), Box::new(driver))];
    threads_of.extend(replicas);
    let (collected, lead) =
        launcher::spread(threads_of, |_| collect(rx, 1, &threads, false, w, obs));
    let lead = lead?
        .into_iter()
        .flatten()
        .next()
        .ok_or_else(|| Error::Runtime("dp: device 0 returned nothing".into()))?;
    // Device 0's memory as training left it; the replicas' now.
    let mut snaps = vec![lead.snap.clone()];
    snaps.extend(devs[1..].iter().map(|d| d.mem().snapshot()));
    Ok((
        Outcome {
            lead,
            collected,
            snaps,
            remote_mem: Vec::new(),
        },
        Trace::default(),
    ))
}

/// Replaces a replica's parameters by empty tensors: it holds real ones only during a step.
fn release_params(model: &mut Model, dev: &Device) {
    model.visit_params(&mut |p| {
        p.w = Tensor::zeros(&[0], MemCategory::Params, dev.mem());
        p.g = None;
    });
}

fn replica_main(
    w: &Workload,
    k: &Knobs,
    classes: usize,
    dev: Arc<Device>,
    clock: Arc<DeviceClock>,
    rx: Receiver<Cmd>,
    tx: Sender<Result<Reply>>,
) -> Result<()> {
    let p = pool(dev.threads, &format!("tune-dev{}", dev.index))?;
    p.install(move || {
        let r = replica_loop(w, k, classes, &dev, &clock, &rx, &tx);
        if let Err(e) = &r {
            // The driver is waiting for this replica: tell it why it will not answer.
            let _ = tx.send(Err(Error::Runtime(format!("device {}: {e}", dev.index))));
        }
        r
    })
}

fn replica_loop(
    w: &Workload,
    k: &Knobs,
    classes: usize,
    dev: &Arc<Device>,
    clock: &DeviceClock,
    rx: &Receiver<Cmd>,
    tx: &Sender<Result<Reply>>,
) -> Result<()> {
    let mut model = zoo::build_with(w.model, classes, w.seed, dev, k.fuse)?;
    release_params(&mut model, dev);
    let ctx = Ctx {
        amp: k.amp,
        ..Ctx::train(dev)
    };
    let seg = k.checkpoint.segment_len(model.layers.len());
    for cmd in rx {
        let t = Instant::now();
        let reply = match cmd {
            Cmd::Forward { params, buffers, x } => {
                let mut ps = params.into_iter();
                model.visit_params(&mut |p| {
                    if let Some(w) = ps.next() {
                        p.w = w;
                    }
                });
                let mut bs = buffers.into_iter();
                model.visit_buffers(&mut |_, b| {
                    if let Some(v) = bs.next() {
                        *b = v;
                    }
                });
                Reply::Logits(model.forward(x, &ctx, seg)?)
            }
            Cmd::Backward { dy } => {
                model.backward(dy, &ctx, seg)?;
                let mut grads = Vec::new();
                let mut missing = None;
                model.visit_params(&mut |p| match p.g.take() {
                    Some(g) => grads.push(g),
                    None => missing = Some(p.name.clone()),
                });
                if let Some(name) = missing {
                    return Err(Error::Runtime(format!(
                        "dp: parameter '{name}' got no gradient on device {}",
                        dev.index
                    )));
                }
                release_params(&mut model, dev);
                Reply::Grads(grads)
            }
        };
        clock.add_busy(t.elapsed());
        if tx.send(Ok(reply)).is_err() {
            break;
        }
    }
    Ok(())
}

/// Rows `i*b..(i+1)*b` of a row-major tensor, copied into `dev`'s arena.
fn rows(t: &Tensor, i: usize, b: usize, dev: &Device) -> Result<Tensor> {
    let row: usize = t.shape()[1..].iter().product();
    let mut shape = t.shape().to_vec();
    shape[0] = b;
    let v = t.f32()?[i * b * row..(i + 1) * b * row].to_vec();
    Tensor::from_vec(&shape, v, MemCategory::Activations, dev.mem())
}

impl GradSync<CpuRig> for Dp<'_> {
    type Out = ();
    fn around(mut self, p: &mut Prepared<CpuRig>, l: Looper<'_, CpuRig>) -> Result<Synced<()>> {
        let trained = l.run(p, &mut self)?;
        // Hanging up ends the replicas' loops.
        drop(self);
        Ok(Synced::new(trained, has_batch_norm(&mut p.model), ()))
    }
}

/// What device 0 did in one step besides what the loop's phases show.
#[derive(Default)]
struct DpMarks {
    /// The replicas' clocks when the step began.
    before: Vec<ClockReading>,
    /// Copies made inside the forward hook (replicate, scatter, gather).
    copy_fwd: Duration,
    /// Copies made inside backward (scatter of the output gradient, reduce_add).
    copy_bwd: Duration,
    /// Device 0's own forward and backward, without waiting for the replicas.
    work: Duration,
    /// The forward hook end to end, so the loss's share of `forward` is known.
    fwd_hook: Duration,
    /// When device 0's own backward started.
    bwd_start: Option<Instant>,
}

/// The DataParallel strategy, driven from device 0: every copy is device 0's work.
struct Dp<'a> {
    devs: &'a [Arc<Device>],
    clocks: &'a [Arc<DeviceClock>],
    /// Rows per device.
    rows: usize,
    to: Vec<Sender<Cmd>>,
    from: Vec<Receiver<Result<Reply>>>,
    reports: Sender<StepReport>,
    at: DpMarks,
}

impl Dp<'_> {
    /// A replica that hung up failed with an error of its own, which the launcher
    /// reports instead of this.
    fn stopped(i: usize) -> Error {
        Error::Runtime(format!("{PEER_STOPPED} (dp: device {i} stopped)"))
    }

    fn recv(&self, i: usize) -> Result<Reply> {
        match self.from[i - 1].recv() {
            Ok(r) => r,
            Err(_) => Err(Self::stopped(i)),
        }
    }

    fn send(&self, i: usize, c: Cmd) -> Result<()> {
        self.to[i - 1].send(c).map_err(|_| Self::stopped(i))
    }

    fn out_of_turn(i: usize) -> Error {
        Error::Runtime(format!("dp: device {i} answered out of turn"))
    }

    /// `replicate` + `scatter`: every other device gets the parameters, buffers and its
    /// rows; device 0 keeps rows 0.
    fn replicate_scatter(&self, model: &mut Model, x: &Tensor) -> Result<Tensor> {
        for (i, dev) in self.devs.iter().enumerate().skip(1) {
            let mut params = Vec::new();
            let mut res: Result<()> = Ok(());
            model.visit_params(&mut |p| {
                let t = p.w.f32().and_then(|v| {
                    Tensor::from_vec(p.w.shape(), v.to_vec(), MemCategory::Params, dev.mem())
                });
                match t {
                    Ok(t) => params.push(t),
                    Err(e) => res = Err(e),
                }
            });
            res?;
            let mut buffers = Vec::new();
            model.visit_buffers(&mut |_, b| buffers.push(b.clone()));
            let xi = rows(x, i, self.rows, dev)?;
            self.send(
                i,
                Cmd::Forward {
                    params,
                    buffers,
                    x: xi,
                },
            )?;
        }
        rows(x, 0, self.rows, &self.devs[0])
    }

    /// `gather`: device 0's logits then every replica's, one tensor on device 0.
    fn gather(&self, logits0: Tensor, outs: Vec<Tensor>, ctx: &Ctx) -> Result<Tensor> {
        let classes = logits0.shape()[1];
        let mut v = Vec::with_capacity(self.rows * self.devs.len() * classes);
        v.extend_from_slice(logits0.f32()?);
        for l in &outs {
            v.extend_from_slice(l.f32()?);
        }
        ctx.from_vec(&[v.len() / classes, classes], v)
    }

    /// `reduce_add` onto device 0, device by device.
    fn reduce_add(model: &mut Model, grads: &[Vec<Tensor>]) -> Result<()> {
        for gs in grads {
            let mut idx = 0;
            let mut res: Result<()> = Ok(());
            model.visit_params(&mut |p| {
                if res.is_err() {
                    return;
                }
                res = (|| {
                    let src = gs
                        .get(idx)
                        .ok_or_else(|| Error::Runtime("dp: gradient count differs".into()))?
                        .f32()?;
                    let (g, _) = p.grad_slot()?;
                    for (a, b) in g.iter_mut().zip(src) {
                        *a += b;
                    }
                    Ok(())
                })();
                idx += 1;
            });
            res?;
        }
        Ok(())
    }
}

impl Strategy<CpuExec> for Dp<'_> {
    fn begin_step(&mut self, _: &mut Model, _: &mut HostClock) -> Result<()> {
        self.at = DpMarks {
            before: self.clocks.iter().map(|c| c.read()).collect(),
            ..DpMarks::default()
        };
        Ok(())
    }

    fn forward(
        &mut self,
        model: &mut Model,
        x: Tensor,
        ctx: &Ctx,
        seg: Option<usize>,
    ) -> Result<Tensor> {
        let t_hook = Instant::now();
        let t = Instant::now();
        let x0 = self.replicate_scatter(model, &x);
        drop(x);
        let x0 = x0?;
        self.at.copy_fwd += t.elapsed();

        let t = Instant::now();
        let logits0 = model.forward(x0, ctx, seg)?;
        self.at.work += t.elapsed();
        let mut outs = Vec::with_capacity(self.devs.len() - 1);
        for i in 1..self.devs.len() {
            match self.recv(i)? {
                Reply::Logits(l) => outs.push(l),
                Reply::Grads(_) => return Err(Self::out_of_turn(i)),
            }
        }

        let t = Instant::now();
        let full = self.gather(logits0, outs, ctx);
        self.at.copy_fwd += t.elapsed();
        self.at.fwd_hook += t_hook.elapsed();
        full
    }

    fn before_backward(&mut self, _last: bool, dy: Tensor) -> Result<Tensor> {
        let t = Instant::now();
        let mut res = Ok(());
        for i in 1..self.devs.len() {
            res = rows(&dy, i, self.rows, &self.devs[i])
                .and_then(|d| self.send(i, Cmd::Backward { dy: d }));
            if res.is_err() {
                break;
            }
        }
        let dy0 = res.and_then(|()| rows(&dy, 0, self.rows, &self.devs[0]));
        drop(dy);
        self.at.copy_bwd += t.elapsed();
        self.at.bwd_start = Some(Instant::now());
        dy0
    }

    fn after_backward(&mut self, _last: bool, model: &mut Model) -> Result<()> {
        if let Some(t) = self.at.bwd_start.take() {
            self.at.work += t.elapsed();
        }
        let mut grads = Vec::with_capacity(self.devs.len() - 1);
        for i in 1..self.devs.len() {
            match self.recv(i)? {
                Reply::Grads(g) => grads.push(g),
                Reply::Logits(_) => return Err(Self::out_of_turn(i)),
            }
        }
        let t = Instant::now();
        let r = Self::reduce_add(model, &grads);
        drop(grads);
        self.at.copy_bwd += t.elapsed();
        r
    }

    fn end_step(&mut self, _: &mut Model, ev: &StepEvent, _: &mut dyn Observer) -> Result<()> {
        let at = std::mem::take(&mut self.at);
        let (copy_fwd, copy_bwd) = (at.copy_fwd.as_secs_f64(), at.copy_bwd.as_secs_f64());
        // The loop timed the copies as part of forward and backward; they are
        // communication, as torch's profiler would show them.
        let mut phases = ev.phases;
        phases.forward = (phases.forward - copy_fwd).max(0.0);
        phases.backward = (phases.backward - copy_bwd).max(0.0);
        phases.comm += copy_fwd + copy_bwd;
        let loss_s = (ev.phases.forward - at.fwd_hook.as_secs_f64()).max(0.0);
        let comm0 = copy_fwd + copy_bwd;
        let busy0 =
            ev.phases.zero_grad + at.work.as_secs_f64() + loss_s + comm0 + ev.phases.optimizer;
        let mut devices = vec![DeviceStep {
            index: 0,
            busy_s: busy0,
            comm_s: comm0,
            ..DeviceStep::default()
        }];
        for (index, (c, b)) in self.clocks.iter().zip(&at.before).enumerate().skip(1) {
            let dc = c.read().since(b);
            devices.push(DeviceStep {
                index,
                busy_s: dc.busy_s,
                comm_s: dc.comm_s,
                ..DeviceStep::default()
            });
        }
        self.reports
            .send(StepReport {
                rank: 0,
                step: ev.step,
                loss: ev.loss,
                samples: ev.samples,
                step_s: ev.step_s,
                phases,
                mem_after: ev.mem_after.clone(),
                devices,
                digest: None,
            })
            .map_err(|_| Error::Runtime("dp: the launcher stopped listening".into()))
    }
}
