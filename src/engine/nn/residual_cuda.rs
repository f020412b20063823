//! The residual block on the GPU, beside `residual.rs`: the same sum of the main path
//! and the shortcut, formed in f32 and stored by the output ReLU.

use crate::engine::cuda::gpu::{DBuf, GTensor, Gpu};
use crate::engine::cuda::sync_bn::NcclSync;
use crate::engine::nn::model_cuda::GLayer;
use crate::engine::ops::layer_cuda::{f32_unique, missing, store, GParam, GpuLayer, Pass};
use crate::error::{Error, Result};
use std::rc::Rc;

pub struct GBasicBlock {
    pub(crate) main: Vec<GLayer>,
    pub(crate) shortcut: Vec<GLayer>,
    pub(crate) out: GLayer,
}

impl GpuLayer for GBasicBlock {
    fn name(&self) -> &'static str {
        "basic_block"
    }
    fn forward(&mut self, x: GTensor, gpu: &Gpu, p: Pass) -> Result<GTensor> {
        let mut sc = x.clone();
        for l in self.shortcut.iter_mut() {
            sc = l.forward(sc, gpu, p)?;
        }
        let mut h = x;
        for l in self.main.iter_mut() {
            h = l.forward(h, gpu, p)?;
        }
        // The sum is formed in f32 from (possibly half) branches; the output
        // ReLU stores it.
        let shape = h.shape.clone();
        let mut sum = f32_unique(gpu, h)?;
        gpu.axpy(&mut sum.s, gpu.widen(&sc)?.s(), 1.0)?;
        drop(sc);
        self.out.forward(GTensor::new(&shape, sum)?, gpu, p)
    }
    fn backward(
        &mut self,
        dy: GTensor,
        need_dx: bool,
        gpu: &Gpu,
        p: Pass,
    ) -> Result<Option<GTensor>> {
        let d = self
            .out
            .backward(dy, true, gpu, p)?
            .ok_or_else(|| Error::Runtime("basic_block: relu gave no gradient".into()))?;
        let mut dmain = Some(d.clone());
        for (i, l) in self.main.iter_mut().enumerate().rev() {
            let g = dmain.take().ok_or_else(|| missing("basic_block"))?;
            dmain = l.backward(g, need_dx || i > 0, gpu, p)?;
        }
        let mut dsc = Some(d);
        for l in self.shortcut.iter_mut().rev() {
            let g = dsc.take().ok_or_else(|| missing("basic_block"))?;
            dsc = l.backward(g, need_dx, gpu, p)?;
        }
        if !need_dx {
            return Ok(None);
        }
        match (dmain, dsc) {
            (Some(a), Some(b)) => {
                let shape = a.shape.clone();
                let mut s = f32_unique(gpu, a)?;
                gpu.axpy(&mut s.s, gpu.widen(&b)?.s(), 1.0)?;
                store(gpu, GTensor::new(&shape, s)?, p).map(Some)
            }
            _ => Err(Error::Runtime("basic_block: missing input gradient".into())),
        }
    }
    fn clear_saved(&mut self) {
        for l in self.main.iter_mut().chain(self.shortcut.iter_mut()) {
            l.clear_saved();
        }
        self.out.clear_saved();
    }
    /// Main's parameters, then the shortcut's, as the CPU block visits them.
    fn visit_params(&mut self, f: &mut dyn FnMut(&mut GParam)) {
        for l in self.main.iter_mut().chain(self.shortcut.iter_mut()) {
            l.visit_params(f);
        }
    }
    fn visit_buffers(&mut self, f: &mut dyn FnMut(&mut DBuf)) {
        for l in self.main.iter_mut().chain(self.shortcut.iter_mut()) {
            l.visit_buffers(f);
        }
        self.out.visit_buffers(f);
    }
    fn use_sync_bn(&mut self, sync: &Rc<NcclSync>) -> bool {
        let mut any = false;
        for l in self.main.iter_mut().chain(self.shortcut.iter_mut()) {
            any |= l.use_sync_bn(sync);
        }
        any | self.out.use_sync_bn(sync)
    }
}
