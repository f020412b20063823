//! Puts a training run's devices on the probes' timeline, next to the host and NVML
//! samplers: `tune train --sample-interval MS` and the sampling-overhead benchmark.
//!
//! The step loop is not touched. An observer wrapper hears the devices once
//! (`Observer::on_devices`) and each finished step; busy time goes into the probes'
//! `DeviceCounters` per step (step time minus data wait: the device computes for the
//! rest), and a sampler copies each device's tracked bytes into the counters at every
//! tick, so arena bytes are read live between steps rather than only at step ends.
//! With one device per run today, device 0 gets the step's busy time; multi-device runs
//! will report each device's own busy time.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tune_probes::{
    DeviceCounters, EngineSampler, HostSampler, NvmlSampler, Recorder, Sample, Sampler,
    SharedTimeline, Timeline, TimelineSnapshot, TreeMembers, DEFAULT_CAPACITY,
};

use crate::engine::device::{Device, MemTracker};
use crate::engine::vocab::{Observer, StepEvent};
use crate::error::{Error, Result};

/// The memory trackers of the run's devices, by device index; empty until the run
/// has created its devices.
type Trackers = Arc<Mutex<Vec<Arc<MemTracker>>>>;

fn lock(t: &Trackers) -> std::sync::MutexGuard<'_, Vec<Arc<MemTracker>>> {
    t.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Copies tracked bytes into the counters, then samples them as engine devices.
struct EngineDevices {
    trackers: Trackers,
    counters: Arc<DeviceCounters>,
    inner: EngineSampler,
}

impl Sampler for EngineDevices {
    fn name(&self) -> &str {
        "engine"
    }

    fn sample(&mut self, now_ms: f64, out: &mut Vec<Sample>) {
        let trackers = lock(&self.trackers);
        // Before the run has devices there is nothing to read: no samples, not zeros.
        if trackers.is_empty() {
            return;
        }
        let n = trackers.len().min(self.counters.len());
        for (i, t) in trackers.iter().take(n).enumerate() {
            self.counters.set_bytes(i, t.total_current());
            self.counters.raise_peak(i, t.total_peak());
        }
        drop(trackers);
        let first = out.len();
        self.inner.sample(now_ms, out);
        // Counters for devices the run did not create would read as idle and empty:
        // leave them out rather than report zeros.
        let mut i = first;
        while i < out.len() {
            if out[i].device.is_some_and(|d| d as usize >= n) {
                out.remove(i);
            } else {
                i += 1;
            }
        }
    }
}

/// Sampling of one training run: started before it, finished after it.
pub struct RunProbes {
    recorder: Recorder,
    timeline: SharedTimeline,
    counters: Arc<DeviceCounters>,
    trackers: Trackers,
    members: TreeMembers,
}

impl RunProbes {
    /// Starts sampling this process (host CPU, its process tree), the run's `devices`
    /// engine devices and any NVIDIA GPUs, every `interval`.
    pub fn start(interval: Duration, devices: usize) -> Result<RunProbes> {
        if interval.is_zero() {
            return Err(Error::Invalid(
                "sampling interval 0 ms: must be at least 1 ms".into(),
            ));
        }
        let counters = DeviceCounters::new_shared(devices.max(1));
        let trackers: Trackers = Arc::default();
        let host = HostSampler::new().watch(std::process::id());
        let members = host.tree_members();
        let samplers: Vec<Box<dyn Sampler>> = vec![
            Box::new(host),
            Box::new(EngineDevices {
                trackers: Arc::clone(&trackers),
                counters: Arc::clone(&counters),
                inner: EngineSampler::new(Arc::clone(&counters)),
            }),
            Box::new(NvmlSampler::new()),
        ];
        let timeline = Arc::new(Mutex::new(Timeline::new(interval, DEFAULT_CAPACITY)));
        let recorder = Recorder::start(samplers, Arc::clone(&timeline))?;
        Ok(RunProbes {
            recorder,
            timeline,
            counters,
            trackers,
            members,
        })
    }

    /// Wraps the run's observer so the devices and step busy times reach the samplers.
    pub fn observer<'a>(&self, inner: &'a mut dyn Observer) -> ProbedObserver<'a> {
        ProbedObserver {
            inner,
            counters: Arc::clone(&self.counters),
            trackers: Arc::clone(&self.trackers),
        }
    }

    pub fn timeline(&self) -> SharedTimeline {
        Arc::clone(&self.timeline)
    }

    /// Pids seen in this process's tree (this process and any children).
    pub fn tree_members(&self) -> TreeMembers {
        self.members.clone()
    }

    /// Stops sampling and returns everything recorded.
    pub fn finish(self) -> Result<TimelineSnapshot> {
        self.recorder.stop()?;
        let snap = tune_probes::recorder::lock(&self.timeline).snapshot();
        Ok(snap)
    }
}

/// Forwards every event to the wrapped observer after feeding the probes.
pub struct ProbedObserver<'a> {
    inner: &'a mut dyn Observer,
    counters: Arc<DeviceCounters>,
    trackers: Trackers,
}

impl Observer for ProbedObserver<'_> {
    fn on_note(&mut self, note: &str) {
        self.inner.on_note(note);
    }

    fn on_step(&mut self, ev: &StepEvent) {
        let busy_s = (ev.step_s - ev.phases.data_wait).max(0.0);
        self.counters.add_busy(0, (busy_s * 1e9) as u64);
        self.inner.on_step(ev);
    }

    fn on_devices(&mut self, devices: &[Arc<Device>]) {
        let mut t = lock(&self.trackers);
        t.clear();
        t.extend(devices.iter().map(|d| Arc::clone(d.mem())));
        drop(t);
        self.inner.on_devices(devices);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::clock::Phases;
    use crate::engine::device::MemCategory;
    use tune_probes::engine::metric;
    use tune_probes::Source;

    fn step(step_s: f64, data_wait: f64) -> StepEvent {
        StepEvent {
            step: 0,
            steps: 1,
            loss: 1.0,
            samples: 1,
            step_s,
            phases: Phases {
                data_wait,
                ..Phases::default()
            },
            mem_after: Default::default(),
            loss_scale: None,
            skipped: false,
        }
    }

    #[test]
    fn device_bytes_and_busy_reach_the_engine_sampler() {
        let counters = DeviceCounters::new_shared(1);
        let trackers: Trackers = Arc::default();
        let mut s = EngineDevices {
            trackers: Arc::clone(&trackers),
            counters: Arc::clone(&counters),
            inner: EngineSampler::new(Arc::clone(&counters)),
        };
        let mut out = Vec::new();
        s.sample(0.0, &mut out);
        assert!(out.is_empty(), "no devices yet must mean no samples");

        let mut inner = crate::engine::vocab::NoObserver;
        let mut obs = ProbedObserver {
            inner: &mut inner,
            counters: Arc::clone(&counters),
            trackers: Arc::clone(&trackers),
        };
        let dev = Device::cpu(0, 1);
        obs.on_devices(std::slice::from_ref(&dev));
        dev.mem().alloc(MemCategory::Activations, 3000);
        dev.mem().free(MemCategory::Activations, 2000);
        s.sample(0.0, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].source, Source::Engine);
        assert_eq!(out[0].get(metric::BYTES), Some(1000.0));
        assert_eq!(out[0].get(metric::PEAK_BYTES), Some(3000.0));

        // 80 ms step of which 20 ms waited for data: 60 ms busy in a 100 ms tick.
        obs.on_step(&step(0.080, 0.020));
        out.clear();
        s.sample(100.0, &mut out);
        let busy = out[0].get(metric::BUSY_PCT).unwrap();
        assert!((busy - 60.0).abs() < 1e-6, "{busy}");
    }

    #[test]
    fn devices_the_run_did_not_create_are_not_reported() {
        let counters = DeviceCounters::new_shared(2);
        let trackers: Trackers = Arc::default();
        let mut s = EngineDevices {
            trackers: Arc::clone(&trackers),
            counters: Arc::clone(&counters),
            inner: EngineSampler::new(Arc::clone(&counters)),
        };
        lock(&trackers).push(Arc::clone(Device::cpu(0, 1).mem()));
        let mut out = Vec::new();
        s.sample(0.0, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].device, Some(0));
    }

    #[test]
    fn zero_interval_is_refused() {
        assert!(matches!(
            RunProbes::start(Duration::ZERO, 1),
            Err(Error::Invalid(_))
        ));
    }
}
