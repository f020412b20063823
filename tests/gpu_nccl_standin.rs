//! The NCCL stand-in (tests/standin/nccl.cpp) and the driver stand-in's N devices, checked
//! by a small C++ program (tests/standin/nccl_check.cpp) linked straight against both and
//! run with 2 and 3 stand-in devices: communicator init three ways, every collective
//! against a host reference, half-type rounding, stream order, and the errors that must
//! not hang (count mismatch, abort while a peer waits, an id from another process).
//! Runs only under `TUNE_CUDA_STANDIN=1` (`.ci/run` sets it); there is no real NCCL
//! counterpart here: on a GPU machine, NCCL itself is what runs.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[path = "common/standin.rs"]
mod standin;

/// Every check nccl_check.cpp runs; each must report "ok".
const CHECKS: [&str; 18] = [
    "dead_process_id_refused",
    "devices",
    "init_one_thread_per_device",
    "init_all",
    "init_in_group_from_one_thread",
    "duplicate_gpu_refused",
    "all_reduce_f32_sum_avg_max_in_and_out_of_place",
    "all_reduce_f64_sum",
    "half_types_sum_in_float_round_to_nearest_even",
    "broadcast_from_root_1",
    "reduce_to_last_rank",
    "all_gather",
    "reduce_scatter",
    "stream_order_memset_before_collective_event_after",
    "collective_on_another_devices_stream_refused",
    "count_mismatch_is_an_error_not_a_hang",
    "abort_while_a_peer_waits_returns",
    "out_of_bounds_buffer_is_a_sticky_error",
];

/// nccl_link_dir names its temporary link by process id, so two tests of this binary
/// making the link at once could trip over each other's: one at a time.
static LINK: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn standin_dir(test: &str) -> Option<PathBuf> {
    if !standin::requested() {
        eprintln!("skipping {test}: TUNE_CUDA_STANDIN=1 is not set (the NCCL stand-in is tested only on the CPU stand-in)");
        return None;
    }
    if let Err(e) = standin::activate() {
        panic!("{test}: {e}");
    }
    standin::dir()
}

/// Builds nccl_check.cpp against the stand-in in `dir`, into `out`.
fn build_check(dir: &Path, out: &Path) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let exe = out.join("nccl_check");
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let o = Command::new(&cxx)
        .args(["-std=c++17", "-O1", "-g", "-pthread", "-Wall", "-o"])
        .arg(&exe)
        .arg(root.join("tests/standin/nccl_check.cpp"))
        .arg("-L")
        .arg(dir)
        .args(["-l:libcuda.so.1", "-l:libnccl.so.2"])
        .arg(format!("-Wl,-rpath,{}", dir.display()))
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cxx}: {e}"));
    assert!(
        o.status.success(),
        "building nccl_check.cpp failed:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    exe
}

/// Runs the check program with `devices` stand-in devices; kills it after `limit`.
fn run(
    exe: &Path,
    devices: Option<&str>,
    args: &[&str],
    limit: Duration,
) -> (bool, String, String) {
    let mut cmd = Command::new(exe);
    // Short for the checks of the timeout itself; long enough elsewhere that only a hang
    // (caught by `limit`) or a missing wake-up (caught by the checks' own clocks) trips it.
    let timeout = if args == ["timeout"] { "1" } else { "30" };
    cmd.args(args)
        .env("TUNE_NCCL_STANDIN_TIMEOUT_S", timeout)
        .env_remove("TUNE_CUDA_STANDIN_DEVICES")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(d) = devices {
        cmd.env("TUNE_CUDA_STANDIN_DEVICES", d);
    }
    let mut child = cmd.spawn().unwrap();
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        out.read_to_string(&mut s).unwrap();
        s
    });
    let ereader = std::thread::spawn(move || {
        let mut s = String::new();
        err.read_to_string(&mut s).unwrap();
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let (stdout, stderr) = (reader.join().unwrap(), ereader.join().unwrap());
    assert!(
        status.is_some(),
        "nccl_check {args:?} with {devices:?} devices hung for {limit:?}:\n{stdout}\n{stderr}"
    );
    (status.unwrap().success(), stdout, stderr)
}

#[test]
fn nccl_standin_collectives_on_2_and_3_devices() {
    let test = "nccl_standin_collectives_on_2_and_3_devices";
    let Some(dir) = standin_dir(test) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let exe = build_check(&dir, tmp.path());
    for devices in ["2", "3"] {
        let (ok, stdout, stderr) = run(&exe, Some(devices), &[], Duration::from_secs(240));
        eprintln!(
            "{test}: {} {devices} devices:\n{stdout}{stderr}",
            standin::label()
        );
        assert!(
            ok,
            "nccl_check failed with {devices} devices:\n{stdout}\n{stderr}"
        );
        for c in CHECKS {
            assert!(
                stdout.lines().any(|l| l == format!("ok {c}")),
                "check {c} did not pass with {devices} devices:\n{stdout}"
            );
        }
    }
}

#[test]
fn standin_device_count_falls_back_to_one_with_one_line() {
    let test = "standin_device_count_falls_back_to_one_with_one_line";
    let Some(dir) = standin_dir(test) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let exe = build_check(&dir, tmp.path());
    let limit = Duration::from_secs(30);
    for (value, want, lines) in [
        (None, "devices 1", 0),
        (Some("8"), "devices 8", 0),
        (Some("9"), "devices 1", 1),
        (Some("0"), "devices 1", 1),
        (Some("two"), "devices 1", 1),
    ] {
        let (ok, stdout, stderr) = run(&exe, value, &["count"], limit);
        assert!(ok, "{value:?}: {stderr}");
        assert_eq!(stdout.trim(), want, "TUNE_CUDA_STANDIN_DEVICES={value:?}");
        let said = stderr
            .lines()
            .filter(|l| l.contains("TUNE_CUDA_STANDIN_DEVICES"))
            .count();
        assert_eq!(said, lines, "{value:?}: stderr {stderr}");
    }
}

/// tune reaches NCCL only through its own private `libnccl.so` link (cudarc never tries
/// `libnccl.so.2`); through that link the stand-in loads with no driver in the process
/// and reports its version.
#[test]
fn nccl_standin_version_through_tunes_private_link() {
    let test = "nccl_standin_version_through_tunes_private_link";
    let Some(dir) = standin_dir(test) else {
        return;
    };
    assert!(
        !dir.join("libnccl.so").exists(),
        "the stand-in folder must not hold a libnccl.so link: tune makes its own"
    );
    let found = {
        let _one = LINK.lock().unwrap_or_else(|p| p.into_inner());
        tune::engine::cuda::versions::nccl().unwrap()
    };
    assert_eq!(found.version, "2.27.0");
    assert_eq!(found.path.file_name().unwrap(), "libnccl.so");
    assert_eq!(
        std::fs::canonicalize(&found.path).unwrap(),
        std::fs::canonicalize(dir.join("libnccl.so.2")).unwrap()
    );
    eprintln!(
        "{test}: {}NCCL {} through {}",
        standin::label(),
        found.version,
        found.path.display()
    );
}

/// A rank that never comes is an error after TUNE_NCCL_STANDIN_TIMEOUT_S, in init and in a
/// collective, with one line each; nothing is written.
#[test]
fn nccl_standin_missing_rank_times_out() {
    let test = "nccl_standin_missing_rank_times_out";
    let Some(dir) = standin_dir(test) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let exe = build_check(&dir, tmp.path());
    let start = Instant::now();
    let (ok, stdout, stderr) = run(&exe, Some("2"), &["timeout"], Duration::from_secs(60));
    assert!(ok, "{stdout}\n{stderr}");
    for c in [
        "init_with_a_missing_rank_times_out",
        "collective_with_a_missing_rank_times_out",
    ] {
        assert!(
            stdout.lines().any(|l| l == format!("ok {c}")),
            "{c}:\n{stdout}"
        );
    }
    let lines = stderr
        .lines()
        .filter(|l| l.contains("TUNE_NCCL_STANDIN_TIMEOUT_S"))
        .count();
    assert_eq!(lines, 2, "{stderr}");
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "{:?}",
        start.elapsed()
    );
}

/// Set in the re-executed child of [`cudarc_nccl_runs_on_the_standin`].
const INNER: &str = "TUNE_NCCL_STANDIN_INNER";

/// cudarc's own NCCL calls (the ones tune's DDP makes) against the stand-in: cudarc 0.19
/// loads NCCL only as `libnccl.so`, so this test re-runs itself with tune's private link
/// folder on `LD_LIBRARY_PATH` (the loader reads it only at process start) and 2 devices.
#[test]
fn cudarc_nccl_runs_on_the_standin() {
    let test = "cudarc_nccl_runs_on_the_standin";
    if std::env::var_os(INNER).is_some() {
        cudarc_nccl_inner();
        return;
    }
    let Some(dir) = standin_dir(test) else {
        return;
    };
    let link = {
        let _one = LINK.lock().unwrap_or_else(|p| p.into_inner());
        tune::engine::cuda::versions::nccl_link_dir(&dir.join("libnccl.so.2")).unwrap()
    };
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(INNER, "1")
        .env("TUNE_CUDA_STANDIN_DEVICES", "2")
        .env("TUNE_NCCL_STANDIN_TIMEOUT_S", "30")
        .env(
            "LD_LIBRARY_PATH",
            format!("{}:{}", link.display(), dir.display()),
        );
    let o = cmd.output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    eprintln!("{test}: {}child:\n{stdout}{stderr}", standin::label());
    assert!(o.status.success(), "{stdout}\n{stderr}");
    assert!(stderr.contains("cudarc NCCL: all checks ran"), "{stderr}");
}

fn cudarc_nccl_inner() {
    use cudarc::driver::CudaContext;
    use cudarc::nccl::safe::{group_end, group_start, Comm, Id, ReduceOp};
    let n = CudaContext::device_count().unwrap() as usize;
    assert_eq!(n, 2);
    let v = cudarc::nccl::result::get_nccl_version().unwrap();
    assert_eq!(v, 22700);

    // One thread per device, each with its own communicator (Comm::from_rank).
    let id = Id::new().unwrap();
    let outs: Vec<(Vec<f32>, Vec<half::bf16>, Vec<f32>)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..n)
            .map(|r| {
                s.spawn(move || {
                    let ctx = CudaContext::new(r).unwrap();
                    let stream = ctx.new_stream().unwrap();
                    let comm = Comm::from_rank(stream.clone(), r, n, id).unwrap();
                    let x: Vec<f32> = (0..64).map(|i| (i * (r + 1)) as f32 * 0.1).collect();
                    let dx = stream.clone_htod(&x).unwrap();
                    let mut dy = stream.alloc_zeros::<f32>(64).unwrap();
                    comm.all_reduce(&dx, &mut dy, &ReduceOp::Sum).unwrap();
                    let h: Vec<half::bf16> = (0..16)
                        .map(|i| half::bf16::from_f32(1.0 + i as f32 / 7.0 + r as f32))
                        .collect();
                    let mut dh = stream.clone_htod(&h).unwrap();
                    comm.all_reduce_in_place(&mut dh, &ReduceOp::Avg).unwrap();
                    // Broadcast from rank 1: rank 0 passes no send buffer.
                    let mut db = stream.alloc_zeros::<f32>(64).unwrap();
                    let send = (r == 1).then_some(&dx);
                    comm.broadcast(send, &mut db, 1).unwrap();
                    let out = (
                        stream.clone_dtoh(&dy).unwrap(),
                        stream.clone_dtoh(&dh).unwrap(),
                        stream.clone_dtoh(&db).unwrap(),
                    );
                    stream.synchronize().unwrap();
                    drop(comm); // ncclCommAbort, which cudarc expects to succeed
                    out
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (i, y) in outs[0].0.iter().enumerate() {
        assert_eq!(
            *y,
            (i as f32 * 0.1) + (i * 2) as f32 * 0.1,
            "all_reduce [{i}]"
        );
    }
    for (i, b) in outs[1].2.iter().enumerate() {
        assert_eq!(*b, (i * 2) as f32 * 0.1, "broadcast [{i}]");
    }
    for r in 1..n {
        assert_eq!(outs[r].0, outs[0].0, "rank {r} all_reduce differs");
        assert_eq!(outs[r].1, outs[0].1, "rank {r} bf16 avg differs");
        assert_eq!(outs[r].2, outs[0].2, "rank {r} broadcast differs");
    }
    for (i, b) in outs[0].1.iter().enumerate() {
        let a0 = half::bf16::from_f32(1.0 + i as f32 / 7.0).to_f32();
        let a1 = half::bf16::from_f32(2.0 + i as f32 / 7.0).to_f32();
        let want = half::bf16::from_f32(a0 * 0.5 + a1 * 0.5);
        assert_eq!(*b, want, "bf16 avg [{i}]");
    }

    // One thread driving both devices: ncclCommInitAll, collectives inside a group.
    let streams: Vec<_> = (0..n)
        .map(|r| CudaContext::new(r).unwrap().new_stream().unwrap())
        .collect();
    let comms = Comm::from_devices(streams.clone()).unwrap();
    let xs: Vec<_> = (0..n)
        .map(|r| streams[r].clone_htod(&[r as f32 + 1.0; 8]).unwrap())
        .collect();
    let mut ys: Vec<_> = (0..n)
        .map(|r| streams[r].alloc_zeros::<f32>(8 * n).unwrap())
        .collect();
    group_start().unwrap();
    for (r, y) in ys.iter_mut().enumerate() {
        comms[r].all_gather(&xs[r], y).unwrap();
    }
    group_end().unwrap();
    for (r, y) in ys.iter().enumerate() {
        let got = streams[r].clone_dtoh(y).unwrap();
        let want: Vec<f32> = (0..n).flat_map(|q| [q as f32 + 1.0; 8]).collect();
        assert_eq!(got, want, "all_gather on rank {r}");
    }
    for s in &streams {
        s.synchronize().unwrap();
    }
    drop(comms);
    eprintln!("cudarc NCCL: all checks ran");
}
