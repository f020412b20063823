//! Multi-process DDP on the CPU backend, launched as torchrun and srun launch it: two
//! `tune train --parallel ddp` processes give bit for bit the losses of one process
//! with `--devices 2`; a killed rank ends the other with an error within the timeout;
//! mismatched settings, a missing rank and a contradictory launch are refused on every
//! rank; and, where PyTorch is installed, real torchrun launches it. The same on the CUDA
//! backend over NCCL (on the CPU stand-in in CI: two processes, one stand-in device each,
//! the NCCL stand-in's ranks joined across processes as real NCCL joins them).

// Only its torch finder is needed here.
#[allow(dead_code)]
#[path = "pytorch/support.rs"]
mod support;

#[path = "common/standin.rs"]
mod standin;

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Ranks run side by side on two cores: tests that start several must not overlap.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn tune() -> &'static str {
    env!("CARGO_BIN_EXE_tune")
}

fn cache() -> PathBuf {
    std::env::var_os("TUNE_CACHE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("tune-cache"))
}

/// A port nobody listens on right now, with the one above it free too (tune's rendezvous
/// takes `MASTER_PORT + 1` under torchrun, whose agent holds `MASTER_PORT`). Taken below
/// the kernel's ephemeral range: a port bound to 0 comes from that range, where the
/// agent's and workers' own outgoing connections draw theirs, and CI once saw
/// `MASTER_PORT + 1` taken that way ("Address already in use").
fn free_port() -> u16 {
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32768);
    let (first, last) = (low.saturating_sub(12_000).max(1025), low.saturating_sub(2));
    // Start somewhere different in each process, so two test binaries rarely probe the
    // same ports in the same order.
    let span = u32::from(last - first);
    let seed = std::process::id()
        ^ (std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos()));
    for i in 0..span {
        let p = first + ((seed.wrapping_add(i * 7)) % span) as u16;
        let free = |port: u16| TcpListener::bind(("127.0.0.1", port)).is_ok();
        if free(p) && free(p + 1) {
            return p;
        }
    }
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// `tune train` as rank `rank` of `world` (torchrun's variables), stdout and stderr
/// captured.
fn rank_cmd(rank: usize, world: usize, port: u16, args: &[&str]) -> Command {
    let mut c = Command::new(tune());
    c.arg("train")
        .args(args)
        .env("TUNE_CACHE_DIR", cache())
        .env("RANK", rank.to_string())
        .env("WORLD_SIZE", world.to_string())
        .env("LOCAL_RANK", rank.to_string())
        .env("MASTER_ADDR", "127.0.0.1")
        .env("MASTER_PORT", port.to_string())
        .env("TUNE_DIST_TIMEOUT", "20")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Kills a child that outlives its test.
struct Reaped(Option<Child>);

impl Reaped {
    fn wait_within(&mut self, limit: Duration) -> (Output, Duration) {
        let t = Instant::now();
        let mut child = self.0.take().unwrap();
        loop {
            if child.try_wait().unwrap().is_some() {
                return (child.wait_with_output().unwrap(), t.elapsed());
            }
            if t.elapsed() > limit {
                let _ = child.kill();
                let out = child.wait_with_output().unwrap();
                panic!(
                    "a rank did not exit within {limit:?}; stderr: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Some(c) = &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn spawn(mut c: Command) -> Reaped {
    Reaped(Some(c.spawn().unwrap()))
}

/// Runs every rank to the end (each within `limit`), rank 0 first in the result.
fn run_ranks(cmds: Vec<Command>, limit: Duration) -> Vec<Output> {
    let mut kids: Vec<Reaped> = cmds.into_iter().map(spawn).collect();
    kids.iter_mut().map(|k| k.wait_within(limit).0).collect()
}

fn json(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not one JSON value ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

fn losses(v: &serde_json::Value) -> Vec<u32> {
    v["losses"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (l.as_f64().unwrap() as f32).to_bits())
        .collect()
}

/// One process with `--devices 2` (one compute thread per virtual device).
fn in_process(args: &[&str]) -> serde_json::Value {
    let out = Command::new(tune())
        .arg("train")
        .args(args)
        .args(["--devices", "2", "--threads", "2", "--json"])
        .env("TUNE_CACHE_DIR", cache())
        .output()
        .unwrap();
    json(&out)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

const MLP: &[&str] = &[
    "--parallel",
    "ddp",
    "--model",
    "mlp",
    "--dataset",
    "synthetic",
    "--batch-size",
    "32",
    "--steps",
    "6",
    "--warmup",
    "1",
];

const CNN: &[&str] = &[
    "--parallel",
    "ddp",
    "--model",
    "cnn-small",
    "--dataset",
    "shapes:256",
    "--batch-size",
    "16",
    "--steps",
    "4",
    "--warmup",
    "1",
    "--sync-bn",
    "--bucket-mb",
    "1",
    "--no-eval",
];

fn two_ranks(args: &[&str]) -> Vec<Output> {
    let port = free_port();
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--threads", "1", "--json"]);
    run_ranks(
        (0..2).map(|r| rank_cmd(r, 2, port, &all)).collect(),
        Duration::from_secs(240),
    )
}

#[test]
fn two_processes_match_one_process_with_two_devices_bit_for_bit() {
    let _g = serial();
    for (what, args) in [("mlp synthetic", MLP), ("cnn-small shapes sync_bn", CNN)] {
        let base = in_process(args);
        let outs = two_ranks(args);
        let rank0 = json(&outs[0]);
        assert!(
            outs[1].status.success() && outs[1].stdout.is_empty(),
            "{what}: rank 1 must succeed and print nothing: {:?} {}",
            outs[1].status,
            stderr(&outs[1])
        );
        println!("{what}: losses {}", rank0["losses"]);
        assert_eq!(losses(&rank0), losses(&base), "{what}: losses differ");
        assert_eq!(rank0["knobs"]["devices"], 2, "{what}");
        let devs = rank0["devices"].as_array().unwrap();
        assert_eq!(
            devs.len(),
            2,
            "{what}: rank 0 summarises both ranks' devices"
        );
        assert!(
            devs.iter().all(|d| d["busy_s"].as_f64().unwrap() > 0.0),
            "{what}: every rank's work is in the summary: {devs:?}"
        );
    }
}

#[test]
fn srun_variables_launch_the_same_job() {
    let _g = serial();
    let port = free_port();
    let mut args: Vec<&str> = MLP.to_vec();
    args.extend(["--threads", "1", "--json"]);
    let cmds = (0..2)
        .map(|r| {
            let mut c = Command::new(tune());
            c.arg("train")
                .args(&args)
                .env("TUNE_CACHE_DIR", cache())
                .env_remove("WORLD_SIZE")
                .env_remove("RANK")
                .env_remove("MASTER_ADDR")
                .env("SLURM_PROCID", r.to_string())
                .env("SLURM_NTASKS", "2")
                .env("SLURM_LOCALID", r.to_string())
                .env("SLURM_NODELIST", "localhost")
                .env("MASTER_PORT", port.to_string())
                .env("TUNE_DIST_TIMEOUT", "20")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            c
        })
        .collect();
    let outs = run_ranks(cmds, Duration::from_secs(120));
    assert_eq!(losses(&json(&outs[0])), losses(&in_process(MLP)));
    assert!(outs[1].status.success(), "{}", stderr(&outs[1]));
}

/// CPU seconds (user and system, every thread) process `pid` has used so far.
fn cpu_s(pid: u32) -> Option<f64> {
    // SAFETY: sysconf reads a constant of the system and touches no memory of ours.
    let tck = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command's closing parenthesis start at field 3 (state); utime and
    // stime are fields 14 and 15.
    let f: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?;
    Some(ticks / tck.max(1) as f64)
}

/// Waits until every rank has used `cpu` seconds of CPU: training, not the rendezvous
/// (which polls every 10 ms and uses next to none) nor the start. A fixed sleep (3 s for
/// the CPU ranks, 8 s for the stand-in's) was the same guess at twice the time or more.
/// Panics with a rank's stderr if it ends first, or after `limit`.
fn until_training(kids: &mut [Reaped], cpu: f64, limit: Duration) {
    let t = Instant::now();
    loop {
        let mut all = true;
        for k in kids.iter_mut() {
            let c = k.0.as_mut().unwrap();
            if c.try_wait().unwrap().is_some() {
                let out = k.0.take().unwrap().wait_with_output().unwrap();
                panic!("a rank ended before the kill: {}", stderr(&out));
            }
            all &= cpu_s(c.id()).is_some_and(|s| s >= cpu);
        }
        if all {
            println!("every rank used {cpu} s of CPU after {:?}", t.elapsed());
            return;
        }
        assert!(
            t.elapsed() < limit,
            "the ranks did not train within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A long run whose rank `victim` is killed once training has started: the other rank
/// must exit with an error naming the dead rank, well within the timeout.
fn kill_one(victim: usize) {
    let port = free_port();
    let args = [
        "--parallel",
        "ddp",
        "--model",
        "mlp",
        "--dataset",
        "synthetic",
        "--batch-size",
        "32",
        "--steps",
        "100000",
        "--threads",
        "1",
    ];
    let mut kids: Vec<Reaped> = (0..2)
        .map(|r| {
            let mut c = rank_cmd(r, 2, port, &args);
            c.env("TUNE_DIST_TIMEOUT", "60");
            spawn(c)
        })
        .collect();
    until_training(&mut kids, 0.5, Duration::from_secs(30));
    let t = Instant::now();
    let mut dead = kids.remove(victim);
    dead.0.as_mut().unwrap().kill().unwrap();
    dead.wait_within(Duration::from_secs(10));
    let (out, _) = kids[0].wait_within(Duration::from_secs(30));
    let took = t.elapsed();
    let err = stderr(&out);
    println!("after killing rank {victim}, the other exited in {took:?}: {err}");
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("rank {victim}")) && err.contains("killed"),
        "the error names the dead rank: {err}"
    );
    assert!(took < Duration::from_secs(15), "took {took:?}");
}

#[test]
fn a_killed_rank_ends_the_other_with_an_error() {
    let _g = serial();
    kill_one(1);
    kill_one(0);
}

#[test]
fn mismatched_settings_are_refused_on_every_rank() {
    let _g = serial();
    let port = free_port();
    let base: Vec<&str> = MLP.iter().copied().chain(["--threads", "1"]).collect();
    let mut other = base.clone();
    other.extend(["--lr", "0.02"]);
    let outs = run_ranks(
        vec![rank_cmd(0, 2, port, &base), rank_cmd(1, 2, port, &other)],
        Duration::from_secs(60),
    );
    for (r, o) in outs.iter().enumerate() {
        let e = stderr(o);
        println!("rank {r}: {e}");
        assert_eq!(o.status.code(), Some(2), "rank {r}: {e}");
        assert!(
            e.contains("workload.lr") && e.contains("rank 1's settings differ"),
            "rank {r} names the knob: {e}"
        );
        assert!(o.stdout.is_empty(), "rank {r} wrote output");
    }
    // The world size too.
    let port = free_port();
    let outs = run_ranks(
        vec![rank_cmd(0, 2, port, &base), {
            let mut c = rank_cmd(1, 3, port, &["--parallel", "ddp", "--model", "mlp"]);
            c.args([
                "--dataset",
                "synthetic",
                "--batch-size",
                "33",
                "--steps",
                "6",
            ]);
            c
        }],
        Duration::from_secs(60),
    );
    for o in &outs {
        assert_eq!(o.status.code(), Some(2), "{}", stderr(o));
    }
    assert!(
        stderr(&outs[0]).contains("world size is 3"),
        "{}",
        stderr(&outs[0])
    );
}

#[test]
fn a_rank_that_never_comes_times_out_the_rendezvous() {
    let _g = serial();
    let port = free_port();
    let args: Vec<&str> = MLP.iter().copied().chain(["--threads", "1"]).collect();
    let mut c = rank_cmd(0, 2, port, &args);
    c.env("TUNE_DIST_TIMEOUT", "2");
    let (out, took) = spawn(c).wait_within(Duration::from_secs(20));
    let e = stderr(&out);
    println!("{took:?}: {e}");
    assert_eq!(out.status.code(), Some(1), "{e}");
    assert!(e.contains("rank(s) 1 never joined"), "{e}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    // And a rank whose master never comes.
    let mut c = rank_cmd(1, 2, free_port(), &args);
    c.env("TUNE_DIST_TIMEOUT", "2");
    let (out, took) = spawn(c).wait_within(Duration::from_secs(20));
    let e = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{e}");
    assert!(e.contains("cannot reach rank 0"), "{e}");
    assert!(took < Duration::from_secs(10), "{took:?}");
}

#[test]
fn a_launch_that_contradicts_the_flags_exits_2_before_any_rendezvous() {
    for (extra, env, want) in [
        (
            &["--parallel", "dp", "--devices", "2"][..],
            vec![],
            &["--parallel ddp"][..],
        ),
        (
            &["--parallel", "ddp", "--devices", "4"][..],
            vec![],
            &["devices"][..],
        ),
        (
            &["--parallel", "ddp"][..],
            vec![("MASTER_ADDR", "")],
            &["MASTER_ADDR"][..],
        ),
        (
            &["--parallel", "ddp"][..],
            vec![("RANK", "x")],
            &["RANK"][..],
        ),
        // A GPU rank with no GPU of its own: no driver here, or (on the stand-in or a
        // GPU machine) fewer GPUs than LOCAL_RANK needs. A local rank is below the world
        // size, so the world is large enough to hold it.
        (
            &["--parallel", "ddp", "--device", "cuda"][..],
            vec![("LOCAL_RANK", "9"), ("WORLD_SIZE", "16")],
            &["libcuda.so.1", "LOCAL_RANK 9 but this node has"][..],
        ),
    ] {
        let mut c = rank_cmd(0, 2, free_port(), extra);
        c.args(["--model", "mlp", "--dataset", "synthetic", "--steps", "1"]);
        for (k, v) in env {
            c.env(k, v);
        }
        let (out, took) = spawn(c).wait_within(Duration::from_secs(20));
        let e = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {e}");
        assert!(want.iter().any(|w| e.contains(w)), "{extra:?}: {e}");
        assert!(took < Duration::from_secs(5), "{extra:?} waited: {took:?}");
    }
}

#[test]
fn real_torchrun_launches_tune_train() {
    let Some(py) = support::python("real_torchrun_launches_tune_train") else {
        return;
    };
    let _g = serial();
    let mut args: Vec<&str> = MLP.to_vec();
    args.extend(["--threads", "1", "--json"]);
    let port = free_port().to_string();
    let mut cmd = Command::new(py);
    cmd.args(["-m", "torch.distributed.run", "--nproc-per-node", "2"])
        .args(["--master-addr", "127.0.0.1", "--master-port", &port])
        .args(["--no-python", tune(), "train"])
        .args(&args)
        .env("TUNE_CACHE_DIR", cache())
        .env("TUNE_DIST_TIMEOUT", "60")
        .env_remove("WORLD_SIZE")
        .env_remove("RANK")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let (out, _) = spawn(cmd).wait_within(Duration::from_secs(180));
    let v = json(&out);
    assert_eq!(losses(&v), losses(&in_process(MLP)));
    assert_eq!(v["devices"].as_array().map(Vec::len), Some(2));
}

/// Two GPUs for two processes: the stand-in's, or a machine's (NCCL refuses two ranks of
/// one communicator on one GPU, so a one-GPU machine cannot run these).
fn two_gpus(test: &str) -> bool {
    if standin::gpu_or_skip(test).is_none() {
        return false;
    }
    let n = cudarc::driver::CudaContext::device_count().unwrap_or(0);
    if standin::requested() || n >= 2 {
        return true;
    }
    let why = format!("needs 2 GPUs for 2 processes; this machine has {n}");
    assert!(
        std::env::var("TUNE_REQUIRE_GPU").as_deref() != Ok("1"),
        "{test}: TUNE_REQUIRE_GPU=1 but {why}"
    );
    eprintln!("skipping {test}: {why}");
    false
}

const GPU_CNN: &[&str] = &[
    "--device",
    "cuda",
    "--parallel",
    "ddp",
    "--model",
    "cnn-small",
    "--dataset",
    "synthetic",
    "--batch-size",
    "8",
    "--steps",
    "3",
    "--warmup",
    "1",
    "--lr",
    "0.05",
    "--sync-bn",
    "--bucket-mb",
    "1",
];

/// `rank_cmd` for the CUDA backend: every process sees the stand-in's 2 devices and takes
/// the one `LOCAL_RANK` names.
fn gpu_rank_cmd(rank: usize, port: u16, args: &[&str]) -> Command {
    let mut c = rank_cmd(rank, 2, port, args);
    c.env("TUNE_CUDA_STANDIN_DEVICES", "2")
        .env("TUNE_NCCL_STANDIN_TIMEOUT_S", "30")
        .env_remove("TUNE_NCCL_REEXEC");
    c
}

/// Two processes of `tune train --device cuda --parallel ddp` (cnn-small with
/// SyncBatchNorm across the processes, small buckets) give bit for bit the losses of one
/// process with two GPUs (each collective reduces in rank order either way), and track
/// the CPU backend's two processes; rank 0 summarises both GPUs, rank 1 prints nothing.
#[test]
fn two_gpu_processes_match_one_process_with_two_gpus() {
    let test = "two_gpu_processes_match_one_process_with_two_gpus";
    if !two_gpus(test) {
        return;
    }
    let _g = serial();
    let mut args: Vec<&str> = GPU_CNN.to_vec();
    args.extend(["--devices", "2", "--json"]);
    let one = Command::new(tune())
        .arg("train")
        .args(&args)
        .env("TUNE_CACHE_DIR", cache())
        .env("TUNE_CUDA_STANDIN_DEVICES", "2")
        .env_remove("TUNE_NCCL_REEXEC")
        .output()
        .unwrap();
    let one = json(&one);
    let port = free_port();
    let outs = run_ranks(
        (0..2).map(|r| gpu_rank_cmd(r, port, &args)).collect(),
        Duration::from_secs(240),
    );
    let rank0 = json(&outs[0]);
    assert!(
        outs[1].status.success() && outs[1].stdout.is_empty(),
        "rank 1 must succeed and print nothing: {:?} {}",
        outs[1].status,
        stderr(&outs[1])
    );
    let cpu_args: Vec<&str> = args
        .iter()
        .map(|a| if *a == "cuda" { "cpu" } else { *a })
        .collect();
    let cpu = json(
        &Command::new(tune())
            .arg("train")
            .args(&cpu_args)
            .args(["--threads", "2"])
            .env("TUNE_CACHE_DIR", cache())
            .output()
            .unwrap(),
    );
    println!(
        "{}cnn-small sync_bn, 2 processes: {}; one process, 2 GPUs: {}; CPU: {}",
        standin::label(),
        rank0["losses"],
        one["losses"],
        cpu["losses"]
    );
    assert_eq!(losses(&rank0), losses(&one), "two processes vs one");
    for (g, c) in rank0["losses"]
        .as_array()
        .unwrap()
        .iter()
        .zip(cpu["losses"].as_array().unwrap())
    {
        let (g, c) = (g.as_f64().unwrap(), c.as_f64().unwrap());
        assert!((g - c).abs() <= 1e-3 + 1e-2 * c.abs(), "gpu {g} vs cpu {c}");
    }
    let devs = rank0["devices"].as_array().unwrap();
    assert_eq!(devs.len(), 2, "rank 0 summarises both GPUs: {devs:?}");
    assert!(
        devs.iter().all(|d| d["busy_s"].as_f64().unwrap() > 0.0),
        "{devs:?}"
    );
}

/// A GPU rank killed mid-training ends the other process with an error naming it, well
/// within the timeouts, whichever rank dies.
#[test]
fn a_killed_gpu_rank_ends_the_other_with_an_error() {
    let test = "a_killed_gpu_rank_ends_the_other_with_an_error";
    if !two_gpus(test) {
        return;
    }
    let _g = serial();
    for victim in [1, 0] {
        let port = free_port();
        let mut args: Vec<&str> = GPU_CNN
            .iter()
            .map(|a| if *a == "3" { "100000" } else { *a })
            .collect();
        args.extend(["--devices", "2", "--no-eval"]);
        let mut kids: Vec<Reaped> = (0..2)
            .map(|r| spawn(gpu_rank_cmd(r, port, &args)))
            .collect();
        until_training(&mut kids, 1.0, Duration::from_secs(60));
        let t = Instant::now();
        let mut dead = kids.remove(victim);
        dead.0.as_mut().unwrap().kill().unwrap();
        dead.wait_within(Duration::from_secs(10));
        let (out, _) = kids[0].wait_within(Duration::from_secs(60));
        let took = t.elapsed();
        let err = stderr(&out);
        println!("after killing GPU rank {victim}, the other exited in {took:?}: {err}");
        assert_eq!(out.status.code(), Some(1), "{err}");
        assert!(
            err.contains(&format!("rank {victim}")),
            "names the dead rank: {err}"
        );
        assert!(took < Duration::from_secs(20), "took {took:?}");
    }
}

/// Real torchrun starts the two GPU processes (`--no-python`), as a PyTorch user would.
#[test]
fn real_torchrun_launches_tune_train_on_gpus() {
    let test = "real_torchrun_launches_tune_train_on_gpus";
    let Some(py) = support::python(test) else {
        return;
    };
    if !two_gpus(test) {
        return;
    }
    let _g = serial();
    let mut args: Vec<&str> = GPU_CNN.to_vec();
    args.extend(["--devices", "2", "--json"]);
    let port = free_port().to_string();
    let mut cmd = Command::new(py);
    cmd.args(["-m", "torch.distributed.run", "--nproc-per-node", "2"])
        .args(["--master-addr", "127.0.0.1", "--master-port", &port])
        .args(["--no-python", tune(), "train"])
        .args(&args)
        .env("TUNE_CACHE_DIR", cache())
        .env("TUNE_DIST_TIMEOUT", "60")
        .env("TUNE_CUDA_STANDIN_DEVICES", "2")
        .env_remove("TUNE_NCCL_REEXEC")
        .env_remove("WORLD_SIZE")
        .env_remove("RANK")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let (out, _) = spawn(cmd).wait_within(Duration::from_secs(240));
    let v = json(&out);
    assert_eq!(v["devices"].as_array().map(Vec::len), Some(2), "{v}");
    assert_eq!(v["losses"].as_array().map(Vec::len), Some(3), "{v}");
}
