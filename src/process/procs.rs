//! Process lifetime for trials: children that die with the process that started them,
//! and ending a whole process tree (including members that left its process group).

use std::process::Command;

use tune_probes::host::process_tree;

/// Makes the child get `sig` when the thread that spawns it dies (`PR_SET_PDEATHSIG`),
/// and puts it in a process group of its own. The caller must spawn from a thread that
/// outlives the child: the kernel ties the signal to the parent *thread*.
pub(crate) fn die_with_parent(cmd: &mut Command, sig: libc::c_int) {
    use std::os::unix::process::CommandExt;
    cmd.process_group(0);
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the closure runs between fork and exec and only calls async-signal-safe
    // functions (prctl, getppid, _exit); it touches no memory of the parent but `parent`.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, sig as libc::c_ulong, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent died before prctl: the signal will never come, so go now.
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
}

/// Sends `sig` to a process group.
pub(crate) fn kill_group(pgid: u32, sig: libc::c_int) {
    if pgid > 1 {
        // SAFETY: kill(2) has no memory effects; a negative pid addresses the group.
        unsafe {
            libc::kill(-(pgid as libc::pid_t), sig);
        }
    }
}

/// SIGKILLs every live descendant of `root` (not `root` itself), found by their parent
/// links in /proc, so processes that called setsid or left the group are caught too.
/// Returns how many it signalled.
pub(crate) fn kill_descendants(root: u32) -> usize {
    let tree = process_tree(root).unwrap_or_default();
    let mut n = 0;
    for pid in tree.into_iter().filter(|&p| p != root && p > 1) {
        // SAFETY: kill(2) has no memory effects.
        unsafe {
            libc::kill(pid as libc::pid_t, libc::SIGKILL);
        }
        n += 1;
    }
    n
}

/// Resident memory of `root`'s descendants together (`root` left out), in bytes.
/// Shared pages count once per process, so this can exceed what the tree really holds.
pub(crate) fn descendants_rss(root: u32) -> u64 {
    process_tree(root)
        .unwrap_or_default()
        .into_iter()
        .filter(|&p| p != root)
        .filter_map(tune_probes::host::read_rss)
        .sum()
}
