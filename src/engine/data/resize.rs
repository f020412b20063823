//! Stored images larger than the model's input, shrunk on load: the shape of real input
//! pipelines (decode a large JPEG, then resize), so the loader has per-sample work worth
//! moving to workers. `shapes:N@S` stores S x S PNGs and serves them at the model's size.

use std::sync::Arc;

use super::{Dataset, ImageShape};
use crate::{Error, Result};

/// A dataset whose images are `factor` times the wanted size per side, box-filtered down.
pub struct Downscaled {
    inner: Arc<dyn Dataset>,
    want: ImageShape,
    factor: usize,
}

impl Downscaled {
    pub fn new(inner: Arc<dyn Dataset>, want: ImageShape) -> Result<Downscaled> {
        let have = inner.image_shape();
        let factor = have.h / want.h.max(1);
        if have.c != want.c || factor == 0 || have.h != want.h * factor || have.w != want.w * factor
        {
            return Err(Error::Invalid(format!(
                "stored images {have} cannot be box-filtered to {want}: the size must be a whole multiple"
            )));
        }
        Ok(Downscaled {
            inner,
            want,
            factor,
        })
    }
}

/// Averages `f x f` blocks of an HWC image (`src` is `h*f x w*f x c`).
pub fn box_downscale(src: &[u8], want: ImageShape, f: usize, out: &mut [u8]) {
    let (w, c) = (want.w, want.c);
    let src_row = w * f * c;
    let area = (f * f) as u32;
    for y in 0..want.h {
        for x in 0..w {
            for ch in 0..c {
                let mut sum = 0u32;
                for dy in 0..f {
                    let row = &src[(y * f + dy) * src_row..];
                    for dx in 0..f {
                        sum += u32::from(row[(x * f + dx) * c + ch]);
                    }
                }
                out[(y * w + x) * c + ch] = ((sum + area / 2) / area) as u8;
            }
        }
    }
}

impl Dataset for Downscaled {
    fn len(&self) -> usize {
        self.inner.len()
    }

    fn image_shape(&self) -> ImageShape {
        self.want
    }

    fn num_classes(&self) -> usize {
        self.inner.num_classes()
    }

    fn load(&self, index: usize, out: &mut [u8]) -> Result<u32> {
        if out.len() != self.want.len() {
            return Err(Error::Runtime(format!(
                "resize: output buffer has {} bytes, image needs {}",
                out.len(),
                self.want.len()
            )));
        }
        let mut big = vec![0u8; self.inner.image_shape().len()];
        let label = self.inner.load(index, &mut big)?;
        box_downscale(&big, self.want, self.factor, out);
        Ok(label)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn box_filter_averages_blocks_with_rounding() {
        let want = ImageShape { h: 1, w: 2, c: 1 };
        // 2x4 gray image: left block 0,1,2,3 -> 1.5 -> 2; right block all 10.
        let src = [0u8, 1, 10, 10, 2, 3, 10, 10];
        let mut out = [0u8; 2];
        box_downscale(&src, want, 2, &mut out);
        assert_eq!(out, [2, 10]);
    }

    #[test]
    fn stored_shapes_serve_the_models_size_with_the_same_labels() {
        let dir = tempfile::tempdir().unwrap();
        let want = ImageShape { h: 32, w: 32, c: 3 };
        let big = crate::engine::data::open("shapes:20@64", want, dir.path()).unwrap();
        let small = crate::engine::data::open("shapes:20", want, dir.path()).unwrap();
        assert_eq!(big.train.image_shape(), want);
        let (mut a, mut b) = (vec![0u8; want.len()], vec![0u8; want.len()]);
        for i in 0..20 {
            let la = big.train.load(i, &mut a).unwrap();
            let lb = small.train.load(i, &mut b).unwrap();
            assert_eq!(la, lb, "same sample, same label");
        }
        assert!(crate::engine::data::open("shapes:20@48", want, dir.path()).is_err());
    }
}
