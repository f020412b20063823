//! Ops: each file holds one operation's forward and backward (CPU kernels plus the
//! `Layer` that wraps them).

pub mod activation;
pub mod batchnorm;
pub mod conv2d;
pub mod gemm;
pub mod linear;
pub mod loss;
pub mod pool;
