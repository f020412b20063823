//! `tune bench`: the engine-speed figures compared against PyTorch in
//! docs/performance.md. Same protocol as `../shared/peers/torch_bench.py`: one fixed
//! synthetic batch (no loader), SGD lr 0.01 momentum 0.9, fp32, gradients set to none,
//! 10 warm-up steps then `runs` timed runs of `steps` steps, median run reported.
//! `--amp off,bf16` trains each precision `runs` times, alternating, one timed run per
//! training. Before the mlp and cnn rows the cores' FMA peak is measured
//! (`gemm_peak`), and each row gives its useful GFLOP/s as a share of it.
//!
//! `--what sampling` measures what sampling at 10 Hz costs a training run: `runs` pairs
//! of the same `cnn-small` run with the probes off and on (the `tune train
//! --sample-interval 100` path), alternating which goes first, in one process.

use std::time::Instant;

use serde::Serialize;

use crate::commands::cli::{check_flag, BenchArgs};
use crate::engine::device::Device;
use crate::engine::nn::zoo::ModelKind;
use crate::engine::ops::gemm::{kernel_family, matmul, Mat};
use crate::engine::ops::gemm_amp::native_half;
use crate::engine::ops::gemm_peak::{self, Peak};
use crate::engine::optim::OptimKind;
use crate::engine::train::{run, DeviceChoice, NoObserver, Workload};
use crate::error::{Error, Result};
use crate::knobs::{Amp, Knobs, ZeroGrad};
use crate::limits;
use crate::stats::median;
use crate::stats::{bootstrap_ci, Bootstrap};

const WARMUP: usize = 10;

#[derive(Serialize)]
struct Row {
    engine: &'static str,
    workload: String,
    threads: usize,
    batch: usize,
    samples_per_s: Option<f64>,
    step_ms_median: Option<f64>,
    gflops_median: Option<f64>,
    n: Option<usize>,
    /// Which f32 GEMM kernels ran: figures from different families are not comparable.
    gemm_kernels: &'static str,
    amp: String,
    /// Whether the GEMMs computed natively in the half type (else widened to f32).
    native_half: bool,
    /// Useful GFLOP/s ([`flops_per_sample`] x samples/s) and its share of the measured
    /// peak of the precision the GEMMs ran in.
    useful_gflops: Option<f64>,
    peak_fraction: Option<f64>,
}

/// Useful flops of one training sample: the GEMM multiply-adds of `zoo::describe`'s
/// linear and conv layers (forward, weight gradient, and input gradient for all but the
/// first layer), 2 flops each. Pointwise work (ReLU, batch norm, the optimizer) is not
/// counted: it is what a faster engine would fuse away, not useful arithmetic.
fn flops_per_sample(kind: ModelKind) -> Option<f64> {
    // (multiply-adds of the layer's forward GEMM per sample, input gradient computed)
    let layers: &[(usize, bool)] = match kind {
        ModelKind::Mlp | ModelKind::MlpGelu => {
            &[(784 * 1024, false), (1024 * 1024, true), (1024 * 10, true)]
        }
        // 3x3 convs 3->32 (32x32 out), 32->64 s2 (16x16), 64->128 s2 (8x8), linear 128->10.
        ModelKind::CnnSmall => &[
            (32 * 32 * 32 * 27, false),
            (16 * 16 * 64 * 288, true),
            (8 * 8 * 128 * 576, true),
            (128 * 10, true),
        ],
        ModelKind::ResnetMini => return None,
    };
    let gemms = |dx: bool| if dx { 3.0 } else { 2.0 };
    Some(
        layers
            .iter()
            .map(|&(m, dx)| 2.0 * m as f64 * gemms(dx))
            .sum(),
    )
}

/// The sums of `a.steps` step times of each timed run of one training (after warm-up).
fn timed_runs(
    kind: ModelKind,
    batch: usize,
    threads: usize,
    amp: Amp,
    runs: usize,
    a: &BenchArgs,
) -> Result<Vec<f64>> {
    let w = Workload {
        steps: WARMUP + runs * a.steps,
        warmup: WARMUP,
        lr: 0.01,
        optimizer: OptimKind::Sgd,
        threads,
        eval: false,
        device: DeviceChoice::Cpu,
        ..Workload::new(kind, "synthetic")
    };
    let k = Knobs {
        batch_size: batch,
        zero_grad: ZeroGrad::None,
        amp,
        ..Knobs::default()
    };
    let s = run(&w, &k, &mut NoObserver)?;
    Ok(s.step_times[WARMUP..]
        .chunks(a.steps)
        .map(|c| c.iter().sum())
        .collect())
}

/// One row per precision in `amps`: one training of `runs` timed runs when there is one
/// precision, else `runs` rounds of one training per precision, alternating.
fn train_rows(
    kind: ModelKind,
    batch: usize,
    threads: usize,
    amps: &[Amp],
    peak: Option<Peak>,
    a: &BenchArgs,
) -> Result<Vec<Row>> {
    let mut per: Vec<Vec<f64>> = vec![Vec::new(); amps.len()];
    if amps.len() == 1 {
        per[0] = timed_runs(kind, batch, threads, amps[0], a.runs, a)?;
    } else {
        for round in 0..a.runs {
            let order: Vec<usize> = if round % 2 == 0 {
                (0..amps.len()).collect()
            } else {
                (0..amps.len()).rev().collect()
            };
            for i in order {
                per[i].extend(timed_runs(kind, batch, threads, amps[i], 1, a)?);
            }
        }
    }
    Ok(amps
        .iter()
        .zip(&per)
        .map(|(&amp, runs)| {
            let med = median(runs);
            let sps = (batch * a.steps) as f64 / med;
            let native = native_half(amp);
            let useful = flops_per_sample(kind).map(|f| f * sps / 1e9);
            let top = peak.and_then(|p| {
                if native {
                    p.native_bf16()
                } else {
                    Some(p.f32_gflops)
                }
            });
            Row {
                engine: "tune",
                workload: if kind == ModelKind::Mlp {
                    "mlp".into()
                } else {
                    "cnn".into()
                },
                threads,
                batch,
                samples_per_s: Some(sps),
                step_ms_median: Some(med / a.steps as f64 * 1e3),
                gflops_median: None,
                n: None,
                gemm_kernels: kernel_family(),
                amp: amp.to_string(),
                native_half: native,
                useful_gflops: useful,
                peak_fraction: useful.zip(top).map(|(u, p)| u / p),
            }
        })
        .collect())
}

fn gemm_row(n: usize, threads: usize) -> Result<Row> {
    let dev = Device::cpu(0, threads);
    let a: Vec<f32> = (0..n * n).map(|i| ((i % 17) as f32 - 8.0) * 0.01).collect();
    let b: Vec<f32> = (0..n * n).map(|i| ((i % 13) as f32 - 6.0) * 0.01).collect();
    let mut c = vec![0.0f32; n * n];
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .map_err(|e| Error::Runtime(e.to_string()))?;
    let flop = 2.0 * (n * n * n) as f64;
    // Enough repetitions for about a second per size, as the peers' gemm_bench does.
    let reps = ((2e10 / flop) as usize).clamp(2, 200);
    let mut call = || {
        matmul(
            &mut c,
            Mat::rm(&a, n, n),
            Mat::rm(&b, n, n),
            false,
            dev.par(),
        )
    };
    let times = pool.install(|| -> Result<Vec<f64>> {
        call()?;
        let mut t = Vec::with_capacity(reps);
        for _ in 0..reps {
            let s = Instant::now();
            call()?;
            t.push(s.elapsed().as_secs_f64());
        }
        Ok(t)
    })?;
    Ok(Row {
        engine: "tune",
        workload: "sgemm".into(),
        threads,
        batch: 0,
        samples_per_s: None,
        step_ms_median: None,
        gflops_median: Some(flop / median(&times) / 1e9),
        n: Some(n),
        gemm_kernels: kernel_family(),
        amp: "off".into(),
        native_half: false,
        useful_gflops: None,
        peak_fraction: None,
    })
}

fn print_peak(threads: usize, p: Option<Peak>, json: bool) -> Result<()> {
    if json {
        let v = serde_json::json!({
            "engine": "tune", "workload": "peak", "threads": threads,
            "f32_gflops": p.map(|p| p.f32_gflops),
            "f32_unit": p.map(|p| p.f32_unit),
            "bf16_gflops": p.and_then(|p| p.bf16_gflops),
            "amx_bf16_gflops": p.and_then(|p| p.amx_bf16_gflops),
        });
        println!("{v}");
        return Ok(());
    }
    let Some(p) = p else {
        println!("peak threads={threads}: not measured: the probe needs AVX-512F or FMA");
        return Ok(());
    };
    let per = |g: f64| format!("{g:.0} GFLOP/s ({:.0} a core)", g / threads as f64);
    let dot = p
        .bf16_gflops
        .map_or("not measured, no AVX512_BF16".into(), per);
    let amx = p.amx_bf16_gflops.map_or(String::new(), |g| {
        format!("; bf16 AMX tiles (tdpbf16ps) {}", per(g))
    });
    let width = if p.f32_unit == "fma" {
        "256-bit"
    } else {
        "512-bit"
    };
    println!(
        "peak threads={threads}: f32 FMA ({width}) {}; bf16 dot products (vdpbf16ps) {dot}{amx}",
        per(p.f32_gflops)
    );
    Ok(())
}

/// One dashboard frame over a synthetic sweep of 100 trials on 4 devices; `--runs` times
/// 100 frames, median and 95th percentile reported.
fn dash_row(a: &BenchArgs) -> Result<()> {
    let (trials, devices, w, h) = (100, 4, 160, 48);
    let t = crate::tui::dash::bench::measure(trials, devices, w, h, a.runs * 100)?;
    if a.json {
        let line = serde_json::json!({
            "engine": "tune", "workload": "dash-frame", "trials": trials, "devices": devices,
            "width": w, "height": h, "frames": t.frames,
            "median_ms": t.median_ms, "p95_ms": t.p95_ms, "max_ms": t.max_ms,
            "cpu_ms_mean": t.cpu_ms_mean,
        });
        println!("{line}");
    } else {
        let cpu = t
            .cpu_ms_mean
            .map_or("unknown".into(), |c| format!("{c:.3} ms"));
        println!(
            "dash frame ({trials} trials, {devices} devices, {w}x{h}): wall median {:.3} ms, p95 {:.3} ms, max {:.3} ms; CPU {cpu} per frame; {} frames",
            t.median_ms, t.p95_ms, t.max_ms, t.frames
        );
    }
    Ok(())
}

#[derive(Serialize)]
struct SamplingRow {
    engine: &'static str,
    workload: &'static str,
    model: &'static str,
    threads: usize,
    batch: usize,
    interval_ms: u64,
    pairs: usize,
    steps: usize,
    off_samples_per_s: f64,
    on_samples_per_s: f64,
    /// Median over pairs of on/off throughput, with its 95% bootstrap interval.
    ratio_on_off: f64,
    ratio_lo: f64,
    ratio_hi: f64,
    /// Sampling thread CPU as a share of one core, median over the "on" runs.
    sampler_cpu_pct_of_core: Option<f64>,
    tick_mean_us: Option<f64>,
}

/// Throughput of the timed steps of one run (after the warm-up).
fn timed_throughput(s: &crate::engine::RunSummary, batch: usize) -> f64 {
    let t: f64 = s.step_times[WARMUP..].iter().sum();
    (batch * (s.step_times.len() - WARMUP)) as f64 / t
}

fn sampling_row(threads: usize, a: &BenchArgs) -> Result<SamplingRow> {
    const BATCH: usize = 64;
    const INTERVAL_MS: u64 = 100;
    let w = Workload {
        steps: WARMUP + a.steps,
        warmup: WARMUP,
        lr: 0.01,
        optimizer: OptimKind::Sgd,
        threads,
        eval: false,
        device: DeviceChoice::Cpu,
        ..Workload::new(ModelKind::CnnSmall, "synthetic")
    };
    let k = Knobs {
        batch_size: BATCH,
        zero_grad: ZeroGrad::None,
        ..Knobs::default()
    };
    let interval = std::time::Duration::from_millis(INTERVAL_MS);
    let (mut off, mut on, mut ratios, mut cpu, mut tick) = (vec![], vec![], vec![], vec![], vec![]);
    for pair in 0..a.runs {
        let mut one = |sampled: bool| -> Result<f64> {
            let (s, p) = crate::commands::train::run_sampled(
                &w,
                &k,
                &mut NoObserver,
                sampled.then_some(interval),
            )?;
            if let Some(p) = p {
                cpu.extend(p.sampling.thread_cpu_pct_of_core);
                tick.extend(p.sampling.tick_mean_us);
            }
            Ok(timed_throughput(&s, BATCH))
        };
        // Alternate the order so drift on a shared machine does not favour one side.
        let (x, y) = if pair % 2 == 0 {
            let x = one(false)?;
            (x, one(true)?)
        } else {
            let y = one(true)?;
            (one(false)?, y)
        };
        off.push(x);
        on.push(y);
        ratios.push(y / x);
    }
    let (lo, hi) = bootstrap_ci(&ratios, median, &Bootstrap::with_seed(7));
    let med = |v: &[f64]| (!v.is_empty()).then(|| median(v));
    Ok(SamplingRow {
        engine: "tune",
        workload: "sampling-overhead",
        model: "cnn-small",
        threads,
        batch: BATCH,
        interval_ms: INTERVAL_MS,
        pairs: a.runs,
        steps: a.steps,
        off_samples_per_s: median(&off),
        on_samples_per_s: median(&on),
        ratio_on_off: median(&ratios),
        ratio_lo: lo,
        ratio_hi: hi,
        sampler_cpu_pct_of_core: med(&cpu),
        tick_mean_us: med(&tick),
    })
}

fn print_sampling(r: &SamplingRow, json: bool) -> Result<()> {
    if json {
        println!(
            "{}",
            serde_json::to_string(r).map_err(|e| Error::Runtime(e.to_string()))?
        );
        return Ok(());
    }
    println!(
        "sampling every {} ms, {} batch {} threads={}: off {:.1} samples/s, on {:.1} samples/s; \
         on/off {:.4} [{:.4}, {:.4}] over {} pairs (cost {:.2}%); sampling thread {} of one core, {} per tick",
        r.interval_ms,
        r.model,
        r.batch,
        r.threads,
        r.off_samples_per_s,
        r.on_samples_per_s,
        r.ratio_on_off,
        r.ratio_lo,
        r.ratio_hi,
        r.pairs,
        100.0 * (1.0 - r.ratio_on_off),
        r.sampler_cpu_pct_of_core
            .map_or("unknown".into(), |c| format!("{c:.2}%")),
        r.tick_mean_us
            .map_or("unknown".into(), |t| format!("{:.0} us", t)),
    );
    Ok(())
}

/// What `--what` can name.
const WHAT: &[&str] = &["mlp", "cnn", "gemm", "peak", "dash", "sampling"];

fn unknown_what(other: &str) -> Error {
    Error::Invalid(format!(
        "bench: --what: unknown workload '{other}': allowed values are {}",
        WHAT.join(", ")
    ))
}

pub fn main(a: &BenchArgs) -> Result<i32> {
    check_flag("runs", &limits::BENCH_RUNS, a.runs)?;
    // Each configuration trains warm-up plus runs x steps steps in one run.
    check_flag("steps", &limits::STEPS, a.steps.saturating_mul(a.runs))
        .map_err(|e| Error::Invalid(format!("{e} (counting all {} runs)", a.runs)))?;
    for (flag, n) in [("threads", a.threads.len()), ("what", a.what.len())] {
        limits::FLAG_LIST.check_usize(n).map_err(|_| {
            let n = format!("{n} entries");
            Error::Invalid(format!("--{flag} {}", limits::FLAG_LIST.refusal(&n)))
        })?;
    }
    for &t in &a.threads {
        check_flag("threads", &limits::THREADS, t)?;
    }
    // Every entry is checked before the first benchmark runs.
    if let Some(other) = a.what.iter().find(|w| !WHAT.contains(&w.as_str())) {
        return Err(unknown_what(other));
    }
    let amps = a
        .amp
        .iter()
        .map(|s| {
            s.parse::<Amp>()
                .map_err(|e| Error::Invalid(format!("bench: --amp: {e}")))
        })
        .collect::<Result<Vec<_>>>()?;
    if amps.is_empty() {
        return Err(Error::Invalid("bench: --amp: no precision named".into()));
    }
    crate::process::alloc::mark_training();
    let needs_peak = a
        .what
        .iter()
        .any(|w| ["mlp", "cnn", "peak"].contains(&w.as_str()));
    let mut peaks = Vec::new();
    if needs_peak {
        for &t in &a.threads {
            let p = gemm_peak::measure(t);
            print_peak(t, p, a.json)?;
            peaks.push((t, p));
        }
    }
    let peak_at = |t: usize| peaks.iter().find(|(pt, _)| *pt == t).and_then(|(_, p)| *p);
    for what in &a.what {
        if what == "peak" {
            continue;
        }
        if what == "dash" {
            dash_row(a)?;
            continue;
        }
        for &t in &a.threads {
            if what == "sampling" {
                print_sampling(&sampling_row(t, a)?, a.json)?;
                continue;
            }
            let rows = match what.as_str() {
                "mlp" => train_rows(ModelKind::Mlp, 128, t, &amps, peak_at(t), a)?,
                "cnn" => train_rows(ModelKind::CnnSmall, 64, t, &amps, peak_at(t), a)?,
                "gemm" => [512, 1024, 2048]
                    .into_iter()
                    .map(|n| gemm_row(n, t))
                    .collect::<Result<_>>()?,
                other => return Err(unknown_what(other)),
            };
            let first_sps = rows.first().and_then(|r| r.samples_per_s);
            for r in rows {
                if a.json {
                    println!(
                        "{}",
                        serde_json::to_string(&r).map_err(|e| Error::Runtime(e.to_string()))?
                    );
                } else if let Some(g) = r.gflops_median {
                    println!(
                        "sgemm n={:<5} threads={t}: {g:.1} GFLOP/s ({} kernels)",
                        r.n.unwrap_or(0),
                        r.gemm_kernels
                    );
                } else {
                    let vs = match (first_sps, r.samples_per_s) {
                        (Some(f), Some(x)) if amps.len() > 1 => {
                            format!(", {:.2}x {}", x / f, amps[0])
                        }
                        _ => String::new(),
                    };
                    let peak = match (r.useful_gflops, r.peak_fraction) {
                        (Some(u), Some(f)) => format!(
                            ", {u:.0} useful GFLOP/s = {:.0}% of the {} peak",
                            100.0 * f,
                            if r.native_half { "native bf16" } else { "f32" }
                        ),
                        (Some(u), None) => format!(", {u:.0} useful GFLOP/s"),
                        _ => String::new(),
                    };
                    println!(
                        "{:<4} batch {:<4} threads={t} amp={:<4}: {:.1} samples/s{vs} (median step {:.2} ms{peak}; {} GEMMs)",
                        r.workload,
                        r.batch,
                        r.amp,
                        r.samples_per_s.unwrap_or(f64::NAN),
                        r.step_ms_median.unwrap_or(f64::NAN),
                        if r.native_half { "native bf16".to_string() } else { format!("{} f32", r.gemm_kernels) }
                    );
                }
            }
        }
    }
    Ok(0)
}
