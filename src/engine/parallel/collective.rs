//! Collectives between devices, behind one trait so the reducer and SyncBatchNorm do not
//! care what carries the bytes: a ring whose links are channels between the CPU
//! backend's virtual devices in one process, or TCP connections between processes
//! (`tcp.rs`, multi-process DDP under torchrun or srun); NCCL on GPUs later.
//!
//! The contract an implementation keeps (NCCL's): every rank of a communicator calls the
//! same collectives, with the same lengths, in the same order; a call returns when the
//! result is in place on this rank. The CPU ring blocks the calling thread until then.
//! An NCCL implementation would enqueue on its communication stream and synchronise that
//! stream before returning, which keeps the reducer's comm thread the only place that
//! waits, exactly as it is here. `all_reduce` and `broadcast` take tensors (gradient
//! buckets, parameters), whose storage is device memory on a GPU backend; the small f64
//! vectors of `all_reduce_f64` (batch-norm statistics) are host values an NCCL
//! implementation stages through a device buffer.

use std::ops::Range;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex};
use std::time::Instant;

pub use crate::engine::collective::{is_peer_stop, Collective, ReduceOp, PEER_STOPPED};
use crate::engine::parallel::summary::DeviceClock;
use crate::engine::parallel::tcp::TcpLink;
use crate::engine::tensor::Tensor;
use crate::error::{Error, Result};

pub(crate) enum Chunk {
    F32(Vec<f32>),
    F64(Vec<f64>),
}

/// What the ring algorithm needs of an element type.
trait Elem: Copy + std::ops::AddAssign + Send + 'static {
    fn pack(v: Vec<Self>) -> Chunk;
    fn unpack(c: Chunk) -> Option<Vec<Self>>;
    fn is(c: &Chunk) -> bool;
    fn div(self, n: usize) -> Self;
}

impl Elem for f32 {
    fn pack(v: Vec<f32>) -> Chunk {
        Chunk::F32(v)
    }
    fn unpack(c: Chunk) -> Option<Vec<f32>> {
        match c {
            Chunk::F32(v) => Some(v),
            Chunk::F64(_) => None,
        }
    }
    fn is(c: &Chunk) -> bool {
        matches!(c, Chunk::F32(_))
    }
    fn div(self, n: usize) -> f32 {
        self / n as f32
    }
}

impl Elem for f64 {
    fn pack(v: Vec<f64>) -> Chunk {
        Chunk::F64(v)
    }
    fn unpack(c: Chunk) -> Option<Vec<f64>> {
        match c {
            Chunk::F64(v) => Some(v),
            Chunk::F32(_) => None,
        }
    }
    fn is(c: &Chunk) -> bool {
        matches!(c, Chunk::F64(_))
    }
    fn div(self, n: usize) -> f64 {
        self / n as f64
    }
}

/// How a rank reaches its ring neighbours. Both kinds deliver messages in order and never
/// block the sender, so the ring algorithm cannot deadlock on a full buffer.
enum Link {
    /// Channels between threads of one process.
    Chan {
        next: Sender<Chunk>,
        // Receivers are not `Sync`; only one thread uses a ring at a time anyway.
        prev: Mutex<Receiver<Chunk>>,
    },
    /// TCP connections to the neighbours' processes.
    Tcp(TcpLink),
}

/// One rank of a ring: it sends to rank+1 and receives from rank-1.
///
/// All-reduce is the bandwidth-optimal ring algorithm (reduce-scatter, then all-gather):
/// each rank moves 2(N-1)/N of the buffer, whatever N. The fully reduced value of each
/// chunk is computed once, by the rank that owns it, and then copied, so every rank ends
/// with the same bits.
pub struct Ring {
    rank: usize,
    world: usize,
    link: Link,
    /// Message buffers received and done with, reused for sending: buffers travel round
    /// the ring instead of being allocated (and page-faulted in) for every message.
    spare: Mutex<Vec<Chunk>>,
}

/// Spare buffers kept per rank; a ring step needs one at a time.
const SPARES: usize = 4;

/// A ring of `world` ranks (index = rank). Each rank's end goes to its own thread.
pub fn ring(world: usize) -> Vec<Ring> {
    let world = world.max(1);
    let (txs, mut rxs): (Vec<_>, Vec<_>) = (0..world).map(|_| channel::<Chunk>()).unzip();
    // Channel r carries rank r's messages to rank r+1, so rank r reads channel r-1.
    rxs.rotate_right(1);
    txs.into_iter()
        .zip(rxs)
        .enumerate()
        .map(|(rank, (next, prev))| Ring {
            rank,
            world,
            link: Link::Chan {
                next,
                prev: Mutex::new(prev),
            },
            spare: Mutex::new(Vec::new()),
        })
        .collect()
}

impl Ring {
    /// This process's rank of a ring whose neighbours are other processes.
    pub(crate) fn tcp(rank: usize, world: usize, link: TcpLink) -> Ring {
        Ring {
            rank,
            world,
            link: Link::Tcp(link),
            spare: Mutex::new(Vec::new()),
        }
    }
}

/// Chunk k of a buffer of `len` split into `n` near-equal parts.
fn part(len: usize, n: usize, k: usize) -> Range<usize> {
    (k * len / n)..((k + 1) * len / n)
}

impl Ring {
    fn stopped(&self) -> Error {
        Error::Runtime(format!(
            "{PEER_STOPPED} (rank {} of {} lost its ring neighbour)",
            self.rank, self.world
        ))
    }

    fn send<T: Elem>(&self, v: &[T]) -> Result<()> {
        let mut buf = self
            .spare
            .lock()
            .ok()
            .and_then(|mut s| {
                let i = s.iter().position(T::is)?;
                T::unpack(s.swap_remove(i))
            })
            .unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(v);
        match &self.link {
            Link::Chan { next, .. } => next.send(T::pack(buf)).map_err(|_| self.stopped()),
            Link::Tcp(t) => t.send(T::pack(buf)),
        }
    }

    fn recycle<T: Elem>(&self, v: Vec<T>) {
        if let Ok(mut s) = self.spare.lock() {
            if s.len() < SPARES {
                s.push(T::pack(v));
            }
        }
    }

    fn recv<T: Elem>(&self, len: usize) -> Result<Vec<T>> {
        let msg = match &self.link {
            Link::Chan { prev, .. } => {
                let rx = prev.lock().map_err(|_| self.stopped())?;
                rx.recv().map_err(|_| self.stopped())?
            }
            Link::Tcp(t) => t.recv()?,
        };
        match T::unpack(msg) {
            Some(v) if v.len() == len => Ok(v),
            _ => Err(Error::Runtime(format!(
                "collective: rank {} got a message of another length or type than {len} \
                 values: the ranks called collectives in different orders",
                self.rank
            ))),
        }
    }

    fn all_reduce_slice<T: Elem>(&self, buf: &mut [T], op: ReduceOp) -> Result<()> {
        let (n, r, len) = (self.world, self.rank, buf.len());
        if n == 1 {
            return Ok(());
        }
        // Reduce-scatter: after step s, the chunk received holds s+2 ranks' sums.
        for s in 0..n - 1 {
            let send_k = (r + n - s) % n;
            let recv_k = (r + 2 * n - s - 1) % n;
            self.send(&buf[part(len, n, send_k)])?;
            let got = self.recv::<T>(part(len, n, recv_k).len())?;
            for (d, g) in buf[part(len, n, recv_k)].iter_mut().zip(&got) {
                *d += *g;
            }
            self.recycle(got);
        }
        let own = (r + 1) % n;
        if op == ReduceOp::Avg {
            for v in &mut buf[part(len, n, own)] {
                *v = v.div(n);
            }
        }
        // All-gather: pass finished chunks around until everyone has all of them.
        for s in 0..n - 1 {
            let send_k = (r + 1 + n - s) % n;
            let recv_k = (r + n - s) % n;
            self.send(&buf[part(len, n, send_k)])?;
            let got = self.recv::<T>(part(len, n, recv_k).len())?;
            buf[part(len, n, recv_k)].copy_from_slice(&got);
            self.recycle(got);
        }
        Ok(())
    }

    /// Sum or average of `buf` over all ranks, in place.
    pub fn all_reduce_f32(&self, buf: &mut [f32], op: ReduceOp) -> Result<()> {
        self.all_reduce_slice(buf, op)
    }

    /// `root`'s `buf` into every rank's `buf`, passed along the ring.
    pub fn broadcast_f32(&self, buf: &mut [f32], root: usize) -> Result<()> {
        let n = self.world;
        if root >= n {
            return Err(Error::Runtime(format!(
                "broadcast from rank {root} in a world of {n}"
            )));
        }
        if n == 1 {
            return Ok(());
        }
        if self.rank == root {
            return self.send(buf);
        }
        let got = self.recv::<f32>(buf.len())?;
        buf.copy_from_slice(&got);
        if (self.rank + 1) % n != root {
            self.send(&got)?;
        }
        self.recycle(got);
        Ok(())
    }
}

impl Collective for Ring {
    fn rank(&self) -> usize {
        self.rank
    }
    fn world_size(&self) -> usize {
        self.world
    }
    fn name(&self) -> &'static str {
        match self.link {
            Link::Chan { .. } => "in-process ring",
            Link::Tcp(_) => "TCP ring",
        }
    }
    fn all_reduce(&self, t: &mut Tensor, op: ReduceOp) -> Result<()> {
        self.all_reduce_f32(t.f32_mut()?, op)
    }
    fn broadcast(&self, t: &mut Tensor, root: usize) -> Result<()> {
        self.broadcast_f32(t.f32_mut()?, root)
    }
    fn all_reduce_f64(&self, v: &mut [f64], op: ReduceOp) -> Result<()> {
        self.all_reduce_slice(v, op)
    }
}

/// A collective whose calls are charged to a device's communication time.
pub struct Timed {
    pub inner: Arc<dyn Collective>,
    pub clock: Arc<DeviceClock>,
}

impl Timed {
    fn time<R>(&self, f: impl FnOnce() -> R) -> R {
        let t = Instant::now();
        let r = f();
        self.clock.add_sync(t.elapsed());
        r
    }
}

impl Collective for Timed {
    fn rank(&self) -> usize {
        self.inner.rank()
    }
    fn world_size(&self) -> usize {
        self.inner.world_size()
    }
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn all_reduce(&self, t: &mut Tensor, op: ReduceOp) -> Result<()> {
        self.time(|| self.inner.all_reduce(t, op))
    }
    fn broadcast(&self, t: &mut Tensor, root: usize) -> Result<()> {
        self.time(|| self.inner.broadcast(t, root))
    }
    fn all_reduce_f64(&self, v: &mut [f64], op: ReduceOp) -> Result<()> {
        self.time(|| self.inner.all_reduce_f64(v, op))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(rank: usize, len: usize) -> Vec<f32> {
        (0..len)
            .map(|i| ((rank * 7919 + i * 104_729) % 1000) as f32 / 37.0 - 13.0)
            .collect()
    }

    /// Runs `f` on every rank of a fresh ring and returns the ranks' results in order.
    fn on_ring<T: Send>(world: usize, f: impl Fn(&Ring) -> T + Sync) -> Vec<T> {
        let rings = ring(world);
        std::thread::scope(|s| {
            let hs: Vec<_> = rings.iter().map(|r| s.spawn(|| f(r))).collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    #[test]
    fn all_reduce_sums_and_averages_with_identical_bits_on_every_rank() {
        for world in [1, 2, 3, 4, 5] {
            for len in [0, 1, 3, 7, 1000] {
                for op in [ReduceOp::Sum, ReduceOp::Avg] {
                    let out = on_ring(world, |r| {
                        let mut v = data(r.rank(), len);
                        r.all_reduce_f32(&mut v, op).unwrap();
                        v
                    });
                    for (i, got) in out[0].iter().enumerate() {
                        let mut want: f64 = (0..world).map(|r| data(r, len)[i] as f64).sum();
                        if op == ReduceOp::Avg {
                            want /= world as f64;
                        }
                        assert!(
                            (*got as f64 - want).abs() <= 1e-4 * (1.0 + want.abs()),
                            "world {world} len {len} {op:?}: [{i}] {got} vs {want}"
                        );
                    }
                    let bits = |v: &Vec<f32>| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                    for o in &out[1..] {
                        assert_eq!(bits(o), bits(&out[0]), "world {world} len {len}");
                    }
                }
            }
        }
    }

    #[test]
    fn f64_all_reduce_and_broadcast() {
        let out = on_ring(3, |r| {
            let mut v = vec![r.rank() as f64 + 0.5; 4];
            r.all_reduce_f64(&mut v, ReduceOp::Sum).unwrap();
            let mut b = data(r.rank(), 9);
            r.broadcast_f32(&mut b, 1).unwrap();
            (v, b)
        });
        for (v, b) in &out {
            assert_eq!(v, &vec![4.5; 4]);
            assert_eq!(b, &data(1, 9));
        }
    }

    #[test]
    fn dropped_peer_gives_a_peer_stop_error() {
        let mut rings = ring(2);
        let r1 = rings.pop().unwrap();
        let r0 = rings.pop().unwrap();
        drop(r1);
        let mut v = vec![1.0f32; 4];
        let e = r0.all_reduce_f32(&mut v, ReduceOp::Sum).unwrap_err();
        assert!(is_peer_stop(&e), "{e}");
    }
}
