//! SyncBatchNorm over NCCL (`torch.nn.SyncBatchNorm` under DDP on GPUs): batch-norm
//! statistics over every rank's rows instead of each rank's shard, as the CPU backend's
//! `ops::sync_bn` does over its collective. The layer (`ops::batchnorm_cuda`) sums
//! its per-channel reductions and its row count across ranks with [`NcclSync::sum`]; the
//! counts stay on the device, so no rank waits on the host for them.

use std::rc::Rc;
use std::sync::Arc;

use cudarc::driver::CudaStream;
use cudarc::nccl::safe::{Comm, ReduceOp};

use crate::engine::cuda::gpu::{cuda_err, nccl_err, DBuf, Gpu};
use crate::error::Result;

/// One rank's handle on the DDP communicator, shared by its batch-norm layers. `Rc`:
/// a communicator belongs to its rank's thread, as the layers do.
pub struct NcclSync {
    comm: Rc<Comm>,
    /// The communicator's own stream: DDP's gradient all-reduces run there too, so every
    /// collective of a rank is issued in one order on one stream (PyTorch's process group
    /// serialises SyncBatchNorm's and the reducer's collectives the same way); two
    /// streams on one communicator could interleave differently on two ranks.
    cs: Arc<CudaStream>,
}

impl NcclSync {
    pub fn new(comm: Rc<Comm>, cs: Arc<CudaStream>) -> NcclSync {
        NcclSync { comm, cs }
    }

    /// `buf` summed over every rank, in place: after the compute stream's work so far
    /// and before its next.
    pub fn sum(&self, gpu: &Gpu, buf: &mut DBuf) -> Result<()> {
        self.cs
            .join(&gpu.stream)
            .map_err(|e| cuda_err("stream wait", e))?;
        self.comm
            .all_reduce_in_place(&mut buf.s, &ReduceOp::Sum)
            .map_err(|e| nccl_err("SyncBatchNorm all-reduce", e))?;
        gpu.stream
            .join(&self.cs)
            .map_err(|e| cuda_err("stream wait", e))
    }

    /// Writes `rows` into `buf[at]`, the row count the sum carries with the statistics.
    pub fn put_count(gpu: &Gpu, buf: &mut DBuf, at: usize, rows: usize) -> Result<()> {
        let count = [rows as f32];
        gpu.stream
            .memcpy_htod(&count[..], &mut buf.s.slice_mut(at..at + 1))
            .map_err(|e| cuda_err("SyncBatchNorm row count", e))
    }
}
