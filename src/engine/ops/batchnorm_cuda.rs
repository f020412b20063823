//! BatchNorm2d on the CUDA backend, beside the CPU op in `batchnorm.rs`: channel
//! statistics by reduction kernels, running statistics updated once per step (not on a
//! checkpoint's recompute). f32 throughout; under AMP the input is widened, and the
//! output, the normalised input kept for backward and the input gradient are stored in
//! the half type, as on the CPU backend. Under DDP with `sync_bn` the statistics and the
//! input gradient's sums are taken over every rank's rows (`cuda::sync_bn`); the
//! parameter gradients stay local, for DDP's all-reduce to average like every other.

use std::rc::Rc;

use crate::cuda_launch;
use crate::engine::cuda::gpu::{DBuf, GTensor, Gpu};
use crate::engine::cuda::kernels::{channel_reduce, elementwise, per_item};
use crate::engine::cuda::sync_bn::NcclSync;
use crate::engine::device::MemCategory;
use crate::engine::ops::layer_cuda::{missing, out, shape_err, store, GParam, GpuLayer, Pass};
use crate::error::Result;

pub struct GBatchNorm {
    pub(crate) c: usize,
    pub(crate) eps: f32,
    pub(crate) momentum: f32,
    pub(crate) gamma: GParam,
    pub(crate) beta: GParam,
    pub(crate) run_mean: DBuf,
    pub(crate) run_var: DBuf,
    pub(crate) saved: Option<(GTensor, DBuf)>,
    /// SyncBatchNorm's communicator, under DDP with `sync_bn`.
    pub(crate) sync: Option<Rc<NcclSync>>,
    /// The following ReLU fused in (`fuse = on`, ops/fused.rs): the `bn_relu_*` kernels.
    pub(crate) relu: bool,
}

impl GpuLayer for GBatchNorm {
    fn name(&self) -> &'static str {
        if self.relu {
            "batchnorm_relu"
        } else {
            "batchnorm2d"
        }
    }
    fn forward(&mut self, x: GTensor, gpu: &Gpu, p: Pass) -> Result<GTensor> {
        let x = gpu.widen(&x)?;
        let c = self.c;
        if x.shape.last() != Some(&c) || x.is_empty() {
            return Err(shape_err(
                "batchnorm",
                format!("input {:?} does not end in {c} channels", x.shape),
            ));
        }
        let rows = x.len() / c;
        let (n, ci) = (x.len() as u64, c as i32);
        let mut invstd = gpu.alloc(c, MemCategory::Workspace)?;
        let mut y = out(gpu, x.len(), p)?;
        let forward = if self.relu {
            "bn_relu_forward"
        } else {
            "bn_forward"
        };
        if !p.train {
            cuda_launch!(
                gpu,
                "bn_invstd",
                per_item(c),
                &mut invstd.s,
                &self.run_var.s,
                &ci,
                &self.eps
            )?;
            let null = 0u64;
            cuda_launch!(
                gpu,
                forward,
                elementwise(x.len()),
                &mut y.s,
                &null,
                x.s(),
                &self.run_mean.s,
                &invstd.s,
                &self.gamma.w.s,
                &self.beta.w.s,
                &n,
                &ci
            )?;
            return store(gpu, GTensor::new(&x.shape, y)?, p);
        }
        // Under SyncBatchNorm `mean` carries the row count at [c] through the sums.
        let sync = self.sync.as_deref();
        let mut mean = gpu.zeros(c + usize::from(sync.is_some()), MemCategory::Workspace)?;
        let mut var = gpu.zeros(c, MemCategory::Workspace)?;
        gpu.channel_sum(&mut mean.s, x.s(), c)?;
        match sync {
            Some(s) => {
                NcclSync::put_count(gpu, &mut mean, c, rows)?;
                s.sum(gpu, &mut mean)?;
                cuda_launch!(gpu, "bn_sync_mean", per_item(c), &mut mean.s, &ci)?;
            }
            None => {
                let (inv_m, cn) = (1.0 / rows as f32, c as u64);
                cuda_launch!(gpu, "scale", elementwise(c), &mut mean.s, &inv_m, &cn)?;
            }
        }
        let r = rows as u64;
        cuda_launch!(
            gpu,
            "channel_sqdev",
            channel_reduce(rows, c),
            &mut var.s,
            x.s(),
            &mean.s,
            &r,
            &ci
        )?;
        let update = i32::from(!p.recompute);
        match sync {
            Some(s) => {
                s.sum(gpu, &mut var)?;
                cuda_launch!(
                    gpu,
                    "bn_sync_finish",
                    per_item(c),
                    &mut mean.s,
                    &mut var.s,
                    &mut invstd.s,
                    &mut self.run_mean.s,
                    &mut self.run_var.s,
                    &ci,
                    &self.eps,
                    &self.momentum,
                    &update
                )?;
            }
            None => {
                let m = rows as f32;
                cuda_launch!(
                    gpu,
                    "bn_finish",
                    per_item(c),
                    &mut mean.s,
                    &mut var.s,
                    &mut invstd.s,
                    &mut self.run_mean.s,
                    &mut self.run_var.s,
                    &ci,
                    &m,
                    &self.eps,
                    &self.momentum,
                    &update
                )?;
            }
        }
        let save = p.save;
        let mut xhat = if save {
            Some(out(gpu, x.len(), p)?)
        } else {
            None
        };
        let null = 0u64;
        {
            use cudarc::driver::PushKernelArg;
            let f = gpu.kernels.get(forward)?;
            let mut b = gpu.stream.launch_builder(f);
            b.arg(&mut y.s);
            match &mut xhat {
                Some(h) => b.arg(&mut h.s),
                None => b.arg(&null),
            };
            b.arg(x.s())
                .arg(&mean.s)
                .arg(&invstd.s)
                .arg(&self.gamma.w.s)
                .arg(&self.beta.w.s)
                .arg(&n)
                .arg(&ci);
            // SAFETY: bn_forward and bn_relu_forward(y, xhat|null, x, mean, invstd, gamma,
            // beta, n, c): the arguments above in that order; every buffer holds n or c
            // floats.
            unsafe { b.launch(elementwise(x.len())) }
                .map_err(|e| crate::engine::cuda::gpu::cuda_err(&format!("kernel {forward}"), e))?;
        }
        if let Some(h) = xhat {
            self.saved = Some((store(gpu, GTensor::new(&x.shape, h)?, p)?, invstd));
        }
        store(gpu, GTensor::new(&x.shape, y)?, p)
    }
    fn backward(
        &mut self,
        dy: GTensor,
        need_dx: bool,
        gpu: &Gpu,
        p: Pass,
    ) -> Result<Option<GTensor>> {
        let (xhat, invstd) = self.saved.take().ok_or_else(|| missing("batchnorm"))?;
        let (xhat, dy) = (gpu.widen(&xhat)?, gpu.widen(&dy)?);
        let c = self.c;
        let rows = xhat.len() / c;
        let (r, ci) = (rows as u64, c as i32);
        // The fused ReLU's mask goes inside the sums and the input gradient's kernel,
        // except under SyncBatchNorm, whose sums cross ranks in between: masked up front.
        let fused = self.relu && self.sync.is_none();
        let dy = if self.relu && !fused {
            let mut dm = gpu.alloc(dy.len(), MemCategory::Workspace)?;
            let n = dy.len() as u64;
            cuda_launch!(
                gpu,
                "bn_relu_mask",
                elementwise(dy.len()),
                &mut dm.s,
                dy.s(),
                xhat.s(),
                &self.gamma.w.s,
                &self.beta.w.s,
                &n,
                &ci
            )?;
            GTensor::new(&dy.shape, dm)?
        } else {
            dy
        };
        let mut dbeta = gpu.zeros(c, MemCategory::Workspace)?;
        let mut dgamma = gpu.zeros(c, MemCategory::Workspace)?;
        if fused {
            cuda_launch!(
                gpu,
                "bn_relu_channel_sums",
                channel_reduce(rows, c),
                &mut dbeta.s,
                &mut dgamma.s,
                dy.s(),
                xhat.s(),
                &self.gamma.w.s,
                &self.beta.w.s,
                &r,
                &ci
            )?;
        } else {
            gpu.channel_sum(&mut dbeta.s, dy.s(), c)?;
            cuda_launch!(
                gpu,
                "channel_dot",
                channel_reduce(rows, c),
                &mut dgamma.s,
                dy.s(),
                xhat.s(),
                &r,
                &ci
            )?;
        }
        {
            let (gg, _) = self.gamma.slot(gpu)?;
            gpu.axpy(&mut gg.s, &dgamma.s, 1.0)?;
        }
        {
            let (gb, _) = self.beta.slot(gpu)?;
            gpu.axpy(&mut gb.s, &dbeta.s, 1.0)?;
        }
        if !need_dx {
            return Ok(None);
        }
        let mut dx = out(gpu, xhat.len(), p)?;
        let n = xhat.len() as u64;
        match self.sync.as_deref() {
            Some(s) => {
                // dbeta, dgamma and the row count, summed over every rank.
                let mut sums = gpu.alloc(2 * c + 1, MemCategory::Workspace)?;
                let st = &gpu.stream;
                st.memcpy_dtod(&dbeta.s, &mut sums.s.slice_mut(0..c))
                    .and_then(|()| st.memcpy_dtod(&dgamma.s, &mut sums.s.slice_mut(c..2 * c)))
                    .map_err(|e| crate::engine::cuda::gpu::cuda_err("SyncBatchNorm sums", e))?;
                NcclSync::put_count(gpu, &mut sums, 2 * c, rows)?;
                s.sum(gpu, &mut sums)?;
                cuda_launch!(
                    gpu,
                    "bn_sync_backward_dx",
                    elementwise(xhat.len()),
                    &mut dx.s,
                    dy.s(),
                    xhat.s(),
                    &self.gamma.w.s,
                    &invstd.s,
                    &sums.s,
                    &n,
                    &ci
                )?;
            }
            None if fused => {
                let inv_m = 1.0 / rows as f32;
                cuda_launch!(
                    gpu,
                    "bn_relu_backward_dx",
                    elementwise(xhat.len()),
                    &mut dx.s,
                    dy.s(),
                    xhat.s(),
                    &self.gamma.w.s,
                    &self.beta.w.s,
                    &invstd.s,
                    &dbeta.s,
                    &dgamma.s,
                    &inv_m,
                    &n,
                    &ci
                )?;
            }
            None => {
                let inv_m = 1.0 / rows as f32;
                cuda_launch!(
                    gpu,
                    "bn_backward_dx",
                    elementwise(xhat.len()),
                    &mut dx.s,
                    dy.s(),
                    xhat.s(),
                    &self.gamma.w.s,
                    &invstd.s,
                    &dbeta.s,
                    &dgamma.s,
                    &inv_m,
                    &n,
                    &ci
                )?;
            }
        }
        store(gpu, GTensor::new(&xhat.shape, dx)?, p).map(Some)
    }
    fn clear_saved(&mut self) {
        self.saved = None;
    }
    fn visit_params(&mut self, f: &mut dyn FnMut(&mut GParam)) {
        f(&mut self.gamma);
        f(&mut self.beta);
    }
    fn visit_buffers(&mut self, f: &mut dyn FnMut(&mut DBuf)) {
        f(&mut self.run_mean);
        f(&mut self.run_var);
    }
    fn use_sync_bn(&mut self, sync: &Rc<NcclSync>) -> bool {
        self.sync = Some(Rc::clone(sync));
        true
    }
}
