//! All samplers together on one recorder, as `tune trial` will run them.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tune_probes::recorder::lock;
use tune_probes::{
    DeviceCounters, EngineSampler, HostSampler, NvmlSampler, Recorder, Sampler, Source, Timeline,
};

#[test]
fn host_engine_and_nvml_share_one_timeline() {
    let counters = DeviceCounters::new_shared(2);
    let samplers: Vec<Box<dyn Sampler>> = vec![
        Box::new(HostSampler::new().watch(std::process::id())),
        Box::new(EngineSampler::new(Arc::clone(&counters))),
        Box::new(NvmlSampler::new()),
    ];
    let tl = Arc::new(Mutex::new(Timeline::new(Duration::from_millis(10), 10_000)));
    let rec = Recorder::start(samplers, Arc::clone(&tl)).unwrap();

    // Wait for enough ticks that rates exist, bounded so a stuck recorder fails.
    let deadline = Instant::now() + Duration::from_secs(30);
    while lock(&tl).overhead().tick.calls < 4 && Instant::now() < deadline {
        counters.add_busy(0, 1_000_000);
        counters.set_bytes(1, 1 << 20);
        std::thread::sleep(Duration::from_millis(5));
    }
    rec.stop().unwrap();

    let snap = lock(&tl).snapshot();
    let sources: std::collections::BTreeSet<Source> =
        snap.samples.iter().map(|s| s.source).collect();
    assert!(sources.contains(&Source::Host));
    assert!(sources.contains(&Source::Tree));
    assert!(sources.contains(&Source::Engine));
    let ts: Vec<f64> = snap.samples.iter().map(|s| s.t_ms).collect();
    assert!(ts.windows(2).all(|w| w[0] <= w[1]), "timeline out of order");
    for name in ["host", "engine", "nvml"] {
        assert!(
            snap.overhead.per_sampler[name].mean_us().is_some(),
            "{name}"
        );
    }
    assert!(snap.overhead_duty_pct().is_some());
    if let Some(n) = tune_probes::nvml_notice() {
        println!("{n}");
        assert!(!sources.contains(&Source::Gpu));
    }
    assert!(!snap.summarize().is_empty());
}
