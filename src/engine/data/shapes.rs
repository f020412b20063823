//! `shapes`: a synthetic, learnable 10-class image dataset.
//!
//! Each image is one drawn shape (random size, position, small rotation and, for RGB,
//! random colours independent of the class) on a noisy background. Images are generated
//! from (seed, index) alone, PNG-encoded and stored in shard files under the cache
//! directory, so that `load` pays a real PNG decode like an image-folder dataset does.
//!
//! Shard file (all integers little-endian):
//! `magic "TSHAPES1" | h w c count: u32 | first_index seed: u64 | labels: count x u8 |
//!  offsets: (count+1) x u64 into the PNG area | concatenated PNGs`.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, Weak};

use rayon::prelude::*;

use super::{Dataset, ImageShape, Rng, Splits, GRAY28, RGB32};
use crate::{Error, Result};

pub const NUM_CLASSES: usize = 10;
pub const CLASS_NAMES: [&str; NUM_CLASSES] = [
    "disk", "square", "triangle", "plus", "hbar", "vbar", "ring", "diamond", "x", "frame",
];
pub const SHARD_SIZE: usize = 1000;
pub const TRAIN_SEED: u64 = 7;
pub const TEST_SEED: u64 = 8;
/// Bump when rendering or the shard layout changes: old caches are then simply not found.
const VERSION: u32 = 1;
const MAGIC: &[u8; 8] = b"TSHAPES1";
const HEADER: usize = 8 + 4 * 4 + 8 * 2;

/// Held-out test size for `n` training samples.
pub fn test_len(n: usize) -> usize {
    (n / 5).max(500)
}

/// The splits rendered at `stored` (a larger square of the same channels as `want`).
pub(super) fn open_splits_stored(
    n: usize,
    want: ImageShape,
    stored: ImageShape,
    cache_dir: &Path,
) -> Result<Splits> {
    open_splits(n, want, cache_dir)?; // the same checks on the model's shape
    let train = ShapesDataset::open(cache_dir, stored, n, TRAIN_SEED)?;
    let test = ShapesDataset::open(cache_dir, stored, test_len(n), TEST_SEED)?;
    Ok(Splits {
        train: Arc::new(train),
        test: Arc::new(test),
        name: format!("shapes:{n}@{} ({want})", stored.h),
    })
}

pub(super) fn open_splits(n: usize, want: ImageShape, cache_dir: &Path) -> Result<Splits> {
    if want != GRAY28 && want != RGB32 {
        return Err(Error::Invalid(format!(
            "dataset `shapes` comes in {GRAY28} (for mlp) or {RGB32} (for cnn-small, resnet-mini); \
             the model takes {want}"
        )));
    }
    let train = ShapesDataset::open(cache_dir, want, n, TRAIN_SEED)?;
    let test = ShapesDataset::open(cache_dir, want, test_len(n), TEST_SEED)?;
    Ok(Splits {
        train: Arc::new(train),
        test: Arc::new(test),
        name: format!("shapes:{n} ({want})"),
    })
}

/// The deterministic label of sample `index`: each block of 10 consecutive indices holds
/// every class once in a seeded order, so classes are exactly balanced without the label
/// being a function of `index % 10`.
pub fn label_of(seed: u64, index: usize) -> u32 {
    let block = (index / NUM_CLASSES) as u64;
    let mut perm: [u32; NUM_CLASSES] = std::array::from_fn(|i| i as u32);
    Rng::from_keys(&[seed, block, 0x1abe1]).shuffle(&mut perm);
    perm[index % NUM_CLASSES]
}

/// Whether local point (u, v), with the shape spanning roughly [-1, 1]^2 and v pointing
/// down, lies inside the class's shape. Areas are kept within about 2x of each other so
/// no class is recognisable by brightness alone.
fn inside(class: u32, u: f32, v: f32) -> bool {
    let (au, av) = (u.abs(), v.abs());
    match class {
        0 => u * u + v * v <= 1.0,
        1 => au.max(av) <= 0.82,
        2 => (-0.95..=0.95).contains(&v) && au <= (v + 0.95) / 1.9,
        3 => (au <= 0.28 && av <= 1.0) || (av <= 0.28 && au <= 1.0),
        4 => au <= 1.0 && av <= 0.32,
        5 => av <= 1.0 && au <= 0.32,
        6 => {
            let r2 = u * u + v * v;
            (0.36..=1.0).contains(&r2)
        }
        7 => au + av <= 1.0,
        8 => au.max(av) <= 0.9 && ((u - v).abs() <= 0.32 || (u + v).abs() <= 0.32),
        _ => {
            let m = au.max(av);
            (0.55..=0.92).contains(&m)
        }
    }
}

/// Renders sample `index` of the dataset `seed` as HWC u8; returns (pixels, label).
pub fn render(shape: ImageShape, seed: u64, index: usize) -> (Vec<u8>, u32) {
    let label = label_of(seed, index);
    let mut rng = Rng::from_keys(&[seed, index as u64, 0x5eed]);
    let (h, w, c) = (shape.h, shape.w, shape.c);
    let side = h.min(w) as f32;
    let span = rng.range_f32(0.5, 0.8);
    let r = span * side / 2.0;
    let jitter = (side / 2.0 - r).min(0.12 * side).max(0.0);
    let cx = w as f32 / 2.0 + rng.range_f32(-jitter, jitter);
    let cy = h as f32 / 2.0 + rng.range_f32(-jitter, jitter);
    let angle = rng.range_f32(-0.15, 0.15);
    let (sin, cos) = angle.sin_cos();

    let mut bg = [0f32; 3];
    let mut fg = [0f32; 3];
    if c == 1 {
        bg[0] = rng.range_f32(0.0, 70.0);
        fg[0] = rng.range_f32(150.0, 255.0);
    } else {
        // Colours are drawn independently of the class; the only constraint is enough
        // brightness contrast for the shape to be visible.
        for b in bg.iter_mut() {
            *b = rng.range_f32(0.0, 110.0);
        }
        let bg_mean = bg.iter().sum::<f32>() / 3.0;
        let mut tries = 0;
        loop {
            for f in fg.iter_mut() {
                *f = rng.range_f32(0.0, 255.0);
            }
            tries += 1;
            if fg.iter().sum::<f32>() / 3.0 - bg_mean >= 90.0 || tries >= 64 {
                break;
            }
        }
        if fg.iter().sum::<f32>() / 3.0 - bg_mean < 90.0 {
            for (f, b) in fg.iter_mut().zip(bg) {
                *f = (b + 130.0).min(255.0);
            }
        }
    }
    let sigma = rng.range_f32(6.0, 18.0);

    let mut out = vec![0u8; shape.len()];
    // 2x2 supersampling: soft edges, so small size changes move pixel values smoothly.
    const SUB: [f32; 2] = [0.25, 0.75];
    let inv_r = 1.0 / r;
    for y in 0..h {
        for x in 0..w {
            let mut hits = 0u32;
            for sy in SUB {
                for sx in SUB {
                    let dx = x as f32 + sx - cx;
                    let dy = y as f32 + sy - cy;
                    let u = (dx * cos + dy * sin) * inv_r;
                    let v = (-dx * sin + dy * cos) * inv_r;
                    hits += inside(label, u, v) as u32;
                }
            }
            let cov = hits as f32 * 0.25;
            let base = (y * w + x) * c;
            for ch in 0..c {
                let v = bg[ch] + (fg[ch] - bg[ch]) * cov + sigma * approx_normal(&mut rng);
                out[base + ch] = v.round().clamp(0.0, 255.0) as u8;
            }
        }
    }
    (out, label)
}

/// Irwin-Hall with four 16-bit uniforms from one draw: close enough to a Gaussian for
/// pixel noise and several times cheaper than Box-Muller.
fn approx_normal(rng: &mut Rng) -> f32 {
    let b = rng.next_u64();
    let s = (b & 0xffff) + ((b >> 16) & 0xffff) + ((b >> 32) & 0xffff) + (b >> 48);
    (s as f32 / 65536.0 - 2.0) * 1.732_050_8
}

fn encode_png(pixels: &[u8], shape: ImageShape) -> Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(shape.len() + 128);
    let color = if shape.c == 1 {
        png::ColorType::Grayscale
    } else {
        png::ColorType::Rgb
    };
    let fail = |e: png::EncodingError| Error::Runtime(format!("encoding a shapes PNG: {e}"));
    let mut enc = png::Encoder::new(&mut buf, shape.w as u32, shape.h as u32);
    enc.set_color(color);
    enc.set_depth(png::BitDepth::Eight);
    enc.set_compression(png::Compression::Fast);
    let mut writer = enc.write_header().map_err(fail)?;
    writer.write_image_data(pixels).map_err(fail)?;
    writer.finish().map_err(fail)?;
    Ok(buf)
}

/// One shard's bytes, kept in memory, with its index parsed.
struct Shard {
    path: PathBuf,
    bytes: Vec<u8>,
    labels_at: usize,
    offsets: Vec<u64>,
    data_at: usize,
}

impl Shard {
    fn png(&self, i: usize) -> &[u8] {
        let a = self.data_at + self.offsets[i] as usize;
        let b = self.data_at + self.offsets[i + 1] as usize;
        &self.bytes[a..b]
    }

    fn label(&self, i: usize) -> u32 {
        self.bytes[self.labels_at + i] as u32
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ShardKey {
    shape: ImageShape,
    seed: u64,
    first: usize,
    count: usize,
}

fn build_shard(key: ShardKey) -> Result<Vec<u8>> {
    let items: Vec<(Vec<u8>, u32)> = (key.first..key.first + key.count)
        .into_par_iter()
        .map(|i| {
            let (px, label) = render(key.shape, key.seed, i);
            Ok((encode_png(&px, key.shape)?, label))
        })
        .collect::<Result<_>>()?;
    let data_len: usize = items.iter().map(|(p, _)| p.len()).sum();
    let mut out = Vec::with_capacity(HEADER + key.count * 9 + 8 + data_len);
    out.extend_from_slice(MAGIC);
    for v in [key.shape.h, key.shape.w, key.shape.c, key.count] {
        out.extend_from_slice(&(v as u32).to_le_bytes());
    }
    out.extend_from_slice(&(key.first as u64).to_le_bytes());
    out.extend_from_slice(&key.seed.to_le_bytes());
    out.extend(items.iter().map(|(_, l)| *l as u8));
    let mut off = 0u64;
    out.extend_from_slice(&off.to_le_bytes());
    for (p, _) in &items {
        off += p.len() as u64;
        out.extend_from_slice(&off.to_le_bytes());
    }
    for (p, _) in &items {
        out.extend_from_slice(p);
    }
    Ok(out)
}

fn parse_shard(path: &Path, bytes: Vec<u8>, key: ShardKey) -> Result<Shard> {
    let bad = |msg: String| Error::format(path, msg);
    if bytes.len() < HEADER || &bytes[..8] != MAGIC {
        return Err(bad("not a shapes shard (bad magic or too short)".into()));
    }
    let u32_at =
        |o: usize| u32::from_le_bytes([bytes[o], bytes[o + 1], bytes[o + 2], bytes[o + 3]]);
    let u64_at = |o: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&bytes[o..o + 8]);
        u64::from_le_bytes(b)
    };
    let (h, w, c, count) = (u32_at(8), u32_at(12), u32_at(16), u32_at(20));
    let (first, seed) = (u64_at(24), u64_at(32));
    let found = (
        ImageShape::new(h as usize, w as usize, c as usize),
        seed,
        first,
        count as usize,
    );
    if found != (key.shape, key.seed, key.first as u64, key.count) {
        return Err(bad(format!(
            "shard header {found:?} does not match expected {:?}",
            (key.shape, key.seed, key.first, key.count)
        )));
    }
    let labels_at = HEADER;
    let offsets_at = labels_at + key.count;
    let data_at = offsets_at + 8 * (key.count + 1);
    if bytes.len() < data_at {
        return Err(bad(format!(
            "truncated: index needs {data_at} bytes, file has {}",
            bytes.len()
        )));
    }
    let offsets: Vec<u64> = (0..=key.count)
        .map(|i| u64_at(offsets_at + 8 * i))
        .collect();
    let data_len = (bytes.len() - data_at) as u64;
    if offsets[0] != 0 || offsets.windows(2).any(|p| p[0] > p[1]) || offsets[key.count] != data_len
    {
        return Err(bad(format!(
            "corrupt offsets: PNG area is {data_len} bytes, last offset {}",
            offsets[key.count]
        )));
    }
    if bytes[labels_at..offsets_at]
        .iter()
        .any(|&l| l as usize >= NUM_CLASSES)
    {
        return Err(bad("label out of range".into()));
    }
    Ok(Shard {
        path: path.to_path_buf(),
        bytes,
        labels_at,
        offsets,
        data_at,
    })
}

/// The directory of one generated dataset.
pub fn cache_path(cache_dir: &Path, shape: ImageShape, n: usize, seed: u64) -> PathBuf {
    cache_dir.join(format!("shapes-v{VERSION}-{shape}-n{n}-seed{seed}"))
}

/// Reads every shard from disk, generating (and atomically writing) those that are missing
/// or unreadable. Returns the shards and how many had to be generated.
fn load_or_generate(
    dir: &Path,
    shape: ImageShape,
    n: usize,
    seed: u64,
) -> Result<(Vec<Shard>, usize)> {
    fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    let keys: Vec<ShardKey> = (0..n.div_ceil(SHARD_SIZE))
        .map(|k| ShardKey {
            shape,
            seed,
            first: k * SHARD_SIZE,
            count: SHARD_SIZE.min(n - k * SHARD_SIZE),
        })
        .collect();
    let loaded: Vec<(Shard, bool)> = keys
        .into_par_iter()
        .enumerate()
        .map(|(k, key)| {
            let path = dir.join(format!("shard-{k:05}.bin"));
            match fs::read(&path) {
                Ok(bytes) => {
                    // A shard that fails to parse came from elsewhere (renames are
                    // atomic); regenerating it is the cache doing its job.
                    if let Ok(s) = parse_shard(&path, bytes, key) {
                        return Ok((s, false));
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(&path, e)),
            }
            let bytes = build_shard(key)?;
            crate::fsio::atomic_write(&path, &bytes)?;
            Ok((parse_shard(&path, bytes, key)?, true))
        })
        .collect::<Result<_>>()?;
    let generated = loaded.iter().filter(|(_, g)| *g).count();
    Ok((loaded.into_iter().map(|(s, _)| s).collect(), generated))
}

struct ShapesData {
    shards: Vec<Shard>,
}

pub struct ShapesDataset {
    shape: ImageShape,
    n: usize,
    data: Arc<ShapesData>,
}

impl ShapesDataset {
    /// Opens (generating on first use) `n` samples from `seed`. Shard bytes are read once
    /// per process and shared: a second open of the same set while the first is alive
    /// costs nothing.
    pub fn open(cache_dir: &Path, shape: ImageShape, n: usize, seed: u64) -> Result<Self> {
        static LIVE: OnceLock<Mutex<HashMap<PathBuf, Weak<ShapesData>>>> = OnceLock::new();
        if n == 0 {
            return Err(Error::Invalid("shapes needs at least one sample".into()));
        }
        let dir = cache_path(cache_dir, shape, n, seed);
        // Held across generation: two threads opening the same set generate it once.
        let mut live = LIVE
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        live.retain(|_, w| w.strong_count() > 0);
        let data = match live.get(&dir).and_then(Weak::upgrade) {
            Some(d) => d,
            None => {
                let (shards, _) = load_or_generate(&dir, shape, n, seed)?;
                let d = Arc::new(ShapesData { shards });
                live.insert(dir, Arc::downgrade(&d));
                d
            }
        };
        Ok(ShapesDataset { shape, n, data })
    }

    /// The label without decoding the image.
    pub fn label(&self, index: usize) -> Option<u32> {
        (index < self.n).then(|| self.data.shards[index / SHARD_SIZE].label(index % SHARD_SIZE))
    }
}

impl Dataset for ShapesDataset {
    fn len(&self) -> usize {
        self.n
    }

    fn image_shape(&self) -> ImageShape {
        self.shape
    }

    fn num_classes(&self) -> usize {
        NUM_CLASSES
    }

    fn load(&self, index: usize, out: &mut [u8]) -> Result<u32> {
        if index >= self.n {
            return Err(Error::Runtime(format!(
                "shapes: sample {index} out of range (len {})",
                self.n
            )));
        }
        if out.len() != self.shape.len() {
            return Err(Error::Runtime(format!(
                "shapes: output buffer has {} bytes, image needs {}",
                out.len(),
                self.shape.len()
            )));
        }
        let shard = &self.data.shards[index / SHARD_SIZE];
        let i = index % SHARD_SIZE;
        let bad = |msg: String| Error::format(&shard.path, format!("sample {index}: {msg}"));
        let mut reader = png::Decoder::new(io::Cursor::new(shard.png(i)))
            .read_info()
            .map_err(|e| bad(e.to_string()))?;
        let info = reader.info();
        let want_color = if self.shape.c == 1 {
            png::ColorType::Grayscale
        } else {
            png::ColorType::Rgb
        };
        if (info.width as usize, info.height as usize) != (self.shape.w, self.shape.h)
            || info.color_type != want_color
            || info.bit_depth != png::BitDepth::Eight
        {
            return Err(bad(format!(
                "PNG is {}x{} {:?}/{:?}, expected {}",
                info.width, info.height, info.color_type, info.bit_depth, self.shape
            )));
        }
        reader.next_frame(out).map_err(|e| bad(e.to_string()))?;
        Ok(shard.label(i))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mtimes(dir: &Path) -> Vec<(PathBuf, std::time::SystemTime)> {
        let mut v: Vec<_> = fs::read_dir(dir)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (e.path(), e.metadata().unwrap().modified().unwrap())
            })
            .collect();
        v.sort();
        v
    }

    #[test]
    fn deterministic_and_cached() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = cache_path(tmp.path(), GRAY28, 2500, 3);
        let (a, gen_a) = load_or_generate(&dir, GRAY28, 2500, 3).unwrap();
        assert_eq!(gen_a, 3);
        let before = mtimes(&dir);
        assert_eq!(before.len(), 3, "no temp files left behind: {before:?}");
        let (b, gen_b) = load_or_generate(&dir, GRAY28, 2500, 3).unwrap();
        assert_eq!(gen_b, 0, "second open regenerated");
        assert_eq!(mtimes(&dir), before);
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x.bytes, y.bytes);
        }
        // Same bytes from an independent generation elsewhere.
        let tmp2 = tempfile::tempdir().unwrap();
        let (c, _) = load_or_generate(tmp2.path(), GRAY28, 2500, 3).unwrap();
        assert!(a.iter().zip(&c).all(|(x, y)| x.bytes == y.bytes));

        // A different seed gives different images.
        assert_ne!(render(GRAY28, 3, 5).0, render(GRAY28, 4, 5).0);
    }

    #[test]
    fn load_decodes_what_was_rendered() {
        let tmp = tempfile::tempdir().unwrap();
        for shape in [GRAY28, RGB32] {
            let ds = ShapesDataset::open(tmp.path(), shape, 1200, 11).unwrap();
            assert_eq!(ds.len(), 1200);
            let mut buf = vec![0u8; shape.len()];
            for i in [0, 1, 999, 1000, 1199] {
                let label = ds.load(i, &mut buf).unwrap();
                let (px, l) = render(shape, 11, i);
                assert_eq!((label, &buf), (l, &px));
                assert_eq!(ds.label(i), Some(l));
            }
            assert!(ds.load(1200, &mut buf).is_err());
        }
    }

    #[test]
    fn classes_balanced() {
        let mut counts = [0usize; NUM_CLASSES];
        for i in 0..1005 {
            counts[label_of(7, i) as usize] += 1;
        }
        assert!(counts.iter().all(|&c| c == 100 || c == 101), "{counts:?}");
        assert_eq!(counts.iter().sum::<usize>(), 1005);
        // Not simply index % 10.
        assert!((0..100).any(|i| label_of(7, i) != (i % 10) as u32));
    }

    #[test]
    fn colour_does_not_give_the_class_away() {
        // Mean image colour per class should be about the same for every class.
        let mut means = [[0f64; 3]; NUM_CLASSES];
        let mut counts = [0f64; NUM_CLASSES];
        for i in 0..2000 {
            let (px, l) = render(RGB32, 1, i);
            // The brightest pixel of each image approximates its foreground colour.
            let brightest = px
                .chunks(3)
                .max_by_key(|p| p.iter().map(|&v| v as u32).sum::<u32>())
                .unwrap();
            for (m, &v) in means[l as usize].iter_mut().zip(brightest) {
                *m += v as f64;
            }
            counts[l as usize] += 1.0;
        }
        for ch in 0..3 {
            let per: Vec<f64> = means.iter().zip(counts).map(|(m, n)| m[ch] / n).collect();
            let (lo, hi) = per
                .iter()
                .fold((f64::MAX, f64::MIN), |(a, b), &v| (a.min(v), b.max(v)));
            assert!(hi - lo < 30.0, "channel {ch}: {per:?}");
        }
    }

    #[test]
    fn corrupt_shard_is_regenerated() {
        let tmp = tempfile::tempdir().unwrap();
        let (a, _) = load_or_generate(tmp.path(), GRAY28, 10, 1).unwrap();
        let path = tmp.path().join("shard-00000.bin");
        let len = fs::metadata(&path).unwrap().len();
        fs::write(&path, &a[0].bytes[..(len / 2) as usize]).unwrap();
        let (b, generated) = load_or_generate(tmp.path(), GRAY28, 10, 1).unwrap();
        assert_eq!(generated, 1);
        assert_eq!(a[0].bytes, b[0].bytes);
    }

    #[test]
    fn concurrent_generation_is_safe() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let handles: Vec<_> = (0..3)
            .map(|_| {
                let dir = dir.clone();
                std::thread::spawn(move || load_or_generate(&dir, GRAY28, 1500, 2).map(|_| ()))
            })
            .collect();
        for h in handles {
            h.join().unwrap().unwrap();
        }
        let (_, generated) = load_or_generate(&dir, GRAY28, 1500, 2).unwrap();
        assert_eq!(generated, 0);
        assert_eq!(fs::read_dir(&dir).unwrap().count(), 2);
    }

    /// Timing of the default train set: `cargo test --lib shapes::tests::time_20000 -- --ignored --nocapture`.
    #[test]
    #[ignore]
    fn time_20000() {
        for shape in [GRAY28, RGB32] {
            let tmp = tempfile::tempdir().unwrap();
            let t = std::time::Instant::now();
            let (_, g) = load_or_generate(tmp.path(), shape, 20_000, TRAIN_SEED).unwrap();
            let gen = t.elapsed();
            let t = std::time::Instant::now();
            load_or_generate(tmp.path(), shape, 20_000, TRAIN_SEED).unwrap();
            let reread = t.elapsed();
            let ds = ShapesDataset::open(tmp.path(), shape, 20_000, TRAIN_SEED).unwrap();
            let mut buf = vec![0u8; shape.len()];
            let t = std::time::Instant::now();
            for i in 0..20_000 {
                ds.load(i, &mut buf).unwrap();
            }
            let decode = t.elapsed();
            let bytes: u64 = fs::read_dir(tmp.path())
                .unwrap()
                .map(|e| e.unwrap().metadata().unwrap().len())
                .sum();
            eprintln!(
                "{shape}: generate {g} shards {gen:?}, reread {reread:?}, decode all {decode:?} \
                 ({:.1} us/img), {bytes} bytes on disk, rayon threads {}",
                decode.as_secs_f64() * 1e6 / 20_000.0,
                rayon::current_num_threads()
            );
        }
    }
}

/// Learnability check with a plain MLP trained by SGD on the loader's batches:
/// `cargo test --lib shapes::learn -- --ignored --nocapture`.
#[cfg(test)]
#[allow(clippy::needless_range_loop)] // index loops read like the maths here
mod learn {
    use super::super::{default_normalize, Loader, LoaderConfig};
    use super::*;

    fn dot(a: &[f32], b: &[f32]) -> f32 {
        let mut acc = [0f32; 8];
        let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
        let tail: f32 = ca
            .remainder()
            .iter()
            .zip(cb.remainder())
            .map(|(x, y)| x * y)
            .sum();
        for (x, y) in ca.zip(cb) {
            for k in 0..8 {
                acc[k] += x[k] * y[k];
            }
        }
        acc.iter().sum::<f32>() + tail
    }

    fn axpy(alpha: f32, x: &[f32], y: &mut [f32]) {
        for (yi, xi) in y.iter_mut().zip(x) {
            *yi += alpha * xi;
        }
    }

    struct Mlp {
        d: usize,
        hidden: usize,
        w1: Vec<f32>,
        b1: Vec<f32>,
        w2: Vec<f32>,
        b2: Vec<f32>,
    }

    impl Mlp {
        fn forward(&self, x: &[f32], h: &mut [f32], logits: &mut [f32; 10]) {
            for j in 0..self.hidden {
                h[j] = (dot(&self.w1[j * self.d..(j + 1) * self.d], x) + self.b1[j]).max(0.0);
            }
            for k in 0..10 {
                logits[k] = dot(&self.w2[k * self.hidden..(k + 1) * self.hidden], h) + self.b2[k];
            }
        }
    }

    fn train_and_eval(shape: ImageShape, steps: usize, hidden: usize) -> f32 {
        let tmp = tempfile::tempdir().unwrap();
        let splits = open_splits(20_000, shape, tmp.path()).unwrap();
        let norm = default_normalize(shape);
        let d = shape.len();
        let mut rng = Rng::new(1);
        let mut m = Mlp {
            d,
            hidden,
            w1: (0..hidden * d)
                .map(|_| rng.normal() * (2.0 / d as f32).sqrt())
                .collect(),
            b1: vec![0.0; hidden],
            w2: (0..10 * hidden)
                .map(|_| rng.normal() * (1.0 / hidden as f32).sqrt())
                .collect(),
            b2: vec![0.0; 10],
        };
        let cfg = LoaderConfig {
            batch_size: 128,
            num_workers: 1,
            seed: 3,
            augment: std::env::var_os("TUNE_LEARN_AUGMENT").is_some(),
            ..LoaderConfig::default()
        };
        let mut loader = Loader::new(splits.train.clone(), norm.clone(), cfg).unwrap();
        let (lr, mom) = (0.02f32, 0.9f32);
        let mut v1 = vec![0f32; m.w1.len()];
        let mut v2 = vec![0f32; m.w2.len()];
        let mut vb1 = vec![0f32; hidden];
        let mut vb2 = vec![0f32; 10];
        let mut h = vec![0f32; hidden];
        let mut logits = [0f32; 10];
        for step in 0..steps {
            let b = loader.next_batch().unwrap();
            let mut g1 = vec![0f32; m.w1.len()];
            let mut g2 = vec![0f32; m.w2.len()];
            let mut gb1 = vec![0f32; hidden];
            let mut gb2 = vec![0f32; 10];
            let mut loss = 0.0;
            for (x, &y) in b.x.chunks_exact(d).zip(&b.y) {
                m.forward(x, &mut h, &mut logits);
                let mx = logits.iter().cloned().fold(f32::MIN, f32::max);
                let z: f32 = logits.iter().map(|l| (l - mx).exp()).sum();
                loss += z.ln() + mx - logits[y as usize];
                let mut dh = vec![0f32; hidden];
                for k in 0..10 {
                    let p = (logits[k] - mx).exp() / z - (k == y as usize) as u32 as f32;
                    let p = p / b.n as f32;
                    gb2[k] += p;
                    axpy(p, &h, &mut g2[k * hidden..(k + 1) * hidden]);
                    axpy(p, &m.w2[k * hidden..(k + 1) * hidden], &mut dh);
                }
                for j in 0..hidden {
                    if h[j] > 0.0 {
                        gb1[j] += dh[j];
                        axpy(dh[j], x, &mut g1[j * d..(j + 1) * d]);
                    }
                }
            }
            for (p, v, g) in [
                (&mut m.w1, &mut v1, &g1),
                (&mut m.w2, &mut v2, &g2),
                (&mut m.b1, &mut vb1, &gb1),
                (&mut m.b2, &mut vb2, &gb2),
            ] {
                for ((p, v), g) in p.iter_mut().zip(v.iter_mut()).zip(g) {
                    *v = mom * *v + g;
                    *p -= lr * *v;
                }
            }
            if step % 50 == 0 {
                eprintln!("{shape} step {step}: loss {:.3}", loss / b.n as f32);
            }
        }
        let (mut right, mut total) = (0usize, 0usize);
        for b in Loader::eval_batches(splits.test.clone(), &norm, 256) {
            let b = b.unwrap();
            for (x, &y) in b.x.chunks_exact(d).zip(&b.y) {
                m.forward(x, &mut h, &mut logits);
                let pred = (0..10)
                    .max_by(|&a, &c| logits[a].total_cmp(&logits[c]))
                    .unwrap();
                right += (pred == y as usize) as usize;
                total += 1;
            }
        }
        right as f32 / total as f32
    }

    #[test]
    #[ignore]
    fn learnable_by_small_mlp() {
        for shape in [GRAY28, RGB32] {
            let t = std::time::Instant::now();
            let acc = train_and_eval(shape, 300, 256);
            eprintln!(
                "{shape}: held-out accuracy {acc:.3} after 300 steps ({:?})",
                t.elapsed()
            );
        }
    }
}
