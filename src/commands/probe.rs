//! `tune probe`: what this machine has, and for GPUs why there are none when there are none.

use crate::commands::cli::ProbeArgs;
use crate::engine::cuda::versions::{self, Found};
use crate::engine::ops::gemm::kernel_family;
use crate::engine::ops::gemm_amp::{amp_path_lines, bf16_unit, native_half};
use crate::error::Result;
use crate::knobs::Amp;

/// NVRTC's major version from the soname that loaded (`libnvrtc.so.13`).
fn nvrtc_major(libs: &[tune_probes::culibs::LibStatus]) -> Option<u32> {
    let l = libs.iter().find(|l| l.name == "nvrtc")?;
    let name = l.loaded.as_deref()?;
    name.rsplit(".so.").next()?.split('.').next()?.parse().ok()
}

fn found_line(what: &str, r: &std::result::Result<Found, String>) -> String {
    match r {
        Ok(f) => format!("{what}: {} ({})", f.version, f.path.display()),
        Err(e) => format!("{what}: not available: {e}"),
    }
}

/// What each GPU knob will use on a GPU of compute capability `cc`.
fn knob_lines(cc: Option<(u32, u32)>, cudnn: bool, nccl: bool) -> Vec<String> {
    let tc = cc.map(versions::tensor_core_dtypes).unwrap_or_default();
    let on_tc = |d: &str| {
        if tc.contains(&d) {
            "tensor cores".to_string()
        } else {
            "no tensor cores for it: runs as plain FMA".to_string()
        }
    };
    vec![
        format!("amp=bf16: {}", on_tc("bf16")),
        format!("amp=fp16: {}", on_tc("fp16")),
        format!("tf32 GEMMs: {}", on_tc("tf32")),
        format!("fp8: {}", on_tc("fp8")),
        format!(
            "conv2d: {}",
            if std::env::var(crate::engine::cuda::dnn::OFF_ENV).as_deref() == Ok("0") {
                "cuDNN off (TUNE_CUDNN=0): im2col + cuBLASLt, autotune times the GEMMs"
            } else if cudnn {
                "cuDNN, autotune times its forward and backward algorithms per shape"
            } else {
                "no cuDNN: im2col + cuBLASLt, autotune times the GEMMs"
            }
        ),
        format!(
            "parallel=ddp: {}",
            if nccl {
                "NCCL all-reduce on a communication stream, one thread per GPU or one process per GPU under torchrun/srun, SyncBatchNorm over NCCL (parallel=dp: NCCL broadcast and reduce from GPU 0)"
            } else {
                "no NCCL: DDP on GPUs cannot run"
            }
        ),
    ]
}

pub fn main(args: &ProbeArgs) -> Result<i32> {
    let cpu = tune_probes::cpu_info();
    let gpus = tune_probes::gpu_inventory();
    let libs = tune_probes::probe_cuda_libs();
    let nccl = versions::nccl();
    let cudnn = versions::cudnn();
    let nvrtc = nvrtc_major(&libs);
    let backend = match crate::engine::cuda::usable() {
        Ok(name) => format!("usable on {name}"),
        Err(why) => format!("not usable here: {why}"),
    };
    if args.json {
        let v = serde_json::json!({
            "cpu": { "model": cpu.model, "logical_cores": cpu.logical_cores, "available": cpu.available, "gemm_kernels": kernel_family(), "amp_paths": amp_path_lines(), "bf16_native": native_half(Amp::Bf16), "bf16_unit": bf16_unit() },
            "gpus": match &gpus { Ok(g) => serde_json::to_value(g).unwrap_or_default(), Err(_) => serde_json::Value::Null },
            "gpu_notice": gpus.as_ref().err().map(|e| e.to_string()),
            "cuda_libraries": libs,
            "cuda_backend": backend,
            "nccl": nccl.as_ref().ok(),
            "nccl_notice": nccl.as_ref().err(),
            "cudnn": cudnn.as_ref().ok(),
            "cudnn_notice": cudnn.as_ref().err(),
            "tensor_core_dtypes": gpus.as_ref().ok().map(|g| g.iter().map(|d| {
                d.compute_capability.map(versions::tensor_core_dtypes).unwrap_or_default()
            }).collect::<Vec<_>>()),
            "ptx_warning": gpus.as_ref().ok().and_then(|g| g.first()).and_then(|d| {
                versions::ptx_warning(&d.cuda_driver_version, nvrtc?)
            }),
        });
        println!("{v}");
        return Ok(0);
    }
    println!(
        "cpu: {} ({} logical cores, {} available to this process; {} GEMM kernels)",
        cpu.model.as_deref().unwrap_or("unknown"),
        cpu.logical_cores,
        cpu.available,
        kernel_family()
    );
    for line in amp_path_lines() {
        println!("  {line}");
    }
    match gpus {
        Ok(g) if g.is_empty() => println!("gpus: none (NVML loaded, no devices)"),
        Ok(g) => {
            for d in &g {
                let cc = d
                    .compute_capability
                    .map_or("compute capability unknown".into(), |(a, b)| {
                        format!("compute capability {a}.{b}")
                    });
                println!(
                    "gpu {}: {} ({:.1} GiB, {cc}, driver {}, CUDA {})",
                    d.index,
                    d.name,
                    d.memory_total_bytes as f64 / (1u64 << 30) as f64,
                    d.driver_version,
                    d.cuda_driver_version
                );
                for line in knob_lines(d.compute_capability, cudnn.is_ok(), nccl.is_ok()) {
                    println!("  {line}");
                }
                for (other, status) in &d.peer_access {
                    println!("  peer access to gpu {other}: {status}");
                }
            }
            if let Some(w) = g
                .first()
                .and_then(|d| versions::ptx_warning(&d.cuda_driver_version, nvrtc?))
            {
                println!("warning: {w}");
            }
        }
        Err(e) => println!("gpus: none: {e}"),
    }
    for l in &libs {
        match (&l.loaded, &l.error) {
            (Some(name), _) => println!(
                "cuda library {}: loads ({})",
                l.name,
                l.path.as_deref().unwrap_or(name)
            ),
            (None, Some(e)) => println!("cuda library {}: does not load: {e}", l.name),
            (None, None) => println!("cuda library {}: does not load", l.name),
        }
    }
    if libs.iter().any(|l| l.loaded.is_none()) {
        println!(
            "  (looked up by soname via LD_LIBRARY_PATH and the loader cache, then in ${}: \
             ':'-separated folders, e.g. the lib folders of the nvidia-* Python wheels)",
            tune_probes::culibs::LIB_DIRS_ENV
        );
    }
    println!("{}", found_line("nccl", &nccl));
    println!("{}", found_line("cudnn", &cudnn));
    println!("cuda backend: {backend}");
    Ok(0)
}
