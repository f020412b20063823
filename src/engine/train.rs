//! The one entrance of a run: checks what can be checked before a device opens, then
//! hands the run to its backend (CPU, CUDA) and strategy (single, DP, DDP). The run
//! vocabulary is re-exported here under the paths the stages above use.

use crate::engine::cpu;
use crate::engine::cuda;
use crate::engine::device::is_multi_device;
use crate::engine::parallel;
use crate::error::{Error, Result};
use crate::knobs::{Knobs, Parallel};

pub use crate::engine::clock::Phases;
pub use crate::engine::device::DeviceChoice;
pub use crate::engine::host::{default_cache_dir, default_threads};
pub use crate::engine::vocab::{NoObserver, Observer, RunSummary, StepEvent, Workload};

/// Trains `w` under `k`, reporting each step to `obs`.
pub fn run(w: &Workload, k: &Knobs, obs: &mut dyn Observer) -> Result<RunSummary> {
    k.validate()?;
    if w.steps == 0 {
        return Err(Error::Invalid("invalid steps 0: must be at least 1".into()));
    }
    if w.threads == 0 {
        return Err(Error::Invalid(
            "invalid threads 0: must be at least 1".into(),
        ));
    }
    w.scaler.validate()?;
    match w.device {
        DeviceChoice::Cuda => return run_cuda(w, k, obs),
        DeviceChoice::Auto => match crate::engine::cuda::usable() {
            Ok(name) => {
                obs.on_note(&format!("device auto: CUDA backend ({name})"));
                return run_cuda(w, k, obs);
            }
            Err(why) => obs.on_note(&format!("device auto: CPU backend ({why})")),
        },
        DeviceChoice::Cpu => {}
    }
    if is_multi_device(k) {
        return parallel::run(w, k, obs);
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(w.threads)
        .build()
        .map_err(|e| Error::Runtime(format!("cannot start {} compute threads: {e}", w.threads)))?;
    pool.install(|| cpu::run(w, k, obs))
}

/// A CUDA run: one GPU, or DP/DDP over several.
fn run_cuda(w: &Workload, k: &Knobs, obs: &mut dyn Observer) -> Result<RunSummary> {
    if !is_multi_device(k) {
        return cuda::train::run(w, k, obs);
    }
    match k.parallel {
        Parallel::Dp => cuda::dp::run(w, k, obs),
        _ => cuda::ddp::run(w, k, obs),
    }
}
