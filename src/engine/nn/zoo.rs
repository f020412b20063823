//! The model zoo: `mlp`, `cnn-small` and `resnet-mini`, as defined in DESIGN.md, and
//! `mlp-gelu`, the MLP with GELU (tanh approximation) where `mlp` has ReLU, as a
//! transformer's feed-forward block has it.

use std::fmt;
use std::str::FromStr;

use crate::engine::device::Device;
use crate::engine::nn::model::Model;
use crate::engine::nn::residual::BasicBlockDesc;
use crate::engine::ops::activation::ReluDesc;
use crate::engine::ops::batchnorm::{BatchNormDesc, BnReluDesc};
use crate::engine::ops::conv2d::Conv2dDesc;
use crate::engine::ops::fused::LinearReluDesc;
use crate::engine::ops::gelu::GeluDesc;
use crate::engine::ops::layer::LayerDesc;
use crate::engine::ops::linear::LinearDesc;
use crate::engine::ops::pool::{FlattenDesc, GlobalAvgPoolDesc};
use crate::engine::rng::Rng;
use crate::error::{Error, Result};
use crate::knobs::Fuse;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum ModelKind {
    #[serde(rename = "mlp")]
    Mlp,
    #[serde(rename = "mlp-gelu")]
    MlpGelu,
    #[serde(rename = "cnn-small")]
    CnnSmall,
    #[serde(rename = "resnet-mini")]
    ResnetMini,
}

impl ModelKind {
    pub const ALLOWED: &'static [&'static str] = &["mlp", "cnn-small", "resnet-mini", "mlp-gelu"];

    /// Input shape per sample (H, W, C).
    pub fn input(self) -> [usize; 3] {
        match self {
            ModelKind::Mlp | ModelKind::MlpGelu => [28, 28, 1],
            ModelKind::CnnSmall | ModelKind::ResnetMini => [32, 32, 3],
        }
    }
}

impl fmt::Display for ModelKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ModelKind::Mlp => "mlp",
            ModelKind::MlpGelu => "mlp-gelu",
            ModelKind::CnnSmall => "cnn-small",
            ModelKind::ResnetMini => "resnet-mini",
        })
    }
}

impl FromStr for ModelKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim() {
            "mlp" => Ok(ModelKind::Mlp),
            "mlp-gelu" | "mlp_gelu" => Ok(ModelKind::MlpGelu),
            "cnn-small" | "cnn_small" | "cnn" => Ok(ModelKind::CnnSmall),
            "resnet-mini" | "resnet_mini" | "resnet" => Ok(ModelKind::ResnetMini),
            other => Err(Error::Invalid(format!(
                "unknown model '{other}': allowed values are {}",
                Self::ALLOWED.join(", ")
            ))),
        }
    }
}

fn conv(c_in: usize, c_out: usize, k: usize, stride: usize, pad: usize) -> LayerDesc {
    Box::new(Conv2dDesc {
        c_in,
        c_out,
        k,
        stride,
        pad,
        bias: false,
    })
}

fn conv_bn_relu(c_in: usize, c_out: usize, stride: usize, fuse: Fuse) -> Vec<LayerDesc> {
    match fuse {
        Fuse::Off => vec![
            conv(c_in, c_out, 3, stride, 1),
            Box::new(BatchNormDesc::new(c_out)),
            Box::new(ReluDesc),
        ],
        Fuse::On => vec![
            conv(c_in, c_out, 3, stride, 1),
            Box::new(BnReluDesc(BatchNormDesc::new(c_out))),
        ],
    }
}

/// A ResNet basic block as `BasicBlock::new` builds it. Its second batch norm feeds the
/// residual sum, not a ReLU, so only the first pair fuses.
fn basic_block(c_in: usize, c_out: usize, stride: usize, fuse: Fuse) -> LayerDesc {
    let mut main = conv_bn_relu(c_in, c_out, stride, fuse);
    main.push(conv(c_out, c_out, 3, 1, 1));
    main.push(Box::new(BatchNormDesc::new(c_out)));
    let shortcut: Vec<LayerDesc> = if stride != 1 || c_in != c_out {
        vec![
            conv(c_in, c_out, 1, stride, 0),
            Box::new(BatchNormDesc::new(c_out)),
        ]
    } else {
        Vec::new()
    };
    Box::new(BasicBlockDesc {
        c_in,
        c_out,
        stride,
        main,
        shortcut,
        out: Box::new(ReluDesc),
    })
}

/// The model as a description every backend builds from: the one definition of each
/// model's layers.
pub fn describe(kind: ModelKind, classes: usize) -> Vec<LayerDesc> {
    describe_with(kind, classes, Fuse::Off)
}

/// [`describe`] under the `fuse` knob: with `on`, each bias+ReLU and batch norm+ReLU pair
/// is one fused layer (ops/fused.rs). The parameters, their order and their initial
/// values are the same either way. `mlp-gelu` has no fused bias+GELU layer: under
/// `fuse = on` only its optimizer is fused.
pub fn describe_with(kind: ModelKind, classes: usize, fuse: Fuse) -> Vec<LayerDesc> {
    let linear = |d_in, d_out| -> LayerDesc { Box::new(LinearDesc { d_in, d_out }) };
    let linear_relu = |d_in, d_out| -> Vec<LayerDesc> {
        match fuse {
            Fuse::Off => vec![linear(d_in, d_out), Box::new(ReluDesc)],
            Fuse::On => vec![Box::new(LinearReluDesc(LinearDesc { d_in, d_out }))],
        }
    };
    match kind {
        ModelKind::Mlp => {
            let mut l: Vec<LayerDesc> = vec![Box::new(FlattenDesc)];
            l.extend(linear_relu(784, 1024));
            l.extend(linear_relu(1024, 1024));
            l.push(linear(1024, classes));
            l
        }
        ModelKind::MlpGelu => vec![
            Box::new(FlattenDesc),
            linear(784, 1024),
            Box::new(GeluDesc),
            linear(1024, 1024),
            Box::new(GeluDesc),
            linear(1024, classes),
        ],
        ModelKind::CnnSmall => {
            let mut l = conv_bn_relu(3, 32, 1, fuse);
            l.extend(conv_bn_relu(32, 64, 2, fuse));
            l.extend(conv_bn_relu(64, 128, 2, fuse));
            l.push(Box::new(GlobalAvgPoolDesc));
            l.push(linear(128, classes));
            l
        }
        ModelKind::ResnetMini => {
            // ResNet-20 layout for 32x32 inputs: 3 stages of 3 basic blocks.
            let mut l = conv_bn_relu(3, 16, 1, fuse);
            let mut c = 16;
            for (stage, width) in [16usize, 32, 64].into_iter().enumerate() {
                for b in 0..3 {
                    let stride = if stage > 0 && b == 0 { 2 } else { 1 };
                    l.push(basic_block(c, width, stride, fuse));
                    c = width;
                }
            }
            l.push(Box::new(GlobalAvgPoolDesc));
            l.push(linear(c, classes));
            l
        }
    }
}

/// The random stream a model's initial weights are drawn from.
pub fn init_rng(seed: u64) -> Rng {
    Rng::from_keys(&[seed, 0x6d6f64656c])
}

/// Builds a freshly initialised model; the same seed gives the same weights.
pub fn build(kind: ModelKind, classes: usize, seed: u64, dev: &Device) -> Result<Model> {
    build_with(kind, classes, seed, dev, Fuse::Off)
}

/// [`build`] under the `fuse` knob: the same weights, fused layers where `fuse` is on.
pub fn build_with(
    kind: ModelKind,
    classes: usize,
    seed: u64,
    dev: &Device,
    fuse: Fuse,
) -> Result<Model> {
    let mut rng = init_rng(seed);
    let layers = describe_with(kind, classes, fuse)
        .iter()
        .map(|d| d.cpu(&mut rng, dev))
        .collect::<Result<Vec<_>>>()?;
    Ok(Model::new(&kind.to_string(), layers, kind.input(), classes))
}
