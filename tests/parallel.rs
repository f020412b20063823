//! Multi-device training on the CPU backend's virtual devices: DP and DDP follow the
//! single-device loss curve over the same global batch, DDP replicas stay bit-identical,
//! DP loads device 0 while DDP keeps devices even, DDP's first gradient bucket is
//! all-reduced while backward is still running, and bad input exits 2.

use std::path::Path;
use std::process::{Command, Output};
use std::sync::{mpsc, Mutex, MutexGuard};
use std::time::Duration;

use tune::engine::nn::zoo::ModelKind;
use tune::engine::parallel::{run_traced, Options, Trace};
use tune::engine::train::{run, NoObserver, RunSummary, Workload};
use tune::knobs::{Checkpoint, Knobs, Parallel, ZeroGrad};
use tune::Error;

/// The tests that time devices run one at a time: on two cores, a concurrent test's
/// threads would be the noise they measure.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

/// Float reassociation only (chunked GEMMs, ring sums): observed differences are about
/// 1e-7 relative; anything that changes the data or the statistics is far above this.
const RTOL: f32 = 1e-5;

fn workload(model: ModelKind, dataset: &str, steps: usize, cache: &Path) -> Workload {
    Workload {
        steps,
        warmup: 1,
        threads: 2,
        eval: false,
        lr: 0.01,
        cache_dir: cache.to_path_buf(),
        ..Workload::new(model, dataset)
    }
}

fn knobs(parallel: Parallel, devices: usize, batch_size: usize) -> Knobs {
    Knobs {
        parallel,
        devices,
        batch_size,
        ..Knobs::default()
    }
}

fn max_rel_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs() / x.abs().max(1e-3))
        .fold(0.0, f32::max)
}

fn assert_same_curve(base: &RunSummary, other: &RunSummary, what: &str) {
    let d = max_rel_diff(&base.losses, &other.losses);
    println!("{what}: max relative loss difference {d:.2e}");
    assert!(
        d <= RTOL,
        "{what}: loss curve differs by {d:.2e}\n single {:?}\n {what} {:?}",
        base.losses,
        other.losses
    );
}

/// Runs DDP with replica verification and checks the digests it recorded.
fn ddp_verified(w: &Workload, k: &Knobs) -> (RunSummary, Trace) {
    let (s, t) = run_traced(
        w,
        k,
        &mut NoObserver,
        Options {
            verify_replicas: true,
        },
    )
    .unwrap();
    assert_eq!(t.ranks.len(), k.devices);
    let d0 = &t.ranks[0].digests;
    assert_eq!(d0.len(), w.steps, "one digest per step");
    for (r, rt) in t.ranks.iter().enumerate() {
        assert_eq!(
            &rt.digests, d0,
            "rank {r}'s parameters differ from rank 0's"
        );
    }
    assert!(
        d0.windows(2).all(|p| p[0] != p[1]),
        "parameters must change every step"
    );
    (s, t)
}

#[test]
fn single_dp_and_ddp_follow_one_loss_curve_and_ddp_replicas_stay_identical() {
    let _serial = serial();
    let cache = tempfile::tempdir().unwrap();
    let w = workload(ModelKind::Mlp, "synthetic", 5, cache.path());
    let single = run(&w, &knobs(Parallel::Single, 1, 48), &mut NoObserver).unwrap();
    for n in [2, 3] {
        let dp = run(&w, &knobs(Parallel::Dp, n, 48), &mut NoObserver).unwrap();
        assert_eq!(dp.devices.len(), n);
        assert_same_curve(&single, &dp, &format!("dp x{n}"));
        let (ddp, _) = ddp_verified(&w, &knobs(Parallel::Ddp, n, 48));
        assert_eq!(ddp.devices.len(), n);
        assert_same_curve(&single, &ddp, &format!("ddp x{n}"));
    }
    // Gradient accumulation with released gradients: DDP synchronises only the last
    // micro-batch, DP reduces every one; both equal one device.
    let acc = |p, n| Knobs {
        grad_accum: 2,
        zero_grad: ZeroGrad::None,
        ..knobs(p, n, 24)
    };
    let single = run(&w, &acc(Parallel::Single, 1), &mut NoObserver).unwrap();
    let dp = run(&w, &acc(Parallel::Dp, 2), &mut NoObserver).unwrap();
    assert_same_curve(&single, &dp, "dp x2, grad_accum 2");
    let (ddp, _) = ddp_verified(&w, &acc(Parallel::Ddp, 2));
    assert_same_curve(&single, &ddp, "ddp x2, grad_accum 2");
}

#[test]
fn sync_bn_makes_ddp_match_one_device_on_a_batch_norm_model() {
    let _serial = serial();
    let cache = tempfile::tempdir().unwrap();
    let w = workload(ModelKind::CnnSmall, "synthetic", 4, cache.path());
    let k = |p, n, sync_bn| Knobs {
        sync_bn,
        checkpoint: Checkpoint::Every(2),
        ..knobs(p, n, 16)
    };
    let single = run(&w, &k(Parallel::Single, 1, false), &mut NoObserver).unwrap();
    let (synced, _) = ddp_verified(&w, &k(Parallel::Ddp, 2, true));
    assert_same_curve(&single, &synced, "ddp x2 sync_bn");
    // Without SyncBatchNorm each rank normalises its own 8 samples: a different
    // computation, which this tolerance must be able to see.
    let local = run(&w, &k(Parallel::Ddp, 2, false), &mut NoObserver).unwrap();
    let d = max_rel_diff(&single.losses, &local.losses);
    println!("ddp x2 without sync_bn: max relative loss difference {d:.2e}");
    assert!(
        d > 10.0 * RTOL,
        "per-rank BN statistics went unnoticed: {d:.2e}"
    );
}

#[test]
fn ddp_over_distributed_sampler_shards_matches_one_device_across_an_epoch() {
    let _serial = serial();
    // 256 samples, global batch 32: 8 steps per epoch, so 10 steps reshuffle once.
    let cache = tempfile::tempdir().unwrap();
    let w = workload(ModelKind::Mlp, "shapes:256", 10, cache.path());
    let single = run(&w, &knobs(Parallel::Single, 1, 32), &mut NoObserver).unwrap();
    let (ddp, _) = ddp_verified(&w, &knobs(Parallel::Ddp, 2, 32));
    assert_same_curve(&single, &ddp, "ddp x2 on shapes");
    let dp = run(&w, &knobs(Parallel::Dp, 2, 32), &mut NoObserver).unwrap();
    assert_same_curve(&single, &dp, "dp x2 on shapes");
}

fn table(what: &str, s: &RunSummary) {
    for d in &s.devices {
        println!(
            "{what} device {}: busy {:.1}% comm {:.1}% peak {:.2} MiB",
            d.index,
            d.busy_fraction * 100.0,
            d.comm_fraction * 100.0,
            d.peak_bytes as f64 / (1 << 20) as f64
        );
    }
    println!("{what} imbalance {:?}", s.imbalance);
}

#[test]
fn dp_loads_device_0_and_ddp_keeps_devices_even() {
    let _serial = serial();
    let cache = tempfile::tempdir().unwrap();
    let w = Workload {
        warmup: 2,
        ..workload(ModelKind::CnnSmall, "synthetic", 8, cache.path())
    };
    let dp = run(&w, &knobs(Parallel::Dp, 2, 32), &mut NoObserver).unwrap();
    table("cnn-small dp", &dp);
    let (d0, d1) = (&dp.devices[0], &dp.devices[1]);
    // Memory is counted, not timed: device 0 holds the whole batch, the gathered
    // outputs and the only optimizer state.
    assert!(
        d0.peak_bytes > d1.peak_bytes,
        "dp: device 0 peak {} <= device 1 peak {}",
        d0.peak_bytes,
        d1.peak_bytes
    );
    assert!(d0.peak_by_category["optimizer_state"] > 0);
    assert_eq!(d1.peak_by_category["optimizer_state"], 0);
    assert!(
        d0.comm_s > 0.0 && d1.comm_s == 0.0,
        "device 0 makes every copy"
    );

    // Busy time is timed, and on cnn-small device 0's extra work is a few percent of a
    // step: the MLP, whose optimizer and gradient reduction are a large share of a
    // step, shows it above the noise of a shared machine.
    let mlp = workload(ModelKind::Mlp, "synthetic", 8, cache.path());
    let dp_mlp = run(&mlp, &knobs(Parallel::Dp, 2, 64), &mut NoObserver).unwrap();
    table("mlp dp", &dp_mlp);
    assert!(
        dp_mlp.devices[0].busy_fraction > dp_mlp.devices[1].busy_fraction,
        "dp: device 0 must be busier"
    );

    let ddp = run(&w, &knobs(Parallel::Ddp, 2, 32), &mut NoObserver).unwrap();
    table("cnn-small ddp", &ddp);
    let imb = ddp.imbalance.unwrap();
    assert!(imb.memory <= 1.10, "ddp memory imbalance {}", imb.memory);
    // Timed on 2 shared cores: looser than the 10% the docs table shows on a quiet
    // machine, still far below what DP's device 0 reaches.
    assert!(imb.busy <= 1.25, "ddp busy imbalance {}", imb.busy);
}

#[test]
fn ddp_all_reduces_the_first_bucket_while_backward_is_still_running() {
    let _serial = serial();
    // mlp with 1 MiB buckets: bucket 0 holds the last two layers (4 MiB) and is ready
    // while the first layer's weight gradient (784x1024) is still being computed.
    let cache = tempfile::tempdir().unwrap();
    let w = workload(ModelKind::Mlp, "synthetic", 6, cache.path());
    let k = Knobs {
        bucket_mb: 1,
        ..knobs(Parallel::Ddp, 2, 256)
    };
    let (s, t) = run_traced(&w, &k, &mut NoObserver, Options::default()).unwrap();
    assert_eq!(t.bucket_lens.len(), 2, "buckets {:?}", t.bucket_lens);
    let mut started_early = 0;
    let mut total = 0;
    for (r, rt) in t.ranks.iter().enumerate() {
        assert_eq!(rt.backward.len(), w.steps);
        for bwd in &rt.backward {
            let first = rt
                .allreduce
                .iter()
                .find(|b| b.step == bwd.step && b.bucket == 0)
                .unwrap();
            println!(
                "rank {r} step {}: backward {:.2}..{:.2} ms (last gradient), bucket 0 handed \
                 over {:.2}, all-reduce {:.2}..{:.2} ms",
                bwd.step,
                bwd.start_s * 1e3,
                bwd.end_s * 1e3,
                first.launch_s * 1e3,
                first.start_s * 1e3,
                first.end_s * 1e3
            );
            // The hand-over happens inside backward, before its last gradient (the first
            // layer's weights) is computed, every time.
            assert!(first.launch_s > bwd.start_s && first.launch_s < bwd.end_s);
            total += 1;
            if first.start_s < bwd.end_s {
                started_early += 1;
            }
        }
    }
    // The communication thread needs a core to start on; on a loaded machine it may
    // occasionally get one only after backward ends.
    assert!(
        started_early * 2 > total,
        "bucket 0's all-reduce started before backward ended in only {started_early} of {total} steps"
    );
    let overlap = s.devices[0].comm_overlap.unwrap();
    println!("share of all-reduce time hidden behind gradient computation, device 0: {overlap:.2}");
    assert!(overlap > 0.0);
}

#[test]
fn a_diverging_rank_stops_every_rank_and_reports_the_divergence() {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let cache = tempfile::tempdir().unwrap();
        let w = Workload {
            lr: 1e9,
            ..workload(ModelKind::Mlp, "synthetic", 20, cache.path())
        };
        let _ = tx.send(run(&w, &knobs(Parallel::Ddp, 2, 32), &mut NoObserver).err());
    });
    let err = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("ddp run hung after a rank failed");
    match err {
        Some(Error::Diverged { .. }) => {}
        other => panic!("expected a divergence, got {other:?}"),
    }
}

fn tune(args: &[&str], cache: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tune"))
        .args(args)
        .env("TUNE_CACHE_DIR", cache)
        .output()
        .unwrap()
}

fn assert_bad_input(args: &[&str], needle: &str) {
    let cache = tempfile::tempdir().unwrap();
    let out = tune(args, cache.path());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{args:?}: stderr {err}");
    assert!(
        err.contains(needle),
        "{args:?}: expected '{needle}' in: {err}"
    );
    assert!(out.stdout.is_empty(), "{args:?}: nothing on stdout");
}

#[test]
fn bad_parallel_input_exits_2_and_dp_on_one_device_runs_with_a_note() {
    assert_bad_input(
        &["train", "--devices", "0"],
        "--devices 0: must be at least 1",
    );
    assert_bad_input(
        &[
            "train",
            "--parallel",
            "ddp",
            "--devices",
            "2",
            "--bucket-mb",
            "0",
        ],
        "--bucket-mb 0: must be at least 1",
    );
    assert_bad_input(
        &["train", "--parallel", "dp", "--devices", "2", "--sync-bn"],
        "sync_bn needs parallel = ddp",
    );
    assert_bad_input(&["train", "--devices", "2"], "needs parallel = dp or ddp");
    assert_bad_input(
        &[
            "train",
            "--parallel",
            "ddp",
            "--devices",
            "2",
            "--batch-size",
            "33",
        ],
        "not divisible by devices 2",
    );
    assert_bad_input(
        &[
            "train",
            "--parallel",
            "ddp",
            "--devices",
            "65",
            "--batch-size",
            "65",
            "--steps",
            "1",
        ],
        "at most 64",
    );

    let cache = tempfile::tempdir().unwrap();
    let base = [
        "train",
        "--model",
        "mlp",
        "--dataset",
        "synthetic",
        "--steps",
        "2",
        "--warmup",
        "0",
        "--no-eval",
        "--batch-size",
        "8",
    ];
    let out = tune(
        &[&base[..], &["--parallel", "dp", "--devices", "1"]].concat(),
        cache.path(),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("DP on one device is single"), "{err}");
    let out = tune(
        &[&base[..], &["--parallel", "dp", "--devices", "1", "--json"]].concat(),
        cache.path(),
    );
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(s["not_applicable"]["parallel"]
        .as_str()
        .unwrap()
        .contains("single"));
    assert_eq!(s["devices"].as_array().unwrap().len(), 1);

    let out = tune(
        &[
            &base[..],
            &["--parallel", "ddp", "--devices", "2", "--json"],
        ]
        .concat(),
        cache.path(),
    );
    assert_eq!(out.status.code(), Some(0));
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let devs = s["devices"].as_array().unwrap();
    assert_eq!(devs.len(), 2);
    for d in devs {
        for key in ["busy_fraction", "comm_fraction", "peak_bytes"] {
            assert!(d[key].as_f64().unwrap() > 0.0, "{key} in {d}");
        }
    }
    assert!(s["imbalance"]["memory"].as_f64().unwrap() >= 1.0);
}

/// Seconds of step time the phases account for, over the measured steps: every phase
/// but `recompute`, which is part of `backward`.
fn phase_total(s: &RunSummary) -> (f64, f64) {
    let n = s.step_times.len() - s.warmup;
    let p = &s.phases_mean;
    let phases = p.data_wait + p.h2d + p.zero_grad + p.forward + p.backward + p.comm + p.optimizer;
    (phases * n as f64, s.step_times[s.warmup..].iter().sum())
}

#[test]
fn dp_and_ddp_charge_communication_to_comm_once_and_one_device_has_none() {
    let _serial = serial();
    let cache = tempfile::tempdir().unwrap();
    // The MLP on DP: the copies are a large share of a step, so counting them in
    // forward/backward as well as in comm would overshoot the step time visibly.
    let w = workload(ModelKind::Mlp, "synthetic", 6, cache.path());
    let single = run(&w, &knobs(Parallel::Single, 1, 64), &mut NoObserver).unwrap();
    assert_eq!(
        single.phases_mean.comm, 0.0,
        "one device communicates nothing"
    );
    for p in [Parallel::Dp, Parallel::Ddp] {
        let s = run(&w, &knobs(p, 2, 64), &mut NoObserver).unwrap();
        let (phases, steps) = phase_total(&s);
        println!(
            "{p:?}: phases {phases:.6} s of {steps:.6} s, comm {:.6} s/step",
            s.phases_mean.comm
        );
        assert!(s.phases_mean.comm > 0.0, "{p:?}: no communication charged");
        // Every phase is an interval inside its step: their sum cannot exceed it.
        assert!(
            phases <= steps * (1.0 + 1e-9),
            "{p:?}: phases add up to {phases} s, more than the steps' {steps} s"
        );
    }
}
