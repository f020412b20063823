//! `tune train`: one run with a live progress line, or one JSON summary with `--json`.
//! `--sample-interval MS` puts the run's devices, this process and any GPUs on one
//! sampled timeline and adds per-device summaries and findings to the output. It is off
//! by default because `tune train` is also the benchmark harness: its figures stay
//! comparable with those taken without a sampling thread (the measured cost at 10 Hz
//! is in docs/performance.md).

use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

use crate::commands::cli::TrainCmdArgs;
use crate::engine::parallel::launch::{self, Launch};
use crate::engine::probe::RunProbes;
use crate::engine::train::DeviceChoice;
use crate::engine::train::{run, Observer, RunSummary, StepEvent, Workload};
use crate::error::{Error, Result};
use crate::knobs::{Knobs, Parallel};
use crate::watch::report::RunSampled;

/// Draws the progress line: step, loss, samples/s over the last steps.
struct Progress {
    bar: ProgressBar,
    last: Instant,
    window: (usize, f64),
}

impl Observer for Progress {
    fn on_note(&mut self, note: &str) {
        self.bar.suspend(|| eprintln!("note: {note}"));
    }

    fn on_step(&mut self, ev: &StepEvent) {
        self.window.0 += ev.samples;
        self.window.1 += ev.step_s;
        if self.bar.length() != Some(ev.steps as u64) {
            self.bar.set_length(ev.steps as u64);
        }
        self.bar.set_position(ev.step as u64 + 1);
        if self.last.elapsed() > Duration::from_millis(200) || ev.step + 1 == ev.steps {
            let sps = self.window.0 as f64 / self.window.1.max(1e-9);
            self.bar
                .set_message(format!("loss {:.4}  {:.0} samples/s", ev.loss, sps));
            self.window = (0, 0.0);
            self.last = Instant::now();
        }
    }
}

/// `--json` output: the run summary, plus what sampling found when it was on.
#[derive(Serialize)]
struct JsonOut<'a> {
    #[serde(flatten)]
    summary: &'a RunSummary,
    #[serde(skip_serializing_if = "Option::is_none")]
    probes: Option<RunSampled>,
}

/// Runs with sampling every `interval` when given; returns what sampling found.
pub fn run_sampled(
    w: &Workload,
    k: &Knobs,
    obs: &mut dyn Observer,
    interval: Option<Duration>,
) -> Result<(RunSummary, Option<RunSampled>)> {
    let Some(interval) = interval else {
        return Ok((run(w, k, obs)?, None));
    };
    let probes = RunProbes::start(interval, k.devices)?;
    let tree = probes.tree_members();
    let s = run(w, k, &mut probes.observer(obs))?;
    let snap = probes.finish()?;
    Ok((s, Some(RunSampled::of(&snap, tree.pids()))))
}

/// Under torchrun or srun with more than one process: this process is one DDP rank.
/// `devices` defaults to the world size; anything else that contradicts the launch is
/// refused here, before any rank waits for the others.
fn join_launch(cmd: &TrainCmdArgs, w: &mut Workload, k: &mut Knobs) -> Result<Option<Launch>> {
    let Some(l) = launch::from_env()?.filter(|l| l.world > 1) else {
        return Ok(None);
    };
    let given = cmd.run.knobs.given();
    if !given.contains(&"devices") {
        k.devices = l.world;
        k.validate()?;
    }
    if k.parallel != Parallel::Ddp || k.devices != l.world {
        return Err(Error::Invalid(format!(
            "{} started {} processes (WORLD_SIZE {}): each is one DDP rank, so run \
             `tune train --parallel ddp` (devices = {}, or leave --devices out); got \
             --parallel {} --devices {}",
            l.launcher, l.world, l.world, l.world, k.parallel, k.devices
        )));
    }
    // Every process decides alone, so `auto` takes the GPU only when this process has its
    // own (LOCAL_RANK below the GPU count); the rendezvous then refuses a job whose
    // processes decided differently, naming the setting.
    if w.device == DeviceChoice::Auto {
        w.device = if crate::engine::cuda::usable().is_ok()
            && crate::engine::cuda::gpu_count() > l.local_rank
        {
            DeviceChoice::Cuda
        } else {
            DeviceChoice::Cpu
        };
    }
    if cmd.sample_interval.is_some() {
        return Err(Error::Invalid(format!(
            "--sample-interval under {} with {} processes: sampling a multi-process run \
             is not supported; sample one process with `tune watch --pid`",
            l.launcher, l.world
        )));
    }
    w.launch = Some(l.clone());
    Ok(Some(l))
}

pub fn main(cmd: &TrainCmdArgs) -> Result<i32> {
    let args = &cmd.run;
    cmd.check()?;
    crate::process::alloc::mark_training();
    let mut knobs = args.knobs.knobs()?;
    let mut w = args.workload();
    let launch = join_launch(cmd, &mut w, &mut knobs)?;
    let w = w;
    let knobs = knobs;
    crate::engine::cuda::libs::reexec_for_nccl(w.device, &knobs)?;
    if launch.as_ref().is_some_and(|l| l.rank > 0) {
        // Rank 0 prints the job's summary (every rank's steps); the others stay quiet,
        // as torchrun's workers usually are, and speak only through errors.
        run(&w, &knobs, &mut crate::engine::NoObserver)?;
        return Ok(0);
    }
    let interval = cmd.sample_interval.map(Duration::from_millis);
    if args.json {
        let (s, probes) = run_sampled(&w, &knobs, &mut crate::engine::NoObserver, interval)?;
        let out = JsonOut {
            summary: &s,
            probes,
        };
        println!(
            "{}",
            serde_json::to_string(&out).map_err(|e| crate::Error::Runtime(e.to_string()))?
        );
        return Ok(0);
    }
    let bar = ProgressBar::new(w.steps as u64);
    bar.set_style(
        ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    bar.set_prefix(format!("{} on {}", w.model, w.dataset));
    let mut p = Progress {
        bar,
        last: Instant::now(),
        window: (0, 0.0),
    };
    let (s, sampled) = run_sampled(&w, &knobs, &mut p, interval)?;
    p.bar.finish();
    print_summary(&s);
    for line in sampled.iter().flat_map(RunSampled::lines) {
        println!("{line}");
    }
    Ok(0)
}

fn print_summary(s: &RunSummary) {
    println!(
        "{} on {}: {:.1} samples/s (median step {:.2} ms, {} threads), final loss {:.4}",
        s.model, s.dataset, s.samples_per_s, s.step_ms_median, s.threads, s.final_loss
    );
    if let Some(a) = s.accuracy {
        println!("held-out accuracy: {:.2}%", a * 100.0);
    }
    let mb = |b: u64| b as f64 / (1 << 20) as f64;
    let peaks: Vec<String> = s
        .peak_bytes
        .iter()
        .map(|(k, v)| format!("{k} {:.1}", mb(*v)))
        .collect();
    println!(
        "peak MiB: {} (total {:.1})",
        peaks.join(", "),
        mb(s.peak_total_bytes)
    );
    let step = s.step_ms_median / 1e3;
    let ph: Vec<String> = crate::engine::train::Phases::NAMES
        .iter()
        .map(|n| (n, s.phases_mean.get(n)))
        .filter(|(_, v)| *v > 0.0)
        .map(|(n, v)| format!("{n} {:.2} ms ({:.0}%)", v * 1e3, 100.0 * v / step))
        .collect();
    println!("phases per step: {}", ph.join(", "));
    for (k, why) in &s.not_applicable {
        println!("{k}: not applicable: {why}");
    }
    print_devices(s);
}

/// The per-device table of a multi-device run.
fn print_devices(s: &RunSummary) {
    if s.devices.len() < 2 {
        return;
    }
    println!("device  threads   busy   comm  overlap  peak MiB");
    for d in &s.devices {
        let overlap = d
            .comm_overlap
            .map_or("-".to_string(), |o| format!("{:.0}%", o * 100.0));
        println!(
            "{:>6}  {:>7}  {:>5.1}%  {:>4.1}%  {:>7}  {:>8.1}",
            d.index,
            d.threads,
            d.busy_fraction * 100.0,
            d.comm_fraction * 100.0,
            overlap,
            d.peak_bytes as f64 / (1 << 20) as f64
        );
    }
    if let Some(i) = s.imbalance {
        println!(
            "imbalance (max/mean): busy {:.3}, peak memory {:.3}",
            i.busy, i.memory
        );
    }
}
