//! Fully connected layer, `y = x W^T + b` with `W` stored `[out, in]` as in PyTorch.

use crate::engine::device::Device;
use crate::engine::nn::layer::{take_saved, Ctx, Layer, Param};
use crate::engine::ops::gemm::{matmul, Mat};
use crate::engine::ops::{add_bias_grad, fill_rows};
use crate::engine::rng::Rng;
use crate::engine::tensor::Tensor;
use crate::error::{Error, Result};

pub struct Linear {
    pub d_in: usize,
    pub d_out: usize,
    pub w: Param,
    pub b: Param,
    saved_x: Option<Tensor>,
}

impl Linear {
    /// PyTorch's default init: U(-1/sqrt(in), 1/sqrt(in)) for weights and bias.
    pub fn new(d_in: usize, d_out: usize, rng: &mut Rng, dev: &Device) -> Result<Linear> {
        let bound = 1.0 / (d_in as f32).sqrt();
        let w = (0..d_in * d_out)
            .map(|_| rng.range_f32(-bound, bound))
            .collect();
        let b = (0..d_out).map(|_| rng.range_f32(-bound, bound)).collect();
        Ok(Linear {
            d_in,
            d_out,
            w: Param::new("weight", &[d_out, d_in], w, true, dev)?,
            b: Param::new("bias", &[d_out], b, false, dev)?,
            saved_x: None,
        })
    }

    fn rows(&self, x: &Tensor) -> Result<usize> {
        let n = x.shape().first().copied().unwrap_or(0);
        if n == 0 || x.len() != n * self.d_in {
            return Err(Error::Shape {
                op: "linear",
                msg: format!(
                    "input {:?} does not have {} features per row",
                    x.shape(),
                    self.d_in
                ),
            });
        }
        Ok(n)
    }
}

impl Layer for Linear {
    fn name(&self) -> String {
        format!("linear({}->{})", self.d_in, self.d_out)
    }

    fn forward(&mut self, x: Tensor, ctx: &Ctx) -> Result<Tensor> {
        let n = self.rows(&x)?;
        let xf = x.widened()?;
        let w = ctx.weights(&self.w.w)?;
        let mut y = ctx.alloc(&[n, self.d_out]);
        {
            let yd = y.f32_mut()?;
            fill_rows(yd, self.b.w.f32()?);
            matmul(
                yd,
                Mat::rm(xf.f32()?, n, self.d_in),
                Mat::rm(w.f32()?, self.d_out, self.d_in).t(),
                true,
                ctx.dev.par(),
            )?;
        }
        drop(xf);
        if ctx.save {
            self.saved_x = Some(ctx.store(x)?);
        }
        ctx.store(y)
    }

    fn backward(&mut self, dy: Tensor, need_dx: bool, ctx: &Ctx) -> Result<Option<Tensor>> {
        let x = take_saved(&mut self.saved_x, "linear")?.into_f32()?;
        let dy = dy.into_f32()?;
        let n = self.rows(&x)?;
        let dyd = dy.f32()?;
        let dym = Mat::rm(dyd, n, self.d_out);
        {
            let (gw, acc) = self.w.grad_slot()?;
            matmul(
                gw,
                dym.t(),
                Mat::rm(x.f32()?, n, self.d_in),
                acc,
                ctx.dev.par(),
            )?;
        }
        add_bias_grad(&mut self.b, dyd)?;
        if !need_dx {
            return Ok(None);
        }
        let w = ctx.weights(&self.w.w)?;
        let mut dx = ctx.alloc(x.shape());
        matmul(
            dx.f32_mut()?,
            dym,
            Mat::rm(w.f32()?, self.d_out, self.d_in),
            false,
            ctx.dev.par(),
        )?;
        Ok(Some(ctx.store(dx)?))
    }

    fn clear_saved(&mut self) {
        self.saved_x = None;
    }

    fn visit_params(&mut self, f: &mut dyn FnMut(&mut Param)) {
        f(&mut self.w);
        f(&mut self.b);
    }
}
