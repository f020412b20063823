//! The batch script and `sbatch` command line of one run: the same `tune trial` command
//! line and environment as a local trial (`trial::engine_args`), run on the allocated node
//! under the spec's per-trial limit, with the node's fingerprint printed first
//! (`child::NODE_ENV`). Multi-device and multi-node trials start one task per device
//! through `srun`, with the torchrun-style rendezvous (MASTER_ADDR, MASTER_PORT) next to
//! the Slurm variables each task gets (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID).

use std::path::{Path, PathBuf};

use crate::executor::child::{MEM_CAP_ENV, NODE_ENV, RANKS_ENV};
use crate::executor::trial::engine_args;
use crate::knobs::{Knobs, Parallel};
use crate::runner::live::LIVE_ENV;
use crate::runner::Run;
use crate::spec::{EngineWorkload, SlurmSpec};

/// The `error` kind the script prints when the per-trial limit (`search.timeout_s`)
/// ended the trial before Slurm's own time limit did.
pub const TIMEOUT_KIND: &str = "timeout";

/// Files of one run in the shared folder.
pub struct RunFiles {
    /// The file name stem, also the job's name.
    pub name: String,
    pub script: PathBuf,
    pub stdout: PathBuf,
    pub stderr: PathBuf,
    /// Rank 0's stdout when the run is launched through `srun`.
    pub rank0: PathBuf,
}

impl RunFiles {
    pub fn new(dir: &Path, sweep: &str, run: &Run) -> RunFiles {
        let clean = |s: &str| -> String {
            s.chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                        c
                    } else {
                        '_'
                    }
                })
                .collect()
        };
        // The id ends in the configuration's hash, which keeps names distinct when the
        // readable part is cut.
        let id = clean(&run.id);
        let id = if id.len() > 80 {
            id[id.len() - 80..].to_string()
        } else {
            id
        };
        let name = format!("tune-{}-{id}-r{}-{}", clean(sweep), run.round, run.repeat);
        RunFiles {
            script: dir.join(format!("{name}.sh")),
            stdout: dir.join(format!("{name}.out")),
            stderr: dir.join(format!("{name}.err")),
            rank0: dir.join(format!("{name}.rank0.out")),
            name,
        }
    }
}

/// Single quotes for sh: everything literal, `'` written as `'\''`.
pub fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Tasks per node: a DDP trial is one process per device, as torchrun would start it
/// (each task joins the rendezvous as one rank); single and DP trials are one process.
pub fn tasks_per_node(knobs: &Knobs) -> usize {
    if knobs.parallel == Parallel::Ddp {
        knobs.devices.max(1)
    } else {
        1
    }
}

/// Whether the run is started through `srun` (one task per rank on each node).
pub fn uses_srun(knobs: &Knobs, slurm: &SlurmSpec) -> bool {
    tasks_per_node(knobs) > 1 || slurm.nodes > 1
}

/// The batch script for `run`.
pub fn batch_script(
    exe: &Path,
    w: &EngineWorkload,
    run: &Run,
    slurm: &SlurmSpec,
    timeout_s: u64,
    mem_cap_bytes: Option<u64>,
    files: &RunFiles,
) -> String {
    let args: Vec<String> = engine_args(w, &run.knobs, run.steps)
        .iter()
        .map(|a| sh_quote(a))
        .collect();
    let trial = format!(
        "{} {}",
        sh_quote(&exe.display().to_string()),
        args.join(" ")
    );
    let mut s = String::from(
        "#!/bin/sh\n# Written by `tune sweep` (executor = \"slurm\"): one run of one trial.\n",
    );
    s.push_str(&format!("export {NODE_ENV}=1\n"));
    // The dashboard's live file is the submitting machine's; a node must not write it.
    s.push_str(&format!("unset {LIVE_ENV}\n"));
    if let Some(cap) = mem_cap_bytes {
        s.push_str(&format!("export {MEM_CAP_ENV}={cap}\n"));
    }
    // The per-trial limit in seconds, as a local trial has it; Slurm's own limit is whole
    // minutes and ends the job as TIMEOUT if this one does not come first.
    let limited = format!("timeout -k 5 {timeout_s} {trial}");
    if uses_srun(&run.knobs, slurm) {
        s.push_str(concat!(
            "MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)\n",
            "MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))\n",
            "export MASTER_ADDR MASTER_PORT\n",
        ));
        s.push_str(&format!("export {RANKS_ENV}=1\n"));
        // Each task's own stdout; rank 0's holds the result line.
        let per_task = files
            .stdout
            .with_file_name(format!("{}.rank%t.out", files.name));
        s.push_str(&format!(
            "srun --kill-on-bad-exit=1 --output={} {limited}\n",
            sh_quote(&per_task.display().to_string())
        ));
    } else {
        s.push_str(&format!("{limited}\n"));
    }
    s.push_str(&format!(
        concat!(
            "rc=$?\n",
            "if [ \"$rc\" = 124 ]; then\n",
            "  echo '{{\"error\":{{\"kind\":\"{kind}\",\"message\":\"killed after the per-trial limit of {t} s (search.timeout_s)\"}}}}'\n",
            "fi\n",
            "exit \"$rc\"\n"
        ),
        kind = TIMEOUT_KIND,
        t = timeout_s
    ));
    s
}

/// `sbatch`'s arguments for `run` (the script path last).
pub fn sbatch_args(knobs: &Knobs, slurm: &SlurmSpec, files: &RunFiles) -> Vec<String> {
    let mut a = vec![
        "--parsable".to_string(),
        format!("--job-name={}", files.name),
        format!("--output={}", files.stdout.display()),
        format!("--error={}", files.stderr.display()),
        format!("--time={}", slurm.time_limit_min),
        format!("--nodes={}", slurm.nodes),
    ];
    if uses_srun(knobs, slurm) {
        a.push(format!("--ntasks-per-node={}", tasks_per_node(knobs)));
    }
    let opt = |a: &mut Vec<String>, flag: &str, v: &Option<String>| {
        if let Some(v) = v {
            a.push(format!("--{flag}={v}"));
        }
    };
    opt(&mut a, "partition", &slurm.partition);
    opt(&mut a, "account", &slurm.account);
    opt(&mut a, "gres", &slurm.gres);
    if let Some(g) = slurm.gpus_per_trial {
        a.push(format!("--gpus-per-node={g}"));
    }
    if let Some(c) = slurm.cpus_per_trial {
        a.push(format!("--cpus-per-task={c}"));
    }
    a.extend(slurm.extra_args.iter().cloned());
    a.push(files.script.display().to_string());
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workload(devices: usize) -> EngineWorkload {
        EngineWorkload {
            model: "mlp".into(),
            dataset: "synthetic".into(),
            batch_size: 16,
            steps: 10,
            warmup: 2,
            device: "cpu".into(),
            devices,
            threads: Some(1),
            lr: None,
        }
    }

    fn run() -> Run {
        Run {
            id: "num_workers=2#abcd'1234".into(),
            label: "num_workers=2".into(),
            round: 0,
            repeat: 1,
            knobs: Knobs::default(),
            steps: 10,
            attach: None,
        }
    }

    #[test]
    fn the_script_runs_the_local_trial_command_line_under_the_limit() {
        let slurm = SlurmSpec::with_timeout(90);
        let files = RunFiles::new(Path::new("/shared"), "my sweep", &run());
        assert_eq!(files.name, "tune-my_sweep-num_workers_2_abcd_1234-r0-1");
        let s = batch_script(
            Path::new("/bin/tune"),
            &workload(1),
            &run(),
            &slurm,
            90,
            Some(64),
            &files,
        );
        assert!(
            s.contains("timeout -k 5 90 '/bin/tune' 'trial' '--json'"),
            "{s}"
        );
        assert!(s.contains("export TUNE_TRIAL_MEM_CAP_BYTES=64"), "{s}");
        assert!(!s.contains("srun"), "{s}");
        let a = sbatch_args(&run().knobs, &slurm, &files).join(" ");
        assert!(a.contains("--time=2 --nodes=1"), "{a}");
        assert!(
            a.ends_with("/shared/tune-my_sweep-num_workers_2_abcd_1234-r0-1.sh"),
            "{a}"
        );
    }

    #[test]
    fn ddp_ranks_go_through_srun_with_a_rendezvous_and_dp_stays_one_process() {
        let slurm = SlurmSpec::with_timeout(60);
        let mut r = run();
        r.knobs.parallel = Parallel::Ddp;
        r.knobs.devices = 2;
        let files = RunFiles::new(Path::new("/shared"), "s", &r);
        let s = batch_script(
            Path::new("/bin/tune"),
            &workload(2),
            &r,
            &slurm,
            60,
            None,
            &files,
        );
        assert!(s.contains("export MASTER_ADDR MASTER_PORT"), "{s}");
        assert!(s.contains("srun --kill-on-bad-exit=1"), "{s}");
        let a = sbatch_args(&r.knobs, &slurm, &files).join(" ");
        assert!(a.contains("--ntasks-per-node=2"), "{a}");
        // DataParallel is one process driving its devices.
        r.knobs.parallel = Parallel::Dp;
        let s = batch_script(
            Path::new("/bin/tune"),
            &workload(2),
            &r,
            &slurm,
            60,
            None,
            &files,
        );
        assert!(!s.contains("srun"), "{s}");
        assert!(!sbatch_args(&r.knobs, &slurm, &files)
            .join(" ")
            .contains("ntasks"));
    }

    #[test]
    fn quoting_keeps_single_quotes_literal() {
        assert_eq!(sh_quote("a'b"), r"'a'\''b'");
    }
}
