//! The model zoo: `mlp`, `cnn-small` and `resnet-mini`, as defined in DESIGN.md.

use std::fmt;
use std::str::FromStr;

use crate::engine::device::Device;
use crate::engine::nn::model::Model;
use crate::engine::nn::residual::BasicBlock;
use crate::engine::ops::activation::Relu;
use crate::engine::ops::batchnorm::BatchNorm2d;
use crate::engine::ops::conv2d::Conv2d;
use crate::engine::ops::layer::{Layer, LayerDesc};
use crate::engine::ops::linear::Linear;
use crate::engine::ops::pool::{Flatten, GlobalAvgPool};
use crate::engine::rng::Rng;
use crate::error::{Error, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum ModelKind {
    #[serde(rename = "mlp")]
    Mlp,
    #[serde(rename = "cnn-small")]
    CnnSmall,
    #[serde(rename = "resnet-mini")]
    ResnetMini,
}

impl ModelKind {
    pub const ALLOWED: &'static [&'static str] = &["mlp", "cnn-small", "resnet-mini"];

    /// Input shape per sample (H, W, C).
    pub fn input(self) -> [usize; 3] {
        match self {
            ModelKind::Mlp => [28, 28, 1],
            ModelKind::CnnSmall | ModelKind::ResnetMini => [32, 32, 3],
        }
    }
}

impl fmt::Display for ModelKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ModelKind::Mlp => "mlp",
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
            "cnn-small" | "cnn_small" | "cnn" => Ok(ModelKind::CnnSmall),
            "resnet-mini" | "resnet_mini" | "resnet" => Ok(ModelKind::ResnetMini),
            other => Err(Error::Invalid(format!(
                "unknown model '{other}': allowed values are {}",
                Self::ALLOWED.join(", ")
            ))),
        }
    }
}

fn conv_bn_relu(c_in: usize, c_out: usize, stride: usize) -> Vec<LayerDesc> {
    vec![
        LayerDesc::Conv2d {
            c_in,
            c_out,
            k: 3,
            stride,
            pad: 1,
            bias: false,
        },
        batch_norm(c_out),
        LayerDesc::Relu,
    ]
}

fn batch_norm(c: usize) -> LayerDesc {
    LayerDesc::BatchNorm2d {
        c,
        eps: 1e-5,
        momentum: 0.1,
    }
}

/// A ResNet basic block as `BasicBlock::new` builds it.
fn basic_block(c_in: usize, c_out: usize, stride: usize) -> LayerDesc {
    let mut main = conv_bn_relu(c_in, c_out, stride);
    main.extend(conv_bn_relu(c_out, c_out, 1));
    main.pop();
    let shortcut = if stride != 1 || c_in != c_out {
        vec![
            LayerDesc::Conv2d {
                c_in,
                c_out,
                k: 1,
                stride,
                pad: 0,
                bias: false,
            },
            batch_norm(c_out),
        ]
    } else {
        Vec::new()
    };
    LayerDesc::BasicBlock {
        main,
        shortcut,
        out: Box::new(LayerDesc::Relu),
    }
}

/// The model as a description every backend builds from: the one definition of each
/// model's layers.
pub fn describe(kind: ModelKind, classes: usize) -> Vec<LayerDesc> {
    let linear = |d_in, d_out| LayerDesc::Linear { d_in, d_out };
    match kind {
        ModelKind::Mlp => vec![
            LayerDesc::Flatten,
            linear(784, 1024),
            LayerDesc::Relu,
            linear(1024, 1024),
            LayerDesc::Relu,
            linear(1024, classes),
        ],
        ModelKind::CnnSmall => {
            let mut l = conv_bn_relu(3, 32, 1);
            l.extend(conv_bn_relu(32, 64, 2));
            l.extend(conv_bn_relu(64, 128, 2));
            l.push(LayerDesc::GlobalAvgPool);
            l.push(linear(128, classes));
            l
        }
        ModelKind::ResnetMini => {
            // ResNet-20 layout for 32x32 inputs: 3 stages of 3 basic blocks.
            let mut l = conv_bn_relu(3, 16, 1);
            let mut c = 16;
            for (stage, width) in [16usize, 32, 64].into_iter().enumerate() {
                for b in 0..3 {
                    let stride = if stage > 0 && b == 0 { 2 } else { 1 };
                    l.push(basic_block(c, width, stride));
                    c = width;
                }
            }
            l.push(LayerDesc::GlobalAvgPool);
            l.push(linear(c, classes));
            l
        }
    }
}

/// The random stream a model's initial weights are drawn from.
pub fn init_rng(seed: u64) -> Rng {
    Rng::from_keys(&[seed, 0x6d6f64656c])
}

/// A CPU layer from its description, drawing its weights from `rng` as its constructor
/// does.
fn cpu_layer(d: &LayerDesc, rng: &mut Rng, dev: &Device) -> Result<Box<dyn Layer>> {
    Ok(match d {
        LayerDesc::Linear { d_in, d_out } => Box::new(Linear::new(*d_in, *d_out, rng, dev)?),
        LayerDesc::Conv2d {
            c_in,
            c_out,
            k,
            stride,
            pad,
            bias,
        } => Box::new(Conv2d::new(
            *c_in, *c_out, *k, *stride, *pad, *bias, rng, dev,
        )?),
        LayerDesc::BatchNorm2d { c, .. } => Box::new(BatchNorm2d::new(*c, dev)?),
        LayerDesc::Relu => Box::new(Relu::default()),
        LayerDesc::Flatten => Box::new(Flatten::default()),
        LayerDesc::GlobalAvgPool => Box::new(GlobalAvgPool::default()),
        LayerDesc::BasicBlock { main, .. } => match main.first() {
            Some(LayerDesc::Conv2d {
                c_in,
                c_out,
                stride,
                ..
            }) => Box::new(BasicBlock::new(*c_in, *c_out, *stride, rng, dev)?),
            _ => {
                return Err(Error::Runtime(
                    "model description: a basic block must start with a conv".into(),
                ))
            }
        },
        LayerDesc::Other(name) => {
            return Err(Error::Runtime(format!(
                "model description: no CPU layer for {name}"
            )))
        }
    })
}

/// Builds a freshly initialised model; the same seed gives the same weights.
pub fn build(kind: ModelKind, classes: usize, seed: u64, dev: &Device) -> Result<Model> {
    let mut rng = init_rng(seed);
    let layers = describe(kind, classes)
        .iter()
        .map(|d| cpu_layer(d, &mut rng, dev))
        .collect::<Result<Vec<_>>>()?;
    Ok(Model::new(&kind.to_string(), layers, kind.input(), classes))
}
