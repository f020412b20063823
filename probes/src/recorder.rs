//! Runs samplers on a background thread at the timeline's interval.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crate::error::ProbeError;
use crate::sample::{Sample, Sampler};
use crate::timeline::Timeline;

/// A timeline shared between the recorder thread and its readers.
pub type SharedTimeline = Arc<Mutex<Timeline>>;

/// Locks the timeline even if a reader panicked while holding it: the ring
/// only ever holds whole samples, so its contents stay valid.
pub fn lock(timeline: &Mutex<Timeline>) -> MutexGuard<'_, Timeline> {
    timeline.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs every sampler once at the timeline's current time and pushes the
/// results, recording the cost. The recorder calls this each tick; callers
/// may also use it for one final reading after stopping.
pub fn tick(samplers: &mut [Box<dyn Sampler>], timeline: &Mutex<Timeline>, buf: &mut Vec<Sample>) {
    let start = Instant::now();
    let now_ms = lock(timeline).ms_at(start);
    let mut costs: Vec<Duration> = Vec::with_capacity(samplers.len());
    buf.clear();
    for s in samplers.iter_mut() {
        let t0 = Instant::now();
        s.sample(now_ms, buf);
        costs.push(t0.elapsed());
    }
    // One lock per tick, taken after sampling, so slow sampler calls never
    // block readers of the timeline.
    let mut tl = lock(timeline);
    tl.extend(buf.drain(..));
    for (s, c) in samplers.iter().zip(costs) {
        tl.overhead_mut().record_sampler(s.name(), c);
    }
    tl.overhead_mut().tick.record(start.elapsed());
}

/// Samples in the background until stopped or dropped.
pub struct Recorder {
    timeline: SharedTimeline,
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl Recorder {
    /// Starts sampling now (the first tick is immediate) and then every
    /// `timeline.interval()`.
    pub fn start(
        samplers: Vec<Box<dyn Sampler>>,
        timeline: SharedTimeline,
    ) -> Result<Self, ProbeError> {
        let stop = Arc::new(AtomicBool::new(false));
        let handle = thread::Builder::new()
            .name("tune-probes".into())
            .spawn({
                let timeline = Arc::clone(&timeline);
                let stop = Arc::clone(&stop);
                move || run(samplers, &timeline, &stop)
            })
            .map_err(ProbeError::Spawn)?;
        Ok(Recorder {
            timeline,
            stop,
            handle: Some(handle),
        })
    }

    pub fn timeline(&self) -> SharedTimeline {
        Arc::clone(&self.timeline)
    }

    /// Stops the thread and waits for it; returns promptly, not after a full interval.
    pub fn stop(mut self) -> Result<(), ProbeError> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> Result<(), ProbeError> {
        self.stop.store(true, Ordering::Release);
        match self.handle.take() {
            Some(h) => {
                h.thread().unpark();
                h.join().map_err(|_| ProbeError::SamplerPanicked)
            }
            None => Ok(()),
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        // A panic on the sampler thread was already reported by the panic
        // hook; dropping has no one to return it to.
        let _ = self.shutdown();
    }
}

fn run(mut samplers: Vec<Box<dyn Sampler>>, timeline: &Mutex<Timeline>, stop: &AtomicBool) {
    let interval = lock(timeline).interval().max(Duration::from_millis(1));
    let mut buf = Vec::new();
    let mut due = Instant::now();
    while !stop.load(Ordering::Acquire) {
        tick(&mut samplers, timeline, &mut buf);
        due += interval;
        let now = Instant::now();
        if now > due + interval {
            // Sampling overran; realign instead of firing a burst of catch-up ticks.
            lock(timeline).overhead_mut().late_ticks += 1;
            due = now;
        }
        // park_timeout can wake spuriously, and stop() unparks us, so re-check both.
        while !stop.load(Ordering::Acquire) {
            let now = Instant::now();
            if now >= due {
                break;
            }
            thread::park_timeout(due - now);
        }
    }
    let cpu = thread_cpu_ms();
    lock(timeline).overhead_mut().thread_cpu_ms = cpu;
}

/// CPU time of the calling thread in ms, `None` where `/proc/thread-self` is missing.
fn thread_cpu_ms() -> Option<f64> {
    let text = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    let s = crate::host::parse_pid_stat(&text).ok()?;
    Some((s.utime + s.stime) as f64 / crate::host::USER_HZ * 1e3)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::Source;

    struct Counting {
        n: u32,
    }

    impl Sampler for Counting {
        fn name(&self) -> &str {
            "counting"
        }
        fn sample(&mut self, now_ms: f64, out: &mut Vec<Sample>) {
            self.n += 1;
            let mut s = Sample::new(now_ms, Source::Host);
            s.set("n", self.n as f64);
            out.push(s);
        }
    }

    struct Panicky;

    impl Sampler for Panicky {
        fn name(&self) -> &str {
            "panicky"
        }
        fn sample(&mut self, _: f64, _: &mut Vec<Sample>) {
            panic!("sampler bug");
        }
    }

    fn shared(interval_ms: u64) -> SharedTimeline {
        Arc::new(Mutex::new(Timeline::new(
            Duration::from_millis(interval_ms),
            1000,
        )))
    }

    #[test]
    fn manual_tick_records_samples_and_cost() {
        let tl = shared(100);
        let mut samplers: Vec<Box<dyn Sampler>> = vec![Box::new(Counting { n: 0 })];
        let mut buf = Vec::new();
        tick(&mut samplers, &tl, &mut buf);
        tick(&mut samplers, &tl, &mut buf);
        let tl = lock(&tl);
        assert_eq!(tl.len(), 2);
        assert_eq!(tl.overhead().tick.calls, 2);
        assert_eq!(tl.overhead().per_sampler["counting"].calls, 2);
        let ts: Vec<f64> = tl.samples().map(|s| s.t_ms).collect();
        assert!(ts[0] <= ts[1]);
    }

    #[test]
    fn recorder_samples_in_background_and_stops() {
        let tl = shared(5);
        let rec = Recorder::start(vec![Box::new(Counting { n: 0 })], Arc::clone(&tl)).unwrap();
        // Wait on a count, not a duration, so a loaded machine only slows the test.
        let deadline = Instant::now() + Duration::from_secs(20);
        while lock(&tl).len() < 3 && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(5));
        }
        rec.stop().unwrap();
        let n = lock(&tl).len();
        assert!(n >= 3, "only {n} samples");
        thread::sleep(Duration::from_millis(30));
        assert_eq!(lock(&tl).len(), n, "sampling went on after stop");
        assert!(lock(&tl).overhead().tick.mean_us().is_some());
        // Linux has /proc/thread-self; a tiny sampler may well have used 0 ms.
        assert!(lock(&tl).overhead().thread_cpu_ms.is_some_and(|c| c >= 0.0));
    }

    #[test]
    fn stop_does_not_wait_a_full_interval() {
        let tl = shared(60_000);
        let rec = Recorder::start(vec![Box::new(Counting { n: 0 })], tl).unwrap();
        let t0 = Instant::now();
        drop(rec);
        assert!(t0.elapsed() < Duration::from_secs(30));
    }

    #[test]
    fn panicking_sampler_is_reported_on_stop() {
        let tl = shared(5);
        let rec = Recorder::start(vec![Box::new(Panicky)], tl).unwrap();
        thread::sleep(Duration::from_millis(20));
        assert!(matches!(rec.stop(), Err(ProbeError::SamplerPanicked)));
    }
}
