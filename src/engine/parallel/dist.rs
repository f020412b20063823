//! One process's side of a multi-process run (torchrun/srun, `launch`), shared by the
//! CPU backend's DDP and the GPU's: where step reports go (every rank's to rank 0, which
//! merges them; a member keeps its own too) and how the ranks say they finished.

use std::net::TcpStream;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::thread::Scope;

use crate::engine::device::MemSnapshot;
use crate::engine::parallel::launch::Launch;
use crate::engine::parallel::tcp::{forward_reports, send_done, send_report, Role};
use crate::engine::parallel::{collect, join_all, Collected, StepReport};
use crate::engine::vocab::{Observer, Workload};
use crate::error::{Error, Result};
use crate::knobs::{Knobs, Parallel};

/// A multi-process job runs one DDP rank per process.
pub(crate) fn check_knobs(l: &Launch, k: &Knobs) -> Result<()> {
    if k.parallel != Parallel::Ddp || k.devices != l.world {
        return Err(Error::Invalid(format!(
            "{} started {} processes (WORLD_SIZE {}): each is one DDP rank, so this needs \
             parallel = ddp and devices = {} (got parallel = {}, devices = {})",
            l.launcher, l.world, l.world, l.world, k.parallel, k.devices
        )));
    }
    Ok(())
}

/// What the collecting side holds once the local ranks are done.
pub(crate) enum Tail {
    Local,
    /// Rank 0 of a multi-process job: the other ranks' memory at their end.
    Root(Result<Vec<MemSnapshot>>),
    /// Another rank: its connection to rank 0, to say it finished.
    Member(Result<TcpStream>),
}

/// Collects the step reports of this process's ranks (`tx`'s clones, `rx`): alone
/// (`role` None: `local` reporters), as rank 0 (the other processes' reports read from
/// their connections and merged with these, `world` reporters), or as a member (each
/// report sent to rank 0 and kept for this process's own summary).
#[allow(clippy::too_many_arguments)]
pub(crate) fn route<'s>(
    s: &'s Scope<'s, '_>,
    role: Option<Role>,
    tx: Sender<StepReport>,
    rx: Receiver<StepReport>,
    (local, world): (usize, usize),
    threads: &[usize],
    w: &Workload,
    obs: &mut dyn Observer,
) -> (Collected, Tail) {
    match role {
        None => {
            drop(tx);
            (collect(rx, local, threads, true, w, obs), Tail::Local)
        }
        Some(Role::Root(streams)) => {
            let mut readers = Vec::with_capacity(streams.len());
            let mut spawn_err = None;
            for (i, st) in streams.into_iter().enumerate() {
                let tx = tx.clone();
                match std::thread::Builder::new()
                    .name(format!("tune-ddp-reports{}", i + 1))
                    .spawn_scoped(s, move || forward_reports(st, i + 1, tx))
                {
                    Ok(h) => readers.push(h),
                    Err(e) => {
                        spawn_err = Some(Error::Runtime(format!("cannot start a reader: {e}")))
                    }
                }
            }
            drop(tx);
            let c = collect(rx, world, threads, true, w, obs);
            let mems = join_all(readers);
            (c, Tail::Root(spawn_err.map_or(mems, Err)))
        }
        Some(Role::Member(mut stream)) => {
            drop(tx);
            let (ltx, lrx) = channel();
            let mut sent = Ok(());
            for rep in rx {
                if sent.is_ok() {
                    sent = send_report(&mut stream, &rep);
                }
                let _ = ltx.send(rep);
            }
            drop(ltx);
            let c = collect(lrx, local, threads, true, w, obs);
            (c, Tail::Member(sent.map(|_| stream)))
        }
    }
}

/// After this process's ranks finished: rank 0 gets the others' memory snapshots, a
/// member tells rank 0 it is done (with `mem`, its first device's).
pub(crate) fn finish(tail: Tail, rank: usize, mem: &MemSnapshot) -> Result<Vec<MemSnapshot>> {
    match tail {
        Tail::Local => Ok(Vec::new()),
        Tail::Root(mems) => mems,
        Tail::Member(stream) => {
            let mut stream = stream?;
            send_done(&mut stream, rank, mem)?;
            Ok(Vec::new())
        }
    }
}
