//! Training augmentation on u8 HWC images: random crop from a zero-padded image (pad 2
//! for images under 32 pixels, 4 otherwise, as the usual MNIST/CIFAR recipes) and a
//! horizontal flip with probability 1/2. Randomness comes from the caller's `Rng`, which
//! the loader seeds per batch so results do not depend on which thread ran them.

use super::{ImageShape, Rng};

/// Padding used by `augment` for this image size.
pub fn pad_for(shape: ImageShape) -> usize {
    if shape.h.min(shape.w) >= 32 {
        4
    } else {
        2
    }
}

/// Writes into `dst` the `shape`-sized window of `src` zero-padded by `pad`, whose top-left
/// corner is at (`dy`, `dx`) in padded coordinates (0..=2*pad each; `pad`,`pad` = identity).
pub fn crop_padded(
    src: &[u8],
    dst: &mut [u8],
    shape: ImageShape,
    pad: usize,
    dy: usize,
    dx: usize,
) {
    let (h, w, c) = (shape.h as isize, shape.w as isize, shape.c);
    let (oy, ox) = (dy as isize - pad as isize, dx as isize - pad as isize);
    let row = shape.w * c;
    for y in 0..h {
        let dst_row = &mut dst[y as usize * row..(y as usize + 1) * row];
        let sy = y + oy;
        if sy < 0 || sy >= h {
            dst_row.fill(0);
            continue;
        }
        // Columns x with 0 <= x + ox < w come from the source; the rest are padding.
        let x0 = (-ox).clamp(0, w);
        let x1 = (w - ox).clamp(0, w);
        dst_row[..x0 as usize * c].fill(0);
        dst_row[x1 as usize * c..].fill(0);
        if x0 < x1 {
            let s = (sy * w + x0 + ox) as usize * c;
            let len = (x1 - x0) as usize * c;
            dst_row[x0 as usize * c..x1 as usize * c].copy_from_slice(&src[s..s + len]);
        }
    }
}

/// Mirrors the image left-right in place.
pub fn hflip(img: &mut [u8], shape: ImageShape) {
    let c = shape.c;
    for row in img.chunks_exact_mut(shape.w * c) {
        let (mut a, mut b) = (0, shape.w - 1);
        while a < b {
            for ch in 0..c {
                row.swap(a * c + ch, b * c + ch);
            }
            a += 1;
            b -= 1;
        }
    }
}

/// Random crop then random flip, `src` -> `dst`.
pub fn augment(src: &[u8], dst: &mut [u8], shape: ImageShape, rng: &mut Rng) {
    let pad = pad_for(shape);
    let dy = rng.below(2 * pad + 1);
    let dx = rng.below(2 * pad + 1);
    crop_padded(src, dst, shape, pad, dy, dx);
    if rng.next_u64() & 1 == 1 {
        hflip(dst, shape);
    }
}

#[cfg(test)]
mod tests {
    use super::super::{GRAY28, RGB32};
    use super::*;

    fn image(shape: ImageShape) -> Vec<u8> {
        (0..shape.len()).map(|i| (i % 253 + 1) as u8).collect()
    }

    #[test]
    fn flip_is_an_involution() {
        for shape in [GRAY28, RGB32, ImageShape::new(3, 5, 2)] {
            let src = image(shape);
            let mut img = src.clone();
            hflip(&mut img, shape);
            assert_ne!(img, src);
            let (w, c) = (shape.w, shape.c);
            assert_eq!(img[..c], src[(w - 1) * c..w * c]);
            hflip(&mut img, shape);
            assert_eq!(img, src);
        }
    }

    #[test]
    fn crop_matches_naive_padding() {
        for shape in [GRAY28, RGB32, ImageShape::new(4, 6, 3)] {
            let src = image(shape);
            let pad = pad_for(shape);
            let mut dst = vec![0u8; shape.len()];
            for dy in 0..=2 * pad {
                for dx in 0..=2 * pad {
                    dst.fill(77);
                    crop_padded(&src, &mut dst, shape, pad, dy, dx);
                    for y in 0..shape.h {
                        for x in 0..shape.w {
                            for ch in 0..shape.c {
                                let sy = y as isize + dy as isize - pad as isize;
                                let sx = x as isize + dx as isize - pad as isize;
                                let want = if (0..shape.h as isize).contains(&sy)
                                    && (0..shape.w as isize).contains(&sx)
                                {
                                    src[(sy as usize * shape.w + sx as usize) * shape.c + ch]
                                } else {
                                    0
                                };
                                assert_eq!(dst[(y * shape.w + x) * shape.c + ch], want);
                            }
                        }
                    }
                }
            }
            crop_padded(&src, &mut dst, shape, pad, pad, pad);
            assert_eq!(dst, src);
        }
    }

    #[test]
    fn augment_keeps_shape_and_is_seeded() {
        let src = image(RGB32);
        let mut a = vec![0u8; RGB32.len()];
        let mut b = vec![0u8; RGB32.len()];
        let mut differs = false;
        for s in 0..20 {
            augment(&src, &mut a, RGB32, &mut Rng::new(s));
            augment(&src, &mut b, RGB32, &mut Rng::new(s));
            assert_eq!(a, b);
            assert_eq!(a.len(), RGB32.len());
            differs |= a != src;
        }
        assert!(differs);
    }
}
