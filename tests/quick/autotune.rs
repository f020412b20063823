//! Autotuning end to end: every key is timed once, the choice is reported and cached on
//! disk, a second run reuses the cache, and training gives the same result whichever
//! algorithms were picked.

use tune::engine::autotune::ChoiceSource;
use tune::engine::nn::zoo::ModelKind;
use tune::engine::train::{run, NoObserver, Workload};
use tune::knobs::Knobs;

#[test]
fn autotune_reports_caches_and_trains_like_the_heuristic() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("algos.json");
    let w = Workload {
        steps: 3,
        warmup: 1,
        threads: 1,
        eval: false,
        autotune_cache: Some(cache.clone()),
        ..Workload::new(ModelKind::CnnSmall, "synthetic")
    };
    let k = |autotune| Knobs {
        autotune,
        batch_size: 8,
        ..Knobs::default()
    };
    let plain = run(&w, &k(false), &mut NoObserver).unwrap();
    assert!(plain
        .algorithms
        .iter()
        .all(|c| c.source == ChoiceSource::Heuristic && c.timings_ms.is_empty()));
    assert!(!cache.exists(), "the heuristic writes no cache");

    let tuned = run(&w, &k(true), &mut NoObserver).unwrap();
    // One decision per distinct key: 3 convolutions and 1 linear layer in cnn-small.
    assert_eq!(tuned.algorithms.len(), 4, "{:?}", tuned.algorithms);
    for c in &tuned.algorithms {
        assert_eq!(c.source, ChoiceSource::Measured);
        let want = if c.op == "linear" {
            3
        } else {
            2 + usize::from(c.key.contains("k3 s1"))
        };
        assert_eq!(c.timings_ms.len(), want, "{c:?}");
        assert!(c.timings_ms.contains_key(&c.algo));
    }
    assert!(cache.exists());
    // Different algorithms round differently, but not by much.
    for (a, b) in plain.losses.iter().zip(&tuned.losses) {
        assert!((a - b).abs() < 1e-3 * a.abs().max(1.0), "{a} vs {b}");
    }

    let again = run(&w, &k(true), &mut NoObserver).unwrap();
    assert_eq!(again.algorithms.len(), 4);
    for (c, first) in again.algorithms.iter().zip(&tuned.algorithms) {
        assert_eq!(c.source, ChoiceSource::Cache);
        assert_eq!(c.algo, first.algo);
    }
}
