// The CUDA backend's kernels, compiled once per process by NVRTC (PTX cached on disk by
// `cuda::kernels`). Everything is f32 in NHWC, the CPU backend's layout, so the two can
// be compared element by element. Half types are 16-bit words converted with PTX `cvt`,
// which keeps NVRTC free of include paths (cuda_fp16.h is not shipped with libnvrtc).
//
// Index arithmetic is 64-bit where a product can pass 2^31 (im2col of a large batch).

typedef unsigned long long u64;

#define GRID_STRIDE(i, n) \
    for (u64 i = (u64)blockIdx.x * blockDim.x + threadIdx.x; i < (u64)(n); \
         i += (u64)blockDim.x * gridDim.x)

// ---- elementwise -------------------------------------------------------------------

extern "C" __global__ void fill(float* y, float v, u64 n) {
    GRID_STRIDE(i, n) { y[i] = v; }
}

// y[r, c] = b[c]: the bias a following GEMM accumulates onto.
extern "C" __global__ void fill_rows(float* y, const float* b, u64 rows, int cols) {
    GRID_STRIDE(i, rows * cols) { y[i] = b[i % cols]; }
}

// y += a * x
extern "C" __global__ void axpy(float* y, const float* x, float a, u64 n) {
    GRID_STRIDE(i, n) { y[i] += a * x[i]; }
}

extern "C" __global__ void scale(float* y, float a, u64 n) {
    GRID_STRIDE(i, n) { y[i] *= a; }
}

extern "C" __global__ void relu_forward(float* y, const float* x, u64 n) {
    GRID_STRIDE(i, n) { y[i] = fmaxf(x[i], 0.0f); }
}

// The mask is the forward output, as on the CPU: dx = dy where y > 0.
extern "C" __global__ void relu_backward(float* dx, const float* dy, const float* y, u64 n) {
    GRID_STRIDE(i, n) { dx[i] = y[i] > 0.0f ? dy[i] : 0.0f; }
}

// GELU, tanh approximation (PyTorch's nn.GELU(approximate="tanh")), with the CPU op's
// constants (ops/activation.rs). Backward takes the saved input, as the CPU layer does.
#define GELU_K0 0.7978846f /* sqrt(2/pi) */
#define GELU_K1 0.044715f
extern "C" __global__ void gelu_forward(float* y, const float* x, u64 n) {
    GRID_STRIDE(i, n) {
        float v = x[i];
        float t = tanhf(GELU_K0 * (v + GELU_K1 * v * v * v));
        y[i] = 0.5f * v * (1.0f + t);
    }
}

extern "C" __global__ void gelu_backward(float* dx, const float* dy, const float* x, u64 n) {
    GRID_STRIDE(i, n) {
        float v = x[i];
        float t = tanhf(GELU_K0 * (v + GELU_K1 * v * v * v));
        float du = GELU_K0 * (1.0f + 3.0f * GELU_K1 * v * v);
        dx[i] = dy[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du);
    }
}

// ---- half precision (AMP storage) ---------------------------------------------------

#ifdef __CUDACC__
__device__ __forceinline__ unsigned short f32_to_f16_bits(float x) {
    unsigned short r;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r) : "f"(x));
    return r;
}
__device__ __forceinline__ float f16_bits_to_f32(unsigned short h) {
    float r;
    asm("cvt.f32.f16 %0, %1;" : "=f"(r) : "h"(h));
    return r;
}
#else
// The host build (tests/standin, the CPU stand-in): no PTX there, the compiler's IEEE
// half type rounds to nearest even as cvt.rn does.
__device__ __forceinline__ unsigned short f32_to_f16_bits(float x) {
    _Float16 h = (_Float16)x;
    unsigned short r;
    memcpy(&r, &h, 2);
    return r;
}
__device__ __forceinline__ float f16_bits_to_f32(unsigned short h) {
    _Float16 f;
    memcpy(&f, &h, 2);
    return (float)f;
}
#endif
// bf16 is the top half of an f32; round to nearest even, NaN stays NaN.
__device__ __forceinline__ unsigned short f32_to_bf16_bits(float x) {
    unsigned int u = __float_as_uint(x);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
}
__device__ __forceinline__ float bf16_bits_to_f32(unsigned short h) {
    return __uint_as_float(((unsigned int)h) << 16);
}

extern "C" __global__ void narrow_f16(unsigned short* y, const float* x, u64 n) {
    GRID_STRIDE(i, n) { y[i] = f32_to_f16_bits(x[i]); }
}
extern "C" __global__ void widen_f16(float* y, const unsigned short* x, u64 n) {
    GRID_STRIDE(i, n) { y[i] = f16_bits_to_f32(x[i]); }
}
extern "C" __global__ void narrow_bf16(unsigned short* y, const float* x, u64 n) {
    GRID_STRIDE(i, n) { y[i] = f32_to_bf16_bits(x[i]); }
}
extern "C" __global__ void widen_bf16(float* y, const unsigned short* x, u64 n) {
    GRID_STRIDE(i, n) { y[i] = bf16_bits_to_f32(x[i]); }
}

// ---- per-channel reductions (bias gradient, batch norm) ----------------------------
//
// Blocks of 32 x 8 threads: x walks 32 adjacent channels (coalesced rows), y splits the
// rows; partial sums meet in shared memory and one atomicAdd per channel per block.

#define RED_X 32
#define RED_Y 8

__device__ __forceinline__ void block_col_add(float* out, float acc, int ch, int c) {
    __shared__ float part[RED_Y][RED_X];
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && ch < c) {
        float s = 0.0f;
        for (int k = 0; k < RED_Y; ++k) s += part[k][threadIdx.x];
        atomicAdd(&out[ch], s);
    }
}

// out[ch] += sum over rows of x[r, ch]
extern "C" __global__ void channel_sum(float* out, const float* x, u64 rows, int c) {
    int ch = blockIdx.x * RED_X + threadIdx.x;
    float acc = 0.0f;
    if (ch < c) {
        for (u64 r = (u64)blockIdx.y * RED_Y + threadIdx.y; r < rows;
             r += (u64)gridDim.y * RED_Y)
            acc += x[r * c + ch];
    }
    block_col_add(out, acc, ch, c);
}

// out[ch] += sum over rows of (x[r, ch] - mean[ch])^2
extern "C" __global__ void channel_sqdev(float* out, const float* x, const float* mean, u64 rows,
                                         int c) {
    int ch = blockIdx.x * RED_X + threadIdx.x;
    float acc = 0.0f;
    if (ch < c) {
        float mu = mean[ch];
        for (u64 r = (u64)blockIdx.y * RED_Y + threadIdx.y; r < rows;
             r += (u64)gridDim.y * RED_Y) {
            float d = x[r * c + ch] - mu;
            acc += d * d;
        }
    }
    block_col_add(out, acc, ch, c);
}

// out[ch] += sum dy[r, ch] * xhat[r, ch]  (the dgamma half of batch norm's backward)
extern "C" __global__ void channel_dot(float* out, const float* dy, const float* xhat, u64 rows,
                                       int c) {
    int ch = blockIdx.x * RED_X + threadIdx.x;
    float acc = 0.0f;
    if (ch < c) {
        for (u64 r = (u64)blockIdx.y * RED_Y + threadIdx.y; r < rows;
             r += (u64)gridDim.y * RED_Y)
            acc += dy[r * c + ch] * xhat[r * c + ch];
    }
    block_col_add(out, acc, ch, c);
}

// ---- batch norm --------------------------------------------------------------------

// Biased variance and invstd from summed squared deviations over m rows; running
// statistics updated with the unbiased variance, as torch.nn.BatchNorm2d.
__device__ __forceinline__ void bn_finish_one(int i, float* mean, float* var, float* invstd,
                                              float* run_mean, float* run_var, float m,
                                              float eps, float momentum, int update_running) {
    float v = var[i] / m;
    var[i] = v;
    invstd[i] = rsqrtf(v + eps);
    if (update_running) {
        float unbias = m / fmaxf(m - 1.0f, 1.0f);
        run_mean[i] = (1.0f - momentum) * run_mean[i] + momentum * mean[i];
        run_var[i] = (1.0f - momentum) * run_var[i] + momentum * v * unbias;
    }
}

// On entry `var` holds the summed squared deviations; on exit the biased variance.
extern "C" __global__ void bn_finish(float* mean, float* var, float* invstd, float* run_mean,
                                     float* run_var, int c, float m, float eps, float momentum,
                                     int update_running) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= c) return;
    bn_finish_one(i, mean, var, invstd, run_mean, run_var, m, eps, momentum, update_running);
}

// SyncBatchNorm: `sums` holds c channel sums and the row count, all summed over every
// rank; on exit its first c entries are the global means. The count stays on the device
// so no rank waits on the host for it (as torch's batch_norm_gather_stats_with_counts).
extern "C" __global__ void bn_sync_mean(float* sums, int c) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < c) sums[i] /= sums[c];
}

// bn_finish over the global batch: the row count is mean[c] (after bn_sync_mean).
extern "C" __global__ void bn_sync_finish(float* mean, float* var, float* invstd,
                                          float* run_mean, float* run_var, int c, float eps,
                                          float momentum, int update_running) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= c) return;
    bn_finish_one(i, mean, var, invstd, run_mean, run_var, mean[c], eps, momentum,
                  update_running);
}

// Evaluation: invstd from the running variance.
extern "C" __global__ void bn_invstd(float* invstd, const float* var, int c, float eps) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < c) invstd[i] = rsqrtf(var[i] + eps);
}

// xhat = (x - mean) * invstd (kept when xhat != 0); y = gamma * xhat + beta
extern "C" __global__ void bn_forward(float* y, float* xhat, const float* x, const float* mean,
                                      const float* invstd, const float* gamma,
                                      const float* beta, u64 n, int c) {
    GRID_STRIDE(i, n) {
        int ch = (int)(i % c);
        float h = (x[i] - mean[ch]) * invstd[ch];
        if (xhat) xhat[i] = h;
        y[i] = gamma[ch] * h + beta[ch];
    }
}

// dx = gamma*invstd*(dy - dbeta/m - xhat*dgamma/m), dbeta and dgamma summed over the batch
extern "C" __global__ void bn_backward_dx(float* dx, const float* dy, const float* xhat,
                                          const float* gamma, const float* invstd,
                                          const float* dbeta, const float* dgamma, float inv_m,
                                          u64 n, int c) {
    GRID_STRIDE(i, n) {
        int ch = (int)(i % c);
        dx[i] = gamma[ch] * invstd[ch] *
                (dy[i] - dbeta[ch] * inv_m - xhat[i] * dgamma[ch] * inv_m);
    }
}

// SyncBatchNorm's input gradient: `sums` holds dbeta (c), dgamma (c) and the row count,
// summed over every rank.
extern "C" __global__ void bn_sync_backward_dx(float* dx, const float* dy, const float* xhat,
                                               const float* gamma, const float* invstd,
                                               const float* sums, u64 n, int c) {
    float inv_m = 1.0f / sums[2 * c];
    GRID_STRIDE(i, n) {
        int ch = (int)(i % c);
        dx[i] = gamma[ch] * invstd[ch] *
                (dy[i] - sums[ch] * inv_m - xhat[i] * sums[c + ch] * inv_m);
    }
}

// ---- fused pointwise chains (`fuse = on`: ops/fused.rs, ops/fused_cuda.rs) ---------------

// y[r, c] = max(y[r, c] + b[c], 0): a bias-less GEMM's output, its bias and ReLU in one
// pass (unfused: fill_rows before the GEMM and relu_forward after it).
extern "C" __global__ void bias_relu(float* y, const float* b, u64 rows, int cols) {
    GRID_STRIDE(i, rows * cols) { y[i] = fmaxf(y[i] + b[i % cols], 0.0f); }
}

// dm = dy where y > 0 (ReLU's mask, from its output) and gb[ch] += the column sums of dm:
// ReLU's backward and the bias gradient in one pass.
extern "C" __global__ void relu_mask_channel_sum(float* dm, float* gb, const float* dy,
                                                 const float* y, u64 rows, int c) {
    int ch = blockIdx.x * RED_X + threadIdx.x;
    float acc = 0.0f;
    if (ch < c) {
        for (u64 r = (u64)blockIdx.y * RED_Y + threadIdx.y; r < rows;
             r += (u64)gridDim.y * RED_Y) {
            u64 i = r * c + ch;
            float d = y[i] > 0.0f ? dy[i] : 0.0f;
            dm[i] = d;
            acc += d;
        }
    }
    block_col_add(gb, acc, ch, c);
}

// Batch norm's output through ReLU: positive exactly where gamma*xhat + beta is, the
// expression the backward kernels below recompute the mask from.
__device__ __forceinline__ float bn_relu_grad(float d, float h, float g, float b) {
    return g * h + b > 0.0f ? d : 0.0f;
}

// bn_forward with ReLU applied in the same pass.
extern "C" __global__ void bn_relu_forward(float* y, float* xhat, const float* x,
                                           const float* mean, const float* invstd,
                                           const float* gamma, const float* beta, u64 n,
                                           int c) {
    GRID_STRIDE(i, n) {
        int ch = (int)(i % c);
        float h = (x[i] - mean[ch]) * invstd[ch];
        if (xhat) xhat[i] = h;
        y[i] = fmaxf(gamma[ch] * h + beta[ch], 0.0f);
    }
}

// dbeta[ch] += sum dm and dgamma[ch] += sum dm * xhat, dm being ReLU's mask on dy
// recomputed from xhat: relu_backward, channel_sum and channel_dot in one pass.
extern "C" __global__ void bn_relu_channel_sums(float* dbeta, float* dgamma, const float* dy,
                                                const float* xhat, const float* gamma,
                                                const float* beta, u64 rows, int c) {
    int ch = blockIdx.x * RED_X + threadIdx.x;
    float sb = 0.0f, sg = 0.0f;
    if (ch < c) {
        float g = gamma[ch], b = beta[ch];
        for (u64 r = (u64)blockIdx.y * RED_Y + threadIdx.y; r < rows;
             r += (u64)gridDim.y * RED_Y) {
            u64 i = r * c + ch;
            float h = xhat[i];
            float d = bn_relu_grad(dy[i], h, g, b);
            sb += d;
            sg += d * h;
        }
    }
    block_col_add(dbeta, sb, ch, c);
    // The second sum reuses the block's shared row: every thread waits until the first
    // has been read out.
    __syncthreads();
    block_col_add(dgamma, sg, ch, c);
}

// bn_backward_dx on ReLU's masked gradient, the mask recomputed from xhat.
extern "C" __global__ void bn_relu_backward_dx(float* dx, const float* dy, const float* xhat,
                                               const float* gamma, const float* beta,
                                               const float* invstd, const float* dbeta,
                                               const float* dgamma, float inv_m, u64 n,
                                               int c) {
    GRID_STRIDE(i, n) {
        int ch = (int)(i % c);
        float h = xhat[i];
        float d = bn_relu_grad(dy[i], h, gamma[ch], beta[ch]);
        dx[i] = gamma[ch] * invstd[ch] * (d - dbeta[ch] * inv_m - h * dgamma[ch] * inv_m);
    }
}

// ReLU's mask alone, recomputed from xhat: the SyncBatchNorm path, whose sums cross ranks
// between the two passes, masks once up front.
extern "C" __global__ void bn_relu_mask(float* dm, const float* dy, const float* xhat,
                                        const float* gamma, const float* beta, u64 n, int c) {
    GRID_STRIDE(i, n) {
        int ch = (int)(i % c);
        dm[i] = bn_relu_grad(dy[i], xhat[i], gamma[ch], beta[ch]);
    }
}

// ---- convolution helpers (NHWC, patch columns ordered ky, kx, c as the weights) ---------

extern "C" __global__ void im2col(float* col, const float* x, int n, int h, int w, int c, int k,
                                  int stride, int pad, int oh, int ow) {
    u64 kkc = (u64)k * k * c;
    u64 total = (u64)n * oh * ow * kkc;
    GRID_STRIDE(i, total) {
        u64 row = i / kkc;
        int j = (int)(i % kkc);
        int ci = j % c;
        int kx = (j / c) % k;
        int ky = j / (c * k);
        int ox = (int)(row % ow);
        int oy = (int)((row / ow) % oh);
        u64 b = row / ((u64)ow * oh);
        int iy = oy * stride + ky - pad;
        int ix = ox * stride + kx - pad;
        col[i] = (iy >= 0 && iy < h && ix >= 0 && ix < w)
                     ? x[((b * h + iy) * w + ix) * c + ci]
                     : 0.0f;
    }
}

// Gather form of col2im: each input element sums the patch entries that read it, so the
// result is deterministic and needs no atomics. Overwrites dx.
extern "C" __global__ void col2im(float* dx, const float* col, int n, int h, int w, int c, int k,
                                  int stride, int pad, int oh, int ow) {
    u64 kkc = (u64)k * k * c;
    u64 total = (u64)n * h * w * c;
    GRID_STRIDE(i, total) {
        int ci = (int)(i % c);
        int ix = (int)((i / c) % w);
        int iy = (int)((i / ((u64)c * w)) % h);
        u64 b = i / ((u64)c * w * h);
        float acc = 0.0f;
        for (int ky = 0; ky < k; ++ky) {
            int ty = iy + pad - ky;
            if (ty < 0 || ty % stride) continue;
            int oy = ty / stride;
            if (oy >= oh) continue;
            for (int kx = 0; kx < k; ++kx) {
                int tx = ix + pad - kx;
                if (tx < 0 || tx % stride) continue;
                int ox = tx / stride;
                if (ox >= ow) continue;
                acc += col[((b * oh + oy) * ow + ox) * kkc + (u64)(ky * k + kx) * c + ci];
            }
        }
        dx[i] = acc;
    }
}

// ---- pooling -----------------------------------------------------------------------

extern "C" __global__ void gap_forward(float* y, const float* x, int n, int hw, int c) {
    GRID_STRIDE(i, (u64)n * c) {
        int ch = (int)(i % c);
        u64 b = i / c;
        float acc = 0.0f;
        for (int p = 0; p < hw; ++p) acc += x[(b * hw + p) * c + ch];
        y[i] = acc / (float)hw;
    }
}

extern "C" __global__ void gap_backward(float* dx, const float* dy, int n, int hw, int c) {
    GRID_STRIDE(i, (u64)n * hw * c) {
        int ch = (int)(i % c);
        u64 b = i / ((u64)hw * c);
        dx[i] = dy[b * c + ch] / (float)hw;
    }
}

// ---- loss --------------------------------------------------------------------------

// One thread per row (k is the class count, small). loss[r] is the row's loss; correct[r]
// is 1 when the argmax is the label; dlogits = (softmax - onehot) * scale / n.
extern "C" __global__ void softmax_xent(float* dlogits, float* loss, float* correct,
                                        const float* logits, const unsigned int* labels, int n,
                                        int k, float scale) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= n) return;
    const float* row = logits + (u64)r * k;
    int label = (int)labels[r];
    float mx = __int_as_float(0xff800000);  // -inf; NVRTC has no math.h macros
    int arg = 0;
    for (int j = 0; j < k; ++j)
        if (row[j] > mx) { mx = row[j]; arg = j; }
    float sum = 0.0f;
    for (int j = 0; j < k; ++j) sum += expf(row[j] - mx);
    loss[r] = logf(sum) + mx - row[label];
    correct[r] = arg == label ? 1.0f : 0.0f;
    if (dlogits) {
        float f = scale / (float)n;
        for (int j = 0; j < k; ++j) {
            float p = expf(row[j] - mx) / sum;
            dlogits[(u64)r * k + j] = (p - (j == label ? 1.0f : 0.0f)) * f;
        }
    }
}

// ---- optimizers and the loss scaler (no host sync: state lives on the device) -----------
//
// `amp_state` = [loss scale, found_inf (0/1), growth tracker, optimizer steps taken]. The
// optimizers divide by the scale and do nothing on a step whose gradients overflowed, as
// torch's fused optimizers with GradScaler. The step count lives here too, so a skipped
// step is not counted in AdamW's bias correction (the host cannot know of the skip
// without a sync); it is exact as a float up to 2^24 steps.

extern "C" __global__ void find_nonfinite(float* amp_state, const float* g, u64 n) {
    GRID_STRIDE(i, n) {
        if (!isfinite(g[i])) amp_state[1] = 1.0f;
    }
}

// Before the optimizer kernels of a step: counts the step unless it is skipped.
extern "C" __global__ void opt_begin_step(float* amp_state) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    if (amp_state[1] == 0.0f) amp_state[3] += 1.0f;
}

// a^b by repeated squaring, the order of the host's `powi` (compiler-rt's __powisf2), so
// the bias corrections round as on the CPU backend.
__device__ __forceinline__ float powi_f(float a, int b) {
    float r = 1.0f;
    for (;;) {
        if (b & 1) r *= a;
        b /= 2;
        if (b == 0) break;
        a *= a;
    }
    return r;
}

extern "C" __global__ void sgd_step(float* w, const float* g, float* buf, const float* amp_state,
                                    u64 n, float lr, float momentum, float wd) {
    if (amp_state[1] != 0.0f) return;
    float inv = 1.0f / amp_state[0];
    int first = amp_state[3] == 1.0f;
    GRID_STRIDE(i, n) {
        float d = g[i] * inv + wd * w[i];
        if (buf) {
            float b = first ? d : momentum * buf[i] + d;
            buf[i] = b;
            w[i] -= lr * b;
        } else {
            w[i] -= lr * d;
        }
    }
}

extern "C" __global__ void adamw_step(float* w, const float* g, float* m, float* v,
                                      const float* amp_state, u64 n, float lr, float b1, float b2,
                                      float eps, float wd) {
    if (amp_state[1] != 0.0f) return;
    float inv = 1.0f / amp_state[0];
    int t = (int)amp_state[3];
    float bc1 = 1.0f - powi_f(b1, t);
    float bc2 = 1.0f - powi_f(b2, t);
    GRID_STRIDE(i, n) {
        float gi = g[i] * inv;
        w[i] *= 1.0f - lr * wd;
        m[i] = b1 * m[i] + (1.0f - b1) * gi;
        v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
        w[i] -= lr * (m[i] / bc1) / (sqrtf(v[i] / bc2) + eps);
    }
}

// GradScaler.update on the device: back off and reset on overflow, grow after `interval`
// clean steps. Also clears found_inf for the next step; `skipped[step]` records the
// outcome so the host reads every step's decision once, at the end of the run.
extern "C" __global__ void scaler_update(float* amp_state, float* skipped, int step,
                                         float growth, float backoff, int interval) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    float found = amp_state[1];
    skipped[step] = found;
    if (found != 0.0f) {
        amp_state[0] *= backoff;
        amp_state[2] = 0.0f;
    } else {
        amp_state[2] += 1.0f;
        if (amp_state[2] >= (float)interval) {
            // PyTorch (and the CPU's GradScaler) keep the old scale when growing would
            // overflow f32: an infinite scale would turn every later gradient into NaN.
            float grown = amp_state[0] * growth;
            if (isfinite(grown)) amp_state[0] = grown;
            amp_state[2] = 0.0f;
        }
    }
    amp_state[1] = 0.0f;
}
