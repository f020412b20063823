//! Finding the CUDA libraries before cudarc touches them.
//!
//! cudarc loads each library lazily by soname and panics when it is missing, so every
//! entry point calls [`require`] first. Libraries outside the loader's search path (the
//! GPU image ships them inside Python wheels) are found through `TUNE_CUDA_LIB_DIRS` and
//! loaded here by absolute path: the dynamic loader then hands cudarc's later
//! `dlopen(soname)` the library already mapped, since it matches loaded objects by soname.
//! That works for every library whose soname cudarc tries; NCCL (soname `libnccl.so.2`,
//! which cudarc 0.19 never tries) needs `LD_LIBRARY_PATH` set before the process starts.

use std::sync::Mutex;

use crate::error::{Error, Result};

/// A CUDA library the backend uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lib {
    Driver,
    Nvrtc,
    CublasLt,
    /// Optional: conv2d uses it where it loads (`cuda::dnn`), else im2col + cuBLASLt.
    Cudnn,
}

impl Lib {
    /// Sonames in the order tried: CUDA 13 (the target), then 12.
    pub fn sonames(self) -> &'static [&'static str] {
        match self {
            Lib::Driver => &["libcuda.so.1"],
            Lib::Nvrtc => &["libnvrtc.so.13", "libnvrtc.so.12"],
            Lib::CublasLt => &["libcublasLt.so.13", "libcublasLt.so.12"],
            Lib::Cudnn => &["libcudnn.so.9"],
        }
    }

    pub fn what(self) -> &'static str {
        match self {
            Lib::Driver => "the NVIDIA driver",
            Lib::Nvrtc => "NVRTC, the runtime kernel compiler",
            Lib::CublasLt => "cuBLASLt, for GEMM",
            Lib::Cudnn => "cuDNN, for convolutions",
        }
    }

    /// Whether cudarc will find it (by soname, which includes what [`preload`] mapped).
    fn present(self) -> bool {
        // SAFETY: `is_culib_present` only dlopens each candidate name and closes it again;
        // it calls no symbol. These are NVIDIA's own libraries, made to be dlopen'ed.
        unsafe {
            match self {
                Lib::Driver => cudarc::driver::sys::is_culib_present(),
                Lib::Nvrtc => cudarc::nvrtc::sys::is_culib_present(),
                Lib::CublasLt => cudarc::cublaslt::sys::is_culib_present(),
                Lib::Cudnn => cudarc::cudnn::sys::is_culib_present(),
            }
        }
    }
}

/// Handles of libraries loaded from `TUNE_CUDA_LIB_DIRS`; kept for the whole process so
/// the loader keeps them mapped for cudarc.
static PRELOADED: Mutex<Vec<libloading::Library>> = Mutex::new(Vec::new());

fn open(name: &str) -> std::result::Result<libloading::Library, String> {
    // SAFETY: as in `Lib::present`: loading runs only the library's initialisers.
    unsafe { libloading::Library::new(name) }.map_err(|e| e.to_string())
}

/// Maps `lib` from `TUNE_CUDA_LIB_DIRS` when the loader cannot find it by soname.
/// Returns the loader's last error when neither works.
fn preload(lib: Lib) -> std::result::Result<(), String> {
    let mut last = String::new();
    for s in lib.sonames() {
        match open(s) {
            Ok(_) => return Ok(()),
            Err(e) => last = e,
        }
    }
    for dir in tune_probes::culibs::extra_dirs() {
        for s in lib.sonames() {
            let p = dir.join(s);
            if !p.exists() {
                continue;
            }
            match open(&p.display().to_string()) {
                Ok(l) => {
                    match PRELOADED.lock() {
                        Ok(mut v) => v.push(l),
                        Err(poisoned) => poisoned.into_inner().push(l),
                    }
                    return Ok(());
                }
                Err(e) => last = e,
            }
        }
    }
    Err(last)
}

/// Makes sure every library in `libs` loads, or says in one line which one does not and
/// why, and where tune looked.
pub fn require(libs: &[Lib]) -> Result<()> {
    for &lib in libs {
        let loaded = preload(lib);
        if loaded.is_ok() && lib.present() {
            continue;
        }
        let why = loaded
            .err()
            .unwrap_or_else(|| "cudarc cannot load it".into());
        return Err(Error::Unavailable(format!(
            "CUDA backend: {} ({}) does not load: {why}; looked up by soname and in ${} \
             (':'-separated folders)",
            lib.sonames()[0],
            lib.what(),
            tune_probes::culibs::LIB_DIRS_ENV
        )));
    }
    Ok(())
}

/// Whether an optional library loads (mapping it from `TUNE_CUDA_LIB_DIRS` if needed),
/// or the loader's reason why not.
pub fn optional(lib: Lib) -> std::result::Result<(), String> {
    preload(lib)?;
    if lib.present() {
        Ok(())
    } else {
        Err(format!("cudarc cannot load {}", lib.sonames()[0]))
    }
}

/// The variable `tune train` sets when it re-runs itself with tune's private NCCL link on
/// `LD_LIBRARY_PATH`, so that it never does so twice.
pub const NCCL_REEXEC_ENV: &str = "TUNE_NCCL_REEXEC";

/// Makes sure cudarc can load NCCL, or says in one line why not and what to do.
/// cudarc loads it only as `libnccl.so` (never `libnccl.so.2`) through the loader's
/// search path, which is fixed when the process starts: see [`nccl_search_dir`].
pub fn require_nccl() -> Result<()> {
    // SAFETY: as in `Lib::present`: a dlopen and close of NCCL, no symbol called.
    if unsafe { cudarc::nccl::sys::is_culib_present() } {
        return Ok(());
    }
    let why = match crate::engine::cuda::versions::nccl() {
        Ok(f) => format!(
            "libnccl.so.2 is here, but cudarc loads NCCL only as libnccl.so: put {} on \
             LD_LIBRARY_PATH before tune starts (`tune train` does this itself)",
            f.path
                .parent()
                .map_or_else(String::new, |p| p.display().to_string())
        ),
        Err(e) => e,
    };
    Err(Error::Unavailable(format!(
        "CUDA backend: multi-GPU training (parallel = dp or ddp) needs NCCL, which does \
         not load: {why}"
    )))
}

/// The folder to put first on `LD_LIBRARY_PATH` so that cudarc finds NCCL, when cudarc
/// cannot load it now but tune found `libnccl.so.2` (its private `libnccl.so` link's
/// folder). `None` when NCCL already loads or is nowhere to be found.
pub fn nccl_search_dir() -> Option<std::path::PathBuf> {
    // SAFETY: as in `require_nccl`.
    if unsafe { cudarc::nccl::sys::is_culib_present() } {
        return None;
    }
    let f = crate::engine::cuda::versions::nccl().ok()?;
    f.path.parent().map(std::path::Path::to_path_buf)
}

/// A DP or DDP run on the CUDA backend whose NCCL cudarc cannot load yet: runs this same
/// command again (same pid, `exec`) with tune's private NCCL folder first on
/// `LD_LIBRARY_PATH`, since the loader reads that variable only when a process starts.
/// Returns when nothing needs doing (no GPU run, no DDP, NCCL loads, no NCCL found, or
/// already re-run: the run's own check then says what is missing), or with the error
/// `exec` gave.
pub fn reexec_for_nccl(
    device: crate::engine::device::DeviceChoice,
    k: &crate::knobs::Knobs,
) -> Result<()> {
    use crate::engine::device::DeviceChoice;
    use std::os::unix::process::CommandExt;
    let gpu = match device {
        DeviceChoice::Cuda => true,
        DeviceChoice::Auto => crate::engine::cuda::usable().is_ok(),
        DeviceChoice::Cpu => false,
    };
    if !gpu
        || !crate::engine::device::is_multi_device(k)
        || std::env::var_os(NCCL_REEXEC_ENV).is_some()
    {
        return Ok(());
    }
    let Some(dir) = nccl_search_dir() else {
        return Ok(());
    };
    let exe = std::env::current_exe()
        .map_err(|e| Error::Runtime(format!("cannot find the tune executable: {e}")))?;
    let mut path = vec![dir];
    if let Some(old) = std::env::var_os("LD_LIBRARY_PATH") {
        path.extend(std::env::split_paths(&old));
    }
    let path = std::env::join_paths(path)
        .map_err(|e| Error::Runtime(format!("LD_LIBRARY_PATH for NCCL: {e}")))?;
    let err = std::process::Command::new(exe)
        .args(std::env::args_os().skip(1))
        .env("LD_LIBRARY_PATH", path)
        .env(NCCL_REEXEC_ENV, "1")
        .exec();
    Err(Error::Runtime(format!(
        "cannot re-run tune with NCCL on LD_LIBRARY_PATH: {err}"
    )))
}

/// Everything a training run on the CUDA backend needs.
pub const TRAINING: [Lib; 3] = [Lib::Driver, Lib::Nvrtc, Lib::CublasLt];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_is_one_line_naming_it() {
        // No machine this test runs on has a CUDA 9 driver library by this name.
        let e = preload(Lib::Driver).err();
        if let Some(e) = e {
            assert!(!e.is_empty());
            let msg = require(&[Lib::Driver]).unwrap_err().to_string();
            assert!(msg.contains("libcuda.so.1"), "{msg}");
            assert!(!msg.contains('\n'), "{msg}");
        }
    }
}
