//! Process utilities that are not about trials: the process tree (kill a group, sum its
//! memory, die with the parent), pipe readers that keep a bounded tail, the allocator that
//! turns an allocation failure into a clean exit, and the `tune supervise` wrapper. The
//! executor, the bridge and `tune watch` use them.

pub mod alloc;
pub(crate) mod pipes;
pub(crate) mod procs;
pub mod supervise;
