//! `tune watch --pid`: no hooks in a process tune did not start, so it samples the
//! Python stacks instead (py-spy's reader: the interpreter's frames through
//! `process_vm_readv`, without pausing the process) and attributes each sample of the
//! main thread to a phase by the functions on its stack.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// What the stack samples showed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StackSummary {
    /// Samples of the main thread that were read.
    pub samples: usize,
    /// Share of samples per phase (`data_wait`, `forward`, `backward`, `optimizer`,
    /// `zero_grad`, `other`).
    pub phase_share: BTreeMap<String, f64>,
    /// Why sampling failed or stopped, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The phase of one stack, innermost frame first: the first frame that names one wins.
pub fn classify<'a>(frames: impl IntoIterator<Item = (&'a str, &'a str)>) -> &'static str {
    for (name, file) in frames {
        // Python 3.11+ frames carry qualified names (`_BaseDataLoaderIter.__next__`).
        let name = name.rsplit('.').next().unwrap_or(name);
        let file = file.replace('\\', "/");
        if file.contains("torch/utils/data/") && name == "__next__" {
            return "data_wait";
        }
        if file.contains("torch/optim/") {
            return if name == "zero_grad" {
                "zero_grad"
            } else {
                "optimizer"
            };
        }
        if name == "backward"
            && (file.contains("torch/_tensor.py") || file.contains("torch/autograd/"))
        {
            return "backward";
        }
        if file.contains("torch/nn/modules/") {
            return "forward";
        }
    }
    "other"
}

/// A running sampler; `stop` ends it and gives the summary.
pub struct StackSampler {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<StackSummary>,
}

impl StackSampler {
    pub fn start(pid: u32, interval: Duration) -> StackSampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let handle = std::thread::spawn(move || sample(pid, interval, &flag));
        StackSampler { stop, handle }
    }

    pub fn stop(self) -> StackSummary {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap_or_else(|_| StackSummary {
            error: Some("the stack sampler panicked".into()),
            ..StackSummary::default()
        })
    }
}

fn sample(pid: u32, interval: Duration, stop: &AtomicBool) -> StackSummary {
    let config = py_spy::Config {
        blocking: py_spy::config::LockingStrategy::NonBlocking,
        include_idle: true,
        ..py_spy::Config::default()
    };
    let mut out = StackSummary::default();
    let Ok(p) = i32::try_from(pid) else {
        out.error = Some(format!("pid {pid} is out of range"));
        return out;
    };
    let mut spy = match py_spy::PythonSpy::new(p as py_spy::Pid, &config) {
        Ok(s) => s,
        Err(e) => {
            out.error = Some(format!(
                "cannot read Python stacks of pid {pid}: {e} (not a Python process, or no \
                 permission to read its memory: run as the same user, and check \
                 /proc/sys/kernel/yama/ptrace_scope)"
            ));
            return out;
        }
    };
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    let mut failures = 0;
    while !stop.load(Ordering::Relaxed) {
        match spy.get_stack_traces() {
            Ok(traces) => {
                // The main thread is the one whose outermost frame is the script's module.
                if let Some(t) = traces
                    .iter()
                    .find(|t| t.frames.last().is_some_and(|f| f.name == "<module>"))
                {
                    let phase = classify(
                        t.frames
                            .iter()
                            .map(|f| (f.name.as_str(), f.filename.as_str())),
                    );
                    *counts.entry(phase.to_string()).or_default() += 1;
                    out.samples += 1;
                }
            }
            Err(e) => {
                failures += 1;
                // The process exits, or stays unreadable: stop quietly after a few.
                if failures >= 5 {
                    out.error = Some(format!("stack sampling stopped: {e}"));
                    break;
                }
            }
        }
        std::thread::sleep(interval);
    }
    let n = out.samples.max(1) as f64;
    out.phase_share = counts.into_iter().map(|(k, c)| (k, c as f64 / n)).collect();
    out
}

#[cfg(test)]
mod tests {
    use super::classify;

    #[test]
    fn stacks_are_attributed_by_their_innermost_torch_frame() {
        let dl = "/v/site-packages/torch/utils/data/dataloader.py";
        assert_eq!(
            classify([
                ("__getitem__", "train.py"),
                ("fetch", "/v/torch/utils/data/_utils/fetch.py"),
                ("__next__", dl),
                ("main", "train.py")
            ]),
            "data_wait"
        );
        assert_eq!(
            classify([
                ("_engine_run_backward", "/v/torch/autograd/graph.py"),
                ("backward", "/v/torch/autograd/__init__.py"),
                ("backward", "/v/torch/_tensor.py")
            ]),
            "backward"
        );
        assert_eq!(
            classify([("_single_tensor_sgd", "/v/torch/optim/sgd.py")]),
            "optimizer"
        );
        assert_eq!(
            classify([("zero_grad", "/v/torch/optim/optimizer.py")]),
            "zero_grad"
        );
        assert_eq!(
            classify([("forward", "/v/torch/nn/modules/conv.py")]),
            "forward"
        );
        assert_eq!(
            classify([("main", "train.py"), ("<module>", "train.py")]),
            "other"
        );
    }
}
