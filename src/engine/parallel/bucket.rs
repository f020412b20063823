//! DDP's gradient buckets (PyTorch's `Reducer`): parameters grouped in reverse order into
//! buckets of about `bucket_mb`; as backward finishes each layer, its gradients are
//! copied into their bucket, and a bucket whose gradients are all there goes to the
//! communication thread to be all-reduced (averaged) while backward goes on with the
//! layers below. After backward the step waits for the buckets still in flight and
//! copies the averaged gradients back.

use std::ops::Range;
use std::sync::mpsc::{Receiver, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::engine::collective::{Collective, ReduceOp};
use crate::engine::device::{Device, MemCategory};
use crate::engine::nn::model::Model;
use crate::engine::ops::layer::Layer;
use crate::engine::parallel::summary::DeviceClock;
use crate::engine::tensor::Tensor;
use crate::error::{Error, Result};

/// Where each parameter sits: global index = position in `Model::visit_params` order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamLayout {
    /// Per top-level layer, its parameters' global indices.
    pub layers: Vec<Range<usize>>,
    /// Elements per parameter.
    pub lens: Vec<usize>,
}

impl ParamLayout {
    pub fn of(model: &mut Model) -> ParamLayout {
        let mut layers = Vec::with_capacity(model.layers.len());
        let mut lens = Vec::new();
        for l in &mut model.layers {
            let start = lens.len();
            l.visit_params(&mut |p| lens.push(p.len()));
            layers.push(start..lens.len());
        }
        ParamLayout { layers, lens }
    }
}

/// Buckets as ranges of global parameter indices, in the order they fill during backward
/// (the last parameters first). Parameters are taken from the end until a bucket holds
/// at least `cap_bytes`; the last bucket takes what is left.
pub fn plan_buckets(lens: &[usize], cap_bytes: usize) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut hi = lens.len();
    let mut bytes = 0usize;
    for i in (0..lens.len()).rev() {
        bytes += lens[i] * 4;
        if bytes >= cap_bytes.max(1) {
            out.push(i..hi);
            hi = i;
            bytes = 0;
        }
    }
    if hi > 0 {
        out.push(0..hi);
    }
    out
}

/// A bucket on its way to or back from the communication thread.
pub struct Job {
    pub bucket: usize,
    pub buf: Tensor,
    /// When backward handed it over (seconds since the run started).
    pub launch_s: f64,
}

/// A finished all-reduce, with when it ran (seconds since the run started).
pub struct Done {
    pub bucket: usize,
    pub buf: Tensor,
    pub launch_s: f64,
    pub start_s: f64,
    pub end_s: f64,
}

/// The communication thread: all-reduces buckets in the order they arrive. Returns when
/// the reducer hangs up, or on the first failed collective (its error; the reducer sees
/// the hang-up).
pub fn comm_loop(
    coll: Arc<dyn Collective>,
    jobs: Receiver<Job>,
    done: Sender<Done>,
    clock: Arc<DeviceClock>,
    t0: Instant,
) -> Result<()> {
    for mut job in jobs {
        let start = t0.elapsed();
        coll.all_reduce(&mut job.buf, ReduceOp::Avg)?;
        let end = t0.elapsed();
        clock.add_comm(end.saturating_sub(start));
        let d = Done {
            bucket: job.bucket,
            buf: job.buf,
            launch_s: job.launch_s,
            start_s: start.as_secs_f64(),
            end_s: end.as_secs_f64(),
        };
        if done.send(d).is_err() {
            break;
        }
    }
    Ok(())
}

/// One all-reduce of one bucket in one step, for traces.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BucketSpan {
    pub step: usize,
    pub bucket: usize,
    /// Handed to the communication thread by backward.
    pub launch_s: f64,
    /// The all-reduce began (on the communication thread) and ended.
    pub start_s: f64,
    pub end_s: f64,
}

pub struct Reducer {
    buckets: Vec<Range<usize>>,
    /// The flat buffer of each bucket; `None` while it is with the communication thread.
    bufs: Vec<Option<Tensor>>,
    /// Per parameter: (bucket, offset in its buffer).
    slot: Vec<(usize, usize)>,
    layout: ParamLayout,
    launched: usize,
    jobs: Sender<Job>,
    done: Receiver<Done>,
    t0: Instant,
    /// When the last gradient of the current backward was computed: the entry of the
    /// last `layer_ready` of a layer with parameters.
    grads_done_s: f64,
}

impl Reducer {
    /// Bucket buffers are charged to the gradient category: like PyTorch's reducer (with
    /// `gradient_as_bucket_view=False`), DDP holds a second copy of the gradients.
    pub fn new(
        layout: ParamLayout,
        cap_bytes: usize,
        dev: &Device,
        jobs: Sender<Job>,
        done: Receiver<Done>,
        t0: Instant,
    ) -> Reducer {
        let buckets = plan_buckets(&layout.lens, cap_bytes);
        let mut slot = vec![(0, 0); layout.lens.len()];
        let mut bufs = Vec::with_capacity(buckets.len());
        for (b, r) in buckets.iter().enumerate() {
            let mut off = 0;
            for p in r.clone() {
                slot[p] = (b, off);
                off += layout.lens[p];
            }
            bufs.push(Some(Tensor::zeros(&[off], MemCategory::Grads, dev.mem())));
        }
        Reducer {
            buckets,
            bufs,
            slot,
            layout,
            launched: 0,
            jobs,
            done,
            t0,
            grads_done_s: 0.0,
        }
    }

    /// When the latest backward computed its last gradient (seconds since the run
    /// started). All-reduce time before this moment ran alongside gradient computation.
    pub fn grads_done_s(&self) -> f64 {
        self.grads_done_s
    }

    /// Elements per bucket, in launch order.
    pub fn bucket_lens(&self) -> Vec<usize> {
        self.buckets
            .iter()
            .map(|r| r.clone().map(|p| self.layout.lens[p]).sum())
            .collect()
    }

    fn hung_up() -> Error {
        Error::Runtime("ddp: the gradient communication thread stopped".into())
    }

    /// Top-level layer `i` finished its backward: copy its gradients into their buckets
    /// and launch every bucket that is now complete. Layers report in reverse order, so
    /// after layer `i` every parameter from `i`'s first one on is final.
    pub fn layer_ready(&mut self, i: usize, layer: &mut dyn Layer) -> Result<()> {
        let Some(range) = self.layout.layers.get(i).cloned() else {
            return Err(Error::Runtime(format!(
                "ddp: layer {i} is not in the model"
            )));
        };
        if !range.is_empty() {
            self.grads_done_s = self.t0.elapsed().as_secs_f64();
        }
        let mut idx = range.start;
        let mut res: Result<()> = Ok(());
        layer.visit_params(&mut |p| {
            if res.is_err() {
                return;
            }
            let (b, off) = self.slot[idx];
            idx += 1;
            res = (|| {
                let g = p.g.as_ref().ok_or_else(|| {
                    Error::Runtime(format!(
                        "ddp: parameter '{}' got no gradient (unused parameters are not supported)",
                        p.name
                    ))
                })?;
                let buf = self.bufs[b]
                    .as_mut()
                    .ok_or_else(|| Error::Runtime("ddp: bucket filled twice in a step".into()))?;
                let g = g.f32()?;
                buf.f32_mut()?[off..off + g.len()].copy_from_slice(g);
                Ok(())
            })();
        });
        res?;
        while self.launched < self.buckets.len() && self.buckets[self.launched].start >= range.start
        {
            self.launch()?;
        }
        Ok(())
    }

    fn launch(&mut self) -> Result<()> {
        let b = self.launched;
        let buf = self.bufs[b]
            .take()
            .ok_or_else(|| Error::Runtime("ddp: bucket launched twice in a step".into()))?;
        self.jobs
            .send(Job {
                bucket: b,
                buf,
                launch_s: self.t0.elapsed().as_secs_f64(),
            })
            .map_err(|_| Self::hung_up())?;
        self.launched += 1;
        Ok(())
    }

    /// Waits for every bucket's all-reduce and copies the averaged gradients back into
    /// the parameters. Returns the time spent waiting (exposed communication) and the
    /// all-reduce spans of this step.
    pub fn finish(
        &mut self,
        model: &mut Model,
        step: usize,
    ) -> Result<(Duration, Vec<BucketSpan>)> {
        while self.launched < self.buckets.len() {
            self.launch()?;
        }
        let t = Instant::now();
        let mut spans = Vec::with_capacity(self.buckets.len());
        for _ in 0..self.buckets.len() {
            let d = self.done.recv().map_err(|_| Self::hung_up())?;
            spans.push(BucketSpan {
                step,
                bucket: d.bucket,
                launch_s: d.launch_s,
                start_s: d.start_s,
                end_s: d.end_s,
            });
            self.bufs[d.bucket] = Some(d.buf);
        }
        let waited = t.elapsed();
        self.launched = 0;
        let mut idx = 0;
        let mut res: Result<()> = Ok(());
        let (bufs, slot) = (&self.bufs, &self.slot);
        model.visit_params(&mut |p| {
            if res.is_err() {
                return;
            }
            let (b, off) = slot[idx];
            idx += 1;
            res = (|| {
                let src = bufs[b]
                    .as_ref()
                    .ok_or_else(|| Error::Runtime("ddp: bucket missing after reduce".into()))?
                    .f32()?;
                let (g, _) = p.grad_slot()?;
                let n = g.len();
                g.copy_from_slice(&src[off..off + n]);
                Ok(())
            })();
        });
        res?;
        spans.sort_by_key(|s| s.bucket);
        Ok((waited, spans))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_fill_from_the_last_parameter() {
        // 4 bytes per element: lens in elements.
        let lens = [100, 10, 300, 5, 50];
        assert_eq!(plan_buckets(&lens, 1 << 20), vec![0..5]);
        // cap 1000 B = 250 elements: [50,5,300] closes at 355, then [10,100].
        assert_eq!(plan_buckets(&lens, 1000), vec![2..5, 0..2]);
        // Tiny cap: one parameter per bucket, last first.
        assert_eq!(plan_buckets(&lens, 1), vec![4..5, 3..4, 2..3, 1..2, 0..1]);
        assert!(plan_buckets(&[], 100).is_empty());
    }
}
