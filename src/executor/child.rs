//! The child side of a trial (`tune trial`): run the engine once and print exactly one
//! JSON line on stdout, `{"ok": RunSummary}` or `{"error": {"kind", "message"}}`.
//!
//! Exit codes: 0 ok, 3 diverged, 2 invalid or unavailable, 1 runtime error,
//! 137 memory cap exceeded. The parent prefers the JSON line over the exit code; the
//! code matters when the line never came (a crash).
//!
//! Memory cap: `TUNE_TRIAL_MEM_CAP_BYTES` (set by the parent from the spec's
//! `mem_cap_mib`, or inherited from the user's environment). The engine is not ours to
//! instrument, and `setrlimit` would need libc and turns overruns into allocation
//! aborts that look like crashes. So a watchdog thread polls this process's resident
//! set (`VmRSS` in /proc/self/status) every 20 ms and, above the cap, prints the `oom`
//! error line and exits with 137. A spike shorter than the poll interval can slip by;
//! the cap is a guard against runaway trials, not an accounting tool.
//!
//! Test hook: `TUNE_TRIAL_FAULT` makes the child misbehave on purpose so the tests can
//! prove that each failure mode gets its status. Format: `;`-separated entries
//! `KIND[@name=value,name=value]`; an entry applies when every listed knob has that value
//! (no `@` = every trial). KIND is `panic`, `abort`, `hang` (sleep forever), `alloc`
//! (allocate and touch memory until the cap; refused without one) or `slow` (sleep one
//! second, then run normally). Only this module reads it.

use std::io::Write;
use std::time::Duration;

use serde::Serialize;

use crate::engine::train::{run, NoObserver, Observer, RunSummary, Workload};
use crate::error::Error;
use crate::knobs::Knobs;
use crate::results::record::NodeFingerprint;
use crate::runner::live::LiveWriter;

pub const MEM_CAP_ENV: &str = "TUNE_TRIAL_MEM_CAP_BYTES";
pub const FAULT_ENV: &str = "TUNE_TRIAL_FAULT";
/// Set (to anything) by a cluster's batch script: the child then prints a
/// `{"node": NodeFingerprint}` line before its result, so the record says what machine
/// measured it. A local trial runs on the sweep's own machine, which the report's
/// environment already describes.
pub const NODE_ENV: &str = "TUNE_TRIAL_NODE";
/// Set by a Slurm batch script that starts one `tune trial` per DDP rank through `srun`:
/// only then does a trial read the launch variables. A local sweep started inside an
/// allocation (`salloc -n 4`) inherits SLURM_NTASKS, and its trials must not take
/// themselves for ranks.
pub const RANKS_ENV: &str = "TUNE_TRIAL_RANKS";
pub use crate::process::alloc::EXIT_OOM;
pub const EXIT_DIVERGED: i32 = 3;

#[derive(Serialize)]
struct ErrorLine<'a> {
    kind: &'a str,
    message: String,
}

#[derive(Serialize)]
enum Line<'a> {
    #[serde(rename = "ok")]
    Ok(&'a RunSummary),
    #[serde(rename = "error")]
    Error(ErrorLine<'a>),
}

fn print_line(line: &Line<'_>) {
    let text = serde_json::to_string(line).unwrap_or_else(|e| {
        format!(r#"{{"error":{{"kind":"runtime","message":"cannot encode result: {e}"}}}}"#)
    });
    let mut out = std::io::stdout().lock();
    // Nothing useful can be done if the parent is gone.
    let _ = writeln!(out, "{text}");
    let _ = out.flush();
}

fn print_error(kind: &str, message: String) {
    print_line(&Line::Error(ErrorLine { kind, message }));
}

/// Child side of `tune trial`: runs the workload, prints one JSON line, returns the exit code.
pub fn child_main(knobs: crate::Result<Knobs>, workload: &Workload) -> i32 {
    crate::process::alloc::mark_trial_child();
    if std::env::var_os(NODE_ENV).is_some() {
        print_node();
    }
    // The sweep checked its own value; one set by hand on `tune trial` is checked alike.
    let cap = match crate::limits::env_u64(
        MEM_CAP_ENV,
        std::env::var_os(MEM_CAP_ENV).as_deref(),
        &crate::limits::MEM_CAP_BYTES,
    ) {
        Ok(cap) => cap,
        Err(e) => {
            print_error("invalid", e.to_string());
            return 2;
        }
    };
    if let Some(cap) = cap {
        start_watchdog(cap);
    }
    let knobs = match knobs {
        Ok(k) => k,
        Err(e) => {
            print_error("invalid", e.to_string());
            return 2;
        }
    };
    if let Err(e) = crate::engine::cuda::libs::reexec_for_nccl(workload.device, &knobs) {
        print_error("unavailable", e.to_string());
        return 2;
    }
    if let Some(code) = inject_fault(&knobs, cap) {
        return code;
    }
    // Under `srun` (a Slurm trial with devices > 1) each task is one DDP rank, as under
    // `tune train`; without this every task would train the whole job on its own.
    let joined;
    let launch = match std::env::var_os(RANKS_ENV) {
        Some(_) => crate::engine::parallel::launch::from_env(),
        None => Ok(None),
    };
    let workload = match launch {
        Ok(Some(l)) if l.world > 1 => {
            if knobs.parallel != crate::knobs::Parallel::Ddp || knobs.devices != l.world {
                print_error(
                    "invalid",
                    format!(
                        "{} started {} processes: each is one DDP rank, so the trial needs \
                         parallel = ddp and devices = {}; got parallel = {}, devices = {}",
                        l.launcher, l.world, l.world, knobs.parallel, knobs.devices
                    ),
                );
                return 2;
            }
            let mut w = workload.clone();
            w.launch = Some(l);
            joined = w;
            &joined
        }
        Ok(_) => workload,
        Err(e) => {
            print_error("invalid", e.to_string());
            return 2;
        }
    };
    // Progress for a dashboard, when the sweep asked for it (see `live`).
    let mut live = LiveWriter::from_env(workload.warmup);
    let mut quiet = NoObserver;
    let obs: &mut dyn Observer = match live.as_mut() {
        Some(w) => w,
        None => &mut quiet,
    };
    match run(workload, &knobs, obs) {
        Ok(s) => {
            print_line(&Line::Ok(&s));
            0
        }
        Err(e) => {
            let (kind, code) = match &e {
                Error::Diverged { .. } => ("diverged", EXIT_DIVERGED),
                Error::Unavailable(_) => ("unavailable", 2),
                e if e.is_bad_input() => ("invalid", 2),
                _ => ("runtime", 1),
            };
            print_error(kind, e.to_string());
            code
        }
    }
}

/// This node's fingerprint as one JSON line (see `NODE_ENV`).
fn print_node() {
    let cpu = tune_probes::cpu_info();
    let (gpus, notice) = match tune_probes::gpu_inventory() {
        Ok(g) => (g, None),
        Err(e) => (Vec::new(), Some(e.to_string())),
    };
    let fp = NodeFingerprint {
        hostname: std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "unknown".into()),
        cpu_model: tune_probes::cpu_model().unwrap_or_else(|| "unknown".into()),
        cores: cpu.logical_cores,
        driver: gpus.first().map(|g| g.driver_version.clone()),
        gpus: gpus.into_iter().map(|g| g.name).collect(),
        gpu_notice: notice,
    };
    let text = serde_json::json!({ "node": fp }).to_string();
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{text}");
    let _ = out.flush();
}

fn rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

fn start_watchdog(cap: u64) {
    if rss_bytes().is_none() {
        eprintln!("note: {MEM_CAP_ENV} is set but /proc/self/status is unreadable: no memory cap");
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("mem-watchdog".into())
        .spawn(move || loop {
            if let Some(rss) = rss_bytes() {
                if rss > cap {
                    print_error(
                        "oom",
                        format!(
                            "resident memory {:.1} MiB exceeded the trial cap of {:.1} MiB",
                            rss as f64 / 1048576.0,
                            cap as f64 / 1048576.0
                        ),
                    );
                    std::process::exit(EXIT_OOM);
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        });
    if let Err(e) = spawned {
        eprintln!("note: cannot start the memory watchdog ({e}): no memory cap");
    }
}

/// The fault that applies to this configuration, if any.
fn fault_for(spec: &str, knobs: &Knobs) -> Option<String> {
    spec.split(';').map(str::trim).find_map(|entry| {
        let (kind, cond) = entry.split_once('@').unwrap_or((entry, ""));
        let applies = cond.split(',').filter(|c| !c.trim().is_empty()).all(|c| {
            c.split_once('=')
                .is_some_and(|(n, v)| knobs.get(n.trim()).as_deref() == Some(v.trim()))
        });
        (applies && !kind.is_empty()).then(|| kind.trim().to_string())
    })
}

/// Test hook (see the module docs). Returns an exit code when the fault ends the trial.
fn inject_fault(knobs: &Knobs, cap: Option<u64>) -> Option<i32> {
    let spec = std::env::var(FAULT_ENV).ok()?;
    match fault_for(&spec, knobs)?.as_str() {
        "panic" => panic!("injected fault: panic ({FAULT_ENV})"),
        "abort" => {
            eprintln!("injected fault: abort ({FAULT_ENV})");
            std::process::abort()
        }
        "hang" => loop {
            std::thread::sleep(Duration::from_secs(3600));
        },
        "alloc" => {
            if cap.is_none() {
                print_error(
                    "invalid",
                    format!("{FAULT_ENV}=alloc needs {MEM_CAP_ENV}, or it would eat the machine"),
                );
                return Some(2);
            }
            let mut hoard: Vec<Vec<u8>> = Vec::new();
            loop {
                // Filled, not just reserved: untouched pages are not resident.
                hoard.push(vec![1u8; 16 << 20]);
                std::hint::black_box(&hoard);
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        "slow" => {
            std::thread::sleep(Duration::from_secs(1));
            None
        }
        other => {
            print_error("invalid", format!("unknown {FAULT_ENV} kind '{other}'"));
            Some(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_matching() {
        let k = Knobs {
            batch_size: 8,
            ..Knobs::default()
        };
        assert_eq!(fault_for("panic", &k).as_deref(), Some("panic"));
        assert_eq!(
            fault_for("panic@batch_size=8", &k).as_deref(),
            Some("panic")
        );
        assert_eq!(fault_for("panic@batch_size=80", &k), None);
        assert_eq!(
            fault_for("hang@batch_size=80;abort@batch_size=8,zero_grad=memset", &k).as_deref(),
            Some("abort")
        );
        assert_eq!(fault_for("abort@batch_size=8,zero_grad=none", &k), None);
    }

    #[test]
    fn rss_is_readable() {
        assert!(rss_bytes().is_some_and(|b| b > 0));
    }
}
