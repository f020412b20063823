//! Softmax cross-entropy over logits `[N, K]`, mean over the batch, fused with its
//! gradient (the numerically stable log-sum-exp form).

use crate::error::{Error, Result};

/// Returns (mean loss, number of correct argmax predictions). When `dlogits` is given it
/// receives `(softmax - onehot) * scale / N`; `scale` carries loss scaling and gradient
/// accumulation.
pub fn softmax_cross_entropy(
    logits: &[f32],
    labels: &[u32],
    k: usize,
    scale: f32,
    dlogits: Option<&mut [f32]>,
) -> Result<(f32, usize)> {
    let n = labels.len();
    if n == 0 || k == 0 || logits.len() != n * k {
        return Err(Error::Shape {
            op: "softmax_cross_entropy",
            msg: format!("{} logits for {n} labels and {k} classes", logits.len()),
        });
    }
    if let Some(&bad) = labels.iter().find(|&&l| l as usize >= k) {
        return Err(Error::Shape {
            op: "softmax_cross_entropy",
            msg: format!("label {bad} out of range for {k} classes"),
        });
    }
    let mut total = 0.0f64;
    let mut correct = 0;
    let mut probs = vec![0.0f32; k];
    let mut dl = dlogits;
    for (i, &label) in labels.iter().enumerate() {
        let row = &logits[i * k..(i + 1) * k];
        let (mut arg, mut max) = (0, f32::NEG_INFINITY);
        for (j, &v) in row.iter().enumerate() {
            if v > max {
                max = v;
                arg = j;
            }
        }
        if arg == label as usize {
            correct += 1;
        }
        let mut sum = 0.0f32;
        for (p, &v) in probs.iter_mut().zip(row) {
            *p = (v - max).exp();
            sum += *p;
        }
        total += (sum.ln() + max - row[label as usize]) as f64;
        if let Some(d) = dl.as_deref_mut() {
            let f = scale / n as f32;
            let drow = &mut d[i * k..(i + 1) * k];
            for (j, (dv, p)) in drow.iter_mut().zip(&probs).enumerate() {
                let one = if j == label as usize { 1.0 } else { 0.0 };
                *dv = (p / sum - one) * f;
            }
        }
    }
    Ok(((total / n as f64) as f32, correct))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uniform_logits_give_ln_k() {
        let (l, _) = softmax_cross_entropy(&[0.0; 20], &[0, 1], 10, 1.0, None).unwrap();
        assert!((l - 10f32.ln()).abs() < 1e-6);
    }

    #[test]
    fn gradient_matches_finite_difference() {
        let logits: Vec<f32> = (0..12).map(|i| ((i * 7 % 5) as f32 - 2.0) * 0.3).collect();
        let labels = [1u32, 3, 0];
        let mut d = vec![0.0; 12];
        softmax_cross_entropy(&logits, &labels, 4, 1.0, Some(&mut d)).unwrap();
        for i in 0..12 {
            let mut p = logits.clone();
            p[i] += 1e-2;
            let mut m = logits.clone();
            m[i] -= 1e-2;
            let lp = softmax_cross_entropy(&p, &labels, 4, 1.0, None).unwrap().0;
            let lm = softmax_cross_entropy(&m, &labels, 4, 1.0, None).unwrap().0;
            let fd = (lp - lm) / 2e-2;
            assert!((fd - d[i]).abs() < 1e-3, "{i}: {fd} vs {}", d[i]);
        }
    }

    #[test]
    fn rejects_out_of_range_label() {
        assert!(softmax_cross_entropy(&[0.0; 4], &[2], 4, 1.0, None).is_ok());
        assert!(softmax_cross_entropy(&[0.0; 4], &[4], 4, 1.0, None).is_err());
    }
}
