//! The CUDA kernels compile. Needs only NVRTC, not a GPU, so CI checks it (`.ci/run`
//! installs NVRTC from NVIDIA's wheel and sets `TUNE_REQUIRE_NVRTC=1`). Skips with a
//! reason when NVRTC is absent, and fails instead under `TUNE_REQUIRE_NVRTC=1` or
//! `TUNE_REQUIRE_GPU=1`.

#[path = "common/standin.rs"]
mod standin;

use tune::engine::cuda::libs::{self, Lib};
use tune::engine::testing::kernels;

fn nvrtc_or_skip(test: &str) -> bool {
    match libs::require(&[Lib::Nvrtc]) {
        Ok(()) => true,
        Err(e) => {
            for var in ["TUNE_REQUIRE_NVRTC", "TUNE_REQUIRE_GPU"] {
                if std::env::var(var).as_deref() == Ok("1") {
                    panic!("{test}: {var}=1 but {e}");
                }
            }
            eprintln!("skipping {test}: {e}");
            false
        }
    }
}

#[test]
fn kernels_compile_for_hopper_and_ampere() {
    if !nvrtc_or_skip("kernels_compile_for_hopper_and_ampere") {
        return;
    }
    eprintln!("NVRTC {}", kernels::nvrtc_version().unwrap());
    for arch in ["sm_90", "sm_80"] {
        let ptx = kernels::compile(arch).unwrap_or_else(|e| panic!("{e}"));
        for name in kernels::names() {
            assert!(
                ptx.contains(&format!(".entry {name}(")),
                "{arch}: no entry for {name}"
            );
        }
        assert!(ptx.contains(&format!(".target {arch}")), "{arch}");
    }
}

/// Every kernel assembles to machine code for Hopper (nvrtcGetCUBIN, no GPU needed): an
/// assembler failure or a resource limit shows here rather than in the driver's JIT on
/// the first GPU run.
#[test]
fn every_kernel_assembles_to_cubin_for_sm_90() {
    if !nvrtc_or_skip("every_kernel_assembles_to_cubin_for_sm_90") {
        return;
    }
    let cubin = kernels::cubin("sm_90").unwrap_or_else(|e| panic!("{e}"));
    eprintln!("sm_90 CUBIN: {} bytes", cubin.len());
    for name in kernels::names() {
        // Each kernel is a symbol of the ELF image (its name in the string table).
        let sym = format!("\0{name}\0");
        assert!(
            cubin.windows(sym.len()).any(|w| w == sym.as_bytes()),
            "sm_90 CUBIN has no symbol {name}"
        );
    }
    // A virtual architecture has no machine code: a clear error, not an empty image.
    let e = kernels::cubin("compute_90").unwrap_err().to_string();
    assert!(e.contains("compute_90"), "{e}");
}

#[test]
fn ptx_is_cached_on_disk_and_reused() {
    if !nvrtc_or_skip("ptx_is_cached_on_disk_and_reused") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (a, cached) = kernels::ptx_cached("sm_90", dir.path()).unwrap();
    assert!(!cached, "first call must compile");
    let (b, cached) = kernels::ptx_cached("sm_90", dir.path()).unwrap();
    assert!(cached, "second call must read the cache");
    assert_eq!(a, b);
    let files: Vec<_> = std::fs::read_dir(dir.path().join("cuda"))
        .unwrap()
        .collect();
    assert_eq!(files.len(), 1, "one PTX file, no temp left behind");
}

#[test]
fn a_kernel_that_does_not_compile_is_a_clear_error() {
    if !nvrtc_or_skip("a_kernel_that_does_not_compile_is_a_clear_error") {
        return;
    }
    let e = kernels::compile("sm_1").unwrap_err().to_string();
    assert!(e.contains("sm_1"), "{e}");
}

/// The stand-in runs kernels of different streams at the same time, except those that use
/// its one `__shared__` section, a barrier or atomics, itself or through a `__device__`
/// helper: the generated table marks exactly those, read from kernels.cu (a kernel missed
/// here would race; the stand-in also reports one that writes shared memory unmarked).
#[test]
fn the_standin_runs_alone_exactly_the_kernels_that_share_memory() {
    let alone = standin::exclusive_kernels(kernels::SOURCE);
    for n in [
        "channel_sum",
        "channel_sqdev",
        "channel_dot",
        "relu_mask_channel_sum",
        "bn_relu_channel_sums",
    ] {
        assert!(alone.iter().any(|a| a == n), "{n} runs alone: {alone:?}");
    }
    for n in [
        "relu_forward",
        "gelu_forward",
        "gelu_backward",
        "fill",
        "axpy",
    ] {
        assert!(
            !alone.iter().any(|a| a == n),
            "{n} runs beside others: {alone:?}"
        );
    }
    for n in &alone {
        assert!(kernels::names().any(|k| k == n), "{n} is a kernel");
    }
    let table = standin::kernel_table();
    assert!(
        table.contains("TUNE_EXCLUSIVE_KERNELS \"") && table.contains("\"channel_sum\""),
        "{table}"
    );
}

/// The CPU stand-in's kernel table is generated from `kernels::names()` (the one list, read
/// from kernels.cu): launch.h holds no list of its own, and the generated table names
/// every kernel once.
#[test]
fn the_cpu_standin_kernel_table_comes_from_the_kernel_source() {
    let launch = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/standin/launch.h"
    ))
    .unwrap();
    let hand_kept: Vec<&str> = kernels::names()
        .filter(|n| launch.contains(&format!("K({n})")))
        .collect();
    assert!(
        hand_kept.is_empty(),
        "launch.h lists kernels by hand: {hand_kept:?}"
    );
    assert!(launch.contains("TUNE_KERNEL_TABLE"));
    let table = standin::kernel_table();
    for n in kernels::names() {
        assert_eq!(
            table.matches(&format!("K({n})")).count(),
            1,
            "{n} in {table}"
        );
    }
}
