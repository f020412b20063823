//! What a layer is, independent of the backend: a model is a list of descriptions
//! (`nn::zoo::describe`), and every backend builds the same model from it. Each op
//! describes its layers with a type of its own, beside the layer (`LinearDesc` in
//! `linear.rs`, ...), implementing [`LayerSpec`]: the CPU layer with its weights drawn
//! from the seed's stream, the same initial values alone ([`Initial`]), and the GPU
//! layer built on them. A new op is new types in its own files, not arms of a closed
//! enum matched in several places.

use std::collections::VecDeque;
use std::fmt;

use crate::engine::cuda::gpu::{DBuf, Gpu};
use crate::engine::device::{Device, MemCategory};
use crate::engine::ops::layer::Layer;
use crate::engine::ops::layer_cuda::{GParam, GpuLayer};
use crate::engine::rng::Rng;
use crate::error::{Error, Result};

/// One layer's description; see the module's doc.
pub trait LayerSpec: Send + Sync + fmt::Debug {
    /// The op's name (`linear`, `conv2d`, ...).
    fn op(&self) -> &'static str;
    /// The CPU layer, drawing its weights from `rng` as its constructor does.
    fn cpu(&self, rng: &mut Rng, dev: &Device) -> Result<Box<dyn Layer>>;
    /// The layer's initial parameters and buffers, appended to `out` in `visit_params`
    /// order, drawn from `rng` exactly as [`LayerSpec::cpu`] draws them.
    fn init(&self, rng: &mut Rng, out: &mut Initial) -> Result<()>;
    /// The GPU layer, its parameters and buffers taken from `src` in visit order.
    fn gpu(&self, gpu: &Gpu, src: &mut InitSource) -> Result<Box<dyn GpuLayer>>;
    /// Whether this layer is, or holds, a layer of `op`.
    fn holds(&self, op: &str) -> bool {
        self.op() == op
    }
}

/// A layer's description.
pub type LayerDesc = Box<dyn LayerSpec>;

/// One parameter's initial values.
#[derive(Clone, Debug, PartialEq)]
pub struct HostParam {
    pub name: String,
    pub shape: Vec<usize>,
    pub values: Vec<f32>,
    pub decay: bool,
}

/// Every parameter and buffer of a model, in visit order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Initial {
    pub params: VecDeque<HostParam>,
    pub buffers: VecDeque<(String, Vec<f32>)>,
}

impl Initial {
    pub(crate) fn param(&mut self, name: &str, shape: &[usize], values: Vec<f32>, decay: bool) {
        self.params.push_back(HostParam {
            name: name.into(),
            shape: shape.to_vec(),
            values,
            decay,
        });
    }

    pub(crate) fn buffer(&mut self, name: &str, values: Vec<f32>) {
        self.buffers.push_back((name.into(), values));
    }

    /// PyTorch's default initialisation: uniform in ±1/sqrt(fan_in).
    pub(crate) fn uniform(rng: &mut Rng, n: usize, fan_in: usize) -> Vec<f32> {
        let bound = 1.0 / (fan_in as f32).sqrt();
        (0..n).map(|_| rng.range_f32(-bound, bound)).collect()
    }
}

/// Initial values consumed in visit order while a GPU model is built.
pub struct InitSource(pub(crate) Initial);

impl InitSource {
    /// The next parameter, which must be `want` of `len` values, uploaded.
    pub(crate) fn param(&mut self, gpu: &Gpu, want: &str, len: usize) -> Result<GParam> {
        let p = self.0.params.pop_front().ok_or_else(|| {
            Error::Runtime(format!(
                "GPU model: ran out of initial parameters at {want}"
            ))
        })?;
        if p.name != want || p.values.len() != len {
            return Err(Error::Runtime(format!(
                "GPU model: expected parameter {want} of {len} values, got {} {:?}",
                p.name, p.shape
            )));
        }
        Ok(GParam {
            w: gpu.upload(&p.values, MemCategory::Params)?,
            name: p.name,
            g: None,
            decay: p.decay,
        })
    }

    /// The next buffer, which must be `want` of `len` values, uploaded.
    pub(crate) fn buffer(&mut self, gpu: &Gpu, want: &str, len: usize) -> Result<DBuf> {
        let (name, data) = self.0.buffers.pop_front().ok_or_else(|| {
            Error::Runtime(format!("GPU model: ran out of initial buffers at {want}"))
        })?;
        if name != want || data.len() != len {
            return Err(Error::Runtime(format!(
                "GPU model: expected buffer {want} of {len} values, got {name}"
            )));
        }
        gpu.upload(&data, MemCategory::Params)
    }
}

/// A layer only the CPU backend has (one whose `describe()` is not written): it can be described,
/// so a model holding it fails to build elsewhere with its name.
#[derive(Debug)]
pub struct CpuOnly(pub String);

impl LayerSpec for CpuOnly {
    fn op(&self) -> &'static str {
        "cpu-only"
    }
    fn cpu(&self, _rng: &mut Rng, _dev: &Device) -> Result<Box<dyn Layer>> {
        Err(Error::Runtime(format!(
            "model description: no CPU layer is built from {}",
            self.0
        )))
    }
    fn init(&self, _rng: &mut Rng, _out: &mut Initial) -> Result<()> {
        Err(Error::Runtime(format!(
            "model description: no initialisation for layer {}",
            self.0
        )))
    }
    fn gpu(&self, _gpu: &Gpu, _src: &mut InitSource) -> Result<Box<dyn GpuLayer>> {
        Err(Error::Unavailable(format!(
            "CUDA backend: layer {} has no GPU kernels yet",
            self.0
        )))
    }
}
