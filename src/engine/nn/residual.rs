//! A ResNet basic block: conv-BN-ReLU-conv-BN plus a shortcut (identity, or a strided
//! 1x1 conv + BN when the shape changes), then ReLU. A composite layer: checkpointing
//! treats it as one unit.

use crate::engine::cuda::gpu::Gpu;
use crate::engine::device::Device;
use crate::engine::nn::residual_cuda::GBasicBlock;
use crate::engine::ops::activation::Relu;
use crate::engine::ops::batchnorm::BatchNorm2d;
use crate::engine::ops::conv2d::Conv2d;
use crate::engine::ops::desc::{InitSource, Initial, LayerSpec};
use crate::engine::ops::layer::{Ctx, Layer, LayerDesc, Param};
use crate::engine::ops::layer_cuda::GpuLayer;
use crate::engine::rng::Rng;
use crate::engine::tensor::Tensor;
use crate::error::{Error, Result};

pub struct BasicBlock {
    c_in: usize,
    c_out: usize,
    stride: usize,
    main: Vec<Box<dyn Layer>>,
    shortcut: Vec<Box<dyn Layer>>,
    out: Box<dyn Layer>,
}

impl BasicBlock {
    pub fn new(
        c_in: usize,
        c_out: usize,
        stride: usize,
        rng: &mut Rng,
        dev: &Device,
    ) -> Result<BasicBlock> {
        Self::with_activation(c_in, c_out, stride, || Box::new(Relu::default()), rng, dev)
    }

    /// A block with another activation in place of ReLU (the gradient check uses GELU).
    pub fn with_activation(
        c_in: usize,
        c_out: usize,
        stride: usize,
        act: fn() -> Box<dyn Layer>,
        rng: &mut Rng,
        dev: &Device,
    ) -> Result<BasicBlock> {
        let main: Vec<Box<dyn Layer>> = vec![
            Box::new(Conv2d::new(c_in, c_out, 3, stride, 1, false, rng, dev)?),
            Box::new(BatchNorm2d::new(c_out, dev)?),
            act(),
            Box::new(Conv2d::new(c_out, c_out, 3, 1, 1, false, rng, dev)?),
            Box::new(BatchNorm2d::new(c_out, dev)?),
        ];
        let shortcut: Vec<Box<dyn Layer>> = if stride != 1 || c_in != c_out {
            vec![
                Box::new(Conv2d::new(c_in, c_out, 1, stride, 0, false, rng, dev)?),
                Box::new(BatchNorm2d::new(c_out, dev)?),
            ]
        } else {
            Vec::new()
        };
        Ok(BasicBlock {
            c_in,
            c_out,
            stride,
            main,
            shortcut,
            out: act(),
        })
    }
}

/// A basic block's description: its layers' descriptions, and the shape the CPU block is
/// built from.
#[derive(Debug)]
pub struct BasicBlockDesc {
    pub c_in: usize,
    pub c_out: usize,
    pub stride: usize,
    pub main: Vec<LayerDesc>,
    pub shortcut: Vec<LayerDesc>,
    pub out: LayerDesc,
}

impl BasicBlockDesc {
    /// The layers in visit order: main, then the shortcut, then the output activation.
    fn layers(&self) -> impl Iterator<Item = &LayerDesc> {
        self.main
            .iter()
            .chain(&self.shortcut)
            .chain(std::iter::once(&self.out))
    }
}

impl LayerSpec for BasicBlockDesc {
    fn op(&self) -> &'static str {
        "basic_block"
    }
    /// From the descriptions (fused or not), drawing in `BasicBlock::new`'s order: main,
    /// then the shortcut.
    fn cpu(&self, rng: &mut Rng, dev: &Device) -> Result<Box<dyn Layer>> {
        let build = |ls: &[LayerDesc], rng: &mut Rng| {
            ls.iter()
                .map(|l| l.cpu(rng, dev))
                .collect::<Result<Vec<_>>>()
        };
        let main = build(&self.main, rng)?;
        let shortcut = build(&self.shortcut, rng)?;
        Ok(Box::new(BasicBlock {
            c_in: self.c_in,
            c_out: self.c_out,
            stride: self.stride,
            main,
            shortcut,
            out: self.out.cpu(rng, dev)?,
        }))
    }
    fn init(&self, rng: &mut Rng, out: &mut Initial) -> Result<()> {
        self.layers().try_for_each(|l| l.init(rng, out))
    }
    fn gpu(&self, gpu: &Gpu, src: &mut InitSource) -> Result<Box<dyn GpuLayer>> {
        // The CPU block visits main's parameters, then the shortcut's.
        let main = self
            .main
            .iter()
            .map(|l| l.gpu(gpu, src))
            .collect::<Result<Vec<_>>>()?;
        let shortcut = self
            .shortcut
            .iter()
            .map(|l| l.gpu(gpu, src))
            .collect::<Result<Vec<_>>>()?;
        Ok(Box::new(GBasicBlock {
            main,
            shortcut,
            out: self.out.gpu(gpu, src)?,
        }))
    }
    fn holds(&self, op: &str) -> bool {
        self.op() == op || self.layers().any(|l| l.holds(op))
    }
}

fn add_into(dst: &mut Tensor, src: &Tensor) -> Result<()> {
    if dst.shape() != src.shape() {
        return Err(Error::Shape {
            op: "residual add",
            msg: format!("{:?} + {:?}", dst.shape(), src.shape()),
        });
    }
    for (d, s) in dst.f32_mut()?.iter_mut().zip(src.f32()?) {
        *d += s;
    }
    Ok(())
}

impl Layer for BasicBlock {
    fn name(&self) -> String {
        format!(
            "basic_block({}->{}, s{})",
            self.c_in, self.c_out, self.stride
        )
    }

    fn describe(&self) -> LayerDesc {
        Box::new(BasicBlockDesc {
            c_in: self.c_in,
            c_out: self.c_out,
            stride: self.stride,
            main: self.main.iter().map(|l| l.describe()).collect(),
            shortcut: self.shortcut.iter().map(|l| l.describe()).collect(),
            out: self.out.describe(),
        })
    }

    fn forward(&mut self, x: Tensor, ctx: &Ctx) -> Result<Tensor> {
        let mut sc = x.clone();
        for l in &mut self.shortcut {
            sc = l.forward(sc, ctx)?;
        }
        let mut h = x;
        for l in &mut self.main {
            h = l.forward(h, ctx)?;
        }
        // The sum is formed in f32 from (possibly half) branches; the output ReLU stores it.
        let mut h = h.into_f32()?;
        add_into(&mut h, &sc.widened()?)?;
        drop(sc);
        self.out.forward(h, ctx)
    }

    fn backward(&mut self, dy: Tensor, need_dx: bool, ctx: &Ctx) -> Result<Option<Tensor>> {
        let d = self
            .out
            .backward(dy, true, ctx)?
            .ok_or_else(|| Error::Runtime("basic_block: relu gave no gradient".into()))?;
        let mut dmain = Some(d.clone());
        for (i, l) in self.main.iter_mut().enumerate().rev() {
            let g = dmain
                .take()
                .ok_or_else(|| Error::Runtime("basic_block: missing gradient".into()))?;
            dmain = l.backward(g, need_dx || i > 0, ctx)?;
        }
        let mut dsc = Some(d);
        for l in self.shortcut.iter_mut().rev() {
            let g = dsc
                .take()
                .ok_or_else(|| Error::Runtime("basic_block: missing gradient".into()))?;
            dsc = l.backward(g, need_dx, ctx)?;
        }
        if !need_dx {
            return Ok(None);
        }
        match (dmain, dsc) {
            (Some(a), Some(b)) => {
                let mut a = a.into_f32()?;
                add_into(&mut a, &b.widened()?)?;
                Ok(Some(ctx.store(a)?))
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

    fn visit_params(&mut self, f: &mut dyn FnMut(&mut Param)) {
        for l in self.main.iter_mut().chain(self.shortcut.iter_mut()) {
            l.visit_params(f);
        }
    }

    fn visit_buffers(&mut self, f: &mut dyn FnMut(&str, &mut Vec<f32>)) {
        for l in self.main.iter_mut().chain(self.shortcut.iter_mut()) {
            l.visit_buffers(f);
        }
    }
}
