//! SyncBatchNorm (`torch.nn.SyncBatchNorm`): under DDP, batch-norm statistics over the
//! global batch instead of each rank's shard. Forward reduces per-channel sums (then
//! centred squares, the same two passes as the local statistics, in f64); backward
//! reduces the two per-channel sums the input gradient needs. The parameter gradients
//! stay local: DDP's gradient all-reduce averages them like every other gradient.

use crate::engine::collective::{Collective, ReduceOp};
use crate::engine::ops::batchnorm::channel_sums;
use crate::error::{Error, Result};

/// Mean and biased variance per channel over all ranks' rows, and the global row count.
/// With one rank this is bit-identical to `BatchNorm2d::batch_stats`.
pub fn global_stats(
    x: &[f32],
    c: usize,
    coll: &dyn Collective,
) -> Result<(Vec<f32>, Vec<f32>, usize)> {
    let mut sum = channel_sums(x, x, c, c + 1, |acc, row, _| {
        for (a, v) in acc.iter_mut().zip(row) {
            *a += *v as f64;
        }
    });
    sum[c] = (x.len() / c.max(1)) as f64;
    coll.all_reduce_f64(&mut sum, ReduceOp::Sum)?;
    let m = sum[c];
    if m < 1.0 {
        return Err(Error::Runtime("sync_bn: the global batch is empty".into()));
    }
    let mean: Vec<f64> = sum[..c].iter().map(|s| s / m).collect();
    let mut sq = channel_sums(x, x, c, c, |acc, row, _| {
        for ((a, v), mu) in acc.iter_mut().zip(row).zip(&mean) {
            let d = *v as f64 - mu;
            *a += d * d;
        }
    });
    coll.all_reduce_f64(&mut sq, ReduceOp::Sum)?;
    Ok((
        mean.iter().map(|&v| v as f32).collect(),
        sq.iter().map(|s| (s / m) as f32).collect(),
        m as usize,
    ))
}

/// The backward sums (per channel: sum of dy, then sum of dy * xhat) and row count over
/// all ranks.
pub fn global_sums(sums: &[f64], m: f64, coll: &dyn Collective) -> Result<(Vec<f64>, f64)> {
    let mut v = Vec::with_capacity(sums.len() + 1);
    v.extend_from_slice(sums);
    v.push(m);
    coll.all_reduce_f64(&mut v, ReduceOp::Sum)?;
    let m = v.pop().unwrap_or(m);
    Ok((v, m))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::ops::batchnorm::BatchNorm2d;
    use crate::engine::parallel::collective::ring;

    fn rows(n: usize, c: usize, seed: usize) -> Vec<f32> {
        (0..n * c)
            .map(|i| (((i + seed) * 2_654_435_761) % 1000) as f32 / 100.0 - 3.0)
            .collect()
    }

    #[test]
    fn one_rank_matches_local_statistics_bit_for_bit() {
        let x = rows(300, 5, 1);
        let r = ring(1);
        let (m, v, n) = global_stats(&x, 5, &r[0]).unwrap();
        let (lm, lv) = BatchNorm2d::batch_stats(&x, 5);
        assert_eq!(n, 300);
        assert_eq!(m, lm);
        assert_eq!(v, lv);
    }

    #[test]
    fn two_shards_give_the_statistics_of_the_whole() {
        let c = 3;
        let x = rows(40, c, 7);
        let (whole_m, whole_v) = BatchNorm2d::batch_stats(&x, c);
        let rings = ring(2);
        let out: Vec<_> = std::thread::scope(|s| {
            let hs: Vec<_> = rings
                .iter()
                .enumerate()
                .map(|(r, ring)| {
                    let shard = x[r * 20 * c..(r + 1) * 20 * c].to_vec();
                    s.spawn(move || global_stats(&shard, c, ring).unwrap())
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (m, v, n) in out {
            assert_eq!(n, 40);
            for i in 0..c {
                assert!((m[i] - whole_m[i]).abs() < 1e-5, "{m:?} vs {whole_m:?}");
                assert!((v[i] - whole_v[i]).abs() < 1e-4, "{v:?} vs {whole_v:?}");
            }
        }
    }
}
