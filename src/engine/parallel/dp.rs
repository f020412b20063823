//! DataParallel as `torch.nn.DataParallel` does it, driven by device 0 every step:
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

use crate::engine::device::{Device, MemCategory};
use crate::engine::nn::layer::Ctx;
use crate::engine::nn::model::Model;
use crate::engine::nn::zoo;
use crate::engine::ops::loss::softmax_cross_entropy;
use crate::engine::optim::Optimizer;
use crate::engine::parallel::collective::PEER_STOPPED;
use crate::engine::parallel::summary::{DeviceClock, DeviceStep};
use crate::engine::parallel::{collect, optim_config, pool, Feed, Outcome, StepReport, Trace};
use crate::engine::tensor::Tensor;
use crate::engine::train::{Observer, Phases, Source, Workload};
use crate::error::{Error, Result};
use crate::knobs::{Knobs, ZeroGrad};

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
    let (collected, model) = std::thread::scope(|s| {
        let mut to_replicas = Vec::new();
        let mut from_replicas = Vec::new();
        let mut replica_handles = Vec::new();
        let mut spawn_err = None;
        for i in 1..n {
            let (cmd_tx, cmd_rx) = channel::<Cmd>();
            let (rep_tx, rep_rx) = channel::<Result<Reply>>();
            let (dev, clock) = (Arc::clone(&devs[i]), Arc::clone(&clocks[i]));
            match std::thread::Builder::new()
                .name(format!("tune-dp-dev{i}"))
                .spawn_scoped(s, move || {
                    replica_main(w, k, feed.classes, dev, clock, cmd_rx, rep_tx)
                }) {
                Ok(h) => replica_handles.push(h),
                Err(e) => spawn_err = Some(Error::Runtime(format!("cannot start device {i}: {e}"))),
            }
            to_replicas.push(cmd_tx);
            from_replicas.push(rep_rx);
        }
        let driver = Driver {
            w,
            k,
            devs,
            clocks: &clocks,
            classes: feed.classes,
            source,
            to: to_replicas,
            from: from_replicas,
            reports: tx,
        };
        let driver_handle = match spawn_err {
            Some(e) => Err(e),
            None => std::thread::Builder::new()
                .name("tune-dp-dev0".into())
                .spawn_scoped(s, move || driver_main(driver))
                .map_err(|e| Error::Runtime(format!("cannot start device 0: {e}"))),
        };
        let collected = collect(rx, 1, &threads, false, w, obs);
        let model = driver_handle.and_then(|h| {
            let mut all = vec![(0, h.join())];
            // Replicas end when the driver hangs up; their errors matter only if the
            // driver reports none of its own.
            all.extend(
                replica_handles
                    .into_iter()
                    .enumerate()
                    .map(|(i, h)| (i + 1, h.join().map(|r| r.map(|_| None)))),
            );
            crate::engine::parallel::first_error(all)
        });
        (collected, model)
    });
    let model = model?
        .into_iter()
        .flatten()
        .next()
        .ok_or_else(|| Error::Runtime("dp: device 0 returned no model".into()))?;
    let mut has_bn = false;
    let mut model = model;
    model.visit_buffers(&mut |_, _| has_bn = true);
    Ok((
        Outcome {
            model,
            collected,
            has_batch_norm: has_bn,
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
    let mut model = zoo::build(w.model, classes, w.seed, dev)?;
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

struct Driver<'a> {
    w: &'a Workload,
    k: &'a Knobs,
    devs: &'a [Arc<Device>],
    clocks: &'a [Arc<DeviceClock>],
    classes: usize,
    source: Source,
    to: Vec<Sender<Cmd>>,
    from: Vec<Receiver<Result<Reply>>>,
    reports: Sender<StepReport>,
}

fn driver_main(d: Driver<'_>) -> Result<Option<Model>> {
    let p = pool(d.devs[0].threads, "tune-dev0")?;
    p.install(|| d.train()).map(Some)
}

/// Rows `i*b..(i+1)*b` of a row-major tensor, copied into `dev`'s arena.
fn rows(t: &Tensor, i: usize, b: usize, dev: &Device) -> Result<Tensor> {
    let row: usize = t.shape()[1..].iter().product();
    let mut shape = t.shape().to_vec();
    shape[0] = b;
    let v = t.f32()?[i * b * row..(i + 1) * b * row].to_vec();
    Tensor::from_vec(&shape, v, MemCategory::Activations, dev.mem())
}

/// Times a piece of device 0's work: busy, and optionally communication.
struct Timer<'a> {
    clock: &'a DeviceClock,
}

impl Timer<'_> {
    fn work<R>(&self, f: impl FnOnce() -> R) -> (R, Duration) {
        let t = Instant::now();
        let r = f();
        let d = t.elapsed();
        self.clock.add_busy(d);
        (r, d)
    }
    fn copy<R>(&self, f: impl FnOnce() -> R) -> (R, Duration) {
        let (r, d) = self.work(f);
        self.clock.add_comm(d);
        (r, d)
    }
}

impl Driver<'_> {
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

    fn train(mut self) -> Result<Model> {
        let dev0 = Arc::clone(&self.devs[0]);
        let mut model = zoo::build(self.w.model, self.classes, self.w.seed, &dev0)?;
        let ctx = Ctx {
            amp: self.k.amp,
            ..Ctx::train(&dev0)
        };
        let seg = self.k.checkpoint.segment_len(model.layers.len());
        let mut opt = Optimizer::new(optim_config(self.w))?;
        for step in 0..self.w.steps {
            self.step(step, &mut model, &ctx, seg, &mut opt)?;
        }
        Ok(model)
    }

    fn step(
        &mut self,
        step: usize,
        model: &mut Model,
        ctx: &Ctx,
        seg: Option<usize>,
        opt: &mut Optimizer,
    ) -> Result<()> {
        let (k, n) = (self.k, self.devs.len());
        let accum = k.grad_accum;
        let b = k.batch_size / n;
        let t_step = Instant::now();
        let before: Vec<_> = self.clocks.iter().map(|c| c.read()).collect();
        let dev0 = Arc::clone(&self.devs[0]);
        let timer = Timer {
            clock: &self.clocks[0],
        };
        let mut ph = Phases::default();
        let mut loss_sum = 0.0f32;

        let (r, d) = timer.work(|| -> Result<()> {
            if k.zero_grad == ZeroGrad::Memset {
                let mut res: Result<()> = Ok(());
                model.visit_params(&mut |p| {
                    if let Some(g) = &mut p.g {
                        if let Err(e) = g.f32_mut().map(|v| v.fill(0.0)) {
                            res = Err(e);
                        }
                    }
                });
                res?;
            }
            Ok(())
        });
        r?;
        ph.zero_grad += d.as_secs_f64();

        for _ in 0..accum {
            let t = Instant::now();
            let batch = self.source.next()?;
            ph.data_wait += t.elapsed().as_secs_f64();
            let t = Instant::now();
            let x = Tensor::from_vec(
                &[batch.n, batch.shape.h, batch.shape.w, batch.shape.c],
                batch.x,
                MemCategory::Activations,
                dev0.mem(),
            )?;
            ph.h2d += t.elapsed().as_secs_f64();

            // replicate + scatter, all copies made by device 0
            let (r, d) = timer.copy(|| -> Result<Tensor> {
                for i in 1..n {
                    let dev = &self.devs[i];
                    let mut params = Vec::new();
                    let mut res: Result<()> = Ok(());
                    model.visit_params(&mut |p| {
                        let t = p.w.f32().and_then(|v| {
                            Tensor::from_vec(
                                p.w.shape(),
                                v.to_vec(),
                                MemCategory::Params,
                                dev.mem(),
                            )
                        });
                        match t {
                            Ok(t) => params.push(t),
                            Err(e) => res = Err(e),
                        }
                    });
                    res?;
                    let mut buffers = Vec::new();
                    model.visit_buffers(&mut |_, b| buffers.push(b.clone()));
                    let xi = rows(&x, i, b, dev)?;
                    self.send(
                        i,
                        Cmd::Forward {
                            params,
                            buffers,
                            x: xi,
                        },
                    )?;
                }
                rows(&x, 0, b, &dev0)
            });
            drop(x);
            let x0 = r?;
            ph.comm += d.as_secs_f64();

            let t = Instant::now();
            let (logits0, _) = timer.work(|| model.forward(x0, ctx, seg));
            let logits0 = logits0?;
            let mut outs = Vec::with_capacity(n - 1);
            for i in 1..n {
                match self.recv(i)? {
                    Reply::Logits(l) => outs.push(l),
                    Reply::Grads(_) => {
                        return Err(Error::Runtime(format!(
                            "dp: device {i} answered out of turn"
                        )))
                    }
                }
            }
            ph.forward += t.elapsed().as_secs_f64();

            // gather
            let (full, d) = timer.copy(|| -> Result<Tensor> {
                let classes = logits0.shape()[1];
                let mut v = Vec::with_capacity(k.batch_size * classes);
                v.extend_from_slice(logits0.f32()?);
                for l in &outs {
                    v.extend_from_slice(l.f32()?);
                }
                ctx.from_vec(&[v.len() / classes, classes], v)
            });
            drop(outs);
            drop(logits0);
            let full = full?;
            ph.comm += d.as_secs_f64();

            let (r, d) = timer.work(|| -> Result<(f32, Tensor)> {
                let mut dl = ctx.alloc(full.shape());
                let (loss, _) = softmax_cross_entropy(
                    full.f32()?,
                    &batch.y,
                    self.classes,
                    1.0 / accum as f32,
                    Some(dl.f32_mut()?),
                )?;
                Ok((loss, dl))
            });
            drop(full);
            let (loss, dlogits) = r?;
            ph.forward += d.as_secs_f64();
            if !loss.is_finite() {
                model.clear_saved();
                return Err(Error::Diverged { step, loss });
            }
            loss_sum += loss / accum as f32;

            // scatter the output gradient
            let (r, d) = timer.copy(|| -> Result<Tensor> {
                for i in 1..n {
                    let dy = rows(&dlogits, i, b, &self.devs[i])?;
                    self.send(i, Cmd::Backward { dy })?;
                }
                rows(&dlogits, 0, b, &dev0)
            });
            drop(dlogits);
            let dy0 = r?;
            ph.comm += d.as_secs_f64();

            let t = Instant::now();
            let (bs, _) = timer.work(|| model.backward(dy0, ctx, seg));
            let bs = bs?;
            ph.recompute += bs.recompute.as_secs_f64();
            let mut grads = Vec::with_capacity(n - 1);
            for i in 1..n {
                match self.recv(i)? {
                    Reply::Grads(g) => grads.push(g),
                    Reply::Logits(_) => {
                        return Err(Error::Runtime(format!(
                            "dp: device {i} answered out of turn"
                        )))
                    }
                }
            }
            ph.backward += t.elapsed().as_secs_f64();

            // reduce_add onto device 0, device by device
            let (r, d) = timer.copy(|| -> Result<()> {
                for gs in &grads {
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
            });
            drop(grads);
            r?;
            ph.comm += d.as_secs_f64();
        }

        let (r, d) = timer.work(|| -> Result<()> {
            opt.begin_step();
            let mut idx = 0;
            let mut res: Result<()> = Ok(());
            model.visit_params(&mut |p| {
                if res.is_ok() {
                    res = opt.update(idx, p, 1.0);
                }
                idx += 1;
            });
            res?;
            if k.zero_grad == ZeroGrad::None {
                model.visit_params(&mut |p| p.g = None);
            }
            Ok(())
        });
        r?;
        ph.optimizer += d.as_secs_f64();

        let step_s = t_step.elapsed().as_secs_f64();
        let devices = self
            .clocks
            .iter()
            .zip(&before)
            .enumerate()
            .map(|(index, (c, b))| {
                let dc = c.read().since(b);
                DeviceStep {
                    index,
                    busy_s: dc.busy_s,
                    comm_s: dc.comm_s,
                    ..DeviceStep::default()
                }
            })
            .collect();
        self.reports
            .send(StepReport {
                rank: 0,
                step,
                loss: loss_sum,
                samples: k.batch_size * accum,
                step_s,
                phases: ph,
                mem_after: dev0.mem().snapshot(),
                devices,
                digest: None,
            })
            .map_err(|_| Error::Runtime("dp: the launcher stopped listening".into()))
    }
}
