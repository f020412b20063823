use super::*;

/// The q-quantile of sorted `s`, by definition (what `quantile` must equal).
fn quantile_sorted(s: &[f64], q: f64) -> f64 {
    if s.is_empty() {
        return f64::NAN;
    }
    let pos = q.clamp(0.0, 1.0) * (s.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    s[lo] + (s[hi] - s[lo]) * (pos - lo as f64)
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol
}

/// Step times around `mean` seconds with relative noise `rel` (normal).
fn steps(rng: &mut SplitMix64, n: usize, mean: f64, rel: f64) -> Vec<f64> {
    (0..n)
        .map(|_| mean * (1.0 + rel * rng.next_gaussian()))
        .collect()
}

#[test]
fn location_and_spread_on_known_values() {
    let xs = [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0];
    assert_eq!(median(&xs), 3.5);
    assert_eq!(median(&[2.0, 1.0, 3.0]), 2.0);
    assert_eq!(mean(&xs), 31.0 / 8.0);
    // Sorted: 1 1 2 3 4 5 6 9; q=0.25 at position 1.75 -> 1 + 0.75 * (2 - 1).
    assert_eq!(quantile(&xs, 0.25), 1.75);
    assert_eq!(quantile(&xs, 0.0), 1.0);
    assert_eq!(quantile(&xs, 1.0), 9.0);
    // Deviations from 3.5: 0.5 2.5 0.5 2.5 1.5 5.5 1.5 2.5 -> median 2.0.
    assert_eq!(mad(&xs), 2.0);
    // Sample sd of 2,4,4,4,5,5,7,9 is sqrt(32/7).
    let ys = [2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0];
    assert!(close(cv(&ys), (32.0f64 / 7.0).sqrt() / 5.0, 1e-12));
    assert!(median(&[]).is_nan() && mean(&[]).is_nan());
}

#[test]
fn moments_of_a_simulated_normal() {
    let mut rng = SplitMix64::new(7);
    let xs: Vec<f64> = (0..20_000)
        .map(|_| 10.0 + 2.0 * rng.next_gaussian())
        .collect();
    assert!(close(mean(&xs), 10.0, 0.05));
    assert!(close(median(&xs), 10.0, 0.05));
    assert!(close(cv(&xs), 0.2, 0.005));
    assert!(close(mad(&xs) * MAD_TO_SIGMA, 2.0, 0.05));
    // The 97.5% quantile of N(10, 2) is 10 + 1.96 * 2.
    assert!(close(quantile(&xs, 0.975), 13.92, 0.1));
}

#[test]
fn uniform_draws_cover_the_range() {
    let mut rng = SplitMix64::new(1);
    let mut counts = [0usize; 10];
    for _ in 0..10_000 {
        counts[rng.below(10)] += 1;
    }
    // Each count is Binomial(10000, 0.1): sd 30, so +-130 is over 4 sd.
    assert!(
        counts.iter().all(|&c| (870..1130).contains(&c)),
        "{counts:?}"
    );
    let u: Vec<f64> = (0..10_000).map(|_| rng.next_f64()).collect();
    assert!(u.iter().all(|&x| (0.0..1.0).contains(&x)));
    assert!(close(mean(&u), 0.5, 0.01));
}

#[test]
fn steady_state_skips_slow_steps_after_warmup() {
    let mut rng = SplitMix64::new(3);
    let mut xs = vec![1.0, 0.8, 0.5]; // warm-up
    xs.extend([0.30, 0.25, 0.22]); // still settling
    xs.extend(steps(&mut rng, 40, 0.1, 0.02));
    assert_eq!(steady_state(&xs, 3), 6);
    // Already steady after warm-up: nothing more is skipped.
    let flat = steps(&mut rng, 40, 0.1, 0.02);
    assert_eq!(steady_state(&flat, 5), 5);
    // Identical timings (MAD 0) are steady too.
    assert_eq!(steady_state(&[0.1; 20], 2), 2);
    // Warm-up longer than the series.
    assert_eq!(steady_state(&[0.1; 4], 10), 4);
}

#[test]
fn steady_state_keeps_at_least_half() {
    // Monotonically decreasing: every step looks slow against the later median.
    let xs: Vec<f64> = (0..20).map(|i| 1.0 / (1.0 + i as f64)).collect();
    assert!(steady_state(&xs, 0) <= 10);
}

#[test]
fn bootstrap_is_seeded_and_covers_the_truth() {
    let mut rng = SplitMix64::new(11);
    let xs = steps(&mut rng, 200, 5.0, 0.1);
    let a = bootstrap_ci(&xs, mean, &Bootstrap::with_seed(1));
    let b = bootstrap_ci(&xs, mean, &Bootstrap::with_seed(1));
    assert_eq!(a, b);
    assert_ne!(a, bootstrap_ci(&xs, mean, &Bootstrap::with_seed(2)));
    // Standard error of the mean is 0.5 / sqrt(200) = 0.035; the 95% CI is about
    // +-0.07 around the sample mean.
    let m = mean(&xs);
    assert!(a.0 < m && m < a.1);
    assert!(
        close(a.1 - a.0, 2.0 * 1.96 * 0.5 / 200f64.sqrt(), 0.03),
        "{a:?}"
    );
    assert!(bootstrap_ci(&[], mean, &Bootstrap::default()).0.is_nan());
}

#[test]
fn throughput_inverts_step_times() {
    let mut rng = SplitMix64::new(5);
    let xs = steps(&mut rng, 100, 0.05, 0.03);
    let t = Throughput::from_step_times(&xs, 64.0, &Bootstrap::with_seed(0)).unwrap();
    assert!(close(t.samples_per_s, 64.0 / median(&xs), 1e-9));
    assert!(t.lo < t.samples_per_s && t.samples_per_s < t.hi);
    assert!(close(t.samples_per_s, 1280.0, 20.0), "{t:?}");
    assert_eq!(t.steps, 100);
    assert!(Throughput::from_step_times(&[], 64.0, &Bootstrap::default()).is_none());
}

#[test]
fn identical_distributions_are_rarely_significant() {
    let mut covered = 0;
    for seed in 0..100 {
        let mut rng = SplitMix64::new(1000 + seed);
        let a = steps(&mut rng, 60, 0.1, 0.02);
        let b = steps(&mut rng, 60, 0.1, 0.02);
        let boot = Bootstrap {
            resamples: 1000,
            ..Bootstrap::with_seed(seed)
        };
        let e = ratio_ci(&a, 32.0, &b, 32.0, &boot);
        if e.lo <= 1.0 && 1.0 <= e.hi {
            covered += 1;
        }
        assert_eq!(e.significant, !(e.lo <= 1.0 && 1.0 <= e.hi));
    }
    assert!(
        covered >= 90,
        "CI contained 1 in only {covered} of 100 runs"
    );
}

#[test]
fn a_ten_percent_speedup_is_significant() {
    let mut rng = SplitMix64::new(42);
    let a = steps(&mut rng, 50, 0.100, 0.02);
    let b = steps(&mut rng, 50, 0.100 / 1.1, 0.02);
    let e = ratio_ci(&a, 32.0, &b, 32.0, &Bootstrap::with_seed(9));
    assert!(e.significant, "{e:?}");
    assert!(
        e.lo > 1.05 && e.hi < 1.15 && close(e.ratio, 1.1, 0.03),
        "{e:?}"
    );
    // Swapped, it is a slowdown.
    let s = ratio_ci(&b, 32.0, &a, 32.0, &Bootstrap::with_seed(9));
    assert!(s.significant && s.hi < 1.0);
    // A doubled batch at the same step time is twice the throughput.
    let d = ratio_ci(&a, 32.0, &a, 64.0, &Bootstrap::with_seed(9));
    assert!(close(d.ratio, 2.0, 1e-12));
}

#[test]
fn mann_whitney_matches_hand_computation() {
    // Complete separation, n1 = n2 = 3: U = 0, mu = 4.5, sigma^2 = 9/12 * 7 = 5.25,
    // z = (4.5 - 0.5) / sqrt(5.25) = 1.745743, p = erfc(z / sqrt 2) = 0.080856.
    let (u, p) = mann_whitney_u(&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0]);
    assert_eq!(u, 0.0);
    assert!(close(p, 0.080856, 1e-5), "{p}");
    let (u, p) = mann_whitney_u(&[4.0, 5.0, 6.0], &[1.0, 2.0, 3.0]);
    assert_eq!(u, 9.0);
    assert!(close(p, 0.080856, 1e-5), "{p}");
    // With ties: pooled 1 2 2 2 3 3 4 5 gets ranks 1, 3 x3, 5.5 x2, 7, 8.
    // R_a = 1 + 3 + 3 + 5.5 = 12.5, U = 12.5 - 10 = 2.5, mu = 8,
    // sigma^2 = 16/12 * (9 - (24 + 6) / 56) = 11.285714,
    // z = (5.5 - 0.5) / 3.359422 = 1.488351, p = 0.136658.
    let (u, p) = mann_whitney_u(&[1.0, 2.0, 2.0, 3.0], &[2.0, 3.0, 4.0, 5.0]);
    assert_eq!(u, 2.5);
    assert!(close(p, 0.136658, 1e-5), "{p}");
    // Identical samples: no evidence at all.
    let (_, p) = mann_whitney_u(&[1.0; 5], &[1.0; 5]);
    assert_eq!(p, 1.0);
    assert_eq!(mann_whitney_u(&[], &[1.0]).1, 1.0);
}

#[test]
fn mann_whitney_detects_a_shift_in_large_samples() {
    let mut rng = SplitMix64::new(8);
    let a = steps(&mut rng, 60, 0.100, 0.02);
    let b = steps(&mut rng, 60, 0.095, 0.02);
    assert!(mann_whitney_u(&a, &b).1 < 0.01);
    let c = steps(&mut rng, 60, 0.100, 0.02);
    assert!(mann_whitney_u(&a, &c).1 > 0.01);
}

/// Samples with ties, a NaN and an infinity, of every small size and a few large.
fn awkward_samples() -> Vec<Vec<f64>> {
    let mut rng = SplitMix64::new(77);
    let mut out: Vec<Vec<f64>> = (1..40)
        .map(|n| (0..n).map(|_| (rng.below(6) as f64) * 0.01 + 0.1).collect())
        .collect();
    out.push(steps(&mut rng, 1000, 0.05, 0.1));
    out.push(vec![0.1, f64::NAN, 0.2, f64::INFINITY, 0.1]);
    out
}

#[test]
fn quantile_by_selection_is_quantile_by_sorting() {
    for xs in awkward_samples() {
        let mut s = xs.clone();
        s.sort_by(f64::total_cmp);
        for q in [0.0, 0.1, 0.25, 0.5, 0.77, 0.975, 1.0] {
            let (a, b) = (quantile(&xs, q), quantile_sorted(&s, q));
            assert!(
                a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                "{xs:?} {q}"
            );
        }
    }
}

/// The counting resampler draws the same resamples as sorting each one and gives
/// the same intervals to the last bit, for the throughput and for the ratio.
#[test]
fn counted_bootstrap_medians_are_the_sorted_ones() {
    let boot = Bootstrap {
        resamples: 300,
        ..Bootstrap::with_seed(12)
    };
    let samples = awkward_samples();
    for xs in &samples {
        let (a, b) = (median_ci(xs, &boot), bootstrap_ci(xs, median, &boot));
        assert_eq!(
            (a.0.to_bits(), a.1.to_bits()),
            (b.0.to_bits(), b.1.to_bits()),
            "{xs:?}"
        );
    }
    for w in samples.windows(2) {
        let (a, b) = (&w[0], &w[1]);
        let got = ratio_ci(a, 32.0, b, 64.0, &boot);
        // ratio_ci as it was: every resample sorted for its median.
        let mut rng = SplitMix64::new(boot.seed);
        let (mut ra, mut rb) = (Vec::new(), Vec::new());
        let stats = (0..boot.resamples)
            .map(|_| {
                resample_into(&mut rng, a, &mut ra);
                resample_into(&mut rng, b, &mut rb);
                (64.0 / median(&rb)) / (32.0 / median(&ra))
            })
            .collect();
        let (lo, hi) = boot.bounds(stats);
        assert_eq!(
            (got.lo.to_bits(), got.hi.to_bits()),
            (lo.to_bits(), hi.to_bits())
        );
    }
}

/// Above the cap the interval comes from evenly spaced values; the median does not.
#[test]
fn a_long_sample_is_bootstrapped_over_evenly_spaced_values() {
    let n = 3 * BOOTSTRAP_MAX + 7;
    let xs: Vec<f64> = (0..n).map(|i| i as f64).collect();
    let b = bootstrapped(&xs);
    assert_eq!(b.len(), BOOTSTRAP_MAX);
    assert_eq!((b[0], b[1]), (0.0, 3.0));
    assert!(b[BOOTSTRAP_MAX - 1] >= (n - 4) as f64);
    let t = Throughput::from_step_times(&xs[1..], 1.0, &Bootstrap::default()).unwrap();
    assert_eq!(t.samples_per_s, 1.0 / median(&xs[1..]));
    assert!(t.lo < t.samples_per_s && t.samples_per_s < t.hi, "{t:?}");
    assert_eq!(bootstrapped(&xs[..BOOTSTRAP_MAX]).len(), BOOTSTRAP_MAX);
}

#[test]
fn repeats_pool_and_noise_floor() {
    let p = pooled(&[vec![1.0, 2.0], vec![3.0]]);
    assert_eq!(p, vec![1.0, 2.0, 3.0]);
    assert!(close(noise_floor(&[100.0, 103.0, 101.0]), 0.03, 1e-12));
    assert_eq!(noise_floor(&[100.0]), 0.0);
}
