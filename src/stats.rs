//! Pure statistics over step times: robust location and spread, steady-state detection,
//! seeded percentile bootstrap, throughput with confidence intervals, comparisons.
//!
//! Step times are in seconds. Functions over an empty slice return NaN rather than an
//! error, as numpy does: callers check lengths where an empty trial is possible, and the
//! types that end up in reports (`Throughput`, `Effect`) are only built from data.

use serde::{Deserialize, Serialize};

/// Scales a median absolute deviation to the standard deviation of a normal distribution.
pub const MAD_TO_SIGMA: f64 = 1.4826;

/// SplitMix64 (Steele, Lea, Flood 2014): tiny, fast, and good enough for resampling
/// indices. It is here rather than in a crate so that a seed reproduces the same
/// confidence intervals on every platform and every version of the program.
#[derive(Clone, Debug)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1), with 53 random bits.
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in 0..n (Lemire's multiply-shift; the bias is below 2^-32 for small n).
    pub fn below(&mut self, n: usize) -> usize {
        ((self.next_u64() as u128 * n as u128) >> 64) as usize
    }

    /// Standard normal deviate (Box-Muller), for simulated timings in tests and probes.
    pub fn next_gaussian(&mut self) -> f64 {
        // 1 - u keeps the logarithm's argument in (0, 1].
        let u1 = 1.0 - self.next_f64();
        let u2 = self.next_f64();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }
}

mod rounds;
pub use rounds::{burst_period, rounds_of, typical_step};

pub fn mean(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    xs.iter().sum::<f64>() / xs.len() as f64
}

pub fn median(xs: &[f64]) -> f64 {
    quantile(xs, 0.5)
}

/// The q-quantile with linear interpolation between order statistics (numpy's default,
/// Hyndman-Fan type 7). `q` is clamped to [0, 1].
///
/// Exactly what sorting and interpolating gives, found by selection in O(n): a sort of
/// a million step times per median was most of a 3-million-value trial's analysis (#27).
pub fn quantile(xs: &[f64], q: f64) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    let mut v = xs.to_vec();
    let pos = q.clamp(0.0, 1.0) * (v.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    let (_, &mut at_lo, above) = v.select_nth_unstable_by(lo, f64::total_cmp);
    let at_hi = if hi == lo {
        at_lo
    } else {
        // The next order statistic is the least of those above.
        above
            .iter()
            .copied()
            .min_by(f64::total_cmp)
            .unwrap_or(at_lo)
    };
    at_lo + (at_hi - at_lo) * (pos - lo as f64)
}

/// Sample standard deviation (n - 1 in the denominator); 0 for a single value.
pub fn std_dev(xs: &[f64]) -> f64 {
    match xs.len() {
        0 => f64::NAN,
        1 => 0.0,
        n => {
            let m = mean(xs);
            (xs.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / (n - 1) as f64).sqrt()
        }
    }
}

/// Coefficient of variation: sample standard deviation over mean.
pub fn cv(xs: &[f64]) -> f64 {
    std_dev(xs) / mean(xs)
}

/// Median absolute deviation from the median, unscaled (multiply by `MAD_TO_SIGMA` to
/// estimate a normal standard deviation).
pub fn mad(xs: &[f64]) -> f64 {
    let m = median(xs);
    let dev: Vec<f64> = xs.iter().map(|x| (x - m).abs()).collect();
    median(&dev)
}

/// Index of the first step whose timing is representative.
///
/// The first `warmup` steps are always dropped. After them, leading steps are dropped
/// while they are slow outliers relative to the post-warm-up steps: slower than
/// `median + max(3 * 1.4826 * MAD, 1% of median)`. The 1% floor keeps a series of
/// near-identical timings (MAD about 0) from treating clock jitter as warm-up. At most
/// half of the post-warm-up steps are dropped, so a series that never settles still
/// keeps data; its high spread then shows in the confidence interval instead.
pub fn steady_state(step_times: &[f64], warmup: usize) -> usize {
    let start = warmup.min(step_times.len());
    let rest = &step_times[start..];
    if rest.len() < 3 {
        return start;
    }
    let m = median(rest);
    let limit = m + (3.0 * MAD_TO_SIGMA * mad(rest)).max(0.01 * m);
    let max_skip = rest.len() / 2;
    let skipped = rest
        .iter()
        .take(max_skip)
        .take_while(|&&t| t > limit || !t.is_finite())
        .count();
    start + skipped
}

/// Settings of a percentile bootstrap. The seed makes intervals reproducible: the same
/// data and seed give the same interval.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bootstrap {
    /// Confidence level, e.g. 0.95.
    pub level: f64,
    pub resamples: usize,
    pub seed: u64,
}

impl Default for Bootstrap {
    fn default() -> Self {
        Bootstrap {
            level: 0.95,
            resamples: 2000,
            seed: 0,
        }
    }
}

impl Bootstrap {
    pub fn with_seed(seed: u64) -> Self {
        Bootstrap {
            seed,
            ..Bootstrap::default()
        }
    }

    fn bounds(&self, mut stats: Vec<f64>) -> (f64, f64) {
        stats.retain(|s| !s.is_nan());
        let tail = (1.0 - self.level.clamp(0.0, 1.0)) / 2.0;
        (quantile(&stats, tail), quantile(&stats, 1.0 - tail))
    }
}

fn resample_into(rng: &mut SplitMix64, from: &[f64], into: &mut Vec<f64>) {
    into.clear();
    into.extend((0..from.len()).map(|_| from[rng.below(from.len())]));
}

/// Most values a median's bootstrap resamples. A sample above this is bootstrapped over
/// this many of its values, evenly spaced (every k-th, so the whole run is covered):
/// its interval is then that of a sample of this size, wider than the full sample's
/// would be, never narrower, while the median itself is exact over all values. At this
/// size the 2,000 resamples take about 0.3 s (docs/performance.md, "Scale of the faces").
pub const BOOTSTRAP_MAX: usize = 1 << 15;

/// `xs`, or `BOOTSTRAP_MAX` of its values evenly spaced when it is longer.
fn bootstrapped(xs: &[f64]) -> std::borrow::Cow<'_, [f64]> {
    let n = xs.len();
    if n <= BOOTSTRAP_MAX {
        return std::borrow::Cow::Borrowed(xs);
    }
    std::borrow::Cow::Owned(
        (0..BOOTSTRAP_MAX)
            .map(|i| xs[i * n / BOOTSTRAP_MAX])
            .collect(),
    )
}

/// Samples up to this size are resampled as ranks and sorted (a few dozen integers sort
/// faster than a count array is cleared and walked); larger ones are counted.
const SMALL_SAMPLE: usize = 64;

/// Medians of bootstrap resamples of one sample, without sorting resampled values.
///
/// A resample's median depends only on which ranks of the sorted sample were drawn and
/// how often: a small sample's drawn ranks are sorted as integers, a large one's are
/// counted and the median read off the running count (O(n) per resample, not a sort).
/// The same draws from the same generator as sorting each resample, and the same value
/// to the last bit (the tests below hold that).
struct MedianResampler<'a> {
    sample: &'a [f64],
    sorted: Vec<f64>,
    /// Position in `sorted` of each value of `sample`.
    rank: Vec<u32>,
    counts: Vec<u32>,
    /// The median's position in a sorted resample (type 7) and the order statistics
    /// around it.
    pos: f64,
    lo: usize,
    hi: usize,
}

impl<'a> MedianResampler<'a> {
    fn new(sample: &'a [f64]) -> Self {
        let n = sample.len();
        let mut order: Vec<u32> = (0..n as u32).collect();
        order.sort_by(|&a, &b| sample[a as usize].total_cmp(&sample[b as usize]));
        let mut rank = vec![0u32; n];
        for (pos, &i) in order.iter().enumerate() {
            rank[i as usize] = pos as u32;
        }
        let pos = 0.5 * n.saturating_sub(1) as f64;
        MedianResampler {
            sample,
            sorted: order.iter().map(|&i| sample[i as usize]).collect(),
            rank,
            counts: if n > SMALL_SAMPLE {
                vec![0; n]
            } else {
                Vec::new()
            },
            pos,
            lo: pos.floor() as usize,
            hi: pos.ceil() as usize,
        }
    }

    /// The median (type 7) of one resample drawn with `rng`.
    fn next(&mut self, rng: &mut SplitMix64) -> f64 {
        let n = self.sample.len();
        let (pos, lo, hi) = (self.pos, self.lo, self.hi);
        if n <= SMALL_SAMPLE {
            let mut buf = [0u32; SMALL_SAMPLE];
            let drawn = &mut buf[..n];
            for d in drawn.iter_mut() {
                *d = self.rank[rng.below(n)];
            }
            drawn.sort_unstable();
            let (a, b) = (
                self.sorted[drawn[lo] as usize],
                self.sorted[drawn[hi] as usize],
            );
            return a + (b - a) * (pos - lo as f64);
        }
        self.counts.fill(0);
        for _ in 0..n {
            self.counts[self.rank[rng.below(n)] as usize] += 1;
        }
        // The resample's order statistics `lo` and `hi`, from the running count.
        let (mut at_lo, mut seen) = (None, 0usize);
        for (r, &c) in self.counts.iter().enumerate() {
            seen += c as usize;
            if at_lo.is_none() && seen > lo {
                at_lo = Some(self.sorted[r]);
            }
            if seen > hi {
                let (a, b) = (at_lo.unwrap_or(self.sorted[r]), self.sorted[r]);
                return a + (b - a) * (pos - lo as f64);
            }
        }
        f64::NAN
    }
}

/// Percentile bootstrap confidence interval of `stat` over `samples`. Returns (NaN, NaN)
/// for an empty sample.
pub fn bootstrap_ci<F: Fn(&[f64]) -> f64>(
    samples: &[f64],
    stat: F,
    boot: &Bootstrap,
) -> (f64, f64) {
    if samples.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let mut rng = SplitMix64::new(boot.seed);
    let mut buf = Vec::with_capacity(samples.len());
    let stats = (0..boot.resamples)
        .map(|_| {
            resample_into(&mut rng, samples, &mut buf);
            stat(&buf)
        })
        .collect();
    boot.bounds(stats)
}

/// Percentile bootstrap interval of the median of `samples` (at most [`BOOTSTRAP_MAX`]
/// of them resampled): `bootstrap_ci(samples, median, boot)`, by counting.
pub fn median_ci(samples: &[f64], boot: &Bootstrap) -> (f64, f64) {
    if samples.is_empty() {
        return (f64::NAN, f64::NAN);
    }
    let mut rng = SplitMix64::new(boot.seed);
    let sample = bootstrapped(samples);
    let mut resampler = MedianResampler::new(&sample);
    let stats = (0..boot.resamples)
        .map(|_| resampler.next(&mut rng))
        .collect();
    boot.bounds(stats)
}

/// Median throughput of one trial with its bootstrap confidence interval.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Throughput {
    /// samples_per_step / median step time.
    pub samples_per_s: f64,
    pub lo: f64,
    pub hi: f64,
    /// Number of step times it was computed from.
    pub steps: usize,
}

impl Throughput {
    /// None when there are no step times or the median step time is not positive.
    ///
    /// The interval is bootstrapped over the median step time and then inverted: the
    /// percentile bootstrap commutes with monotone maps, so this is the interval of the
    /// throughput itself.
    pub fn from_step_times(
        step_times: &[f64],
        samples_per_step: f64,
        boot: &Bootstrap,
    ) -> Option<Throughput> {
        let m = median(step_times);
        if m.is_nan() || m <= 0.0 {
            return None;
        }
        let (lo_t, hi_t) = median_ci(step_times, boot);
        Some(Throughput {
            samples_per_s: samples_per_step / m,
            lo: samples_per_step / hi_t,
            hi: samples_per_step / lo_t,
            steps: step_times.len(),
        })
    }
}

/// Throughput of B relative to A, with a confidence interval.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Effect {
    /// Median throughput of B over median throughput of A; above 1 means B is faster.
    pub ratio: f64,
    pub lo: f64,
    pub hi: f64,
    /// The interval excludes 1: only then is the difference reported as an effect.
    pub significant: bool,
}

/// Ratio of median throughputs B/A. A and B are resampled independently; the samples per
/// step are given separately because a configuration may change the batch size.
pub fn ratio_ci(
    a_steps: &[f64],
    a_samples_per_step: f64,
    b_steps: &[f64],
    b_samples_per_step: f64,
    boot: &Bootstrap,
) -> Effect {
    let thr = |steps: &[f64], sps: f64| sps / median(steps);
    let ratio = thr(b_steps, b_samples_per_step) / thr(a_steps, a_samples_per_step);
    if a_steps.is_empty() || b_steps.is_empty() {
        return Effect {
            ratio,
            lo: f64::NAN,
            hi: f64::NAN,
            significant: false,
        };
    }
    let mut rng = SplitMix64::new(boot.seed);
    let (a, b) = (bootstrapped(a_steps), bootstrapped(b_steps));
    let (mut ra, mut rb) = (MedianResampler::new(&a), MedianResampler::new(&b));
    let stats = (0..boot.resamples)
        .map(|_| {
            let ma = ra.next(&mut rng);
            let mb = rb.next(&mut rng);
            (b_samples_per_step / mb) / (a_samples_per_step / ma)
        })
        .collect();
    let (lo, hi) = boot.bounds(stats);
    Effect {
        ratio,
        lo,
        hi,
        significant: lo > 1.0 || hi < 1.0,
    }
}

/// Complementary error function, from Numerical Recipes (`erfcc`): fractional error
/// below 1.2e-7 everywhere, plenty for a p-value.
fn erfc(x: f64) -> f64 {
    let z = x.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -z * z - 1.265_512_23
        + t * (1.000_023_68
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let r = t * poly.exp();
    if x >= 0.0 {
        r
    } else {
        2.0 - r
    }
}

/// Mann-Whitney U test. Returns U for sample `a` (the number of pairs where a beats b,
/// ties counting one half) and the two-sided p-value from the normal approximation with
/// tie correction and continuity correction (as scipy's `method="asymptotic"`).
/// p is 1 when either sample is empty or all values are tied.
pub fn mann_whitney_u(a: &[f64], b: &[f64]) -> (f64, f64) {
    let (n1, n2) = (a.len(), b.len());
    if n1 == 0 || n2 == 0 {
        return (0.0, 1.0);
    }
    let mut all: Vec<(f64, bool)> = a
        .iter()
        .map(|&x| (x, true))
        .chain(b.iter().map(|&x| (x, false)))
        .collect();
    all.sort_by(|x, y| x.0.total_cmp(&y.0));
    let n = all.len();
    let (mut rank_sum_a, mut tie_term) = (0.0, 0.0);
    let mut i = 0;
    while i < n {
        let mut j = i;
        while j + 1 < n && all[j + 1].0 == all[i].0 {
            j += 1;
        }
        // Ranks i+1..=j+1 share their average.
        let avg = (i + j + 2) as f64 / 2.0;
        let t = (j - i + 1) as f64;
        tie_term += t * t * t - t;
        rank_sum_a += avg * all[i..=j].iter().filter(|e| e.1).count() as f64;
        i = j + 1;
    }
    let (n1f, n2f, nf) = (n1 as f64, n2 as f64, n as f64);
    let u = rank_sum_a - n1f * (n1f + 1.0) / 2.0;
    let mu = n1f * n2f / 2.0;
    let var = n1f * n2f / 12.0 * ((nf + 1.0) - tie_term / (nf * (nf - 1.0)));
    if var.is_nan() || var <= 0.0 {
        return (u, 1.0);
    }
    let z = ((u - mu).abs() - 0.5).max(0.0) / var.sqrt();
    (u, erfc(z / std::f64::consts::SQRT_2).min(1.0))
}

/// All repeats' step times as one sample. Repeats of one configuration are exchangeable,
/// so pooling gives the bootstrap more data than any single repeat.
pub fn pooled<S: AsRef<[f64]>>(repeats: &[S]) -> Vec<f64> {
    repeats
        .iter()
        .flat_map(|r| r.as_ref().iter().copied())
        .collect()
}

/// Relative spread between repeats of the same configuration, max/min - 1: differences
/// between configurations smaller than this are indistinguishable from run-to-run noise.
/// 0 for fewer than two repeats.
pub fn noise_floor(repeat_medians: &[f64]) -> f64 {
    if repeat_medians.len() < 2 {
        return 0.0;
    }
    let max = repeat_medians.iter().copied().fold(f64::MIN, f64::max);
    let min = repeat_medians.iter().copied().fold(f64::MAX, f64::min);
    max / min - 1.0
}

#[cfg(test)]
mod tests;
