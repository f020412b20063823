//! MNIST in the idx format: big-endian magic `0x00000803` (u8 data, 3 dims: n, rows, cols)
//! for images and `0x00000801` (1 dim: n) for labels. Only plain files are read; the
//! `.gz` downloads must be decompressed first.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::{Dataset, ImageShape, Splits};
use crate::{Error, Result};

pub const IMAGES_MAGIC: u32 = 0x0000_0803;
pub const LABELS_MAGIC: u32 = 0x0000_0801;
pub const TRAIN_IMAGES: &str = "train-images-idx3-ubyte";
pub const TRAIN_LABELS: &str = "train-labels-idx1-ubyte";
pub const TEST_IMAGES: &str = "t10k-images-idx3-ubyte";
pub const TEST_LABELS: &str = "t10k-labels-idx1-ubyte";
const NUM_CLASSES: usize = 10;

/// Reads a whole data file; a missing file whose `.gz` sibling exists gets an error
/// saying to decompress it, since that is the usual reason.
pub(super) fn read_file(path: &Path) -> Result<Vec<u8>> {
    fs::read(path).map_err(|e| {
        if e.kind() == io::ErrorKind::NotFound {
            let mut gz = path.as_os_str().to_owned();
            gz.push(".gz");
            if Path::new(&gz).exists() {
                return Error::io(
                    path,
                    io::Error::new(
                        io::ErrorKind::NotFound,
                        format!(
                            "not found, but {} is: only plain files are read, decompress it (gunzip)",
                            Path::new(&gz).display()
                        ),
                    ),
                );
            }
        }
        Error::io(path, e)
    })
}

pub(super) fn check_dir(dir: &Path) -> Result<()> {
    match fs::metadata(dir) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(Error::io(
            dir,
            io::Error::new(io::ErrorKind::NotADirectory, "not a directory"),
        )),
        Err(e) => Err(Error::io(dir, e)),
    }
}

fn be_u32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Checks the header and length of an idx file; returns its dims.
pub fn parse_header(path: &Path, bytes: &[u8], magic: u32) -> Result<Vec<usize>> {
    let ndims = (magic & 0xff) as usize;
    let header = 4 + 4 * ndims;
    if bytes.len() < header {
        return Err(Error::format(
            path,
            format!(
                "truncated idx header: expected at least {header} bytes, file has {}",
                bytes.len()
            ),
        ));
    }
    let found = be_u32(bytes, 0);
    if found != magic {
        return Err(Error::format(
            path,
            format!("bad idx magic {found:#010x}, expected {magic:#010x}"),
        ));
    }
    let dims: Vec<usize> = (0..ndims)
        .map(|i| be_u32(bytes, 4 + 4 * i) as usize)
        .collect();
    if dims[1..].contains(&0) {
        return Err(Error::format(path, format!("zero dimension in {dims:?}")));
    }
    let expected = dims
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .and_then(|n| n.checked_add(header))
        .ok_or_else(|| Error::format(path, format!("dims {dims:?} overflow")))?;
    if bytes.len() < expected {
        return Err(Error::format(
            path,
            format!(
                "truncated: dims {dims:?} need {expected} bytes, file has {}",
                bytes.len()
            ),
        ));
    }
    if bytes.len() > expected {
        return Err(Error::format(
            path,
            format!(
                "{} trailing bytes: dims {dims:?} need {expected} bytes, file has {}",
                bytes.len() - expected,
                bytes.len()
            ),
        ));
    }
    Ok(dims)
}

/// One split of an idx dataset, held in memory (60000 MNIST images are 47 MB).
pub struct IdxDataset {
    shape: ImageShape,
    pixels: Vec<u8>,
    labels: Vec<u8>,
}

impl IdxDataset {
    pub fn open(images: &Path, labels: &Path) -> Result<Self> {
        let img_bytes = read_file(images)?;
        let lbl_bytes = read_file(labels)?;
        let idims = parse_header(images, &img_bytes, IMAGES_MAGIC)?;
        let ldims = parse_header(labels, &lbl_bytes, LABELS_MAGIC)?;
        if idims[0] != ldims[0] {
            return Err(Error::format(
                labels,
                format!(
                    "{} labels but {} has {} images",
                    ldims[0],
                    images.display(),
                    idims[0]
                ),
            ));
        }
        let label_data = lbl_bytes[8..].to_vec();
        if let Some(pos) = label_data.iter().position(|&l| l as usize >= NUM_CLASSES) {
            return Err(Error::format(
                labels,
                format!(
                    "label {} at index {pos} is not a digit 0-9",
                    label_data[pos]
                ),
            ));
        }
        Ok(IdxDataset {
            shape: ImageShape::new(idims[1], idims[2], 1),
            pixels: img_bytes[16..].to_vec(),
            labels: label_data,
        })
    }
}

impl Dataset for IdxDataset {
    fn len(&self) -> usize {
        self.labels.len()
    }

    fn image_shape(&self) -> ImageShape {
        self.shape
    }

    fn num_classes(&self) -> usize {
        NUM_CLASSES
    }

    fn load(&self, index: usize, out: &mut [u8]) -> Result<u32> {
        let n = self.shape.len();
        let Some(&label) = self.labels.get(index) else {
            return Err(Error::Runtime(format!(
                "mnist: sample {index} out of range (len {})",
                self.labels.len()
            )));
        };
        if out.len() != n {
            return Err(Error::Runtime(format!(
                "mnist: output buffer has {} bytes, image needs {n}",
                out.len()
            )));
        }
        out.copy_from_slice(&self.pixels[index * n..(index + 1) * n]);
        Ok(label as u32)
    }
}

pub fn paths(dir: &Path) -> [PathBuf; 4] {
    [TRAIN_IMAGES, TRAIN_LABELS, TEST_IMAGES, TEST_LABELS].map(|f| dir.join(f))
}

pub fn open_mnist(dir: &Path) -> Result<Splits> {
    check_dir(dir)?;
    let [ti, tl, vi, vl] = paths(dir);
    let train = IdxDataset::open(&ti, &tl)?;
    let test = IdxDataset::open(&vi, &vl)?;
    if train.shape != test.shape {
        return Err(Error::format(
            &vi,
            format!(
                "test images are {} but train images are {}",
                test.shape, train.shape
            ),
        ));
    }
    Ok(Splits {
        train: Arc::new(train),
        test: Arc::new(test),
        name: "mnist".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{write_idx_images, write_idx_labels, write_mnist_fixture};
    use super::*;

    fn expect_format(r: Result<impl Sized>, file: &str, needles: &[&str]) {
        match r {
            Err(Error::Format { path, msg }) => {
                assert!(path.ends_with(file), "{path:?}");
                let full = Error::format(path, msg).to_string();
                for n in needles {
                    assert!(full.contains(n), "`{full}` lacks `{n}`");
                }
            }
            Err(e) => panic!("wrong error: {e}"),
            Ok(_) => panic!("accepted"),
        }
    }

    #[test]
    fn round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let n = 7;
        let px: Vec<u8> = (0..n * 5 * 4).map(|i| (i * 7 % 256) as u8).collect();
        let labels: Vec<u8> = (0..n as u8).map(|i| i % 10).collect();
        write_idx_images(&dir.path().join("i"), n, 5, 4, &px).unwrap();
        write_idx_labels(&dir.path().join("l"), &labels).unwrap();
        let ds = IdxDataset::open(&dir.path().join("i"), &dir.path().join("l")).unwrap();
        assert_eq!((ds.len(), ds.image_shape()), (n, ImageShape::new(5, 4, 1)));
        let mut buf = vec![0u8; 20];
        for i in 0..n {
            assert_eq!(ds.load(i, &mut buf).unwrap(), labels[i] as u32);
            assert_eq!(buf, px[i * 20..(i + 1) * 20]);
        }
        assert!(ds.load(n, &mut buf).is_err());

        write_mnist_fixture(dir.path(), 30, 12, 5).unwrap();
        let s = open_mnist(dir.path()).unwrap();
        assert_eq!((s.train.len(), s.test.len()), (30, 12));
        assert_eq!(s.train.image_shape(), super::super::GRAY28);
    }

    #[test]
    fn truncated_and_bad_magic() {
        let dir = tempfile::tempdir().unwrap();
        write_mnist_fixture(dir.path(), 10, 10, 1).unwrap();
        let [ti, tl, ..] = paths(dir.path());
        let bytes = fs::read(&ti).unwrap();
        let full = bytes.len();
        fs::write(&ti, &bytes[..full - 100]).unwrap();
        expect_format(
            open_mnist(dir.path()),
            TRAIN_IMAGES,
            &[TRAIN_IMAGES, &full.to_string(), &(full - 100).to_string()],
        );
        fs::write(&ti, &bytes[..10]).unwrap();
        expect_format(open_mnist(dir.path()), TRAIN_IMAGES, &["truncated"]);

        let mut bad = bytes.clone();
        bad[3] = 0x01;
        fs::write(&ti, &bad).unwrap();
        expect_format(open_mnist(dir.path()), TRAIN_IMAGES, &["magic"]);

        let mut long = bytes.clone();
        long.push(0);
        fs::write(&ti, &long).unwrap();
        expect_format(open_mnist(dir.path()), TRAIN_IMAGES, &["trailing"]);

        fs::write(&ti, &bytes).unwrap();
        write_idx_labels(&tl, &[1u8; 9]).unwrap();
        expect_format(
            open_mnist(dir.path()),
            TRAIN_LABELS,
            &["9 labels", "10 images"],
        );
        write_idx_labels(&tl, &[10u8; 10]).unwrap();
        expect_format(open_mnist(dir.path()), TRAIN_LABELS, &["label 10"]);
    }

    #[test]
    fn missing_files_are_io_errors_with_path() {
        let dir = tempfile::tempdir().unwrap();
        let gone = dir.path().join("nope");
        match open_mnist(&gone) {
            Err(Error::Io { path, .. }) => assert_eq!(path, gone),
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("accepted"),
        }
        write_mnist_fixture(dir.path(), 10, 10, 1).unwrap();
        let [ti, ..] = paths(dir.path());
        let mut gz = ti.as_os_str().to_owned();
        gz.push(".gz");
        fs::rename(&ti, &gz).unwrap();
        match open_mnist(dir.path()) {
            Err(e @ Error::Io { .. }) => {
                let m = e.to_string();
                assert!(m.contains(TRAIN_IMAGES) && m.contains("gunzip"), "{m}");
                assert!(e.is_bad_input());
            }
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("accepted"),
        }
    }
}
