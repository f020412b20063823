//! Which NCCL and cuDNN this machine has, for `tune probe`, and NCCL's private link.
//!
//! cudarc 0.19 loads NCCL by the names `libnccl.so` and `libnccl.so.<cuda version>`,
//! never by its real soname `libnccl.so.2` (what NVIDIA's wheels and packages ship), so
//! tune makes a private folder holding one `libnccl.so` link to the real library. That
//! folder must be on `LD_LIBRARY_PATH` before a process that uses NCCL through cudarc
//! starts; the probe here loads NCCL through the same link, so what it reports is what
//! a run would load. Both libraries answer their version without a GPU.

use std::path::{Path, PathBuf};

use tune_probes::culibs::extra_dirs;

use crate::engine::host::default_cache_dir;

/// A library's version and the file it came from.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Found {
    pub version: String,
    pub path: PathBuf,
}

/// The first existing `name` in `TUNE_CUDA_LIB_DIRS`, then `LD_LIBRARY_PATH`.
fn locate(name: &str) -> Option<PathBuf> {
    let ld = std::env::var_os("LD_LIBRARY_PATH")
        .map(|v| std::env::split_paths(&v).collect::<Vec<_>>())
        .unwrap_or_default();
    extra_dirs()
        .into_iter()
        .chain(ld)
        .filter(|d| !d.as_os_str().is_empty())
        .map(|d| d.join(name))
        .find(|p| p.exists())
}

/// NVIDIA's encoding since NCCL 2.9 and cuDNN 9: major*10000 + minor*100 + patch.
pub fn decode_version(v: u64) -> String {
    format!("{}.{}.{}", v / 10000, (v / 100) % 100, v % 100)
}

/// The private folder with `libnccl.so` -> `target` (one folder per target, so two
/// installs never share a link). Idempotent.
pub fn nccl_link_dir(target: &Path) -> Result<PathBuf, String> {
    let target = target
        .canonicalize()
        .map_err(|e| format!("{}: {e}", target.display()))?;
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in target.as_os_str().as_encoded_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    let dir = default_cache_dir().join("nccl").join(format!("{h:016x}"));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let link = dir.join("libnccl.so");
    if std::fs::read_link(&link).ok().as_deref() != Some(target.as_path()) {
        // A stale or half-made link: replace it through a temporary name, so a
        // concurrent reader sees the old link or the new one, never none.
        // Per process and per call: two threads of one process (a test binary) making
        // the link at once must not share a temporary name.
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = dir.join(format!("libnccl.so.tmp{}-{n}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        std::os::unix::fs::symlink(&target, &tmp)
            .and_then(|_| std::fs::rename(&tmp, &link))
            .map_err(|e| format!("{}: {e}", link.display()))?;
    }
    Ok(dir)
}

/// Calls a `fn(*mut i32) -> i32` version query (`ncclGetVersion`).
fn nccl_query(path: &Path) -> Result<u64, String> {
    // SAFETY: loading NCCL runs only its initialisers; it was made to be dlopen'ed.
    let lib = unsafe { libloading::Library::new(path) }.map_err(|e| e.to_string())?;
    // SAFETY: `ncclResult_t ncclGetVersion(int *version)` per nccl.h; the symbol is
    // used while `lib` is alive and given a valid pointer.
    unsafe {
        let f: libloading::Symbol<unsafe extern "C" fn(*mut i32) -> i32> =
            lib.get(b"ncclGetVersion\0").map_err(|e| e.to_string())?;
        let mut v: i32 = 0;
        let rc = f(&mut v);
        if rc != 0 {
            return Err(format!("ncclGetVersion returned {rc}"));
        }
        u64::try_from(v).map_err(|_| format!("ncclGetVersion gave {v}"))
    }
}

/// NCCL's version, loaded through tune's `libnccl.so` link to the `libnccl.so.2` found in
/// `TUNE_CUDA_LIB_DIRS` or `LD_LIBRARY_PATH`.
pub fn nccl() -> Result<Found, String> {
    let real = locate("libnccl.so.2").ok_or_else(|| {
        "libnccl.so.2 not found in TUNE_CUDA_LIB_DIRS or LD_LIBRARY_PATH".to_string()
    })?;
    let link = nccl_link_dir(&real)?.join("libnccl.so");
    let v = nccl_query(&link)?;
    Ok(Found {
        version: decode_version(v),
        path: link,
    })
}

/// cuDNN's version (`cudnnGetVersion`), from `libcudnn.so.9`.
pub fn cudnn() -> Result<Found, String> {
    let path = locate("libcudnn.so.9").unwrap_or_else(|| PathBuf::from("libcudnn.so.9"));
    // SAFETY: as in `nccl_query`.
    let lib = unsafe { libloading::Library::new(&path) }.map_err(|e| e.to_string())?;
    // SAFETY: `size_t cudnnGetVersion(void)` per cudnn_graph.h; no arguments.
    let v = unsafe {
        let f: libloading::Symbol<unsafe extern "C" fn() -> usize> =
            lib.get(b"cudnnGetVersion\0").map_err(|e| e.to_string())?;
        f()
    };
    Ok(Found {
        version: decode_version(v as u64),
        path,
    })
}

/// Tensor-core data types a GPU of compute capability `cc` has.
pub fn tensor_core_dtypes(cc: (u32, u32)) -> Vec<&'static str> {
    let at = |m: u32, n: u32| cc >= (m, n);
    let mut out = Vec::new();
    if at(7, 0) {
        out.push("fp16");
    }
    if at(8, 0) {
        out.extend(["bf16", "tf32"]);
    }
    if at(8, 9) {
        out.push("fp8");
    }
    out
}

/// NVRTC 13 emits PTX ISA 9.x, which only a driver for CUDA 13.0 or later loads.
pub fn ptx_warning(driver_cuda: &str, nvrtc_major: u32) -> Option<String> {
    let mut it = driver_cuda.split('.').map(|p| p.trim().parse::<u32>().ok());
    let major = it.next().flatten()?;
    (nvrtc_major >= 13 && major < 13).then(|| {
        format!(
            "the driver supports CUDA {driver_cuda}, older than NVRTC {nvrtc_major}'s PTX \
             (ISA 9.x): kernels will not load; update the driver to CUDA 13.0 or later, \
             or put NVRTC 12 first in TUNE_CUDA_LIB_DIRS"
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tensor_core_dtypes_by_compute_capability() {
        assert!(tensor_core_dtypes((6, 1)).is_empty());
        assert_eq!(tensor_core_dtypes((7, 5)), ["fp16"]);
        assert_eq!(tensor_core_dtypes((8, 6)), ["fp16", "bf16", "tf32"]);
        assert_eq!(tensor_core_dtypes((8, 9)), ["fp16", "bf16", "tf32", "fp8"]);
        assert_eq!(tensor_core_dtypes((9, 0)), ["fp16", "bf16", "tf32", "fp8"]);
    }

    #[test]
    fn ptx_warning_only_for_an_older_driver() {
        assert!(ptx_warning("12.4", 13).is_some());
        assert!(ptx_warning("13.0", 13).is_none());
        assert!(ptx_warning("12.4", 12).is_none());
        assert!(ptx_warning("?", 13).is_none());
    }

    #[test]
    fn versions_decode() {
        assert_eq!(decode_version(22_905), "2.29.5");
        assert_eq!(decode_version(91_000), "9.10.0");
    }
}
