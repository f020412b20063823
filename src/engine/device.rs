//! Devices own memory accounting and the compute threads. Every buffer the engine
//! allocates is charged to a category on its device's `MemTracker`, so peak memory per
//! category is a measurement, not an estimate.

use std::any::{Any, TypeId};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::knobs::{Knobs, Parallel};

/// Which device a run asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceChoice {
    Cpu,
    Cuda,
    Auto,
}

impl std::str::FromStr for DeviceChoice {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.trim() {
            "cpu" => Ok(DeviceChoice::Cpu),
            "cuda" => Ok(DeviceChoice::Cuda),
            "auto" => Ok(DeviceChoice::Auto),
            o => Err(Error::Invalid(format!(
                "invalid device '{o}': allowed values are cpu, cuda, auto"
            ))),
        }
    }
}

/// Whether `k` needs the multi-device path (DP on one device is plain training).
pub fn is_multi_device(k: &Knobs) -> bool {
    match k.parallel {
        Parallel::Single => false,
        Parallel::Dp => k.devices > 1,
        Parallel::Ddp => true,
    }
}

/// What a buffer is for. Mirrors how PyTorch memory is usually broken down.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemCategory {
    Params,
    Grads,
    OptimizerState,
    Activations,
    Workspace,
}

impl MemCategory {
    pub const ALL: [MemCategory; 5] = [
        MemCategory::Params,
        MemCategory::Grads,
        MemCategory::OptimizerState,
        MemCategory::Activations,
        MemCategory::Workspace,
    ];

    pub fn name(self) -> &'static str {
        match self {
            MemCategory::Params => "params",
            MemCategory::Grads => "grads",
            MemCategory::OptimizerState => "optimizer_state",
            MemCategory::Activations => "activations",
            MemCategory::Workspace => "workspace",
        }
    }
}

/// Current and peak bytes per category, plus the peak of the total.
#[derive(Debug, Default)]
pub struct MemTracker {
    current: [AtomicI64; 5],
    peak: [AtomicI64; 5],
    total: AtomicI64,
    total_peak: AtomicI64,
    /// Buffers of dropped tensors, of every element type, for
    /// [`MemTracker::take_recycled`] and [`MemTracker::spare`]: like PyTorch's caching
    /// allocator, memory kept for reuse is not charged as in use.
    bin: Bin,
}

/// One kept buffer: a `Vec<T>` for the `T` that `ty` names, `len` elements long.
struct Kept {
    ty: TypeId,
    len: usize,
    bytes: usize,
    buf: Box<dyn Any + Send>,
}

/// The recycle bin's buffers (its Debug says how many, not what they hold). One bin for
/// every element type: f32 compute buffers, bf16/fp16 storage and packed u32 weights
/// are the same memory to the allocator, and a buffer is handed back only to a request
/// of its own type and length.
#[derive(Default)]
struct Bin(Mutex<Vec<Kept>>);

impl std::fmt::Debug for Bin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let n = self.0.lock().map(|b| b.len()).unwrap_or(0);
        write!(f, "Bin({n} buffers)")
    }
}

/// Buffers shorter than this (in elements) are not kept: allocating them costs little.
pub(crate) const RECYCLE_MIN: usize = 1 << 14;
/// Most buffers and bytes the bin keeps: a step's distinct large buffers (cnn-small at
/// batch 64 under bf16 drops about 40 of up to 8 MiB: f32 compute buffers, bf16
/// activations and gradients, packed weights) with room to spare; the oldest go first.
const RECYCLE_MAX: usize = 64;
const RECYCLE_MAX_BYTES: usize = 256 << 20;

/// A point-in-time copy of a tracker's counters.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemSnapshot {
    pub current: std::collections::BTreeMap<String, u64>,
    pub peak: std::collections::BTreeMap<String, u64>,
    pub total_current: u64,
    pub total_peak: u64,
}

impl MemSnapshot {
    pub fn current_of(&self, c: MemCategory) -> u64 {
        self.current.get(c.name()).copied().unwrap_or(0)
    }
    pub fn peak_of(&self, c: MemCategory) -> u64 {
        self.peak.get(c.name()).copied().unwrap_or(0)
    }
}

impl MemTracker {
    fn idx(c: MemCategory) -> usize {
        c as usize
    }

    pub fn alloc(&self, c: MemCategory, bytes: usize) {
        let b = bytes as i64;
        let i = Self::idx(c);
        let now = self.current[i].fetch_add(b, Ordering::Relaxed) + b;
        self.peak[i].fetch_max(now, Ordering::Relaxed);
        let tot = self.total.fetch_add(b, Ordering::Relaxed) + b;
        self.total_peak.fetch_max(tot, Ordering::Relaxed);
    }

    pub fn free(&self, c: MemCategory, bytes: usize) {
        let b = bytes as i64;
        self.current[Self::idx(c)].fetch_sub(b, Ordering::Relaxed);
        self.total.fetch_sub(b, Ordering::Relaxed);
    }

    fn bin(&self) -> std::sync::MutexGuard<'_, Vec<Kept>> {
        match self.bin.0.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }

    /// Keeps a dropped buffer for reuse (a tensor's storage, or packed weights).
    pub(crate) fn recycle<T: Copy + Send + 'static>(&self, v: Vec<T>) {
        if v.len() < RECYCLE_MIN {
            return;
        }
        let kept = Kept {
            ty: TypeId::of::<T>(),
            len: v.len(),
            bytes: v.capacity() * std::mem::size_of::<T>(),
            buf: Box::new(v),
        };
        let mut bin = self.bin();
        bin.push(kept);
        let mut bytes: usize = bin.iter().map(|b| b.bytes).sum();
        while bin.len() > RECYCLE_MAX || bytes > RECYCLE_MAX_BYTES {
            bytes -= bin.remove(0).bytes;
        }
    }

    /// A kept buffer of `T` of exactly `len` elements (the newest), holding its old
    /// values.
    pub(crate) fn take_recycled<T: Copy + Send + 'static>(&self, len: usize) -> Option<Vec<T>> {
        if len < RECYCLE_MIN {
            return None;
        }
        let ty = TypeId::of::<T>();
        let mut bin = self.bin();
        let i = bin.iter().rposition(|b| b.ty == ty && b.len == len)?;
        bin.remove(i).buf.downcast::<Vec<T>>().ok().map(|v| *v)
    }

    /// An empty vector with room for `len` elements, for a kernel that writes them all
    /// into its spare capacity: a kept buffer's memory when the bin has one of `len`
    /// (no fresh pages to fault in: glibc hands large freed blocks back to the kernel,
    /// and re-faulting them was 13% of cnn-small's bf16 step), else a new allocation.
    pub(crate) fn spare<T: Copy + Send + 'static>(&self, len: usize) -> Vec<T> {
        match self.take_recycled(len) {
            Some(mut v) => {
                v.clear();
                v
            }
            None => Vec::with_capacity(len),
        }
    }

    pub fn current(&self, c: MemCategory) -> u64 {
        self.current[Self::idx(c)].load(Ordering::Relaxed).max(0) as u64
    }

    pub fn peak(&self, c: MemCategory) -> u64 {
        self.peak[Self::idx(c)].load(Ordering::Relaxed).max(0) as u64
    }

    /// Bytes in use over all categories; cheap (one atomic load), for samplers.
    pub fn total_current(&self) -> u64 {
        self.total.load(Ordering::Relaxed).max(0) as u64
    }

    /// Peak of the total since creation or the last `reset_peaks`.
    pub fn total_peak(&self) -> u64 {
        self.total_peak.load(Ordering::Relaxed).max(0) as u64
    }

    /// Starts a new peak window (e.g. after warm-up) at the current level.
    pub fn reset_peaks(&self) {
        for i in 0..5 {
            self.peak[i].store(self.current[i].load(Ordering::Relaxed), Ordering::Relaxed);
        }
        self.total_peak
            .store(self.total.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> MemSnapshot {
        let mut s = MemSnapshot::default();
        for c in MemCategory::ALL {
            s.current.insert(c.name().into(), self.current(c));
            s.peak.insert(c.name().into(), self.peak(c));
        }
        s.total_current = self.total_current();
        s.total_peak = self.total_peak();
        s
    }
}

/// Which backend a device runs on; each has a capability table (`engine::caps`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    Cpu,
    Cuda,
}

/// One compute device: its memory accounting, its compute threads and a reusable
/// workspace (like cuDNN's), so big scratch buffers such as im2col matrices are not
/// page-faulted in again on every step.
#[derive(Debug)]
pub struct Device {
    pub backend: Backend,
    pub index: usize,
    pub threads: usize,
    mem: Arc<MemTracker>,
    workspace: Mutex<Vec<f32>>,
}

impl Device {
    pub fn cpu(index: usize, threads: usize) -> Arc<Device> {
        Arc::new(Device {
            backend: Backend::Cpu,
            index,
            threads: threads.max(1),
            mem: Arc::new(MemTracker::default()),
            workspace: Mutex::new(Vec::new()),
        })
    }

    /// A GPU's accounting: its buffers live in device memory (`engine::cuda`), so the
    /// CPU-side workspace and thread count do not apply.
    pub fn cuda(index: usize) -> Arc<Device> {
        Arc::new(Device {
            backend: Backend::Cuda,
            index,
            threads: 1,
            mem: Arc::new(MemTracker::default()),
            workspace: Mutex::new(Vec::new()),
        })
    }

    pub fn mem(&self) -> &Arc<MemTracker> {
        &self.mem
    }

    /// The GEMM parallelism matching this device's thread count.
    pub fn par(&self) -> gemm::Parallelism {
        if self.threads > 1 {
            gemm::Parallelism::Rayon(self.threads)
        } else {
            gemm::Parallelism::None
        }
    }

    /// Borrows the device workspace with at least `len` elements; contents are garbage.
    /// Growth is charged to the workspace category.
    pub fn with_workspace<R>(&self, len: usize, f: impl FnOnce(&mut [f32]) -> R) -> R {
        let mut ws = match self.workspace.lock() {
            Ok(mut g) => std::mem::take(&mut *g),
            Err(p) => std::mem::take(&mut *p.into_inner()),
        };
        if ws.len() < len {
            self.mem.free(MemCategory::Workspace, ws.len() * 4);
            ws = vec![0.0; len];
            self.mem.alloc(MemCategory::Workspace, len * 4);
        }
        let r = f(&mut ws[..len]);
        match self.workspace.lock() {
            Ok(mut g) => *g = ws,
            Err(p) => *p.into_inner() = ws,
        }
        r
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        let n = match self.workspace.get_mut() {
            Ok(w) => w.len(),
            Err(p) => p.get_ref().len(),
        };
        self.mem.free(MemCategory::Workspace, n * 4);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracker_keeps_peak_and_current() {
        let t = MemTracker::default();
        t.alloc(MemCategory::Activations, 100);
        t.alloc(MemCategory::Activations, 50);
        t.free(MemCategory::Activations, 100);
        assert_eq!(t.current(MemCategory::Activations), 50);
        assert_eq!(t.peak(MemCategory::Activations), 150);
        t.reset_peaks();
        assert_eq!(t.peak(MemCategory::Activations), 50);
        assert_eq!(t.snapshot().total_peak, 50);
    }

    #[test]
    fn workspace_grows_once_and_is_charged() {
        let d = Device::cpu(0, 1);
        d.with_workspace(1000, |w| w[999] = 1.0);
        d.with_workspace(10, |w| assert_eq!(w.len(), 10));
        assert_eq!(d.mem().current(MemCategory::Workspace), 4000);
    }
}
