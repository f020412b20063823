//! The loader: sampling (shuffle per epoch, DistributedSampler sharding), batch assembly
//! (decode, augment, normalize) and worker threads.
//!
//! Batches carry a global sequence number g = epoch * batches_per_epoch + index. Worker k
//! of W builds g = k, k+W, k+2W, ... and the consumer reads worker g % W, so delivery is
//! in order without a reorder buffer. Everything random in a batch is seeded from
//! (seed, epoch, index), never from thread state, so the batch stream is bit-identical
//! for any worker count.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::Arc;
use std::thread::JoinHandle;

use super::augment::augment;
use super::{Dataset, ImageShape, Normalize, Rng};
use crate::{Error, Result};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoaderConfig {
    pub batch_size: usize,
    /// 0 = load on the calling thread.
    pub num_workers: usize,
    /// Batches in flight per worker (PyTorch's prefetch_factor); at least 1 with workers.
    pub prefetch: usize,
    pub seed: u64,
    pub shuffle: bool,
    /// Random crop (zero pad 2 for 28x28, 4 for 32x32) and horizontal flip.
    pub augment: bool,
    pub drop_last: bool,
    /// DistributedSampler semantics: disjoint shards padded to equal length by wrapping,
    /// reshuffled per epoch from (seed, epoch). rank 0 of world 1 is a plain sampler.
    pub rank: usize,
    pub world_size: usize,
}

impl Default for LoaderConfig {
    fn default() -> Self {
        LoaderConfig {
            batch_size: 64,
            num_workers: 0,
            prefetch: 2,
            seed: 0,
            shuffle: true,
            augment: false,
            drop_last: false,
            rank: 0,
            world_size: 1,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Batch {
    /// n*h*w*c values, NHWC, normalized.
    pub x: Vec<f32>,
    pub y: Vec<u32>,
    pub n: usize,
    pub shape: ImageShape,
    pub epoch: usize,
    /// Index of the batch within its epoch.
    pub index: usize,
}

/// Sample indices this rank visits in `epoch`, in order: the dataset permuted from
/// (seed, epoch) when shuffling, padded by wrapping to a multiple of `world_size`, then
/// every `world_size`-th entry starting at `rank` (as torch's DistributedSampler).
pub fn sampler_indices(len: usize, cfg: &LoaderConfig, epoch: usize) -> Vec<usize> {
    let world = cfg.world_size.max(1);
    if len == 0 {
        return Vec::new();
    }
    let mut all: Vec<usize> = (0..len).collect();
    if cfg.shuffle {
        Rng::from_keys(&[cfg.seed, epoch as u64, 0x5a3b1e]).shuffle(&mut all);
    }
    let total = len.div_ceil(world) * world;
    (cfg.rank..total)
        .step_by(world)
        .map(|j| all[j % len])
        .collect()
}

/// What every batch builder needs; immutable and shared by the workers.
struct Plan {
    ds: Arc<dyn Dataset>,
    table: Vec<[f32; 256]>,
    shape: ImageShape,
    cfg: LoaderConfig,
    per_rank: usize,
    batches_per_epoch: usize,
}

impl Plan {
    fn new(ds: Arc<dyn Dataset>, norm: &Normalize, cfg: LoaderConfig) -> Result<Plan> {
        if cfg.batch_size == 0 {
            return Err(Error::Invalid("batch size must be at least 1".into()));
        }
        if cfg.world_size == 0 || cfg.rank >= cfg.world_size {
            return Err(Error::Invalid(format!(
                "rank {} is not in a world of {} (need world_size >= 1 and rank < world_size)",
                cfg.rank, cfg.world_size
            )));
        }
        if cfg.num_workers > 0 && cfg.prefetch == 0 {
            return Err(Error::Invalid(
                "prefetch must be at least 1 when num_workers > 0".into(),
            ));
        }
        let len = ds.len();
        if len == 0 {
            return Err(Error::Invalid("the dataset has no samples".into()));
        }
        let shape = ds.image_shape();
        let table = norm.table(shape)?;
        let per_rank = len.div_ceil(cfg.world_size);
        let batches_per_epoch = if cfg.drop_last {
            per_rank / cfg.batch_size
        } else {
            per_rank.div_ceil(cfg.batch_size)
        };
        if batches_per_epoch == 0 {
            return Err(Error::Invalid(format!(
                "with drop_last, {per_rank} samples per rank make no full batch of {}",
                cfg.batch_size
            )));
        }
        Ok(Plan {
            ds,
            table,
            shape,
            cfg,
            per_rank,
            batches_per_epoch,
        })
    }

    /// Builds batch `g` of the endless stream; `cache` holds the current epoch's indices.
    fn build_seq(&self, g: usize, cache: &mut Option<(usize, Vec<usize>)>) -> Result<Batch> {
        let (epoch, index) = (g / self.batches_per_epoch, g % self.batches_per_epoch);
        let indices = match cache {
            Some((e, v)) if *e == epoch => v,
            _ => {
                let v = sampler_indices(self.ds.len(), &self.cfg, epoch);
                &mut cache.insert((epoch, v)).1
            }
        };
        let start = index * self.cfg.batch_size;
        let end = (start + self.cfg.batch_size).min(self.per_rank);
        self.build(&indices[start..end], epoch, index)
    }

    fn build(&self, indices: &[usize], epoch: usize, index: usize) -> Result<Batch> {
        let len = self.shape.len();
        let c = self.shape.c;
        let mut x = vec![0f32; indices.len() * len];
        let mut y = Vec::with_capacity(indices.len());
        let mut raw = vec![0u8; len];
        let mut aug = vec![0u8; if self.cfg.augment { len } else { 0 }];
        let classes = self.ds.num_classes();
        for (&i, out) in indices.iter().zip(x.chunks_exact_mut(len)) {
            let label = self.ds.load(i, &mut raw)?;
            if label as usize >= classes {
                return Err(Error::Runtime(format!(
                    "sample {i} has label {label} but the dataset has {classes} classes"
                )));
            }
            y.push(label);
            let img = if self.cfg.augment {
                // Seeded per sample, not per batch: a sample is augmented the same way
                // whichever batch or DDP rank it lands in, so one device and N devices
                // over the same global batch see the same pixels.
                let mut rng = Rng::from_keys(&[self.cfg.seed, epoch as u64, i as u64, 0xa06]);
                augment(&raw, &mut aug, self.shape, &mut rng);
                &aug
            } else {
                &raw
            };
            for (o, p) in out.chunks_exact_mut(c).zip(img.chunks_exact(c)) {
                for ch in 0..c {
                    o[ch] = self.table[ch][p[ch] as usize];
                }
            }
        }
        Ok(Batch {
            x,
            n: y.len(),
            y,
            shape: self.shape,
            epoch,
            index,
        })
    }
}

struct Worker {
    rx: Option<Receiver<Result<Batch>>>,
    handle: Option<JoinHandle<()>>,
}

pub struct Loader {
    plan: Arc<Plan>,
    next: usize,
    cache: Option<(usize, Vec<usize>)>,
    workers: Vec<Worker>,
    stop: Arc<AtomicBool>,
    /// Set after the first error: the stream has a hole, so later batches are refused.
    failed: Option<String>,
}

impl Loader {
    /// Validates the configuration (batch_size > 0, world_size > 0, rank < world_size,
    /// normalization matching the channels) and starts `num_workers` threads.
    pub fn new(ds: Arc<dyn Dataset>, norm: Normalize, cfg: LoaderConfig) -> Result<Loader> {
        let plan = Arc::new(Plan::new(ds, &norm, cfg)?);
        let stop = Arc::new(AtomicBool::new(false));
        let mut loader = Loader {
            plan: plan.clone(),
            next: 0,
            cache: None,
            workers: Vec::new(),
            stop: stop.clone(),
            failed: None,
        };
        let w = plan.cfg.num_workers;
        for k in 0..w {
            // prefetch - 1 queued plus the one a worker holds (building or blocked in send).
            let (tx, rx) = sync_channel(plan.cfg.prefetch - 1);
            let (plan, stop) = (plan.clone(), stop.clone());
            let handle = std::thread::Builder::new()
                .name(format!("tune-loader-{k}"))
                .spawn(move || worker(plan, k, w, tx, stop))
                .map_err(|e| Error::Runtime(format!("starting loader worker {k}: {e}")))?;
            // On error above, `loader`'s Drop stops the workers already started.
            loader.workers.push(Worker {
                rx: Some(rx),
                handle: Some(handle),
            });
        }
        Ok(loader)
    }

    /// Next batch in deterministic order; runs forever across epochs (the epoch
    /// increments and the order reshuffles).
    pub fn next_batch(&mut self) -> Result<Batch> {
        if let Some(msg) = &self.failed {
            return Err(Error::Runtime(format!(
                "data loader stopped after an earlier error: {msg}"
            )));
        }
        let g = self.next;
        let result = if self.workers.is_empty() {
            self.plan.build_seq(g, &mut self.cache)
        } else {
            let k = g % self.workers.len();
            match self.workers[k].rx.as_ref().map(Receiver::recv) {
                Some(Ok(r)) => r,
                _ => Err(Error::Runtime(format!(
                    "data loader worker {k} exited without delivering batch {g} (it panicked)"
                ))),
            }
        };
        match &result {
            Ok(_) => self.next += 1,
            Err(e) => self.failed = Some(e.to_string()),
        }
        result
    }

    pub fn batches_per_epoch(&self) -> usize {
        self.plan.batches_per_epoch
    }

    /// Samples this rank sees per epoch (after padding, before drop_last).
    pub fn samples_per_epoch(&self) -> usize {
        self.plan.per_rank
    }

    pub fn image_shape(&self) -> ImageShape {
        self.plan.shape
    }

    pub fn config(&self) -> &LoaderConfig {
        &self.plan.cfg
    }

    /// One pass over the dataset in index order without shuffle or augmentation (for
    /// evaluation); the last batch may be short. Stops after the first error.
    pub fn eval_batches(
        ds: Arc<dyn Dataset>,
        norm: &Normalize,
        batch_size: usize,
    ) -> impl Iterator<Item = Result<Batch>> {
        let cfg = LoaderConfig {
            batch_size,
            num_workers: 0,
            shuffle: false,
            augment: false,
            drop_last: false,
            ..LoaderConfig::default()
        };
        let mut plan = Some(Plan::new(ds, norm, cfg));
        let mut index = 0usize;
        std::iter::from_fn(move || {
            let p = match plan.as_ref()? {
                Ok(p) => p,
                Err(_) => return plan.take().and_then(|r| r.err()).map(Err),
            };
            let start = index * p.cfg.batch_size;
            if start >= p.ds.len() {
                return None;
            }
            let end = (start + p.cfg.batch_size).min(p.ds.len());
            let indices: Vec<usize> = (start..end).collect();
            let r = p.build(&indices, 0, index);
            index += 1;
            if r.is_err() {
                plan = None;
            }
            Some(r)
        })
    }
}

fn worker(
    plan: Arc<Plan>,
    k: usize,
    w: usize,
    tx: SyncSender<Result<Batch>>,
    stop: Arc<AtomicBool>,
) {
    let mut cache = None;
    let mut g = k;
    while !stop.load(Ordering::Relaxed) {
        let r = plan.build_seq(g, &mut cache);
        let failed = r.is_err();
        // A send error means the Loader is gone: nothing left to do.
        if tx.send(r).is_err() || failed {
            return;
        }
        g += w;
    }
}

impl Drop for Loader {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Dropping the receivers first wakes any worker blocked on a full channel (its
        // send fails), so the joins below cannot hang.
        for w in &mut self.workers {
            drop(w.rx.take());
        }
        for w in &mut self.workers {
            if let Some(h) = w.handle.take() {
                let _ = h.join();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::{default_normalize, shapes::ShapesDataset, GRAY28, RGB32};
    use super::*;
    use std::collections::HashSet;
    use std::sync::mpsc;
    use std::time::{Duration, Instant};

    /// Label = index, pixels derived from the index: batches reveal which samples they hold.
    struct Indexed {
        n: usize,
        shape: ImageShape,
        fail_at: Option<usize>,
        delay: Duration,
    }

    impl Indexed {
        fn new(n: usize) -> Self {
            Indexed {
                n,
                shape: ImageShape::new(6, 5, 2),
                fail_at: None,
                delay: Duration::ZERO,
            }
        }
    }

    impl Dataset for Indexed {
        fn len(&self) -> usize {
            self.n
        }
        fn image_shape(&self) -> ImageShape {
            self.shape
        }
        fn num_classes(&self) -> usize {
            self.n
        }
        fn load(&self, index: usize, out: &mut [u8]) -> Result<u32> {
            if Some(index) == self.fail_at {
                return Err(Error::format(
                    "fake.bin",
                    format!("sample {index} is broken"),
                ));
            }
            std::thread::sleep(self.delay);
            for (j, o) in out.iter_mut().enumerate() {
                *o = (index * 31 + j * 7) as u8;
            }
            Ok(index as u32)
        }
    }

    fn cfg(batch: usize, workers: usize) -> LoaderConfig {
        LoaderConfig {
            batch_size: batch,
            num_workers: workers,
            seed: 99,
            augment: true,
            ..LoaderConfig::default()
        }
    }

    /// Runs `f` on a thread and fails the test if it takes longer than `secs`.
    fn within(secs: u64, f: impl FnOnce() + Send + 'static) {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            f();
            let _ = tx.send(());
        });
        rx.recv_timeout(Duration::from_secs(secs))
            .expect("timed out (hang?)");
    }

    #[test]
    fn same_stream_for_any_worker_count() {
        let tmp = tempfile::tempdir().unwrap();
        let shapes: Arc<dyn Dataset> =
            Arc::new(ShapesDataset::open(tmp.path(), RGB32, 150, 5).unwrap());
        let indexed: Arc<dyn Dataset> = Arc::new(Indexed::new(101));
        for ds in [shapes, indexed] {
            let norm = default_normalize(ds.image_shape());
            let run = |workers: usize| {
                let mut l = Loader::new(ds.clone(), norm.clone(), cfg(16, workers)).unwrap();
                (0..25).map(|_| l.next_batch().unwrap()).collect::<Vec<_>>()
            };
            let base = run(0);
            let per_epoch = ds.len().div_ceil(16);
            assert_eq!(base[per_epoch - 1].n, ds.len() - 16 * (per_epoch - 1));
            assert_eq!((base[per_epoch].epoch, base[per_epoch].index), (1, 0));
            // Each epoch is a permutation of the dataset, and epochs differ.
            let epoch = |e: usize| -> Vec<u32> {
                base[e * per_epoch..(e + 1) * per_epoch]
                    .iter()
                    .flat_map(|b| b.y.clone())
                    .collect()
            };
            assert_ne!(epoch(0), epoch(1));
            let mut sorted = epoch(1);
            sorted.sort();
            if ds.num_classes() == ds.len() {
                assert_eq!(sorted, (0..ds.len() as u32).collect::<Vec<_>>());
            }
            for w in [1, 2, 3] {
                let other = run(w);
                for (a, b) in base.iter().zip(&other) {
                    assert_eq!(a.y, b.y, "workers {w}");
                    let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                    assert_eq!(bits(&a.x), bits(&b.x), "workers {w}");
                    assert_eq!((a.epoch, a.index, a.n), (b.epoch, b.index, b.n));
                }
            }
        }
    }

    #[test]
    fn batch_values_are_normalized_pixels() {
        let ds: Arc<dyn Dataset> = Arc::new(Indexed::new(10));
        let norm = Normalize {
            mean: vec![0.5, 0.25],
            std: vec![0.5, 2.0],
        };
        let mut c = cfg(4, 0);
        c.augment = false;
        c.shuffle = false;
        let mut l = Loader::new(ds.clone(), norm.clone(), c).unwrap();
        let b = l.next_batch().unwrap();
        assert_eq!((b.n, b.y.clone(), b.x.len()), (4, vec![0, 1, 2, 3], 4 * 60));
        let mut raw = vec![0u8; 60];
        ds.load(2, &mut raw).unwrap();
        for (j, &v) in raw.iter().enumerate() {
            let ch = j % 2;
            let want = (v as f32 / 255.0 - norm.mean[ch]) / norm.std[ch];
            assert_eq!(b.x[2 * 60 + j], want);
        }
        let evals: Vec<Batch> = Loader::eval_batches(ds, &norm, 4)
            .collect::<Result<_>>()
            .unwrap();
        assert_eq!(evals.iter().map(|b| b.n).collect::<Vec<_>>(), vec![4, 4, 2]);
        assert_eq!(evals[0], b);
    }

    #[test]
    fn distributed_shards_are_disjoint_covering_and_padded() {
        let n = 103;
        for shuffle in [false, true] {
            for world in [1, 2, 4, 5] {
                let mut seen = Vec::new();
                let mut lens = HashSet::new();
                for rank in 0..world {
                    let c = LoaderConfig {
                        rank,
                        world_size: world,
                        shuffle,
                        ..cfg(8, 0)
                    };
                    let idx = sampler_indices(n, &c, 3);
                    lens.insert(idx.len());
                    // The loader delivers exactly these samples, in this order.
                    let mut l = Loader::new(
                        Arc::new(Indexed::new(n)),
                        default_normalize(ImageShape::new(6, 5, 2)),
                        c,
                    )
                    .unwrap();
                    for _ in 0..3 * l.batches_per_epoch() {
                        l.next_batch().unwrap();
                    }
                    let epoch3: Vec<usize> = (0..l.batches_per_epoch())
                        .flat_map(|_| l.next_batch().unwrap().y)
                        .map(|y| y as usize)
                        .collect();
                    assert_eq!(epoch3, idx);
                    seen.extend(idx);
                }
                assert_eq!(lens.len(), 1, "equal shard lengths");
                let per = n.div_ceil(world);
                assert_eq!(seen.len(), per * world);
                let distinct: HashSet<_> = seen.iter().copied().collect();
                assert_eq!(distinct.len(), n, "covering (world {world})");
                // Only the wrap-around padding repeats samples.
                assert_eq!(seen.len() - distinct.len(), per * world - n);
            }
        }
        // Different epochs shuffle differently.
        let c = LoaderConfig {
            world_size: 2,
            ..cfg(8, 0)
        };
        assert_ne!(sampler_indices(n, &c, 0), sampler_indices(n, &c, 1));
    }

    #[test]
    fn invalid_configs_are_rejected() {
        let ds: Arc<dyn Dataset> = Arc::new(Indexed::new(10));
        let norm = default_normalize(ds.image_shape());
        let bad = [
            LoaderConfig {
                batch_size: 0,
                ..cfg(1, 0)
            },
            LoaderConfig {
                world_size: 0,
                ..cfg(1, 0)
            },
            LoaderConfig {
                rank: 2,
                world_size: 2,
                ..cfg(1, 0)
            },
            LoaderConfig {
                prefetch: 0,
                ..cfg(1, 2)
            },
            LoaderConfig {
                drop_last: true,
                ..cfg(11, 0)
            },
        ];
        for c in bad {
            assert!(
                matches!(
                    Loader::new(ds.clone(), norm.clone(), c.clone()),
                    Err(Error::Invalid(_))
                ),
                "{c:?}"
            );
        }
        assert!(matches!(
            Loader::new(ds.clone(), default_normalize(GRAY28), cfg(2, 0)),
            Err(Error::Invalid(_))
        ));
        let mut it = Loader::eval_batches(ds, &norm, 0);
        assert!(matches!(it.next(), Some(Err(Error::Invalid(_)))));
        assert!(it.next().is_none());
    }

    #[test]
    fn drop_last_drops_the_short_batch() {
        let ds: Arc<dyn Dataset> = Arc::new(Indexed::new(10));
        let c = LoaderConfig {
            drop_last: true,
            ..cfg(4, 2)
        };
        let mut l = Loader::new(ds.clone(), default_normalize(ds.image_shape()), c).unwrap();
        assert_eq!(l.batches_per_epoch(), 2);
        for i in 0..6 {
            let b = l.next_batch().unwrap();
            assert_eq!((b.n, b.epoch, b.index), (4, i / 2, i % 2));
        }
    }

    #[test]
    fn worker_errors_propagate() {
        for workers in [0, 1, 3] {
            let ds: Arc<dyn Dataset> = Arc::new(Indexed {
                fail_at: Some(37),
                ..Indexed::new(64)
            });
            let mut c = cfg(8, workers);
            c.shuffle = false;
            within(20, move || {
                let mut l =
                    Loader::new(ds.clone(), default_normalize(ds.image_shape()), c).unwrap();
                for _ in 0..4 {
                    l.next_batch().unwrap();
                }
                match l.next_batch() {
                    Err(e) => assert!(e.to_string().contains("sample 37 is broken"), "{e}"),
                    Ok(b) => panic!("batch {} delivered", b.index),
                }
                assert!(l.next_batch().is_err());
            });
        }
    }

    #[test]
    fn drop_does_not_hang() {
        // Workers blocked on full channels.
        within(20, || {
            let ds: Arc<dyn Dataset> = Arc::new(Indexed::new(1000));
            let c = LoaderConfig {
                prefetch: 1,
                ..cfg(4, 3)
            };
            let mut l = Loader::new(ds.clone(), default_normalize(ds.image_shape()), c).unwrap();
            l.next_batch().unwrap();
            std::thread::sleep(Duration::from_millis(100));
            drop(l);
        });
        // Workers in the middle of slow batches; dropped without reading anything.
        within(20, || {
            let ds: Arc<dyn Dataset> = Arc::new(Indexed {
                delay: Duration::from_millis(20),
                ..Indexed::new(1000)
            });
            let l =
                Loader::new(ds.clone(), default_normalize(ds.image_shape()), cfg(8, 2)).unwrap();
            std::thread::sleep(Duration::from_millis(50));
            let t = Instant::now();
            drop(l);
            assert!(t.elapsed() < Duration::from_secs(2));
        });
    }
}
