//! CIFAR-10 binary format: records of 1 label byte + 3072 pixel bytes (1024 R, 1024 G,
//! 1024 B, each 32x32 row-major). Kept as-is in memory and converted CHW -> HWC in `load`,
//! so that conversion is part of the per-sample cost, as in a real loader.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::idx::{check_dir, read_file};
use super::{Dataset, ImageShape, Splits, RGB32};
use crate::{Error, Result};

pub const RECORD: usize = 1 + 3072;
pub const TRAIN_FILES: [&str; 5] = [
    "data_batch_1.bin",
    "data_batch_2.bin",
    "data_batch_3.bin",
    "data_batch_4.bin",
    "data_batch_5.bin",
];
pub const TEST_FILE: &str = "test_batch.bin";
const NUM_CLASSES: usize = 10;

pub struct CifarDataset {
    records: Vec<u8>,
}

impl CifarDataset {
    /// Reads and concatenates the given batch files in order.
    pub fn open(files: &[PathBuf]) -> Result<Self> {
        let mut records = Vec::new();
        for path in files {
            let bytes = read_file(path)?;
            check_records(path, &bytes)?;
            records.extend_from_slice(&bytes);
        }
        Ok(CifarDataset { records })
    }
}

fn check_records(path: &Path, bytes: &[u8]) -> Result<()> {
    let left_over = bytes.len() % RECORD;
    if left_over > 0 {
        return Err(Error::format(
            path,
            format!(
                "truncated or not CIFAR-10 binary: {} bytes is not a multiple of the {RECORD}-byte \
                 record ({} whole records, {} bytes left over; expected {} bytes)",
                bytes.len(),
                bytes.len() / RECORD,
                left_over,
                (bytes.len() / RECORD + 1) * RECORD
            ),
        ));
    }
    if let Some(r) = bytes
        .chunks_exact(RECORD)
        .position(|r| r[0] as usize >= NUM_CLASSES)
    {
        return Err(Error::format(
            path,
            format!(
                "record {r}: label {} is not a CIFAR-10 class 0-9",
                bytes[r * RECORD]
            ),
        ));
    }
    Ok(())
}

impl Dataset for CifarDataset {
    fn len(&self) -> usize {
        self.records.len() / RECORD
    }

    fn image_shape(&self) -> ImageShape {
        RGB32
    }

    fn num_classes(&self) -> usize {
        NUM_CLASSES
    }

    fn load(&self, index: usize, out: &mut [u8]) -> Result<u32> {
        if index >= self.len() {
            return Err(Error::Runtime(format!(
                "cifar10: sample {index} out of range (len {})",
                self.len()
            )));
        }
        if out.len() != RGB32.len() {
            return Err(Error::Runtime(format!(
                "cifar10: output buffer has {} bytes, image needs {}",
                out.len(),
                RGB32.len()
            )));
        }
        let rec = &self.records[index * RECORD..(index + 1) * RECORD];
        let (r, rest) = rec[1..].split_at(1024);
        let (g, b) = rest.split_at(1024);
        for (((px, &r), &g), &b) in out.chunks_exact_mut(3).zip(r).zip(g).zip(b) {
            px[0] = r;
            px[1] = g;
            px[2] = b;
        }
        Ok(rec[0] as u32)
    }
}

pub fn open_cifar10(dir: &Path) -> Result<Splits> {
    check_dir(dir)?;
    let train: Vec<PathBuf> = TRAIN_FILES.iter().map(|f| dir.join(f)).collect();
    Ok(Splits {
        train: Arc::new(CifarDataset::open(&train)?),
        test: Arc::new(CifarDataset::open(&[dir.join(TEST_FILE)])?),
        name: "cifar10".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::write_cifar_fixture;
    use super::*;
    use std::fs;

    #[test]
    fn round_trip_chw_to_hwc() {
        let dir = tempfile::tempdir().unwrap();
        let mut rec = vec![3u8];
        for ch in 0..3u32 {
            for i in 0..1024u32 {
                rec.push(((i * 3 + ch) % 251) as u8);
            }
        }
        let p = dir.path().join("one.bin");
        fs::write(&p, [rec.clone(), rec].concat()).unwrap();
        let ds = CifarDataset::open(&[p]).unwrap();
        assert_eq!(ds.len(), 2);
        let mut buf = vec![0u8; 3072];
        assert_eq!(ds.load(1, &mut buf).unwrap(), 3);
        for (i, px) in buf.chunks(3).enumerate() {
            for (ch, &v) in px.iter().enumerate() {
                assert_eq!(v as usize, (i * 3 + ch) % 251);
            }
        }

        write_cifar_fixture(dir.path(), 23, 7, 9).unwrap();
        let s = open_cifar10(dir.path()).unwrap();
        assert_eq!((s.train.len(), s.test.len()), (23, 7));
        // The fixture draws `shapes` images, so the decoded image must be that render.
        let (px, label) = super::super::shapes::render(RGB32, 9, 4);
        assert_eq!(s.train.load(4, &mut buf).unwrap(), label);
        assert_eq!(buf, px);
    }

    #[test]
    fn truncated_and_missing() {
        let dir = tempfile::tempdir().unwrap();
        write_cifar_fixture(dir.path(), 10, 4, 1).unwrap();
        let p = dir.path().join(TEST_FILE);
        let bytes = fs::read(&p).unwrap();
        fs::write(&p, &bytes[..bytes.len() - 5]).unwrap();
        match open_cifar10(dir.path()) {
            Err(e @ Error::Format { .. }) => {
                let m = e.to_string();
                assert!(m.contains(TEST_FILE) && m.contains("3073"), "{m}");
            }
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("accepted"),
        }
        fs::remove_file(&p).unwrap();
        match open_cifar10(dir.path()) {
            Err(Error::Io { path, .. }) => assert_eq!(path, p),
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("accepted"),
        }
    }
}
