//! Op geometry shared by the CPU kernels, the CUDA kernels and cuDNN's keys: one
//! definition, below both, so neither backend borrows the other's op module.

/// Geometry of one convolution.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConvGeom {
    pub n: usize,
    pub h: usize,
    pub w: usize,
    pub c_in: usize,
    pub c_out: usize,
    pub k: usize,
    pub stride: usize,
    pub pad: usize,
}

impl ConvGeom {
    pub fn oh(&self) -> usize {
        (self.h + 2 * self.pad - self.k) / self.stride + 1
    }
    pub fn ow(&self) -> usize {
        (self.w + 2 * self.pad - self.k) / self.stride + 1
    }
    /// Columns of the im2col matrix.
    pub fn kkc(&self) -> usize {
        self.k * self.k * self.c_in
    }
    /// Rows of the im2col matrix (output pixels over the batch).
    pub fn rows(&self) -> usize {
        self.n * self.oh() * self.ow()
    }
    /// A 1x1, stride-1, unpadded conv is a plain GEMM on the input.
    pub(crate) fn is_pointwise(&self) -> bool {
        self.k == 1 && self.stride == 1 && self.pad == 0
    }
}
