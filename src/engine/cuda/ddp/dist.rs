//! DDP on GPUs across processes, launched as PyTorch users launch it: `torchrun
//! --nproc-per-node N tune train --device cuda --parallel ddp --devices <world> ...` or
//! `srun tune train ...`. Each process is one rank on its GPU `LOCAL_RANK` and runs the
//! same rank loop as a thread of the one-process run (`rank_main`). The CPU backend's
//! rendezvous (`parallel::tcp`) checks that every process has the same settings and
//! carries rank 0's NCCL unique id to the others (NCCL then connects the ranks itself);
//! every rank's step reports go to rank 0, which prints and records the run.

use std::collections::BTreeMap;
use std::sync::mpsc::channel;
use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::CudaContext;
use cudarc::nccl::safe::Id;

use super::{nccl_version, rank_main, summarize, Rank};
use crate::engine::collective::{Collective, ReduceOp};
use crate::engine::cuda::gpu::{nccl_err, Gpu};
use crate::engine::cuda::libs;
use crate::engine::cuda::train::GpuRig;
use crate::engine::device::Device;
use crate::engine::launcher::{self, DeviceThread, Ran, Work};
use crate::engine::parallel::launch::Launch;
use crate::engine::parallel::{dist, settings, tcp};
use crate::engine::vocab::{Feed, Observer, RunSummary, Workload};
use crate::error::{Error, Result};
use crate::knobs::{Amp, Knobs};

/// Bytes of an NCCL unique id.
const ID_BYTES: usize = 128;

pub(super) fn run(
    w: &Workload,
    k: &Knobs,
    obs: &mut dyn Observer,
    l: &Launch,
    verify: bool,
    not_applicable: BTreeMap<String, String>,
) -> Result<RunSummary> {
    dist::check_knobs(l, k)?;
    libs::require(&libs::TRAINING)?;
    libs::require_nccl()?;
    let count = CudaContext::device_count()
        .map_err(|e| Error::Unavailable(format!("CUDA backend: no usable GPU: {e}")))?;
    if l.local_rank >= count.max(0) as usize {
        return Err(Error::Unavailable(format!(
            "{} rank {}: LOCAL_RANK {} but this node has {count} GPU(s); start at most \
             {count} process(es) per node",
            l.launcher, l.rank, l.local_rank
        )));
    }
    let started = Instant::now();
    let joined = tcp::join(l, 1, settings(w, k))?;
    obs.on_note(&format!(
        "ddp: rank {} of {} ({}, rendezvous at {}:{})",
        l.rank, l.world, l.launcher, l.master, l.port
    ));
    let id = share_id(l.rank, &joined.sync)?;
    let dev = Device::cuda(l.rank);
    let gpu = Arc::new(Gpu::open(
        l.local_rank,
        &w.cache_dir,
        k.amp == Amp::Tf32,
        Arc::clone(dev.mem()),
    )?);
    obs.on_note(&format!(
        "CUDA backend: DDP over NCCL {}, rank {} of {} on GPU {} ({}), one process per GPU",
        nccl_version(),
        l.rank,
        l.world,
        l.local_rank,
        gpu.name
    ));
    obs.on_devices(std::slice::from_ref(&dev));
    let feed = Feed::open(w, k)?;
    let per_rank = k.batch_size / l.world;
    let (tx, rx) = channel();
    let rig = GpuRig {
        gpu: Arc::clone(&gpu),
        dev: Arc::clone(&dev),
    };
    let rank = Rank {
        rank: l.rank,
        world: l.world,
        id,
        reports: tx.clone(),
        verify,
    };
    let work = Work {
        source: feed.source(w, k, l.rank, l.world, per_rank)?,
        classes: feed.classes,
        lead: (l.rank == 0).then_some(&feed),
    };
    let threads = joined.threads.clone();
    let role = joined.role;
    let one: Vec<DeviceThread<'_, Ran<Vec<usize>>>> = vec![(
        format!("tune-gpu-rank{}", l.rank),
        Box::new(move || rank_main(rig, rank, work, (w, k))),
    )];
    let ((collected, tail), ends) = launcher::spread(one, |s| {
        dist::route(s, Some(role), tx, rx, (1, l.world), &threads, w, obs)
    });
    let end = ends.and_then(|e| {
        e.into_iter()
            .next()
            .ok_or_else(|| Error::Runtime(format!("rank {} returned nothing", l.rank)))
    });
    // NCCL's own error says only that a peer went away; the rendezvous's connections say
    // which one.
    let end = match (end, &tail) {
        (Err(e), dist::Tail::Root(Err(p)) | dist::Tail::Member(Err(p))) => {
            Err(Error::Runtime(format!("{e} ({p})")))
        }
        (Err(e), dist::Tail::Member(Ok(st))) if closed(st) => Err(Error::Runtime(format!(
            "{e} (rank 0 closed its connection: it stopped or was killed)"
        ))),
        (end, _) => end,
    }?;
    let mut snaps = vec![end.lead.snap.clone()];
    snaps.extend(dist::finish(tail, l.rank, &end.lead.snap)?);
    summarize(
        w,
        k,
        obs,
        &gpu.name,
        end,
        collected,
        &snaps,
        started,
        not_applicable,
    )
}

/// Whether rank 0 hung up on this member (it sends nothing after the rendezvous, so any
/// readable end of stream is its exit). A killed rank 0 that had not read this member's
/// last step reports resets the connection rather than closing it: the kernel answers
/// unread data with a reset, so the peek fails instead of reading 0 bytes (CI saw the
/// member's error lose the dead rank's name that way).
fn closed(st: &std::net::TcpStream) -> bool {
    use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset};
    let mut b = [0u8; 1];
    if st
        .set_read_timeout(Some(std::time::Duration::from_millis(200)))
        .is_err()
    {
        return false;
    }
    match st.peek(&mut b) {
        Ok(n) => n == 0,
        Err(e) => matches!(e.kind(), ConnectionReset | ConnectionAborted | BrokenPipe),
    }
}

/// Rank 0's NCCL unique id on every rank: sent over the rendezvous's ring as a sum in
/// which only rank 0's bytes are not zero (each byte a whole number in an f64, so exact).
fn share_id(rank: usize, ring: &dyn Collective) -> Result<Id> {
    let mut v = vec![0.0f64; ID_BYTES];
    if rank == 0 {
        let id = Id::new().map_err(|e| nccl_err("unique id", e))?;
        for (x, c) in v.iter_mut().zip(id.internal()) {
            *x = f64::from(*c as u8);
        }
    }
    ring.all_reduce_f64(&mut v, ReduceOp::Sum)?;
    let mut internal = [0 as std::ffi::c_char; ID_BYTES];
    for (c, x) in internal.iter_mut().zip(&v) {
        if !(0.0..=255.0).contains(x) {
            return Err(Error::Runtime(format!(
                "ddp: the NCCL unique id arrived damaged (a byte summed to {x})"
            )));
        }
        *c = *x as u8 as std::ffi::c_char;
    }
    Ok(Id::uninit(internal))
}

#[cfg(test)]
mod tests {
    use super::closed;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        (c, l.accept().unwrap().0)
    }

    #[test]
    fn rank_0_gone_is_seen_whether_it_closed_or_reset() {
        let (member, root) = pair();
        assert!(!closed(&member), "an open connection is not closed");
        drop(root);
        assert!(closed(&member), "a clean close");

        // Unread bytes at the root when it goes: the kernel resets the connection.
        let (mut member, mut root) = pair();
        member.write_all(&[7u8; 4096]).unwrap();
        let mut one = [0u8; 1];
        root.read_exact(&mut one).unwrap();
        drop(root);
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(closed(&member), "a reset");
    }
}
