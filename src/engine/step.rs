//! The one step loop, for every backend. Per step, in order: zero-grad, then per
//! micro-batch {data, host-to-device, forward (with checkpoint segments) and loss,
//! backward}, then the scaler's inf check, the optimizer update, and one `StepEvent`
//! (a device that runs the scaler itself reports the step's outcome after the sync).
//! What differs between devices (kernels, uploads, the clock, where the loss is read)
//! sits behind [`Exec`]; the order of the work and what each phase covers is here,
//! once. What differs between parallel modes (keeping replicas in step) sits behind
//! [`Strategy`]: DDP is this loop on every rank with a strategy that all-reduces
//! gradients from the gradient-ready hook.

use std::time::Instant;

use crate::engine::amp::GradScaler;
use crate::engine::clock::{Clock, Phase, Phases};
use crate::engine::data::Batch;
use crate::engine::device::{MemCategory, MemSnapshot};
use crate::engine::nn::model::{LayerOps, Model};
use crate::engine::vocab::{Measured, Observer, Source, StepEvent, Workload};
use crate::error::{Error, Result};
use crate::knobs::{Knobs, ZeroGrad};

/// What the step loop needs of a device.
pub(crate) trait Exec {
    type L: LayerOps;
    type Clock: Clock;
    type Labels;
    /// A micro-batch's loss as the device holds it until the step's sync.
    type Loss;

    /// The training pass's context.
    fn ctx(&self) -> &<Self::L as LayerOps>::Ctx;
    /// A fresh clock for one step.
    fn clock(&self) -> Self::Clock;
    /// What the clock measured; called after `read_loss`, the step's sync.
    fn phases(&self, clock: Self::Clock) -> Result<Phases>;
    /// `zero_grad = memset`: zero every gradient that exists.
    fn zero_grads(&mut self, model: &mut Model<Self::L>) -> Result<()>;
    /// The batch where the device computes, and its labels.
    fn upload(&mut self, batch: Batch) -> Result<(<Self::L as LayerOps>::T, Self::Labels)>;
    /// Softmax cross-entropy of `logits`, and the logits' gradient scaled by `scale`.
    fn loss(
        &mut self,
        logits: <Self::L as LayerOps>::T,
        labels: &Self::Labels,
        scale: f32,
    ) -> Result<(Self::Loss, <Self::L as LayerOps>::T)>;
    /// A loss already known on the host and not finite (stops before its backward).
    fn diverged_now(&self, _loss: &Self::Loss) -> Option<f32> {
        None
    }
    /// The scaler's check: every gradient finite.
    fn grads_finite(&mut self, model: &mut Model<Self::L>) -> Result<bool>;
    /// Fault injection: one gradient element becomes +inf, as an fp16 overflow would.
    fn poison_one_grad(&mut self, model: &mut Model<Self::L>) -> Result<()>;
    /// One optimizer step over every parameter, gradients divided by `loss_scale`.
    fn update(&mut self, model: &mut Model<Self::L>, loss_scale: f32) -> Result<()>;
    /// Under a loss scaler: the inf check, the optimizer step unless it overflowed, and
    /// the scaler's update. `Some(applied)` when the host decided; `None` when the device
    /// decided without a host sync, and [`Exec::scaler_outcome`] tells after the step's
    /// sync.
    fn scaled_update(
        &mut self,
        model: &mut Model<Self::L>,
        scaler: &mut GradScaler,
    ) -> Result<Option<bool>> {
        let scale = scaler.scale();
        let applied = scaler.update(self.grads_finite(model)?);
        if applied {
            self.update(model, scale)?;
        }
        Ok(Some(applied))
    }
    /// After `read_loss`: whether the device applied the step, with `scaler` brought to
    /// the device's state. Only called after `scaled_update` returned `None`.
    fn scaler_outcome(&mut self, _scaler: &mut GradScaler) -> Result<bool> {
        Err(Error::Runtime(
            "this backend decides loss-scaled steps on the host".into(),
        ))
    }
    /// `zero_grad = none`: drop the gradient buffers.
    fn release_grads(&mut self, model: &mut Model<Self::L>);
    /// The step's mean loss over its micro-batches (the one host sync of a step).
    fn read_loss(&mut self, losses: Vec<Self::Loss>, accum: usize) -> Result<f32>;
    fn mem(&self) -> MemSnapshot;
    /// The evaluation pass: BN running statistics, nothing saved for backward.
    fn eval_ctx(&self) -> <Self::L as LayerOps>::Ctx;
    /// How many rows of `logits` predict their label.
    fn correct(&mut self, logits: <Self::L as LayerOps>::T, labels: &Self::Labels)
        -> Result<usize>;
}

/// Held-out accuracy, on any backend: the same batches, the same model walk, the same
/// count, so a CPU and a GPU accuracy mean one thing.
pub(crate) fn evaluate<B: Exec>(
    b: &mut B,
    model: &mut Model<B::L>,
    test: std::sync::Arc<dyn crate::engine::data::Dataset>,
    norm: &crate::engine::data::Normalize,
) -> Result<f64> {
    let ctx = b.eval_ctx();
    let (mut correct, mut total) = (0usize, 0usize);
    for batch in crate::engine::data::Loader::eval_batches(test, norm, 256) {
        let batch = batch?;
        let n = batch.n;
        let (x, labels) = b.upload(batch)?;
        let logits = model.forward(x, &ctx, None)?;
        correct += b.correct(logits, &labels)?;
        total += n;
    }
    if total == 0 {
        return Err(Error::Invalid("the held-out set is empty".into()));
    }
    Ok(correct as f64 / total as f64)
}

/// How the loop keeps replicas in step, as hooks at the points where a parallel mode
/// differs from single-device training. Every hook defaults to doing nothing, which is
/// [`Local`]: monomorphised away on one device. A strategy charges its own waiting to
/// [`Phase::Comm`] on the step's clock.
pub(crate) trait Strategy<B: Exec> {
    /// After zero-grad, before the first micro-batch (DDP: `broadcast_buffers`).
    fn begin_step(&mut self, _model: &mut Model<B::L>, _clock: &mut B::Clock) -> Result<()> {
        Ok(())
    }
    /// A micro-batch's forward (DP: replicate, scatter the rows, forward on every
    /// device, gather the outputs, so that the loss sees the whole batch).
    fn forward(
        &mut self,
        model: &mut Model<B::L>,
        x: Tensor<B>,
        ctx: &<B::L as LayerOps>::Ctx,
        seg: Option<usize>,
    ) -> Result<Tensor<B>> {
        model.forward(x, ctx, seg)
    }
    /// Right before a micro-batch's backward, with the logits' gradient; returns what
    /// this device's backward starts from (DP: its rows, the others' sent to them).
    /// `last` is the step's last micro-batch, whose gradients are final.
    fn before_backward(&mut self, _last: bool, dy: Tensor<B>) -> Result<Tensor<B>> {
        Ok(dy)
    }
    /// Top-level layer `i` finished its backward (reverse order): its gradients are
    /// final for this micro-batch (DDP: fill buckets and launch them on the last one).
    fn grads_ready(&mut self, _last: bool, _i: usize, _layer: &mut B::L) -> Result<()> {
        Ok(())
    }
    /// A micro-batch's backward is done (DP: add the replicas' gradients into device 0's).
    fn after_backward(&mut self, _last: bool, _model: &mut Model<B::L>) -> Result<()> {
        Ok(())
    }
    /// Every micro-batch is done, before the scaler's check and the optimizer (DDP: wait
    /// for the buckets and write the averaged gradients back).
    fn before_update(
        &mut self,
        _model: &mut Model<B::L>,
        _step: usize,
        _clock: &mut B::Clock,
    ) -> Result<()> {
        Ok(())
    }
    /// The step is finished: report it (DDP: a per-rank report to the launcher).
    fn end_step(
        &mut self,
        _model: &mut Model<B::L>,
        ev: &StepEvent,
        obs: &mut dyn Observer,
    ) -> Result<()> {
        obs.on_step(ev);
        Ok(())
    }
}

/// The backend's tensor.
pub(crate) type Tensor<B> = <<B as Exec>::L as LayerOps>::T;

/// One device, nothing to keep in step.
pub(crate) struct Local;
impl<B: Exec> Strategy<B> for Local {}

/// What the loop hands back besides the measurements.
pub(crate) struct Trained {
    pub measured: Measured,
    pub skipped_steps: Vec<usize>,
}

/// Runs `w.steps` optimizer steps of `model` on `b`, kept in step with its peers by `sync`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn train_with<B: Exec, S: Strategy<B>>(
    b: &mut B,
    sync: &mut S,
    model: &mut Model<B::L>,
    source: &mut Source,
    w: &Workload,
    k: &Knobs,
    scaler: &mut Option<GradScaler>,
    obs: &mut dyn Observer,
    started: Instant,
) -> Result<Trained> {
    let seg = k.checkpoint.segment_len(model.layers.len());
    let accum = k.grad_accum;
    let mut skipped_steps = Vec::new();
    let mut step_times = Vec::with_capacity(w.steps);
    let mut losses = Vec::with_capacity(w.steps);
    let mut phase_sum = Phases::default();
    let mut grad_between = 0;
    for step in 0..w.steps {
        let t_step = Instant::now();
        let mut clock = b.clock();
        let mut data_wait = 0.0;
        let m = clock.mark()?;
        if k.zero_grad == ZeroGrad::Memset {
            b.zero_grads(model)?;
        }
        clock.add(Phase::ZeroGrad, m)?;
        sync.begin_step(model, &mut clock)?;
        let mut micro = Vec::with_capacity(accum);
        for mi in 0..accum {
            let last = mi + 1 == accum;
            let t = Instant::now();
            let batch = source.next()?;
            data_wait += t.elapsed().as_secs_f64();
            let m = clock.mark()?;
            let (x, labels) = b.upload(batch)?;
            clock.add(Phase::H2d, m)?;

            let m = clock.mark()?;
            // The loss runs in f32 (as under autocast); its gradient is scaled, then
            // stored like any activation gradient, which is where fp16 would underflow.
            let logits = sync.forward(model, x, b.ctx(), seg)?;
            let loss_scale = scaler.as_ref().map_or(1.0, GradScaler::scale);
            let (loss, dlogits) = b.loss(logits, &labels, loss_scale / accum as f32)?;
            clock.add(Phase::Forward, m)?;
            if let Some(bad) = b.diverged_now(&loss) {
                model.clear_saved();
                return Err(Error::Diverged { step, loss: bad });
            }
            micro.push(loss);

            let m = clock.mark()?;
            let dy = sync.before_backward(last, dlogits)?;
            model.backward_timed(dy, b.ctx(), seg, &mut clock, &mut |i, l| {
                sync.grads_ready(last, i, l)
            })?;
            sync.after_backward(last, model)?;
            clock.add(Phase::Backward, m)?;
        }
        sync.before_update(model, step, &mut clock)?;
        if w.inject_overflow_at == Some(step) {
            b.poison_one_grad(model)?;
        }
        let m = clock.mark()?;
        let loss_scale = scaler.as_ref().map(GradScaler::scale);
        let decided = match scaler.as_mut() {
            Some(sc) => b.scaled_update(model, sc)?,
            None => {
                b.update(model, 1.0)?;
                Some(true)
            }
        };
        clock.add(Phase::Optimizer, m)?;
        if k.zero_grad == ZeroGrad::None {
            let m = clock.mark()?;
            b.release_grads(model);
            clock.add(Phase::ZeroGrad, m)?;
        }
        let loss = b.read_loss(micro, accum)?;
        let apply = match (decided, scaler.as_mut()) {
            (Some(applied), _) => applied,
            (None, Some(sc)) => b.scaler_outcome(sc)?,
            (None, None) => true,
        };
        if !apply {
            skipped_steps.push(step);
            obs.on_note(&format!(
                "step {step}: gradient overflow at loss scale {}, step skipped",
                loss_scale.unwrap_or(1.0)
            ));
        }
        let step_s = t_step.elapsed().as_secs_f64();
        let mut ph = b.phases(clock)?;
        ph.data_wait += data_wait;
        if !loss.is_finite() {
            model.clear_saved();
            return Err(Error::Diverged { step, loss });
        }
        let mem_after = b.mem();
        grad_between = mem_after.current_of(MemCategory::Grads);
        step_times.push(step_s);
        losses.push(loss);
        if step >= w.warmup {
            phase_sum.add(&ph);
        }
        let ev = StepEvent {
            step,
            steps: w.steps,
            loss,
            samples: k.batch_size * accum,
            step_s,
            phases: ph,
            mem_after,
            loss_scale,
            skipped: !apply,
        };
        sync.end_step(model, &ev, obs)?;
    }
    Ok(Trained {
        measured: Measured {
            step_times,
            losses,
            phase_sum,
            grad_between,
            started,
        },
        skipped_steps,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::engine::clock::HostClock;
    use crate::engine::cpu::CpuExec;
    use crate::engine::data::ImageShape;
    use crate::engine::device::Device;
    use crate::engine::nn::zoo::{self, ModelKind};
    use crate::engine::ops::layer::{Ctx, Layer};
    use crate::engine::optim::{OptimConfig, OptimKind, Optimizer};
    use crate::engine::vocab::{synthetic_batch, NoObserver};

    /// Writes down every hook call, and checks at `before_update` that every
    /// parameter already holds its gradient and no weight has moved yet.
    struct Record(Vec<String>, Vec<f32>);

    fn weights(model: &mut Model) -> Vec<f32> {
        let mut v = Vec::new();
        model.visit_params(&mut |p| v.extend_from_slice(p.w.f32().unwrap()));
        v
    }

    impl Strategy<CpuExec> for Record {
        fn begin_step(&mut self, model: &mut Model, _: &mut HostClock) -> Result<()> {
            self.1 = weights(model);
            self.0.push("begin".into());
            Ok(())
        }
        fn forward(
            &mut self,
            model: &mut Model,
            x: crate::engine::tensor::Tensor,
            ctx: &Ctx,
            seg: Option<usize>,
        ) -> Result<crate::engine::tensor::Tensor> {
            self.0.push("forward".into());
            model.forward(x, ctx, seg)
        }
        fn before_backward(
            &mut self,
            last: bool,
            dy: crate::engine::tensor::Tensor,
        ) -> Result<crate::engine::tensor::Tensor> {
            self.0.push(format!("backward last={last}"));
            Ok(dy)
        }
        fn grads_ready(&mut self, last: bool, i: usize, _: &mut Box<dyn Layer>) -> Result<()> {
            self.0.push(format!("ready {i} last={last}"));
            Ok(())
        }
        fn after_backward(&mut self, last: bool, _: &mut Model) -> Result<()> {
            self.0.push(format!("after last={last}"));
            Ok(())
        }
        fn before_update(
            &mut self,
            model: &mut Model,
            step: usize,
            _: &mut HostClock,
        ) -> Result<()> {
            let mut missing = 0;
            model.visit_params(&mut |p| missing += usize::from(p.g.is_none()));
            let moved = weights(model) != self.1;
            self.0
                .push(format!("update {step} missing={missing} moved={moved}"));
            Ok(())
        }
        fn end_step(
            &mut self,
            _: &mut Model,
            ev: &StepEvent,
            obs: &mut dyn Observer,
        ) -> Result<()> {
            self.0.push(format!("end {}", ev.step));
            obs.on_step(ev);
            Ok(())
        }
    }

    #[test]
    fn strategy_hooks_run_in_step_order_with_final_gradients_before_the_update() {
        let dev = Device::cpu(0, 1);
        let kind = ModelKind::Mlp;
        let mut model = zoo::build(kind, 10, 0, &dev).unwrap();
        let layers = model.layers.len();
        let [h, w, c] = kind.input();
        let k = Knobs {
            batch_size: 4,
            grad_accum: 2,
            ..Knobs::default()
        };
        let mut source = Source::Fixed(synthetic_batch(ImageShape { h, w, c }, 4, 10, 0));
        let wl = Workload {
            steps: 2,
            warmup: 0,
            ..Workload::new(kind, "synthetic")
        };
        let mut exec = CpuExec {
            ctx: Ctx::train(&dev),
            dev: Arc::clone(&dev),
            opt: Optimizer::new(OptimConfig::of(OptimKind::Sgd, 0.01).unwrap()).unwrap(),
            classes: 10,
        };
        let mut rec = Record(Vec::new(), Vec::new());
        let t = train_with(
            &mut exec,
            &mut rec,
            &mut model,
            &mut source,
            &wl,
            &k,
            &mut None,
            &mut NoObserver,
            Instant::now(),
        )
        .unwrap();
        assert_eq!(t.measured.losses.len(), 2);

        let mut want = Vec::new();
        for step in 0..2 {
            want.push("begin".to_string());
            for last in [false, true] {
                want.push("forward".into());
                want.push(format!("backward last={last}"));
                want.extend((0..layers).rev().map(|i| format!("ready {i} last={last}")));
                want.push(format!("after last={last}"));
            }
            want.push(format!("update {step} missing=0 moved=false"));
            want.push(format!("end {step}"));
        }
        assert_eq!(rec.0, want);
    }
}
