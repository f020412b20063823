//! Data stage: everything between a dataset spec string and a normalized NHWC batch.
//!
//! It owns the datasets (the synthetic `shapes` set with its PNG shard cache, MNIST idx
//! and CIFAR-10 binary readers), augmentation (random crop, horizontal flip) and the
//! [`Loader`], whose worker threads decode whole batches in parallel and deliver them in
//! a deterministic order that does not depend on the number of workers. It also owns the
//! engine's small deterministic PRNG ([`Rng`]), reused for weight init.

pub mod augment;
pub mod cifar;
pub mod fixtures;
pub mod idx;
pub mod loader;
pub mod resize;
pub mod shapes;

use std::path::Path;
use std::sync::Arc;

use crate::{Error, Result};

pub use loader::{Batch, Loader, LoaderConfig};

/// Height, width and channels of one image, stored HWC.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ImageShape {
    pub h: usize,
    pub w: usize,
    pub c: usize,
}

impl ImageShape {
    pub const fn new(h: usize, w: usize, c: usize) -> Self {
        ImageShape { h, w, c }
    }

    /// Number of values in one image (h*w*c).
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        self.h * self.w * self.c
    }
}

impl std::fmt::Display for ImageShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}x{}x{}", self.h, self.w, self.c)
    }
}

/// The MNIST-like shape (what `mlp` takes).
pub const GRAY28: ImageShape = ImageShape::new(28, 28, 1);
/// The CIFAR-like shape (what `cnn-small` and `resnet-mini` take).
pub const RGB32: ImageShape = ImageShape::new(32, 32, 3);

pub trait Dataset: Send + Sync {
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    fn image_shape(&self) -> ImageShape;
    fn num_classes(&self) -> usize;
    /// Decode sample `index` into `out` (HWC, u8, len = image_shape().len()); returns its label.
    /// For `shapes` this PNG-decodes (real CPU work, as in practice).
    fn load(&self, index: usize, out: &mut [u8]) -> Result<u32>;
}

pub struct Splits {
    pub train: Arc<dyn Dataset>,
    pub test: Arc<dyn Dataset>,
    pub name: String,
}

/// Default number of training samples for `shapes`.
pub const SHAPES_DEFAULT_N: usize = 20_000;

/// Opens a dataset by spec:
/// - `shapes` | `shapes:N`: synthetic, generated to match `want` (28x28x1 or 32x32x3) and
///   cached under `cache_dir`; N train samples (default 20000) plus a held-out test set of
///   max(N/5, 500) samples drawn from a different seed;
/// - `mnist:DIR`: the four plain (not gzipped) idx files;
/// - `cifar10:DIR`: `data_batch_1..5.bin` and `test_batch.bin`.
///
/// For mnist and cifar10 `want` must equal the files' shape.
pub fn open(spec: &str, want: ImageShape, cache_dir: &Path) -> Result<Splits> {
    let (kind, arg) = match spec.split_once(':') {
        Some((k, a)) => (k, Some(a)),
        None => (spec, None),
    };
    match kind {
        "shapes" => {
            // `shapes:N@S`: stored at S x S, shrunk to the model's size on load.
            let (arg, stored) = match arg.and_then(|a| a.split_once('@')) {
                Some((n, s)) => {
                    let side = s.trim().parse::<usize>().ok().filter(|&v| {
                        v >= want.h && v % want.h == 0 && want.h == want.w && v <= 1024
                    });
                    let side = side.ok_or_else(|| {
                        Error::Invalid(format!(
                            "dataset `{spec}`: stored size `{s}` must be a whole multiple of the model's {} pixels, at most 1024 (try shapes:4000@128)",
                            want.h
                        ))
                    })?;
                    (Some(n), Some(side))
                }
                None => (arg, None),
            };
            let n = match arg {
                None => SHAPES_DEFAULT_N,
                Some(a) => a
                    .trim()
                    .parse::<usize>()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or_else(|| {
                        Error::Invalid(format!(
                        "dataset `{spec}`: `{a}` is not a positive sample count (try shapes:20000)"
                    ))
                    })?,
            };
            match stored {
                None => shapes::open_splits(n, want, cache_dir),
                Some(side) => {
                    let big = ImageShape {
                        h: side,
                        w: side,
                        c: want.c,
                    };
                    let s = shapes::open_splits_stored(n, want, big, cache_dir)?;
                    Ok(Splits {
                        train: Arc::new(resize::Downscaled::new(s.train, want)?),
                        test: Arc::new(resize::Downscaled::new(s.test, want)?),
                        name: format!("shapes:{n}@{side} ({big} -> {want})"),
                    })
                }
            }
        }
        "mnist" | "cifar10" => {
            let dir = match arg {
                Some(a) if !a.is_empty() => Path::new(a),
                _ => {
                    return Err(Error::Invalid(format!(
                        "dataset `{spec}` needs a directory: {kind}:/path/to/dir"
                    )))
                }
            };
            let splits = if kind == "mnist" {
                idx::open_mnist(dir)?
            } else {
                cifar::open_cifar10(dir)?
            };
            let have = splits.train.image_shape();
            if have != want {
                let model = if have == GRAY28 {
                    "mlp or mlp-gelu"
                } else if have == RGB32 {
                    "cnn-small or resnet-mini"
                } else {
                    "a model taking that shape"
                };
                return Err(Error::Invalid(format!(
                    "dataset `{kind}` has images of shape {have} but the model takes {want}; \
                     use {model} with this dataset"
                )));
            }
            Ok(splits)
        }
        _ => Err(Error::Invalid(format!(
            "unknown dataset `{spec}`: expected shapes, shapes:N, mnist:DIR or cifar10:DIR"
        ))),
    }
}

/// Per-channel normalization applied after scaling pixels to [0, 1]: (v/255 - mean) / std.
#[derive(Clone, Debug, PartialEq)]
pub struct Normalize {
    pub mean: Vec<f32>,
    pub std: Vec<f32>,
}

impl Normalize {
    /// A 256-entry table per channel: normalization becomes one lookup per value, which
    /// keeps it off the loader's profile.
    pub(crate) fn table(&self, shape: ImageShape) -> Result<Vec<[f32; 256]>> {
        if self.mean.len() != shape.c || self.std.len() != shape.c {
            return Err(Error::Invalid(format!(
                "normalize has {} means and {} stds but images have {} channels",
                self.mean.len(),
                self.std.len(),
                shape.c
            )));
        }
        if let Some(s) = self.std.iter().find(|s| !(s.is_finite() && **s > 0.0)) {
            return Err(Error::Invalid(format!(
                "normalize std must be positive and finite, got {s}"
            )));
        }
        Ok(self
            .mean
            .iter()
            .zip(&self.std)
            .map(|(&m, &s)| {
                let mut t = [0f32; 256];
                for (v, slot) in t.iter_mut().enumerate() {
                    *slot = (v as f32 / 255.0 - m) / s;
                }
                t
            })
            .collect())
    }
}

/// Mean 0.5 / std 0.25 per channel: roughly centres the `shapes` images (dark noisy
/// background, bright shape) and is close enough for MNIST and CIFAR-10 to train well.
pub fn default_normalize(shape: ImageShape) -> Normalize {
    Normalize {
        mean: vec![0.5; shape.c],
        std: vec![0.25; shape.c],
    }
}

/// SplitMix64: tiny, fast, and every seed (including 0) gives a good stream. Deterministic
/// across platforms, so data order and weight init reproduce bit for bit.
#[derive(Clone, Debug)]
pub struct Rng {
    state: u64,
}

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng { state: seed }
    }

    /// A stream for a tuple of keys, e.g. (seed, epoch, batch): each key is folded through
    /// the mixer so nearby tuples give unrelated streams.
    pub fn from_keys(keys: &[u64]) -> Self {
        let mut h = 0x243F_6A88_85A3_08D3u64;
        for &k in keys {
            h = mix64(h ^ mix64(k.wrapping_add(0x9E37_79B9_7F4A_7C15)));
        }
        Rng::new(h)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        mix64(self.state)
    }

    /// Uniform in [0, 1), 24 random bits.
    pub fn next_f32(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 * (1.0 / (1u64 << 24) as f32)
    }

    /// Uniform in [0, 1), 53 random bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in [lo, hi).
    pub fn range_f32(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * self.next_f32()
    }

    /// Uniform in 0..n (n > 0; returns 0 for n == 0). Lemire's multiply-shift with
    /// rejection, so there is no modulo bias.
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            return 0;
        }
        let n = n as u64;
        let threshold = n.wrapping_neg() % n;
        loop {
            let m = (self.next_u64() as u128) * (n as u128);
            if (m as u64) >= threshold {
                return (m >> 64) as usize;
            }
        }
    }

    /// Standard normal (Box-Muller).
    pub fn normal(&mut self) -> f32 {
        let u1 = 1.0 - self.next_f64(); // in (0, 1]: ln stays finite
        let u2 = self.next_f64();
        ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
    }

    /// Fisher-Yates.
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i + 1);
            v.swap(i, j);
        }
    }
}

fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rng_is_deterministic_and_in_range() {
        let mut a = Rng::new(42);
        let mut b = Rng::new(42);
        for _ in 0..1000 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
        let mut r = Rng::new(0);
        let mut counts = [0usize; 7];
        let mut sum = 0.0f64;
        let mut sq = 0.0f64;
        for _ in 0..70_000 {
            let f = r.next_f32();
            assert!((0.0..1.0).contains(&f));
            counts[r.below(7)] += 1;
            let z = r.normal() as f64;
            sum += z;
            sq += z * z;
        }
        for c in counts {
            assert!((9_000..11_000).contains(&c), "{counts:?}");
        }
        let mean = sum / 70_000.0;
        let var = sq / 70_000.0 - mean * mean;
        assert!(
            mean.abs() < 0.02 && (var - 1.0).abs() < 0.03,
            "{mean} {var}"
        );
        assert_ne!(
            Rng::from_keys(&[1, 0, 1]).next_u64(),
            Rng::from_keys(&[1, 1, 0]).next_u64()
        );
    }

    #[test]
    fn open_rejects_bad_specs() {
        let dir = tempfile::tempdir().unwrap();
        for spec in ["nope", "shapes:0", "shapes:x", "mnist", "cifar10:"] {
            match open(spec, GRAY28, dir.path()) {
                Err(Error::Invalid(_)) => {}
                Err(e) => panic!("{spec}: {e}"),
                Ok(_) => panic!("{spec}: accepted"),
            }
        }
        match open("shapes:10", ImageShape::new(64, 64, 3), dir.path()) {
            Err(Error::Invalid(m)) => {
                assert!(m.contains("28x28x1") && m.contains("32x32x3"), "{m}")
            }
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("accepted 64x64x3"),
        }
    }

    #[test]
    fn open_mismatched_real_dataset_suggests_model() {
        let dir = tempfile::tempdir().unwrap();
        fixtures::write_mnist_fixture(dir.path(), 20, 10, 1).unwrap();
        let spec = format!("mnist:{}", dir.path().display());
        match open(&spec, RGB32, dir.path()) {
            Err(Error::Invalid(m)) => {
                assert!(
                    m.contains("28x28x1") && m.contains("32x32x3") && m.contains("mlp"),
                    "{m}"
                )
            }
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("accepted"),
        }
        let s = open(&spec, GRAY28, dir.path()).unwrap();
        assert_eq!((s.train.len(), s.test.len()), (20, 10));
    }
}
