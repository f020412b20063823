//! `tune probe`: what this machine has, and for GPUs why there are none when there are none.

use crate::commands::cli::ProbeArgs;
use crate::engine::ops::gemm::kernel_family;
use crate::error::Result;

pub fn main(args: &ProbeArgs) -> Result<i32> {
    let cpu = tune_probes::cpu_info();
    let gpus = tune_probes::gpu_inventory();
    let libs = tune_probes::probe_cuda_libs();
    let backend = match crate::engine::cuda::usable() {
        Ok(name) => format!("usable on {name}"),
        Err(why) => format!("not usable here: {why}"),
    };
    if args.json {
        let v = serde_json::json!({
            "cpu": { "model": cpu.model, "logical_cores": cpu.logical_cores, "available": cpu.available, "gemm_kernels": kernel_family() },
            "gpus": match &gpus { Ok(g) => serde_json::to_value(g).unwrap_or_default(), Err(_) => serde_json::Value::Null },
            "gpu_notice": gpus.as_ref().err().map(|e| e.to_string()),
            "cuda_libraries": libs,
            "cuda_backend": backend,
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
    match gpus {
        Ok(g) if g.is_empty() => println!("gpus: none (NVML loaded, no devices)"),
        Ok(g) => {
            for d in g {
                println!(
                    "gpu {}: {} ({:.1} GiB, driver {}, CUDA {})",
                    d.index,
                    d.name,
                    d.memory_total_bytes as f64 / (1u64 << 30) as f64,
                    d.driver_version,
                    d.cuda_driver_version
                );
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
    println!("cuda backend: {backend}");
    Ok(0)
}
