//! The global allocator: `System`, plus a clean exit when an allocation fails.
//!
//! Whether a huge batch fits is a property of the machine, so a failed allocation in a
//! trial is a result (`oom`), not a crash. Rust's default reaction is an abort (SIGABRT),
//! which the sweep could only call `crashed`. Here the failure path writes one line with
//! raw `write(2)` (allocating is what just failed) and `_exit`s: in a trial child the
//! `{"error":{"kind":"oom",...}}` line and `EXIT_OOM`, elsewhere `error: out of memory
//! allocating N bytes` on stderr and exit 1, saying whose memory it was: a training run's
//! (`tune train`, `tune bench`: try a smaller batch or model) or tune's own (reading or
//! planning something larger than this machine holds). The success path only adds a
//! null check. Code that would handle a failed `try_reserve` itself loses that chance:
//! tune has none.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU8, Ordering};

/// The exit status of a trial child that ran out of memory: what a kernel OOM kill reads as.
pub const EXIT_OOM: i32 = 137;

/// What this process is doing, for the words of an allocation failure.
static ROLE: AtomicU8 = AtomicU8::new(TUNE);
/// tune's own work: reading files, planning, reporting.
const TUNE: u8 = 0;
/// A trial child: the failure is the trial's `oom` result.
const TRIAL: u8 = 1;
/// Training in this process (`tune train`, `tune bench`): the batch and model decide.
const TRAINING: u8 = 2;

/// Marks this process as a trial child: allocation failures print the trial's JSON line.
pub(crate) fn mark_trial_child() {
    ROLE.store(TRIAL, Ordering::Relaxed);
}

/// Marks this process as one that trains the engine itself: an allocation failure is
/// then the run's size, and the message says to shrink the batch or model.
pub fn mark_training() {
    ROLE.store(TRAINING, Ordering::Relaxed);
}

pub struct OomExit;

// SAFETY: every method forwards to `System` with the caller's arguments unchanged; the
// only addition is diverging (never returning) on a null result.
unsafe impl GlobalAlloc for OomExit {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged; the caller upholds `alloc`'s contract.
        let p = unsafe { System.alloc(layout) };
        if p.is_null() {
            out_of_memory(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded unchanged.
        let p = unsafe { System.alloc_zeroed(layout) };
        if p.is_null() {
            out_of_memory(layout.size());
        }
        p
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded unchanged.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if p.is_null() {
            out_of_memory(new_size);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded unchanged.
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// Writes the one-line report without allocating and ends the process.
fn out_of_memory(size: usize) -> ! {
    let mut buf = [0u8; 256];
    let mut n = 0;
    let mut put = |bytes: &[u8]| {
        for &b in bytes {
            if n < buf.len() {
                buf[n] = b;
                n += 1;
            }
        }
    };
    let role = ROLE.load(Ordering::Relaxed);
    let trial = role == TRIAL;
    if trial {
        // Newline first: stdout may hold a partial line.
        put(b"\n{\"error\":{\"kind\":\"oom\",\"message\":\"out of memory allocating ");
    } else {
        put(b"error: out of memory allocating ");
    }
    put(decimal(size, &mut [0u8; 20]));
    put(match role {
        TRIAL => b" bytes (the machine could not provide it)\"}}\n".as_slice(),
        TRAINING => b" bytes for the training run; try a smaller batch or model\n",
        _ => b" bytes in tune itself (not a training run): what it was reading or planning needs more memory than this process may use\n",
    });
    let fd = if trial { 1 } else { 2 };
    // SAFETY: `buf[..n]` is initialised memory we own; write(2) and _exit(2) are
    // async-signal-safe and allocate nothing.
    unsafe {
        libc::write(fd, buf.as_ptr().cast(), n);
        libc::_exit(if trial { EXIT_OOM } else { 1 });
    }
}

/// `v` in decimal, written into the end of `buf`.
fn decimal(mut v: usize, buf: &mut [u8; 20]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            return &buf[i..];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimal_digits() {
        assert_eq!(decimal(0, &mut [0; 20]), b"0");
        assert_eq!(decimal(313600000000000, &mut [0; 20]), b"313600000000000");
        assert_eq!(
            decimal(usize::MAX, &mut [0; 20]),
            usize::MAX.to_string().as_bytes()
        );
    }
}
