//! Dense matrix multiply on f32 through the `gemm` crate. Views carry strides, so
//! transposed operands cost nothing: backward passes never materialise a transpose.

use crate::error::{Error, Result};

/// A read-only matrix view: element (r, c) is at `data[r * rs + c * cs]`.
#[derive(Clone, Copy)]
pub struct Mat<'a> {
    pub data: &'a [f32],
    pub rows: usize,
    pub cols: usize,
    pub rs: usize,
    pub cs: usize,
}

impl<'a> Mat<'a> {
    /// A row-major `rows x cols` matrix.
    pub fn rm(data: &'a [f32], rows: usize, cols: usize) -> Mat<'a> {
        Mat {
            data,
            rows,
            cols,
            rs: cols,
            cs: 1,
        }
    }

    /// The transpose of this view.
    pub fn t(self) -> Mat<'a> {
        Mat {
            data: self.data,
            rows: self.cols,
            cols: self.rows,
            rs: self.cs,
            cs: self.rs,
        }
    }

    fn last_index(&self) -> usize {
        if self.rows == 0 || self.cols == 0 {
            0
        } else {
            (self.rows - 1) * self.rs + (self.cols - 1) * self.cs
        }
    }
}

/// One `gemm::gemm` call: `dst (m x n, row stride ld) = [dst +] a * b`, the operands
/// given by their first element and their views' strides.
///
/// # Safety
/// Every index the call touches must lie inside the memory behind `dst`, `a` and `b`
/// (`(rows-1)*rs + (cols-1)*cs` from each pointer, `(m-1)*ld + n` for `dst`), and `dst`
/// must not overlap `a`, `b` or memory another thread writes.
#[allow(clippy::too_many_arguments)]
unsafe fn raw_gemm(
    (m, k, n): (usize, usize, usize),
    dst: *mut f32,
    ld: usize,
    (ap, a): (*const f32, &Mat),
    (bp, b): (*const f32, &Mat),
    accumulate: bool,
    par: gemm::Parallelism,
) {
    // SAFETY: the caller's contract above.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst,
            1,
            ld as isize,
            accumulate,
            ap,
            a.cs as isize,
            a.rs as isize,
            bp,
            b.cs as isize,
            b.rs as isize,
            1.0,
            1.0,
            false,
            false,
            false,
            par,
        )
    }
}

/// `dst (m x n, row-major) = [dst +] a (m x k) * b (k x n)`.
/// `accumulate = false` overwrites `dst` without reading it. With `Rayon(t)`, t > 1, the
/// output is split over t single-threaded GEMMs ([`matmul_split`]) rather than left to
/// the gemm crate's own split, which packs the larger operand once per thread.
pub fn matmul(
    dst: &mut [f32],
    a: Mat,
    b: Mat,
    accumulate: bool,
    par: gemm::Parallelism,
) -> Result<()> {
    match par {
        gemm::Parallelism::Rayon(t) if t > 1 => matmul_split(dst, a, b, accumulate, t),
        _ => matmul_one(dst, a, b, accumulate),
    }
}

/// `matmul` on the calling thread.
fn matmul_one(dst: &mut [f32], a: Mat, b: Mat, accumulate: bool) -> Result<()> {
    let par = gemm::Parallelism::None;
    let (m, k, n) = (a.rows, a.cols, b.cols);
    if b.rows != k
        || dst.len() < m * n
        || (k > 0 && (a.last_index() >= a.data.len() || b.last_index() >= b.data.len()))
    {
        return Err(Error::Shape {
            op: "matmul",
            msg: format!(
                "({m}x{k}) * ({}x{n}) into {} elements (a has {}, b has {})",
                b.rows,
                dst.len(),
                a.data.len(),
                b.data.len()
            ),
        });
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    if k == 0 {
        if !accumulate {
            dst[..m * n].fill(0.0);
        }
        return Ok(());
    }
    // SAFETY: the bounds check above guarantees every index the kernel touches
    // (`(rows-1)*rs + (cols-1)*cs` for each operand, `m*n` for dst) lies inside the
    // slices, and `dst` is a unique &mut borrow so it cannot alias `a` or `b`.
    unsafe {
        raw_gemm(
            (m, k, n),
            dst.as_mut_ptr(),
            n,
            (a.data.as_ptr(), &a),
            (b.data.as_ptr(), &b),
            accumulate,
            par,
        );
    }
    Ok(())
}

/// `dst`'s raw pointer for the blocks of [`matmul_split`], which write disjoint parts of
/// it from several threads.
#[derive(Clone, Copy)]
struct DstPtr(*mut f32);
// SAFETY: each task writes only its own block of `dst` (disjoint rows or columns), and
// `matmul_split` holds the unique borrow until every task has finished.
unsafe impl Send for DstPtr {}
unsafe impl Sync for DstPtr {}

impl DstPtr {
    /// The pointer, through a method so a closure captures the whole (Send) wrapper
    /// rather than its raw-pointer field.
    fn get(self) -> *mut f32 {
        self.0
    }
}

/// `matmul` with the output split into `threads` blocks, each a single-threaded GEMM on
/// its own rayon task: rows where `a` is the taller operand (each task packs its rows of
/// `a` and all of `b`), columns otherwise (its columns of `b` and all of `a`), so the
/// larger operand is packed once over all tasks rather than once per thread.
pub fn matmul_split(
    dst: &mut [f32],
    a: Mat,
    b: Mat,
    accumulate: bool,
    threads: usize,
) -> Result<()> {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    // Too small to split, or malformed (matmul_one then names the mismatch).
    if threads <= 1
        || m.max(n) < 2 * threads
        || k == 0
        || b.rows != k
        || dst.len() < m * n
        || a.last_index() >= a.data.len()
        || b.last_index() >= b.data.len()
    {
        return matmul_one(dst, a, b, accumulate);
    }
    let by_rows = m >= n;
    let len = if by_rows { m } else { n };
    let per = len.div_ceil(threads);
    let out = DstPtr(dst.as_mut_ptr());
    use rayon::prelude::*;
    (0..len.div_ceil(per)).into_par_iter().for_each(|i| {
        let (s, e) = (i * per, ((i + 1) * per).min(len));
        let (mm, nn) = if by_rows { (e - s, n) } else { (m, e - s) };
        let (ap, bp, dp) = if by_rows {
            // SAFETY: s < m, so the offsets stay inside `a` and `dst` (checked above).
            unsafe {
                (
                    a.data.as_ptr().add(s * a.rs),
                    b.data.as_ptr(),
                    out.get().add(s * n),
                )
            }
        } else {
            // SAFETY: s < n, likewise inside `b` and `dst`.
            unsafe {
                (
                    a.data.as_ptr(),
                    b.data.as_ptr().add(s * b.cs),
                    out.get().add(s),
                )
            }
        };
        // SAFETY: the block is rows (or columns) s..e of the checked problem: every index
        // lies inside the operands, and blocks of `dst` do not overlap.
        unsafe {
            raw_gemm(
                (mm, k, nn),
                dp,
                n,
                (ap, &a),
                (bp, &b),
                accumulate,
                gemm::Parallelism::None,
            );
        }
    });
    Ok(())
}

/// `matmul`, computed as `dst^T = b^T a^T` in `scratch` (at least m*n floats, `dst`'s
/// contents turned into it first when accumulating) and turned back into `dst`. The
/// `gemm` crate sums each element's k-loop in the same blocks either way, so the result
/// is bit-identical (`tests::turned_is_bit_identical`, and the golden losses), but it
/// packs a column-major right-hand side slowly; where `b` is one (`x W^T` in linear's
/// forward, `dy^T col` in conv's weight gradient) the turned problem is faster. Figures:
/// docs/performance.md, "The GEMM's orientation".
pub fn matmul_turned(
    dst: &mut [f32],
    a: Mat,
    b: Mat,
    accumulate: bool,
    par: gemm::Parallelism,
    scratch: &mut [f32],
) -> Result<()> {
    let (m, n) = (a.rows, b.cols);
    if scratch.len() < m * n || dst.len() < m * n {
        return Err(Error::Shape {
            op: "matmul_turned",
            msg: format!(
                "{m}x{n} result with {} scratch and {} destination elements",
                scratch.len(),
                dst.len()
            ),
        });
    }
    let t = &mut scratch[..m * n];
    if accumulate {
        turn(&dst[..m * n], m, n, t);
    }
    matmul(t, b.t(), a.t(), accumulate, par)?;
    turn(t, n, m, &mut dst[..m * n]);
    Ok(())
}

/// `dst (cols x rows) = src (rows x cols)^T`, both row-major, in 32x32 tiles so both
/// sides stay in L1 while a tile turns.
fn turn(src: &[f32], rows: usize, cols: usize, dst: &mut [f32]) {
    const T: usize = 32;
    for r0 in (0..rows).step_by(T) {
        for c0 in (0..cols).step_by(T) {
            for r in r0..(r0 + T).min(rows) {
                let row = &src[r * cols..(r + 1) * cols];
                for c in c0..(c0 + T).min(cols) {
                    dst[c * rows + r] = row[c];
                }
            }
        }
    }
}

/// The family of f32 kernels the `gemm` crate dispatches to on this CPU, mirroring its
/// runtime choice (`gemm-common` 0.19, `gemm_def!`: AVX-512F when built with `x86-v4`,
/// else FMA, else portable code). Results are bit-identical within a family, not across
/// them (wider vectors sum in another order), so benchmarks and the golden losses name it.
pub fn kernel_family() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            return "avx512f";
        }
        if std::arch::is_x86_feature_detected!("fma") {
            return "fma";
        }
    }
    "portable"
}

/// Deterministic values in [-1, 1) for kernel tests.
#[cfg(test)]
pub fn test_data(n: usize, seed: u32) -> Vec<f32> {
    (0..n)
        .map(|i| {
            (((i as u32).wrapping_mul(2654435761).wrapping_add(seed) >> 16) % 200) as f32 / 100.0
                - 1.0
        })
        .collect()
}

/// Plain triple loop, the reference every GEMM path is tested against.
#[cfg(test)]
pub fn matmul_ref(a: Mat, b: Mat) -> Vec<f32> {
    let mut out = vec![0.0f32; a.rows * b.cols];
    for i in 0..a.rows {
        for j in 0..b.cols {
            let mut s = 0.0f64;
            for p in 0..a.cols {
                s += a.data[i * a.rs + p * a.cs] as f64 * b.data[p * b.rs + j * b.cs] as f64;
            }
            out[i * b.cols + j] = s as f32;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    use super::test_data as data;

    /// linear's forward (`x W^T` onto the bias) and conv's weight gradient (`dy^T col`
    /// onto the gradient so far), including k spanning several of gemm's k-blocks and
    /// sizes off the tile.
    #[test]
    fn turned_is_bit_identical() {
        let par = gemm::Parallelism::None;
        for (m, k, n) in [
            (16, 1024, 1024),
            (37, 300, 45),
            (64, 16384, 288),
            (32, 4096, 27),
        ] {
            // a (m x k) row-major; b (k x n) as the transpose of a row-major (n x k).
            let a = data(m * k, 3);
            let bt = data(n * k, 4);
            let (am, bm) = (Mat::rm(&a, m, k), Mat::rm(&bt, n, k).t());
            let start = data(m * n, 5);
            let mut want = start.clone();
            matmul(&mut want, am, bm, true, par).unwrap();
            let mut got = start.clone();
            let mut scratch = vec![f32::NAN; m * n];
            matmul_turned(&mut got, am, bm, true, par, &mut scratch).unwrap();
            assert!(
                want.iter()
                    .zip(&got)
                    .all(|(w, g)| w.to_bits() == g.to_bits()),
                "{m}x{k}x{n}: turned differs"
            );
            // and a (k x m) used transposed, b row-major: conv's dy^T col.
            let at = data(k * m, 6);
            let b = data(k * n, 7);
            let (am, bm) = (Mat::rm(&at, k, m).t(), Mat::rm(&b, k, n));
            let mut want = start.clone();
            matmul(&mut want, am, bm, true, par).unwrap();
            let mut got = start;
            matmul_turned(&mut got, am, bm, true, par, &mut scratch).unwrap();
            assert!(
                want.iter()
                    .zip(&got)
                    .all(|(w, g)| w.to_bits() == g.to_bits()),
                "{m}x{k}x{n} (a transposed): turned differs"
            );
        }
    }

    #[test]
    fn matches_reference_with_transposes_and_accumulate() {
        let (m, k, n) = (13, 37, 21);
        let a = data(m * k, 1);
        let bt = data(n * k, 2); // stored n x k, used transposed
        let am = Mat::rm(&a, m, k);
        let bm = Mat::rm(&bt, n, k).t();
        let want = matmul_ref(am, bm);
        let mut got = vec![1.0; m * n];
        matmul(&mut got, am, bm, false, gemm::Parallelism::None).unwrap();
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() < 1e-4, "{g} vs {w}");
        }
        matmul(&mut got, am, bm, true, gemm::Parallelism::None).unwrap();
        for (g, w) in got.iter().zip(&want) {
            assert!((g - 2.0 * w).abs() < 1e-4);
        }
    }

    #[test]
    fn rejects_mismatched_shapes() {
        let a = vec![0.0; 6];
        let mut d = vec![0.0; 4];
        assert!(matmul(
            &mut d,
            Mat::rm(&a, 2, 3),
            Mat::rm(&a, 2, 3),
            false,
            gemm::Parallelism::None
        )
        .is_err());
    }

    /// A `rows x cols` operand, stored transposed (`cols x rows`, row-major) when `t`.
    fn view(data: &[f32], rows: usize, cols: usize, t: bool) -> Mat<'_> {
        if t {
            Mat::rm(data, cols, rows).t()
        } else {
            Mat::rm(data, rows, cols)
        }
    }

    #[test]
    fn split_matches_one_gemm() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        for (m, k, n, ta, tb) in [
            (13, 37, 21, false, true),
            (200, 64, 7, true, false),
            (5, 300, 77, false, false),
            (64, 16384, 288, true, false),
            (1, 5, 1, false, false),
        ] {
            let a = data(m * k, 8);
            let b = data(k * n, 9);
            let (am, bm) = (view(&a, m, k, ta), view(&b, k, n, tb));
            for acc in [false, true] {
                let start = data(m * n, 10);
                let mut want = start.clone();
                matmul(&mut want, am, bm, acc, gemm::Parallelism::None).unwrap();
                for threads in [2, 3] {
                    let mut got = start.clone();
                    pool.install(|| matmul_split(&mut got, am, bm, acc, threads))
                        .unwrap();
                    let worst = want
                        .iter()
                        .zip(&got)
                        .map(|(w, g)| (w - g).abs() / (1.0 + w.abs()))
                        .fold(0.0f32, f32::max);
                    assert!(worst < 1e-5, "{m}x{k}x{n} acc={acc} x{threads}: {worst}");
                    let same = want
                        .iter()
                        .zip(&got)
                        .all(|(w, g)| w.to_bits() == g.to_bits());
                    eprintln!("{m}x{k}x{n} acc={acc} x{threads}: bit-identical {same}");
                }
            }
        }
    }

    /// The gemm crate's own parallel split, for the timing below.
    fn gemm_own(d: &mut [f32], a: Mat, b: Mat, t: usize) {
        let (m, k, n) = (a.rows, a.cols, b.cols);
        // SAFETY: the shapes come from checked views of the bench's own buffers.
        unsafe {
            raw_gemm(
                (m, k, n),
                d.as_mut_ptr(),
                n,
                (a.data.as_ptr(), &a),
                (b.data.as_ptr(), &b),
                false,
                gemm::Parallelism::Rayon(t),
            )
        }
    }

    /// Timing of the gemm crate's own 2-thread split against `matmul_split`
    /// on the mlp's and cnn-small's GEMM shapes (run by hand on an idle machine:
    /// `cargo test --release --lib split_speed -- --ignored --nocapture`).
    #[test]
    #[ignore]
    fn split_speed() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        // (m, k, n, a transposed, b transposed)
        let shapes = [
            (128, 784, 1024, false, true),   // mlp fwd 1: y = x W^T
            (1024, 1024, 128, false, true),  // mlp fwd 2 turned: y^T = W x^T
            (128, 1024, 784, false, false),  // mlp dx 1: dy W
            (128, 1024, 1024, false, false), // mlp dx 2
            (1024, 128, 784, true, false),   // mlp dW 1: dy^T x
            (1024, 128, 1024, true, false),  // mlp dW 2
            (16384, 288, 64, false, true),   // cnn conv2 fwd: col W^T
            (64, 16384, 288, true, false),   // cnn conv2 dW: dy^T col
            (4096, 576, 128, false, true),   // cnn conv3 fwd
            (128, 4096, 576, true, false),   // cnn conv3 dW
            (16384, 64, 288, false, false),  // cnn conv2 dcol: dy W
            (32, 65536, 27, true, false),    // cnn conv1 dW
            (2048, 2048, 2048, false, false),
        ];
        for (m, k, n, ta, tb) in shapes {
            let a = data(m * k, 1);
            let b = data(k * n, 2);
            let (am, bm) = (view(&a, m, k, ta), view(&b, k, n, tb));
            let mut d = vec![0.0f32; m * n];
            let mut best = |f: &mut dyn FnMut(&mut [f32])| {
                let mut t = f64::INFINITY;
                for _ in 0..7 {
                    let s = std::time::Instant::now();
                    for _ in 0..10 {
                        f(&mut d);
                    }
                    t = t.min(s.elapsed().as_secs_f64() * 100.0);
                }
                t
            };
            let own = pool.install(|| best(&mut |d| gemm_own(d, am, bm, 2)));
            let split = pool.install(|| best(&mut |d| matmul_split(d, am, bm, false, 2).unwrap()));
            let one = best(&mut |d| matmul_one(d, am, bm, false).unwrap());
            eprintln!(
                "{m}x{k}x{n} ta={ta} tb={tb}: 1 thread {one:.3} ms, gemm 2t {own:.3} ms, split 2t {split:.3} ms"
            );
        }
    }
}
