//! DDP on the CUDA backend over NCCL (`engine::cuda::ddp`), run as users run it: `tune
//! train --device cuda --parallel ddp --devices N`, which re-runs itself with tune's
//! private NCCL link on `LD_LIBRARY_PATH` (cudarc loads NCCL only as `libnccl.so`).
//!
//! Under `TUNE_CUDA_STANDIN=1` the stand-in driver shows 2 devices and the NCCL stand-in
//! (tests/standin/nccl.cpp) reduces across them; on a real machine N is the GPUs it has
//! (1 on the one-GPU H100: NCCL with world size 1). Losses must track the CPU backend's
//! DDP over the same number of devices, and replicas must stay bit-identical.

#[path = "common/standin.rs"]
mod standin;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::{Arc, Mutex, OnceLock};

const TUNE: &str = env!("CARGO_BIN_EXE_tune");
const CHILD_ENV: &str = "TUNE_TEST_GPU_DDP_CHILD";

/// How many GPUs the DDP runs use: the stand-in's 2, or what the machine has (at most 2).
fn world(test: &str) -> Option<usize> {
    standin::gpu_or_skip(test)?;
    if standin::requested() {
        return Some(2);
    }
    let n = cudarc::driver::CudaContext::device_count().unwrap_or(1);
    Some(n.clamp(1, 2) as usize)
}

/// One cache for every run, so NVRTC compiles the kernels once (`.ci/run` sets
/// `TUNE_CACHE_DIR`).
fn cache() -> PathBuf {
    let d = std::env::var_os("TUNE_CACHE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("tune-gpu-ddp-cache"));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn train(device: &str, world: usize, model: &str, extra: &[&str]) -> Output {
    run("ddp", device, world, model, extra)
}

/// `tune train --parallel <parallel> --devices <world>` with the tests' small settings,
/// run once per binary for each set of arguments: several tests hold their runs against
/// the same reference (the f32 DDP and DP runs of mlp, the CPU backend's), and a run's
/// losses and records are a function of its arguments, so the second test reads the
/// first one's output instead of training again (5 of the binary's runs).
fn run(parallel: &str, device: &str, world: usize, model: &str, extra: &[&str]) -> Output {
    type Runs = HashMap<String, Arc<OnceLock<Output>>>;
    static RUNS: OnceLock<Mutex<Runs>> = OnceLock::new();
    let key = format!("{parallel} {device} {world} {model} {extra:?}");
    let slot = {
        let mut runs = RUNS
            .get_or_init(Mutex::default)
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        Arc::clone(runs.entry(key).or_default())
    };
    slot.get_or_init(|| train_once(parallel, device, world, model, extra))
        .clone()
}

fn train_once(parallel: &str, device: &str, world: usize, model: &str, extra: &[&str]) -> Output {
    Command::new(TUNE)
        .args([
            "train",
            "--device",
            device,
            "--parallel",
            parallel,
            "--json",
        ])
        .args(["--devices", &world.to_string()])
        .args(["--model", model, "--dataset", "synthetic", "--steps", "3"])
        .args(["--warmup", "1", "--threads", "2", "--lr", "0.05"])
        .args(["--batch-size", "8"])
        .args(extra)
        .env("TUNE_CACHE_DIR", cache())
        .env("TUNE_CUDA_STANDIN_DEVICES", world.to_string())
        .env_remove("TUNE_NCCL_REEXEC")
        .output()
        .unwrap()
}

fn json(o: &Output) -> serde_json::Value {
    assert!(
        o.status.success(),
        "exit {:?}\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&o.stdout)))
}

fn losses(v: &serde_json::Value) -> Vec<f64> {
    v["losses"]
        .as_array()
        .unwrap_or_else(|| panic!("no losses in {v}"))
        .iter()
        .map(|l| l.as_f64().unwrap())
        .collect()
}

/// |gpu - cpu| <= 1e-3 + 1e-2 |cpu|, gpu_parity's loss-curve tolerance.
fn track(what: &str, gpu: &[f64], cpu: &[f64]) {
    assert_eq!(gpu.len(), cpu.len(), "{what}: {gpu:?} vs {cpu:?}");
    for (i, (g, c)) in gpu.iter().zip(cpu).enumerate() {
        assert!(
            (g - c).abs() <= 1e-3 + 1e-2 * c.abs(),
            "{what}: step {i}: gpu {g} vs cpu {c} (gpu {gpu:?}, cpu {cpu:?})"
        );
    }
}

/// Autotune under DDP: every rank times its GEMMs, rank 0's choices are recorded, and
/// the losses still track the CPU's DDP. bf16 and fp16 under DDP (the CPU backend has no
/// multi-device AMP) track the GPU's own f32 DDP within gpu_amp's AMP-vs-f32 tolerance,
/// with the same skipped steps on every rank (the scaler checks averaged gradients).
#[test]
fn autotune_and_amp_under_ddp_on_gpus() {
    let test = "autotune_and_amp_under_ddp_on_gpus";
    let Some(n) = world(test) else { return };
    let tuned = json(&train("cuda", n, "mlp", &["--autotune"]));
    let cpu = json(&train("cpu", n, "mlp", &[]));
    track("mlp autotune", &losses(&tuned), &losses(&cpu));
    let algos = tuned["algorithms"].as_array().unwrap();
    assert!(
        algos
            .iter()
            .any(|a| a["op"] == "gemm" && a["source"] != "heuristic"),
        "rank 0's autotune choices in the record: {algos:?}"
    );
    let f32_gpu = json(&train("cuda", n, "mlp", &[]));
    for amp in ["bf16", "fp16"] {
        let got = json(&train("cuda", n, "mlp", &["--amp", amp]));
        eprintln!(
            "{}mlp amp={amp} ddp x{n}: {:?} (f32 {:?})",
            standin::label(),
            losses(&got),
            losses(&f32_gpu)
        );
        for (i, (g, f)) in losses(&got).iter().zip(losses(&f32_gpu)).enumerate() {
            assert!(
                (g - f).abs() <= 2e-2 + 5e-2 * f.abs(),
                "amp={amp} step {i}: {g} vs f32 {f}"
            );
        }
        assert!(got["skipped_steps"].as_array().unwrap().is_empty(), "{got}");
        if amp == "fp16" {
            // The scaler's state reaches the record (rank 0's, equal on every rank).
            assert!(got["loss_scale_final"].as_f64().is_some(), "{got}");
        }
    }
}

#[test]
fn ddp_on_gpus_follows_the_cpu_backends_ddp() {
    let test = "ddp_on_gpus_follows_the_cpu_backends_ddp";
    let Some(n) = world(test) else { return };
    // mlp; cnn-small with batch norm (buffers broadcast each step), gradient
    // accumulation (only the last micro-batch all-reduces) and set-to-none gradients;
    // several small buckets so more than one all-reduce runs per step.
    let cases: [(&str, &[&str]); 3] = [
        ("mlp", &[]),
        ("mlp", &["--bucket-mb", "1", "--zero-grad", "none"]),
        ("cnn-small", &["--grad-accum", "2"]),
    ];
    for (model, extra) in cases {
        let gpu = json(&train("cuda", n, model, extra));
        let cpu = json(&train("cpu", n, model, extra));
        let (gs, cs) = (&gpu, &cpu);
        eprintln!(
            "{}{model} {extra:?} on {n} device(s): gpu {:?} cpu {:?}",
            standin::label(),
            losses(&gpu),
            losses(&cpu)
        );
        track(&format!("{model} {extra:?}"), &losses(&gpu), &losses(&cpu));
        let want = if standin::requested() {
            "cuda (CPU stand-in)"
        } else {
            "cuda"
        };
        assert_eq!(gs["backend"], want, "{gs}");
        let devs = gs["devices"].as_array().unwrap();
        assert_eq!(devs.len(), n, "one summary per GPU: {gs}");
        for d in devs {
            assert!(d["busy_s"].as_f64().unwrap() > 0.0, "{d}");
        }
        assert_eq!(cs["devices"].as_array().unwrap().len(), n);
    }
}

/// SyncBatchNorm over NCCL: the statistics and backward sums of every batch-norm layer
/// (nested ones in resnet-mini's blocks too) over the global batch, as the CPU backend's
/// SyncBatchNorm over its collective; with activation checkpointing the recompute
/// synchronises again. With 2 ranks the shard statistics differ from the global ones,
/// so the run must also differ from plain DDP (a SyncBatchNorm that synchronised nothing
/// would equal it).
#[test]
fn sync_bn_on_gpus_follows_the_cpu_backends_sync_bn() {
    let test = "sync_bn_on_gpus_follows_the_cpu_backends_sync_bn";
    let Some(n) = world(test) else { return };
    let cases: [(&str, &[&str]); 2] = [
        ("cnn-small", &["--sync-bn"]),
        ("resnet-mini", &["--sync-bn", "--checkpoint", "sqrt"]),
    ];
    for (model, extra) in cases {
        let gpu = json(&train("cuda", n, model, extra));
        let cpu = json(&train("cpu", n, model, extra));
        let plain: Vec<&str> = extra
            .iter()
            .copied()
            .filter(|a| *a != "--sync-bn")
            .collect();
        let unsynced = json(&train("cuda", n, model, &plain));
        eprintln!(
            "{}{model} {extra:?} on {n} device(s): gpu {:?} cpu {:?}; without sync_bn {:?}",
            standin::label(),
            losses(&gpu),
            losses(&cpu),
            losses(&unsynced)
        );
        track(&format!("{model} {extra:?}"), &losses(&gpu), &losses(&cpu));
        assert!(gpu["not_applicable"].get("sync_bn").is_none(), "{gpu}");
        if n > 1 {
            let (a, b) = (losses(&gpu), losses(&unsynced));
            assert!(
                a.iter().zip(&b).skip(1).any(|(x, y)| (x - y).abs() > 1e-6),
                "{model}: sync_bn changed nothing over {n} ranks: {a:?} vs {b:?}"
            );
        }
    }
    // A model without batch norm: the knob is recorded as not applicable, not refused.
    let mlp = json(&train("cuda", n, "mlp", &["--sync-bn"]));
    assert!(
        mlp["not_applicable"]["sync_bn"]
            .as_str()
            .is_some_and(|w| w.contains("no batch norm")),
        "{mlp}"
    );
}

/// Every rank's parameters after every step, digested: equal to the bit. Runs in a
/// child of this test binary whose `LD_LIBRARY_PATH` holds tune's NCCL link (set before
/// the child starts, as `tune train` does for itself).
#[test]
fn gpu_replicas_stay_bit_identical() {
    let test = "gpu_replicas_stay_bit_identical";
    if std::env::var_os(CHILD_ENV).is_some() {
        return replicas_in_child();
    }
    let Some(n) = world(test) else { return };
    let dir = tune::engine::cuda::libs::nccl_search_dir();
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args([test, "--exact", "--nocapture", "--test-threads", "1"])
        .env(CHILD_ENV, "1")
        .env("TUNE_CUDA_STANDIN_DEVICES", n.to_string());
    if let Some(dir) = dir {
        let old = std::env::var("LD_LIBRARY_PATH").unwrap_or_default();
        c.env("LD_LIBRARY_PATH", format!("{}:{old}", dir.display()));
    }
    let o = c.output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && out.contains("1 passed"),
        "child: {out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

fn replicas_in_child() {
    use tune::engine::nn::zoo::ModelKind;
    use tune::engine::train::{DeviceChoice, NoObserver, Workload};
    use tune::knobs::{Amp, Knobs, Parallel};
    assert!(standin::activate().is_ok());
    let n: usize = std::env::var("TUNE_CUDA_STANDIN_DEVICES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let cache = tempfile::tempdir().unwrap();
    // Also under fp16 with autotune: ranks may pick different GEMM algorithms, yet they
    // apply one averaged gradient, so their parameters stay equal to the bit.
    let half = Knobs {
        amp: Amp::Fp16,
        autotune: true,
        ..Knobs::default()
    };
    for (model, base) in [
        (ModelKind::Mlp, Knobs::default()),
        (ModelKind::CnnSmall, Knobs::default()),
        (ModelKind::Mlp, half),
    ] {
        let w = Workload {
            steps: 3,
            warmup: 1,
            eval: false,
            lr: 0.05,
            device: DeviceChoice::Cuda,
            cache_dir: cache.path().to_path_buf(),
            ..Workload::new(model, "synthetic")
        };
        let k = Knobs {
            parallel: Parallel::Ddp,
            devices: n,
            batch_size: 8,
            bucket_mb: 1,
            ..base
        };
        let s = tune::engine::cuda::ddp::run_verified(&w, &k, &mut NoObserver, true)
            .unwrap_or_else(|e| panic!("{model}: {e}"));
        eprintln!("{}{model}: {:?}", standin::label(), s.losses);
        assert_eq!(s.losses.len(), 3);
    }
}

#[test]
fn without_nccl_ddp_on_gpus_is_one_line_and_exit_2() {
    let test = "without_nccl_ddp_on_gpus_is_one_line_and_exit_2";
    let Some(n) = world(test) else { return };
    if !standin::requested() {
        eprintln!("skipping {test}: only the stand-in can be run without its NCCL");
        return;
    }
    // The stand-in's folder without its libnccl.so.2: the driver and cuBLASLt only.
    let var = tune_probes::culibs::LIB_DIRS_ENV;
    let src = standin::dir().unwrap();
    let all = std::env::var(var).unwrap();
    let dirs: Vec<&str> = all.split(':').filter(|d| PathBuf::from(d) != src).collect();
    assert!(src.join("libnccl.so.2").exists(), "{}", src.display());
    let bare = tempfile::tempdir().unwrap();
    for f in ["libcuda.so.1", "libcublasLt.so.13"] {
        std::os::unix::fs::symlink(src.join(f), bare.path().join(f)).unwrap();
    }
    let o = Command::new(TUNE)
        .args([
            "train",
            "--device",
            "cuda",
            "--parallel",
            "ddp",
            "--devices",
        ])
        .arg(n.to_string())
        .args(["--model", "mlp", "--dataset", "synthetic", "--steps", "2"])
        .env(var, format!("{}:{}", bare.path().display(), dirs.join(":")))
        .env("TUNE_CACHE_DIR", cache())
        .env("LD_LIBRARY_PATH", "")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("needs NCCL") && err.contains("libnccl.so.2"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

/// DataParallel on GPUs (`engine::cuda::dp`): GPU 0 replicates, scatters, gathers, takes
/// the loss and reduces the gradients; its losses track the CPU backend's DP over as many
/// virtual devices, and GPU 0 does more than the replicas (the loss, the gather, the
/// optimizer), which is DP's imbalance.
#[test]
fn dp_on_gpus_follows_the_cpu_backends_dp() {
    let test = "dp_on_gpus_follows_the_cpu_backends_dp";
    let Some(n) = world(test) else { return };
    let dp = |device: &str, model: &str, extra: &[&str]| json(&run("dp", device, n, model, extra));
    let cases: [(&str, &[&str]); 3] = [
        ("mlp", &[]),
        ("cnn-small", &[]),
        ("mlp", &["--grad-accum", "2", "--checkpoint", "sqrt"]),
    ];
    for (model, extra) in cases {
        let gpu = dp("cuda", model, extra);
        let cpu = dp("cpu", model, extra);
        eprintln!(
            "{}dp {model} {extra:?} on {n} device(s): gpu {:?} cpu {:?}",
            standin::label(),
            losses(&gpu),
            losses(&cpu)
        );
        track(
            &format!("dp {model} {extra:?}"),
            &losses(&gpu),
            &losses(&cpu),
        );
        let devs = gpu["devices"].as_array().unwrap();
        assert_eq!(devs.len(), n, "one summary per GPU: {gpu}");
        if n > 1 {
            let peak = |d: &serde_json::Value| d["peak_bytes"].as_u64().unwrap_or(0);
            assert!(
                peak(&devs[0]) > peak(&devs[1]),
                "GPU 0 holds the batch, the outputs and the optimizer: {devs:?}"
            );
        }
    }
}

/// AMP and autotune under DataParallel on GPUs. DP over n GPUs computes what one GPU
/// computes on the whole batch (mlp has no batch norm): under bf16 and fp16 the DP run
/// must follow the single-GPU AMP run much more closely than AMP follows f32, which a DP
/// whose replicas ran in f32 (or GPU 0 alone in the half type) would not. fp16 records
/// its loss scale and skipped steps as the single-GPU run does; autotune records GPU 0's
/// GEMM choices and still tracks the CPU's DP.
#[test]
fn amp_and_autotune_under_dp_on_gpus() {
    let test = "amp_and_autotune_under_dp_on_gpus";
    let Some(n) = world(test) else { return };
    let f32_dp = losses(&json(&run("dp", "cuda", n, "mlp", &[])));
    for amp in ["bf16", "fp16"] {
        let dp = json(&run("dp", "cuda", n, "mlp", &["--amp", amp]));
        let one = json(&run("single", "cuda", 1, "mlp", &["--amp", amp]));
        let (d, o) = (losses(&dp), losses(&one));
        eprintln!(
            "{}mlp amp={amp}: dp x{n} {d:?}, one GPU {o:?}, f32 dp {f32_dp:?}",
            standin::label()
        );
        for i in 0..d.len() {
            let amp_gap = (o[i] - f32_dp[i]).abs();
            let dp_gap = (d[i] - o[i]).abs();
            assert!(
                dp_gap <= 1e-5 + 1e-5 * o[i].abs(),
                "amp={amp} step {i}: dp {} vs one GPU {} (f32 {})",
                d[i],
                o[i],
                f32_dp[i]
            );
            if i > 0 {
                assert!(amp_gap > 0.0, "amp={amp} step {i}: AMP equals f32 exactly");
            }
        }
        assert_eq!(dp["skipped_steps"], one["skipped_steps"], "{dp}");
        if amp == "fp16" {
            assert_eq!(dp["loss_scale_final"], one["loss_scale_final"], "{dp}");
            assert!(dp["loss_scale_final"].as_f64().is_some(), "{dp}");
        }
    }
    let cnn = json(&run("dp", "cuda", n, "cnn-small", &["--amp", "bf16"]));
    let cnn_f32 = json(&run("dp", "cuda", n, "cnn-small", &[]));
    for (g, f) in losses(&cnn).iter().zip(losses(&cnn_f32)) {
        assert!(
            (g - f).abs() <= 2e-2 + 5e-2 * f.abs(),
            "cnn-small bf16 dp {g} vs f32 {f}"
        );
    }
    let tuned = json(&run("dp", "cuda", n, "mlp", &["--autotune"]));
    let cpu = json(&run("dp", "cpu", n, "mlp", &[]));
    track("dp mlp autotune", &losses(&tuned), &losses(&cpu));
    let algos = tuned["algorithms"].as_array().unwrap();
    assert!(
        algos
            .iter()
            .any(|a| a["op"] == "gemm" && a["source"] != "heuristic"),
        "GPU 0's autotune choices in the record: {algos:?}"
    );
}
