//! Real-format data files for tests (unit, integration, CLI): small MNIST idx and
//! CIFAR-10 binary sets whose images are `shapes` renders, so they are also learnable.

use std::fs;
use std::path::Path;

use super::shapes::render;
use super::{cifar, idx, Rng, GRAY28, RGB32};
use crate::{Error, Result};

fn test_seed(seed: u64) -> u64 {
    Rng::from_keys(&[seed, 0x7e57]).next_u64()
}

fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    fs::write(path, bytes).map_err(|e| Error::io(path, e))
}

/// Writes an idx3 u8 image file (`n` images of `rows` x `cols`).
pub fn write_idx_images(
    path: &Path,
    n: usize,
    rows: usize,
    cols: usize,
    pixels: &[u8],
) -> Result<()> {
    if pixels.len() != n * rows * cols {
        return Err(Error::Invalid(format!(
            "write_idx_images: {} pixels for {n}x{rows}x{cols}",
            pixels.len()
        )));
    }
    let mut b = Vec::with_capacity(16 + pixels.len());
    for v in [idx::IMAGES_MAGIC, n as u32, rows as u32, cols as u32] {
        b.extend_from_slice(&v.to_be_bytes());
    }
    b.extend_from_slice(pixels);
    write(path, &b)
}

/// Writes an idx1 u8 label file.
pub fn write_idx_labels(path: &Path, labels: &[u8]) -> Result<()> {
    let mut b = Vec::with_capacity(8 + labels.len());
    for v in [idx::LABELS_MAGIC, labels.len() as u32] {
        b.extend_from_slice(&v.to_be_bytes());
    }
    b.extend_from_slice(labels);
    write(path, &b)
}

fn renders(shape: super::ImageShape, seed: u64, n: usize) -> (Vec<Vec<u8>>, Vec<u8>) {
    (0..n)
        .map(|i| {
            let (px, l) = render(shape, seed, i);
            (px, l as u8)
        })
        .unzip()
}

/// Writes the four MNIST idx files into `dir` (created if needed): `n_train` training
/// images are `shapes` renders of seed `seed`, `n_test` test images come from another seed.
pub fn write_mnist_fixture(dir: &Path, n_train: usize, n_test: usize, seed: u64) -> Result<()> {
    fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let [ti, tl, vi, vl] = idx::paths(dir);
    for (img, lbl, n, s) in [(ti, tl, n_train, seed), (vi, vl, n_test, test_seed(seed))] {
        let (px, labels) = renders(GRAY28, s, n);
        write_idx_images(&img, n, GRAY28.h, GRAY28.w, &px.concat())?;
        write_idx_labels(&lbl, &labels)?;
    }
    Ok(())
}

/// Writes `data_batch_1..5.bin` (splitting `n_train` records across them) and
/// `test_batch.bin` into `dir`, in CIFAR-10 binary format (label byte + CHW planes).
pub fn write_cifar_fixture(dir: &Path, n_train: usize, n_test: usize, seed: u64) -> Result<()> {
    fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let records = |s: u64, range: std::ops::Range<usize>| {
        let mut out = Vec::with_capacity(range.len() * cifar::RECORD);
        for i in range {
            let (px, label) = render(RGB32, s, i);
            out.push(label as u8);
            for ch in 0..3 {
                out.extend(px.iter().skip(ch).step_by(3));
            }
        }
        out
    };
    let files = cifar::TRAIN_FILES.len();
    for (k, name) in cifar::TRAIN_FILES.iter().enumerate() {
        let range = k * n_train / files..(k + 1) * n_train / files;
        write(&dir.join(name), &records(seed, range))?;
    }
    write(
        &dir.join(cifar::TEST_FILE),
        &records(test_seed(seed), 0..n_test),
    )
}
