//! The backend's own kernels (`kernels.cu`): compiled by NVRTC once per (source, GPU
//! architecture, NVRTC version), the PTX cached on disk, each function loaded once.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use cudarc::driver::{CudaContext, CudaFunction, CudaModule, LaunchConfig};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions, Ptx};

use crate::error::{Error, Result};

pub const SOURCE: &str = include_str!("kernels.cu");

/// How every kernel of [`SOURCE`] is declared; what follows, up to `(`, is its name.
const KERNEL_DECL: &str = "extern \"C\" __global__ void ";

/// Every kernel's name, read from [`SOURCE`]: the one list. The loader loads each of
/// them, and the CPU stand-in's kernel table (tests/standin/launch.h) is generated from
/// it, so a new kernel is written once, in `kernels.cu`.
pub fn names() -> impl Iterator<Item = &'static str> {
    SOURCE
        .split(KERNEL_DECL)
        .skip(1)
        .filter_map(|s| s.split('(').next())
        .map(str::trim)
}

/// FNV-1a, for cache file names.
fn fnv(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for p in parts {
        for &b in p.iter().chain(std::iter::once(&0u8)) {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// `sm_90` style architecture name from a compute capability.
pub fn arch_name(major: i32, minor: i32) -> String {
    format!("sm_{major}{minor}")
}

/// NVRTC's version as "major.minor". Needs libnvrtc (see `libs::require`).
pub fn nvrtc_version() -> Result<String> {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: nvrtcVersion writes two ints through the pointers it is given, which point
    // at live locals; the caller has checked that libnvrtc loads (cudarc panics if not).
    let r = unsafe { cudarc::nvrtc::sys::nvrtcVersion(&mut major, &mut minor) };
    if r != cudarc::nvrtc::sys::nvrtcResult::NVRTC_SUCCESS {
        return Err(Error::Unavailable(format!(
            "NVRTC: cannot read its version: {r:?}"
        )));
    }
    Ok(format!("{major}.{minor}"))
}

/// Compiles [`SOURCE`] for `arch` (e.g. `sm_90`). Works without a GPU: only NVRTC is
/// needed, which is how CI checks that the kernels compile.
pub fn compile(arch: &str) -> Result<String> {
    // NVRTC wants a 'static str for the architecture; the set is small and fixed per run.
    let arch: &'static str = Box::leak(arch.to_string().into_boxed_str());
    let opts = CompileOptions {
        arch: Some(arch),
        // Exact division and square root: parity with the CPU backend matters more than
        // the last few percent of these memory-bound kernels.
        prec_div: Some(true),
        prec_sqrt: Some(true),
        ftz: Some(false),
        options: vec!["--std=c++17".into()],
        name: Some("tune_kernels.cu".into()),
        ..Default::default()
    };
    let ptx = compile_ptx_with_opts(SOURCE, opts).map_err(|e| match e {
        cudarc::nvrtc::CompileError::CompileError { log, .. } => Error::Runtime(format!(
            "NVRTC could not compile tune's kernels for {arch}: {}",
            log.to_string_lossy().trim()
        )),
        other => Error::Runtime(format!("NVRTC failed for {arch}: {other:?}")),
    })?;
    Ok(ptx.to_src())
}

/// Compiles [`SOURCE`] for the real architecture `arch` (e.g. `sm_90`) all the way to
/// machine code with NVRTC's assembler, and returns the CUBIN (an ELF image). Needs no GPU:
/// it checks in CI what the driver's PTX JIT would otherwise find only on the device
/// (an assembler failure, a register or shared-memory limit). Same options as [`compile`].
pub fn cubin(arch: &str) -> Result<Vec<u8>> {
    use cudarc::nvrtc::{result, sys};
    let fail = |what: &str, e: &dyn std::fmt::Debug| {
        Error::Runtime(format!("NVRTC {what} for {arch}: {e:?}"))
    };
    let src = std::ffi::CString::new(SOURCE).map_err(|e| fail("source", &e))?;
    let prog = result::create_program(&src, Some(c"tune_kernels.cu"))
        .map_err(|e| fail("create program", &e))?;
    let opts = [
        format!("--gpu-architecture={arch}"),
        "--prec-div=true".into(),
        "--prec-sqrt=true".into(),
        "--ftz=false".into(),
        "--std=c++17".into(),
    ];
    // SAFETY: `prog` was created above and is destroyed once, at the end; `src` outlives
    // it. The CUBIN buffer is sized by nvrtcGetCUBINSize before nvrtcGetCUBIN fills it.
    let out = unsafe {
        let built = result::compile_program(prog, &opts).map_err(|e| {
            let log = result::get_program_log(prog)
                .map(|l| {
                    let bytes: Vec<u8> = l.iter().map(|&c| c as u8).collect();
                    String::from_utf8_lossy(&bytes)
                        .trim_end_matches('\0')
                        .to_string()
                })
                .unwrap_or_default();
            Error::Runtime(format!(
                "NVRTC could not build tune's kernels to CUBIN for {arch}: {e:?} {}",
                log.trim()
            ))
        });
        let cubin = built.and_then(|()| {
            let mut size = 0usize;
            sys::nvrtcGetCUBINSize(prog, &mut size)
                .result()
                .map_err(|e| fail("CUBIN size", &e))?;
            let mut buf = vec![0u8; size];
            sys::nvrtcGetCUBIN(prog, buf.as_mut_ptr().cast())
                .result()
                .map_err(|e| fail("CUBIN", &e))?;
            Ok(buf)
        });
        let _ = result::destroy_program(prog);
        cubin
    };
    match out {
        Ok(b) if b.starts_with(b"\x7fELF") => Ok(b),
        Ok(b) => Err(Error::Runtime(format!(
            "NVRTC gave no CUBIN for {arch} ({} bytes, not an ELF image)",
            b.len()
        ))),
        Err(e) => Err(e),
    }
}

/// The PTX for `arch`, from `cache_dir` when an earlier run compiled the same source with
/// the same NVRTC; compiled and written there (atomically) otherwise.
pub fn ptx_cached(arch: &str, cache_dir: &Path) -> Result<(String, bool)> {
    let ver = nvrtc_version()?;
    let key = fnv(&[SOURCE.as_bytes(), arch.as_bytes(), ver.as_bytes()]);
    let file = cache_dir
        .join("cuda")
        .join(format!("kernels-{arch}-{key:016x}.ptx"));
    if let Ok(ptx) = std::fs::read_to_string(&file) {
        if ptx.contains(".entry") {
            return Ok((ptx, true));
        }
    }
    let ptx = compile(arch)?;
    if let Some(d) = file.parent() {
        std::fs::create_dir_all(d).map_err(|e| Error::io(d, e))?;
    }
    crate::fsio::atomic_write(&file, ptx.as_bytes())?;
    Ok((ptx, false))
}

/// The loaded kernel functions of one context.
pub struct Kernels {
    _module: Arc<CudaModule>,
    funcs: HashMap<&'static str, CudaFunction>,
    /// Whether the PTX came from the disk cache (else NVRTC ran in this process).
    pub from_cache: bool,
}

impl Kernels {
    pub fn load(ctx: &Arc<CudaContext>, cache_dir: &Path) -> Result<Kernels> {
        let (major, minor) = ctx
            .compute_capability()
            .map_err(|e| Error::Runtime(format!("CUDA: compute capability: {e}")))?;
        let (ptx, from_cache) = ptx_cached(&arch_name(major, minor), cache_dir)?;
        let module = ctx
            .load_module(Ptx::from_src(ptx))
            .map_err(|e| Error::Runtime(format!("CUDA: loading tune's kernels: {e}")))?;
        let mut funcs = HashMap::new();
        for n in names() {
            let f = module
                .load_function(n)
                .map_err(|e| Error::Runtime(format!("CUDA: kernel {n}: {e}")))?;
            funcs.insert(n, f);
        }
        Ok(Kernels {
            _module: module,
            funcs,
            from_cache,
        })
    }

    pub fn get(&self, name: &str) -> Result<&CudaFunction> {
        self.funcs
            .get(name)
            .ok_or_else(|| Error::Runtime(format!("CUDA: no kernel named {name}")))
    }
}

/// Launch shape for a grid-stride elementwise kernel over `n` items: 256 threads, at
/// most 65535 blocks (the loop covers the rest).
pub fn elementwise(n: usize) -> LaunchConfig {
    let blocks = n.div_ceil(256).clamp(1, 65_535) as u32;
    LaunchConfig {
        grid_dim: (blocks, 1, 1),
        block_dim: (256, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Launch shape for the per-channel reductions (32 x 8 blocks, see `kernels.cu`): enough
/// row blocks to fill the GPU, each walking at least 64 rows.
pub fn channel_reduce(rows: usize, c: usize) -> LaunchConfig {
    let gy = rows.div_ceil(8 * 64).clamp(1, 1024) as u32;
    LaunchConfig {
        grid_dim: (c.div_ceil(32) as u32, gy, 1),
        block_dim: (32, 8, 1),
        shared_mem_bytes: 0,
    }
}

/// One thread per item in blocks of 128 (per-row and per-channel kernels).
pub fn per_item(n: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (n.div_ceil(128).max(1) as u32, 1, 1),
        block_dim: (128, 1, 1),
        shared_mem_bytes: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kernel declared some other way (`__global__` on its own line, another return
    /// type) would be compiled but never loaded: every `__global__` must be a name here.
    #[test]
    fn names_are_every_global_of_the_source_once() {
        let listed: Vec<&str> = names().collect();
        assert_eq!(
            listed.len(),
            SOURCE.matches("__global__").count(),
            "{listed:?}"
        );
        for n in &listed {
            assert!(
                !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                "not a kernel name: {n:?}"
            );
        }
        let mut unique = listed.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(
            unique.len(),
            listed.len(),
            "a kernel name twice: {listed:?}"
        );
        assert!(listed.contains(&"softmax_xent") && listed.contains(&"scaler_update"));
    }

    #[test]
    fn launch_shapes_cover_the_work() {
        let c = elementwise(1000);
        assert_eq!(c.grid_dim.0 * c.block_dim.0, 1024);
        assert_eq!(elementwise(usize::MAX / 2).grid_dim.0, 65_535);
        let r = channel_reduce(100_000, 40);
        assert_eq!(r.grid_dim.0, 2);
        assert!(r.grid_dim.1 >= 1 && r.grid_dim.1 <= 1024);
    }
}
