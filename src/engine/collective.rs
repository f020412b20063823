//! The collective contract: what a layer (SyncBatchNorm) or a reducer may ask of its
//! peer ranks, whatever carries the bytes. Implementations sit above: the CPU ring and
//! TCP links in `parallel/collective.rs`, NCCL in `cuda/sync_bn.rs`.
//!
//! The contract an implementation keeps (NCCL's): every rank of a communicator calls the
//! same collectives, with the same lengths, in the same order; a call returns when the
//! result is in place on this rank.

use crate::engine::tensor::Tensor;
use crate::error::{Error, Result};

/// Start of the message of a collective that failed because a peer rank stopped: the
/// launcher reports the peer's own error instead of this consequence of it.
pub const PEER_STOPPED: &str = "collective: a peer rank stopped";

/// True when `e` only says that another rank failed first.
pub fn is_peer_stop(e: &Error) -> bool {
    matches!(e, Error::Runtime(m) if m.starts_with(PEER_STOPPED))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReduceOp {
    Sum,
    /// Sum divided by the world size (NCCL's `ncclAvg`; DDP's gradient average).
    Avg,
}

pub trait Collective: Send + Sync {
    fn rank(&self) -> usize;
    fn world_size(&self) -> usize;
    /// What carries the data, for notes and reports.
    fn name(&self) -> &'static str;
    /// Reduces `t` over all ranks in place; every rank ends with bit-identical values.
    fn all_reduce(&self, t: &mut Tensor, op: ReduceOp) -> Result<()>;
    /// Copies `root`'s `t` into every other rank's `t`.
    fn broadcast(&self, t: &mut Tensor, root: usize) -> Result<()>;
    /// Reduces a small host vector in place (f64, so statistics sum without loss).
    fn all_reduce_f64(&self, v: &mut [f64], op: ReduceOp) -> Result<()>;
}
