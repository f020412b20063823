//! Where trials run: a local child process per trial (`trial` parent side, `child` child
//! side: `tune trial`), engine workloads, commands, and Python jobs through the bridge;
//! or batch jobs on a Slurm cluster (`slurm`). Implements the runner's `Executor`.

pub mod child;
mod live_py;
pub mod slurm;
pub mod trial;
mod window;
