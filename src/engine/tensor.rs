//! Tensors: a shape plus shared, tracked storage. Storage is reference counted so a layer
//! can keep its input for backward without copying; memory is charged once per buffer
//! and released when the last reference goes, which is what makes activation peaks real.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use half::{bf16, f16};

use crate::engine::amp;
use crate::engine::device::{MemCategory, MemTracker};
use crate::error::{Error, Result};

/// Element type of a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    F32,
    Bf16,
    F16,
    U32,
}

impl DType {
    pub fn size(self) -> usize {
        match self {
            DType::F32 | DType::U32 => 4,
            DType::Bf16 | DType::F16 => 2,
        }
    }
}

#[derive(Clone, Debug)]
pub enum Buf {
    F32(Vec<f32>),
    Bf16(Vec<bf16>),
    F16(Vec<f16>),
    U32(Vec<u32>),
}

impl Buf {
    fn dtype(&self) -> DType {
        match self {
            Buf::F32(_) => DType::F32,
            Buf::Bf16(_) => DType::Bf16,
            Buf::F16(_) => DType::F16,
            Buf::U32(_) => DType::U32,
        }
    }
    fn len(&self) -> usize {
        match self {
            Buf::F32(v) => v.len(),
            Buf::Bf16(v) => v.len(),
            Buf::F16(v) => v.len(),
            Buf::U32(v) => v.len(),
        }
    }
}

/// A tracked buffer: allocation is charged on creation and released on drop.
#[derive(Debug)]
pub struct Storage {
    buf: Buf,
    cat: MemCategory,
    mem: Arc<MemTracker>,
    /// Names this buffer's contents: fresh for every new buffer and on every mutable
    /// borrow, so what was derived from the contents (a layer's weights packed to bf16
    /// for the GEMMs, `ops/layer.rs`) is known stale once the optimizer has written them.
    id: u64,
}

/// A new content id: unique over the process (a u64 counter does not wrap).
fn next_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

impl Storage {
    fn new(buf: Buf, cat: MemCategory, mem: &Arc<MemTracker>) -> Storage {
        mem.alloc(cat, buf.len() * buf.dtype().size());
        Storage {
            buf,
            cat,
            mem: Arc::clone(mem),
            id: next_id(),
        }
    }
    fn bytes(&self) -> usize {
        self.buf.len() * self.buf.dtype().size()
    }
}

impl Clone for Storage {
    fn clone(&self) -> Self {
        Storage::new(self.buf.clone(), self.cat, &self.mem)
    }
}

impl Drop for Storage {
    fn drop(&mut self) {
        self.mem.free(self.cat, self.bytes());
        match &mut self.buf {
            Buf::F32(v) => self.mem.recycle(std::mem::take(v)),
            Buf::Bf16(v) => self.mem.recycle(std::mem::take(v)),
            Buf::F16(v) => self.mem.recycle(std::mem::take(v)),
            Buf::U32(v) => self.mem.recycle(std::mem::take(v)),
        }
    }
}

#[derive(Clone, Debug)]
pub struct Tensor {
    shape: Vec<usize>,
    storage: Arc<Storage>,
}

impl Tensor {
    pub fn from_buf(
        shape: &[usize],
        buf: Buf,
        cat: MemCategory,
        mem: &Arc<MemTracker>,
    ) -> Result<Tensor> {
        let n: usize = shape.iter().product();
        if buf.len() != n {
            return Err(Error::Shape {
                op: "tensor",
                msg: format!(
                    "shape {shape:?} needs {n} elements, buffer has {}",
                    buf.len()
                ),
            });
        }
        Ok(Tensor {
            shape: shape.to_vec(),
            storage: Arc::new(Storage::new(buf, cat, mem)),
        })
    }

    pub fn from_vec(
        shape: &[usize],
        data: Vec<f32>,
        cat: MemCategory,
        mem: &Arc<MemTracker>,
    ) -> Result<Tensor> {
        Tensor::from_buf(shape, Buf::F32(data), cat, mem)
    }

    pub fn zeros(shape: &[usize], cat: MemCategory, mem: &Arc<MemTracker>) -> Tensor {
        let n = shape.iter().product();
        Tensor {
            shape: shape.to_vec(),
            storage: Arc::new(Storage::new(Buf::F32(vec![0.0; n]), cat, mem)),
        }
    }

    /// An f32 tensor whose contents are unspecified (a dropped buffer's old values, or
    /// zeros): for kernels that write every element. It reuses a buffer of the same
    /// length from this tracker's recycle bin ([`MemTracker::take_recycled`]) instead of
    /// allocating and zero-filling one: on mlp batch 128 (perf, Sapphire Rapids) zeroing
    /// fresh output buffers was 12% of the step in fp32 and bf16 alike.
    pub fn scratch(shape: &[usize], cat: MemCategory, mem: &Arc<MemTracker>) -> Tensor {
        let n: usize = shape.iter().product();
        let v = mem.take_recycled::<f32>(n).unwrap_or_else(|| vec![0.0; n]);
        Tensor {
            shape: shape.to_vec(),
            storage: Arc::new(Storage::new(Buf::F32(v), cat, mem)),
        }
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Names the current contents: equal ids mean the same, unchanged buffer.
    pub fn content_id(&self) -> u64 {
        self.storage.id
    }

    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn dtype(&self) -> DType {
        self.storage.buf.dtype()
    }

    pub fn bytes(&self) -> usize {
        self.storage.bytes()
    }

    pub fn category(&self) -> MemCategory {
        self.storage.cat
    }

    pub fn tracker(&self) -> &Arc<MemTracker> {
        &self.storage.mem
    }

    /// Same storage viewed with another shape of equal element count.
    pub fn reshape(&self, shape: &[usize]) -> Result<Tensor> {
        let n: usize = shape.iter().product();
        if n != self.len() {
            return Err(Error::Shape {
                op: "reshape",
                msg: format!("{:?} -> {shape:?}", self.shape),
            });
        }
        Ok(Tensor {
            shape: shape.to_vec(),
            storage: Arc::clone(&self.storage),
        })
    }

    pub fn f32(&self) -> Result<&[f32]> {
        match &self.storage.buf {
            Buf::F32(v) => Ok(v),
            other => Err(Error::Shape {
                op: "f32",
                msg: format!("tensor holds {:?}, expected f32", other.dtype()),
            }),
        }
    }

    /// The bf16 data when the storage is bf16, for kernels that read it directly.
    pub fn bf16(&self) -> Option<&[bf16]> {
        match &self.storage.buf {
            Buf::Bf16(v) => Some(v),
            _ => None,
        }
    }

    pub fn u32(&self) -> Result<&[u32]> {
        match &self.storage.buf {
            Buf::U32(v) => Ok(v),
            other => Err(Error::Shape {
                op: "u32",
                msg: format!("tensor holds {:?}, expected u32", other.dtype()),
            }),
        }
    }

    /// Mutable f32 data; copies first if the storage is shared (copy-on-write), so an
    /// in-place op never corrupts a buffer another layer saved for backward.
    pub fn f32_mut(&mut self) -> Result<&mut [f32]> {
        let st = Arc::make_mut(&mut self.storage);
        st.id = next_id();
        match &mut st.buf {
            Buf::F32(v) => Ok(v),
            other => Err(Error::Shape {
                op: "f32_mut",
                msg: format!("tensor holds {:?}, expected f32", other.dtype()),
            }),
        }
    }

    /// True when no other tensor shares this storage (an in-place op will not copy).
    pub fn is_unique(&self) -> bool {
        Arc::strong_count(&self.storage) == 1
    }

    /// Converts to another floating dtype, charging the new buffer to `cat`.
    pub fn to_dtype(&self, dt: DType, cat: MemCategory) -> Result<Tensor> {
        let buf = match (&self.storage.buf, dt) {
            (Buf::F32(v), DType::Bf16 | DType::F16 | DType::F32) => {
                amp::narrow(v, dt, &self.storage.mem)?
            }
            (b @ (Buf::Bf16(_) | Buf::F16(_)), DType::F32) => Buf::F32(amp::widen_reusing(
                b,
                self.storage.mem.take_recycled(b.len()),
            )?),
            (b, _) => {
                return Err(Error::Shape {
                    op: "to_dtype",
                    msg: format!("{:?} -> {dt:?} unsupported", b.dtype()),
                })
            }
        };
        Tensor::from_buf(&self.shape, buf, cat, &self.storage.mem)
    }

    /// This tensor as f32 for a kernel: the same storage when it already is f32 (free),
    /// else a widened copy charged as workspace (mixed precision's compute copy).
    pub fn widened(&self) -> Result<Tensor> {
        match self.dtype() {
            DType::F32 => Ok(self.clone()),
            _ => self.to_dtype(DType::F32, MemCategory::Workspace),
        }
    }

    /// Like `widened`, but consumes the tensor, so an f32 tensor stays unique and an
    /// in-place kernel on it does not copy.
    pub fn into_f32(self) -> Result<Tensor> {
        match self.dtype() {
            DType::F32 => Ok(self),
            _ => self.to_dtype(DType::F32, MemCategory::Workspace),
        }
    }
}

/// 32-bit words holding `n` elements of `dt`.
pub fn words(n: usize, dt: DType) -> usize {
    match dt {
        DType::Bf16 | DType::F16 => n.div_ceil(2),
        DType::F32 | DType::U32 => n,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_storage_is_charged_once_and_copy_on_write() {
        let mem = Arc::new(MemTracker::default());
        let mut a = Tensor::zeros(&[4, 4], MemCategory::Activations, &mem);
        let b = a.clone();
        assert_eq!(mem.current(MemCategory::Activations), 64);
        a.f32_mut().unwrap()[0] = 1.0;
        assert_eq!(mem.current(MemCategory::Activations), 128);
        assert_eq!(b.f32().unwrap()[0], 0.0);
        drop(a);
        drop(b);
        assert_eq!(mem.current(MemCategory::Activations), 0);
    }

    /// A dropped f32 buffer is handed to the next scratch tensor of its length as it is
    /// (not zeroed, not reallocated), and charged only while a tensor holds it.
    #[test]
    fn scratch_reuses_a_dropped_buffer_without_zeroing() {
        let mem = Arc::new(MemTracker::default());
        let n = crate::engine::device::RECYCLE_MIN;
        let mut a = Tensor::scratch(&[n], MemCategory::Activations, &mem);
        a.f32_mut().unwrap().fill(3.0);
        let ptr = a.f32().unwrap().as_ptr();
        drop(a);
        assert_eq!(mem.current(MemCategory::Activations), 0);
        let b = Tensor::scratch(&[n], MemCategory::Workspace, &mem);
        assert_eq!(
            b.f32().unwrap().as_ptr(),
            ptr,
            "a fresh buffer, not the dropped one"
        );
        assert!(b.f32().unwrap().iter().all(|v| *v == 3.0));
        assert_eq!(mem.current(MemCategory::Workspace), n as u64 * 4);
        // Another length gets its own buffer.
        let c = Tensor::scratch(&[n + 1], MemCategory::Workspace, &mem);
        assert_ne!(c.f32().unwrap().as_ptr(), ptr);
    }

    /// Half-precision storage goes through the same bin: a dropped bf16 tensor's memory
    /// is what the next bf16 narrowing of its length writes into; a request of another
    /// element type or length does not get it.
    #[test]
    fn half_buffers_are_recycled_by_type_and_length() {
        let mem = Arc::new(MemTracker::default());
        let n = crate::engine::device::RECYCLE_MIN;
        let cat = MemCategory::Activations;
        let src = Tensor::from_vec(&[n], vec![1.5; n], cat, &mem).unwrap();
        let a = src.to_dtype(DType::Bf16, cat).unwrap();
        let ptr = a.bf16().unwrap().as_ptr();
        drop((a, src));
        assert!(
            mem.take_recycled::<f16>(n).is_none(),
            "an f16 request got bf16"
        );
        assert!(mem.take_recycled::<bf16>(n + 1).is_none(), "another length");
        let src = Tensor::from_vec(&[n], vec![-2.0; n], cat, &mem).unwrap();
        let b = src.to_dtype(DType::Bf16, cat).unwrap();
        assert_eq!(
            b.bf16().unwrap().as_ptr(),
            ptr,
            "a fresh buffer, not the dropped one"
        );
        assert!(b.bf16().unwrap().iter().all(|v| v.to_f32() == -2.0));
        assert_eq!(mem.current(cat), n as u64 * 4 + n as u64 * 2);
    }

    /// Every write through `f32_mut` names new contents; clones share the name.
    #[test]
    fn content_id_changes_on_every_write() {
        let mem = Arc::new(MemTracker::default());
        let mut a = Tensor::zeros(&[4], MemCategory::Params, &mem);
        let id = a.content_id();
        assert_eq!(a.clone().content_id(), id);
        a.f32_mut().unwrap()[0] = 1.0;
        assert_ne!(a.content_id(), id);
    }

    #[test]
    fn half_conversion_halves_bytes() {
        let mem = Arc::new(MemTracker::default());
        let a =
            Tensor::from_vec(&[3], vec![1.0, 2.5, -3.0], MemCategory::Activations, &mem).unwrap();
        let h = a.to_dtype(DType::Bf16, MemCategory::Activations).unwrap();
        assert_eq!(h.bytes(), 6);
        let back = h.to_dtype(DType::F32, MemCategory::Activations).unwrap();
        assert_eq!(back.f32().unwrap(), &[1.0, 2.5, -3.0]);
    }
}
