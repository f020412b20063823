//! The model zoo: `mlp`, `cnn-small` and `resnet-mini`, as defined in DESIGN.md.

use std::fmt;
use std::str::FromStr;

use crate::engine::device::Device;
use crate::engine::nn::layer::Layer;
use crate::engine::nn::model::Model;
use crate::engine::nn::residual::BasicBlock;
use crate::engine::ops::activation::Relu;
use crate::engine::ops::batchnorm::BatchNorm2d;
use crate::engine::ops::conv2d::Conv2d;
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

fn conv_bn_relu(
    c_in: usize,
    c_out: usize,
    stride: usize,
    rng: &mut Rng,
    dev: &Device,
) -> Result<Vec<Box<dyn Layer>>> {
    Ok(vec![
        Box::new(Conv2d::new(c_in, c_out, 3, stride, 1, false, rng, dev)?),
        Box::new(BatchNorm2d::new(c_out, dev)?),
        Box::new(Relu::default()),
    ])
}

/// Builds a freshly initialised model; the same seed gives the same weights.
pub fn build(kind: ModelKind, classes: usize, seed: u64, dev: &Device) -> Result<Model> {
    let mut rng = Rng::from_keys(&[seed, 0x6d6f64656c]);
    let layers: Vec<Box<dyn Layer>> = match kind {
        ModelKind::Mlp => vec![
            Box::new(Flatten::default()),
            Box::new(Linear::new(784, 1024, &mut rng, dev)?),
            Box::new(Relu::default()),
            Box::new(Linear::new(1024, 1024, &mut rng, dev)?),
            Box::new(Relu::default()),
            Box::new(Linear::new(1024, classes, &mut rng, dev)?),
        ],
        ModelKind::CnnSmall => {
            let mut l = conv_bn_relu(3, 32, 1, &mut rng, dev)?;
            l.extend(conv_bn_relu(32, 64, 2, &mut rng, dev)?);
            l.extend(conv_bn_relu(64, 128, 2, &mut rng, dev)?);
            l.push(Box::new(GlobalAvgPool::default()));
            l.push(Box::new(Linear::new(128, classes, &mut rng, dev)?));
            l
        }
        ModelKind::ResnetMini => {
            // ResNet-20 layout for 32x32 inputs: 3 stages of 3 basic blocks.
            let mut l = conv_bn_relu(3, 16, 1, &mut rng, dev)?;
            let mut c = 16;
            for (stage, width) in [16usize, 32, 64].into_iter().enumerate() {
                for b in 0..3 {
                    let stride = if stage > 0 && b == 0 { 2 } else { 1 };
                    l.push(Box::new(BasicBlock::new(c, width, stride, &mut rng, dev)?));
                    c = width;
                }
            }
            l.push(Box::new(GlobalAvgPool::default()));
            l.push(Box::new(Linear::new(c, classes, &mut rng, dev)?));
            l
        }
    };
    Ok(Model::new(&kind.to_string(), layers, kind.input(), classes))
}
