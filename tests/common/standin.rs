//! The CPU stand-in for the CUDA driver, cuBLASLt, cuDNN and NCCL (tests/standin/), for the GPU tests
//! under `TUNE_CUDA_STANDIN=1`. Built with the system C++ compiler into
//! `target/standin/<hash of the sources and compiler>/` on first use, and put on
//! `TUNE_CUDA_LIB_DIRS` for this test process only: `--device auto`, `tune probe` and the
//! CI gate sweep never see it, so nothing takes it for a GPU.
#![allow(dead_code)] // each test file uses its own subset

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// What the stand-in's driver reports as the device name; tests print it with their
/// figures so a stand-in result is never read as a GPU's.
pub const DEVICE_NAME: &str = "tune CPU stand-in (not a GPU)";

const SOURCES: [&str; 14] = [
    "tests/standin/cuda_shim.h",
    "tests/standin/activity.h",
    "tests/standin/publish.h",
    "tests/standin/nvml.cpp",
    "tests/standin/half.h",
    "tests/standin/cuda.cpp",
    "tests/standin/launch.h",
    "tests/standin/cublaslt.cpp",
    "tests/standin/cudnn.cpp",
    "tests/standin/cudnn_conv.h",
    "tests/standin/nccl.cpp",
    "tests/standin/nccl_reduce.h",
    "tests/standin/nccl_remote.h",
    "src/engine/cuda/kernels.cu",
];

/// The folder the driver stand-in publishes each process's device activity in, which the
/// NVML stand-in reads (tests/standin/activity.h).
pub const ACTIVITY_ENV: &str = "TUNE_STANDIN_ACTIVITY_DIR";

/// The library built last: its presence means the folder is complete.
const LAST: &str = "libnccl.so.2";

pub fn requested() -> bool {
    std::env::var("TUNE_CUDA_STANDIN").as_deref() == Ok("1")
}

fn fnv(h: &mut u64, bytes: &[u8]) {
    for &b in bytes {
        *h ^= u64::from(b);
        *h = h.wrapping_mul(0x0100_0000_01b3);
    }
}

fn compiler() -> String {
    std::env::var("CXX").unwrap_or_else(|_| "c++".into())
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd
        .output()
        .map_err(|e| format!("cannot run {:?}: {e}", cmd.get_program()))?;
    if out.status.success() {
        return Ok(());
    }
    Err(format!(
        "{:?} failed: {}",
        cmd.get_program(),
        String::from_utf8_lossy(&out.stderr)
    ))
}

fn build(root: &Path) -> Result<PathBuf, String> {
    let cxx = compiler();
    let version = Command::new(&cxx)
        .arg("--version")
        .output()
        .map_err(|e| format!("no C++ compiler ({cxx}): {e}"))?;
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    fnv(&mut h, &version.stdout);
    for s in SOURCES {
        let p = root.join(s);
        let text = std::fs::read(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        fnv(&mut h, &text);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let dir = target.join("standin").join(format!("{h:016x}"));
    if dir.join(LAST).exists() {
        return Ok(dir);
    }
    // Built in a private folder and renamed into place, so test binaries building at the
    // same time never load a half-written library.
    let tmp = target
        .join("standin")
        .join(format!("tmp-{h:016x}-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
    let common = [
        "-std=c++17",
        "-O2",
        "-g",
        "-fPIC",
        "-shared",
        "-pthread",
        "-fvisibility=hidden",
        "-ftls-model=initial-exec",
        "-fno-strict-aliasing",
    ];
    run(Command::new(&cxx)
        .args(common)
        .arg("-I")
        .arg(root.join("src/engine/cuda"))
        .arg("-Wl,-soname,libcuda.so.1")
        .arg("-o")
        .arg(tmp.join("libcuda.so.1"))
        .arg(root.join("tests/standin/cuda.cpp")))?;
    run(Command::new(&cxx)
        .args(common)
        .arg("-Wl,-soname,libcublasLt.so.13")
        .arg("-o")
        .arg(tmp.join("libcublasLt.so.13"))
        .arg(root.join("tests/standin/cublaslt.cpp"))
        .arg("-L")
        .arg(&tmp)
        .arg("-l:libcuda.so.1")
        .arg("-Wl,-rpath,$ORIGIN"))?;
    // cuDNN 9's soname, which cudarc tries (`libcudnn.so.9`); like cuBLASLt it queues its
    // work and checks buffers through the driver stand-in.
    run(Command::new(&cxx)
        .args(common)
        .arg("-Wl,-soname,libcudnn.so.9")
        .arg("-o")
        .arg(tmp.join("libcudnn.so.9"))
        .arg(root.join("tests/standin/cudnn.cpp"))
        .arg("-L")
        .arg(&tmp)
        .arg("-l:libcuda.so.1")
        .arg("-Wl,-rpath,$ORIGIN"))?;
    // NVML's soname. tune loads it from `TUNE_CUDA_LIB_DIRS` where the loader does not
    // find it; it reads what the driver stand-ins of every process did from
    // `TUNE_STANDIN_ACTIVITY_DIR` (tests/standin/activity.h).
    run(Command::new(&cxx)
        .args(common)
        .arg("-Wl,-soname,libnvidia-ml.so.1")
        .arg("-o")
        .arg(tmp.join("libnvidia-ml.so.1"))
        .arg(root.join("tests/standin/nvml.cpp")))?;
    // NCCL's real soname. No `libnccl.so` link here: tune makes its own private one
    // (engine::cuda::versions::nccl_link_dir), and the tests must see it do so. The
    // driver stand-in's tune_standin_* hooks are found at run time (dlopen RTLD_NOLOAD),
    // so `ncclGetVersion` loads even where no libcuda.so.1 is.
    run(Command::new(&cxx)
        .args(common)
        .arg("-Wl,-soname,libnccl.so.2")
        .arg("-o")
        .arg(tmp.join(LAST))
        .arg(root.join("tests/standin/nccl.cpp"))
        .arg("-ldl"))?;
    if std::fs::rename(&tmp, &dir).is_err() {
        // Another test binary won the race; its copy is the same build.
        let _ = std::fs::remove_dir_all(&tmp);
    }
    if dir.join(LAST).exists() {
        Ok(dir)
    } else {
        Err(format!(
            "stand-in not found in {} after building",
            dir.display()
        ))
    }
}

/// The built folder under `TUNE_CUDA_STANDIN=1` (`None` when not requested), set up once
/// per test binary.
fn built() -> &'static Result<Option<PathBuf>, String> {
    static DONE: OnceLock<Result<Option<PathBuf>, String>> = OnceLock::new();
    DONE.get_or_init(|| {
        if !requested() {
            return Ok(None);
        }
        let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
        let dir = build(&root).map_err(|e| format!("TUNE_CUDA_STANDIN=1 but {e}"))?;
        let var = tune_probes::culibs::LIB_DIRS_ENV;
        let old = std::env::var(var).unwrap_or_default();
        let new = if old.is_empty() {
            dir.display().to_string()
        } else {
            format!("{}:{old}", dir.display())
        };
        // Set once, before any test of this binary loads a CUDA library.
        std::env::set_var(var, new);
        // Where the driver stand-ins of this binary's processes publish what they did, for
        // the NVML stand-in: one folder per test binary (a test that checks NVML's figures
        // gives its processes a folder of their own).
        if std::env::var_os(ACTIVITY_ENV).is_none() {
            let act = dir
                .parent()
                .unwrap_or(&dir)
                .join(format!("activity-{}", std::process::id()));
            std::fs::create_dir_all(&act)
                .map_err(|e| format!("TUNE_CUDA_STANDIN=1 but {}: {e}", act.display()))?;
            std::env::set_var(ACTIVITY_ENV, &act);
        }
        Ok(Some(dir))
    })
}

/// Under `TUNE_CUDA_STANDIN=1`: builds the stand-in and puts its folder first on
/// `TUNE_CUDA_LIB_DIRS` for this process. `Ok(true)` when active, `Ok(false)` when not
/// requested; an error when requested but it cannot be built.
pub fn activate() -> Result<bool, String> {
    built().clone().map(|d| d.is_some())
}

/// The folder holding the built stand-in (libcuda.so.1, libcublasLt.so.13, libcudnn.so.9,
/// libnccl.so.2)
/// when it is active, for tests that spawn the tune binary or link it directly.
pub fn dir() -> Option<PathBuf> {
    built().as_ref().ok().cloned().flatten()
}

/// "[CPU stand-in, not a GPU] " when the stand-in is active, for figures a test prints.
pub fn label() -> &'static str {
    if requested() {
        "[CPU stand-in, not a GPU] "
    } else {
        ""
    }
}

/// A GPU, or the CPU stand-in under `TUNE_CUDA_STANDIN=1` (its device name says so).
pub fn gpu_or_skip(test: &str) -> Option<tune::engine::cuda::gpu::Gpu> {
    if let Err(e) = activate() {
        panic!("{test}: {e}");
    }
    let why = match tune::engine::cuda::usable() {
        Ok(_) => {
            let cache = tempfile::tempdir().unwrap();
            match tune::engine::cuda::gpu::Gpu::open(
                0,
                cache.path(),
                false,
                std::sync::Arc::new(tune::engine::device::MemTracker::default()),
            ) {
                Ok(g) => {
                    eprintln!("{test}: {}running on {}", label(), g.name);
                    return Some(g);
                }
                Err(e) => e.to_string(),
            }
        }
        Err(why) => why,
    };
    if std::env::var("TUNE_REQUIRE_GPU").as_deref() == Ok("1") {
        panic!("{test}: TUNE_REQUIRE_GPU=1 but {why}");
    }
    eprintln!("skipping {test}: {why}");
    None
}

/// The devices a test written once runs on: the CPU always, and CUDA when a GPU (or the
/// stand-in under `TUNE_CUDA_STANDIN=1`) is usable here.
pub fn devices(test: &str) -> Vec<tune::engine::train::DeviceChoice> {
    let mut v = vec![tune::engine::train::DeviceChoice::Cpu];
    if gpu_or_skip(test).is_some() {
        v.push(tune::engine::train::DeviceChoice::Cuda);
    }
    v
}

/// Runs `body` once per device of [`devices`], naming each in the test's output.
pub fn on_each_device(test: &str, mut body: impl FnMut(tune::engine::train::DeviceChoice)) {
    for d in devices(test) {
        eprintln!(
            "{test}: {}on {d:?}",
            if d == tune::engine::train::DeviceChoice::Cuda {
                label()
            } else {
                ""
            }
        );
        body(d);
    }
}
