//! Native bf16 (#30): `tune probe` says how each precision computes on this CPU and why,
//! and `tune bench` measures the cores' multiply-add peaks (f32 FMA, bf16 dot products,
//! AMX tiles) and holds each row's useful GFLOP/s against the one its GEMMs ran on.

use std::process::Command;

/// Whether /proc/cpuinfo lists `flag` (read independently of the engine's detection).
fn cpu_has(flag: &str) -> bool {
    std::fs::read_to_string("/proc/cpuinfo")
        .map(|t| {
            t.lines()
                .filter(|l| l.starts_with("flags"))
                .any(|l| l.split_whitespace().any(|f| f == flag))
        })
        .unwrap_or(false)
}

/// Whether the AMX path should run: the tile unit with bf16 (Linux grants the tile
/// state to any process that asks, since 5.16).
fn amx() -> bool {
    cpu_has("amx_bf16") && cpu_has("amx_tile") && cpu_has("avx512_bf16")
}

fn tune(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_tune"))
        .args(args)
        .output()
        .expect("run tune");
    assert!(
        out.status.success(),
        "tune {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

#[test]
fn probe_says_which_path_each_precision_runs_and_why() {
    let out = tune(&["probe"]);
    let line = |p: &str| {
        out.lines()
            .map(str::trim)
            .find(|l| l.starts_with(p))
            .unwrap_or_else(|| panic!("no '{p}' line in tune probe:\n{out}"))
            .to_string()
    };
    let bf16 = line("bf16:");
    if amx() {
        assert!(bf16.contains("native, AMX tiles (tdpbf16ps)"), "{bf16}");
    } else if cpu_has("avx512_bf16") && cpu_has("avx512bw") {
        assert!(
            bf16.contains("AVX512_BF16 dot products (vdpbf16ps)"),
            "{bf16}"
        );
    } else {
        assert!(
            bf16.contains("storage only, computed in f32: this CPU has no AVX512_BF16"),
            "{bf16}"
        );
    }
    let fp16 = line("fp16:");
    assert!(fp16.contains("storage only, computed in f32"), "{fp16}");
    if cpu_has("avx512_fp16") {
        assert!(fp16.contains("accumulates in fp16"), "{fp16}");
    }
    let v: serde_json::Value = serde_json::from_str(&tune(&["probe", "--json"])).unwrap();
    assert_eq!(
        v["cpu"]["bf16_native"].as_bool(),
        Some(cpu_has("avx512_bf16") && cpu_has("avx512bw"))
    );
}

/// One short bench: the peak line and, per precision, useful GFLOP/s as a share of the
/// peak of the unit its GEMMs ran on. The speed of bf16 against fp32 on the whole model
/// (about 1.1-1.4x for mlp on this host, docs/performance.md) is too close to 1 to
/// assert on a loaded runner, so it is printed, not checked; the tile unit's peak
/// against the f32 FMA peak (11x measured here at load 10) is checked, far from its 2x.
#[test]
fn bench_measures_the_peaks_and_each_rows_share_of_its_own() {
    let out = tune(&[
        "bench",
        "--what",
        "mlp",
        "--threads",
        "1",
        "--amp",
        "off,bf16",
        "--runs",
        "3",
        "--steps",
        "5",
        "--json",
    ]);
    let rows: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let peak = rows
        .iter()
        .find(|r| r["workload"] == "peak")
        .unwrap_or_else(|| panic!("no peak row:\n{out}"));
    let native = cpu_has("avx512_bf16") && cpu_has("avx512bw");
    if !cpu_has("avx512f") {
        eprintln!("no AVX-512F: the peak probe has no kernel here, nothing more to check");
        assert!(peak["f32_gflops"].is_null());
        return;
    }
    let f32_peak = peak["f32_gflops"].as_f64().expect("f32 peak");
    assert!(f32_peak > 1.0, "{peak}");
    assert_eq!(peak["bf16_gflops"].is_number(), native, "{peak}");
    if amx() {
        let tiles = peak["amx_bf16_gflops"].as_f64().expect("AMX peak");
        assert!(
            tiles > 2.0 * f32_peak,
            "AMX {tiles} vs f32 FMA {f32_peak} GFLOP/s"
        );
    }
    let sps = |amp: &str| {
        let r = rows
            .iter()
            .find(|r| r["workload"] == "mlp" && r["amp"] == amp)
            .unwrap_or_else(|| panic!("no mlp {amp} row:\n{out}"));
        let frac = r["peak_fraction"].as_f64().expect("peak_fraction");
        // A GEMM cannot beat the cores' measured peak (some slack for the probe's noise).
        assert!(frac > 0.0 && frac < 1.2, "{r}");
        let want = Some(native && amp == "bf16");
        assert_eq!(r["native_half"].as_bool(), want, "{r}");
        r["samples_per_s"].as_f64().expect("samples/s")
    };
    let (fp32, bf16) = (sps("off"), sps("bf16"));
    eprintln!(
        "mlp batch 128, 1 thread: fp32 {fp32:.0}, bf16 {bf16:.0} samples/s ({:.2}x, not checked)",
        bf16 / fp32
    );
}
