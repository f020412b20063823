//! GELU's description (tanh approximation, PyTorch's `nn.GELU(approximate="tanh")`): the
//! CPU layer is `activation::Gelu`, beside ReLU; the GPU layer is `gelu_cuda::gelu()`. A
//! model description holding `GeluDesc` builds on both backends.

use crate::engine::cuda::gpu::Gpu;
use crate::engine::device::Device;
use crate::engine::ops::activation::Gelu;
use crate::engine::ops::desc::{InitSource, Initial, LayerSpec};
use crate::engine::ops::gelu_cuda;
use crate::engine::ops::layer::Layer;
use crate::engine::ops::layer_cuda::GpuLayer;
use crate::engine::rng::Rng;
use crate::error::Result;

/// GELU's description: no parameters, nothing drawn from the seed's stream.
#[derive(Debug)]
pub struct GeluDesc;

impl LayerSpec for GeluDesc {
    fn op(&self) -> &'static str {
        "gelu"
    }
    fn cpu(&self, _rng: &mut Rng, _dev: &Device) -> Result<Box<dyn Layer>> {
        Ok(Box::new(Gelu::default()))
    }
    fn init(&self, _rng: &mut Rng, _out: &mut Initial) -> Result<()> {
        Ok(())
    }
    fn gpu(&self, _gpu: &Gpu, _src: &mut InitSource) -> Result<Box<dyn GpuLayer>> {
        Ok(Box::new(gelu_cuda::gelu()))
    }
}
