// The arithmetic of the cuDNN stand-in (cudnn.cpp): descriptors as plain structs and the
// three convolution directions, each in the algorithms the stand-in offers. Written from
// NVIDIA's cuDNN API reference (cudnnConvolutionForward, cudnnConvolutionBackwardData,
// cudnnConvolutionBackwardFilter, cudnnGetConvolution2dForwardOutputDim), not from tune's
// conv code:
//   P = 1 + (H + 2*pad_h - ((R-1)*dil_h + 1)) / u      (Q likewise with W, pad_w, S, v)
//   y[n,k,p,q] = sum_{c,r,s} x[n, c, p*u - pad_h + r*dil_h, q*v - pad_w + s*dil_w]
//                            * w[k, c, r', s']
//   with (r', s') = (r, s) under CUDNN_CROSS_CORRELATION and (R-1-r, S-1-s) under
//   CUDNN_CONVOLUTION (the filter flipped); x outside the image reads 0 (zero padding).
//   Backward data is the adjoint of that map in x, backward filter its adjoint in w.
//   Every output is blended as dst = alpha*result + beta*dst, and dst is not read when
//   beta == 0 (it may hold NaN: "the output is not read").
// Operands load to f32 and results round once on store (PSEUDO_HALF / PSEUDO_BFLOAT16:
// half storage, f32 compute). Algorithms that need a workspace keep their intermediate
// data there and read it back from there, so a workspace that is too small or shared with
// another buffer shows.
#pragma once
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "half.h"

namespace cudnn_standin {

enum { T_FLOAT = 0, T_DOUBLE = 1, T_HALF = 2, T_BFLOAT16 = 9 };
enum { MODE_CONVOLUTION = 0, MODE_CROSS_CORRELATION = 1 };
enum { MATH_DEFAULT = 0, MATH_TENSOR_OP = 1, MATH_ALLOW_CONVERSION = 2, MATH_FMA = 3 };

// A 4-d tensor (x, y, dx, dy), strides in elements.
struct Tensor {
    int magic;
    bool set;
    int type;
    int64_t n, c, h, w;
    int64_t sn, sc, sh, sw;
};
// A 4-d filter: K output channels, C input channels, R x S taps, packed as its format
// says (NCHW = KCRS, NHWC = KRSC); strides derived from the format.
struct Filter {
    int magic;
    bool set;
    int type, format;
    int64_t k, c, r, s;
    int64_t sk, sc, sr, ss;
};
struct Conv {
    int magic;
    bool set;
    int pad_h, pad_w, u, v, dil_h, dil_w, mode, compute;
    int math;
    int groups;
};

// The geometry one convolution's descriptors agree on.
struct Shape {
    int64_t N, C, H, W, K, R, S, P, Q;
    int64_t pad_h, pad_w, u, v, dil_h, dil_w;
    bool flip;
};

static int esize(int t) { return t == T_FLOAT ? 4 : (t == T_HALF || t == T_BFLOAT16) ? 2 : 0; }

static float load(const void* p, int t, int64_t i) {
    if (t == T_FLOAT) {
        float f;
        memcpy(&f, (const char*)p + i * 4, 4);
        return f;
    }
    uint16_t h;
    memcpy(&h, (const char*)p + i * 2, 2);
    return t == T_BFLOAT16 ? bf16_to_f32(h) : f16_to_f32(h);
}
// Round once to the element type: nearest, ties to even (NaN stays a quiet NaN).
static void store(void* p, int t, int64_t i, float v) {
    if (t == T_FLOAT) {
        memcpy((char*)p + i * 4, &v, 4);
        return;
    }
    uint16_t h = t == T_BFLOAT16 ? f32_to_bf16(v) : f32_to_f16(v);
    memcpy((char*)p + i * 2, &h, 2);
}

// Workspace contents go through memcpy: the caller's pointer need not be aligned.
static float ws_f(const void* ws, int64_t i) {
    float f;
    memcpy(&f, (const char*)ws + i * 4, 4);
    return f;
}
static void ws_put_f(void* ws, int64_t i, float f) { memcpy((char*)ws + i * 4, &f, 4); }

// One filter tap (c, r, s) as the index-precomputing algorithms keep it in the workspace:
// its offset into the image and into the filter (k = 0), and its spatial displacement.
struct Tap {
    int64_t xoff, woff;
    int32_t dh, dw;
};
static Tap ws_tap(const void* ws, int64_t i) {
    Tap t;
    memcpy(&t, (const char*)ws + i * (int64_t)sizeof(Tap), sizeof(Tap));
    return t;
}

enum Dir { FWD, BWD_DATA, BWD_FILTER };

// What one call queues: descriptors copied (the caller may destroy its own at once, as
// cuDNN allows), pointers, the scaling factors read at call time.
struct Job {
    Dir dir;
    int algo;
    Shape g;
    Tensor x, y;  // x or dx; y or dy
    Filter w;     // w or dw
    int type;
    bool tf32;
    float alpha, beta;
    const void *px, *pw, *py;  // the inputs of this direction (the output's is unused)
    void* out;
    void* ws;
};

static int64_t at(const Tensor& t, int64_t n, int64_t c, int64_t h, int64_t w) {
    return n * t.sn + c * t.sc + h * t.sh + w * t.sw;
}
static int64_t at(const Filter& f, int64_t k, int64_t c, int64_t r, int64_t s) {
    return k * f.sk + c * f.sc + r * f.sr + s * f.ss;
}

// The two inputs of a direction as f32 (TF32-rounded where the math type asks), converted
// once per call: the same values the loops would load element by element, so every sum
// adds the same terms in the same order. Converting first made a cnn-small step on the
// stand-in several times faster (the per-element type switch and memcpy dominated
// tests/gpu_cudnn.rs, 127 s of CI).
struct Operand {
    std::vector<float> f;
    void fill(const void* p, int t, bool tf, int64_t n) {
        f.resize((size_t)n);
        for (int64_t i = 0; i < n; ++i) {
            float v = load(p, t, i);
            f[(size_t)i] = tf ? tf32(v) : v;
        }
    }
};

// acc[i] += a * v[i] for i < n. Blocks of 8, which GCC vectorises at -O2 (its "very
// cheap" cost model takes a loop only when the trip count is a multiple of the vector
// width), then the rest one by one. Every element gets the one multiply and the one add a
// scalar loop gives it: results stay bit for bit (no fused multiply-add without -mfma).
static inline void axpy(float* __restrict acc, float a, const float* __restrict v, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; ++l) acc[i + l] += a * v[i + l];
    for (; i < n; ++i) acc[i] += a * v[i];
}
static inline void add(float* __restrict acc, const float* __restrict v, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int l = 0; l < 8; ++l) acc[i + l] += v[i + l];
    for (; i < n; ++i) acc[i] += v[i];
}

// The loops below keep every output element's sum in the order the definition's loops
// give it (forward: taps c, r, s; backward data: taps r, s then channels k; backward
// filter: images and positions n, p, q), each term added into the element's own
// accumulator. They only run that same sum for a row of elements at once (output channels
// or input channels, contiguous in a packed copy of the operand), so the innermost loop is
// a contiguous multiply-add with no bounds check. Scalar loops over one element at a time
// with the bounds check innermost made cuDNN's share of a cnn-small step on the stand-in
// several times its GEMMs'.
struct Ops {
    const Job& j;
    const float *xf, *wf, *yf;  // the inputs of this direction (nullptr for the output)
    float X(int64_t i) const { return xf[i]; }
    float W(int64_t i) const { return wf[i]; }
    float Y(int64_t i) const { return yf[i]; }
    // The filter tap (r, s) of the sum, as stored: flipped under CUDNN_CONVOLUTION.
    int64_t wr(int64_t r) const { return j.g.flip ? j.g.R - 1 - r : r; }
    int64_t wc(int64_t s) const { return j.g.flip ? j.g.S - 1 - s : s; }
    void blend(int64_t i, float acc) const {
        float v = j.alpha * acc;
        if (j.beta != 0.0f) v += j.beta * load(j.out, j.type, i);
        store(j.out, j.type, i, v);
    }
    // im2col of image n into the workspace: row (c, r, s), column (p, q); 0 off the image.
    void im2col(int64_t n) const {
        const Shape& g = j.g;
        int64_t PQ = g.P * g.Q;
        for (int64_t c = 0; c < g.C; ++c)
            for (int64_t r = 0; r < g.R; ++r)
                for (int64_t s = 0; s < g.S; ++s) {
                    int64_t row = (c * g.R + r) * g.S + s;
                    for (int64_t p = 0; p < g.P; ++p)
                        for (int64_t q = 0; q < g.Q; ++q) {
                            int64_t h = p * g.u - g.pad_h + r * g.dil_h;
                            int64_t w = q * g.v - g.pad_w + s * g.dil_w;
                            bool in = h >= 0 && h < g.H && w >= 0 && w < g.W;
                            ws_put_f(j.ws, row * PQ + p * g.Q + q, in ? X(at(j.x, n, c, h, w)) : 0.0f);
                        }
                }
    }
    // The taps (c, r, s) with their offsets, into the workspace.
    void taps() const {
        const Shape& g = j.g;
        for (int64_t c = 0; c < g.C; ++c)
            for (int64_t r = 0; r < g.R; ++r)
                for (int64_t s = 0; s < g.S; ++s) {
                    Tap t{at(j.x, 0, c, r * g.dil_h, s * g.dil_w), at(j.w, 0, c, wr(r), wc(s)),
                          (int32_t)(r * g.dil_h), (int32_t)(s * g.dil_w)};
                    memcpy((char*)j.ws + ((c * g.R + r) * g.S + s) * (int64_t)sizeof(Tap), &t,
                           sizeof(Tap));
                }
    }
    // The filter packed tap-major, [c, r, s][k] (flip applied): a tap's row over k.
    std::vector<float> w_by_tap() const {
        const Shape& g = j.g;
        std::vector<float> out((size_t)(g.C * g.R * g.S * g.K));
        for (int64_t c = 0; c < g.C; ++c)
            for (int64_t r = 0; r < g.R; ++r)
                for (int64_t s = 0; s < g.S; ++s)
                    for (int64_t k = 0; k < g.K; ++k)
                        out[(size_t)((((c * g.R + r) * g.S + s) * g.K) + k)] =
                            W(at(j.w, k, c, wr(r), wc(s)));
        return out;
    }
    // The filter packed [k, r, s][c] (flip applied): a (k, r, s) row over c.
    std::vector<float> w_by_channel() const {
        const Shape& g = j.g;
        std::vector<float> out((size_t)(g.C * g.R * g.S * g.K));
        for (int64_t k = 0; k < g.K; ++k)
            for (int64_t r = 0; r < g.R; ++r)
                for (int64_t s = 0; s < g.S; ++s)
                    for (int64_t c = 0; c < g.C; ++c)
                        out[(size_t)((((k * g.R + r) * g.S + s) * g.C) + c)] =
                            W(at(j.w, k, c, wr(r), wc(s)));
        return out;
    }
    // dy packed [n, p, q][k]: a position's row over k.
    std::vector<float> y_by_position() const {
        const Shape& g = j.g;
        std::vector<float> out((size_t)(g.N * g.P * g.Q * g.K));
        for (int64_t n = 0; n < g.N; ++n)
            for (int64_t p = 0; p < g.P; ++p)
                for (int64_t q = 0; q < g.Q; ++q)
                    for (int64_t k = 0; k < g.K; ++k)
                        out[(size_t)((((n * g.P + p) * g.Q + q) * g.K) + k)] = Y(at(j.y, n, k, p, q));
        return out;
    }
};

// Splits [0, n) into contiguous ranges run on up to hardware_concurrency threads (4 at
// most). Each output element is written by one thread with its sum in the same order as
// a serial run: results stay bit for bit.
template <class F>
static void split(int64_t n, F body) {
    int64_t t = std::min<int64_t>({(int64_t)std::thread::hardware_concurrency(), 4, n});
    if (t <= 1) {
        body(0, n);
        return;
    }
    std::vector<std::thread> ts;
    for (int64_t i = 1; i < t; ++i) ts.emplace_back(body, n * i / t, n * (i + 1) / t);
    body(0, n / t);
    for (auto& th : ts) th.join();
}

// ---- forward: IMPLICIT_GEMM (0), IMPLICIT_PRECOMP_GEMM (1), GEMM (2) ----------------------
// y[n, k, p, q] sums its taps in the order c, r, s; each position's K outputs at once.

static void forward(const Ops& o) {
    const Job& j = o.j;
    const Shape& g = j.g;
    int64_t CRS = g.C * g.R * g.S, PQ = g.P * g.Q, K = g.K;
    std::vector<float> wt = o.w_by_tap();
    if (j.algo == 1) o.taps();
    for (int64_t n = 0; n < g.N; ++n) {
        if (j.algo == 2) o.im2col(n);
        split(PQ, [&](int64_t a, int64_t b) {
            std::vector<float> acc((size_t)K);
            for (int64_t pq = a; pq < b; ++pq) {
                int64_t p = pq / g.Q, q = pq % g.Q;
                int64_t h0 = p * g.u - g.pad_h, w0 = q * g.v - g.pad_w;
                std::fill(acc.begin(), acc.end(), 0.0f);
                if (j.algo == 0) {
                    for (int64_t c = 0, t = 0; c < g.C; ++c)
                        for (int64_t r = 0; r < g.R; ++r)
                            for (int64_t s = 0; s < g.S; ++s, ++t) {
                                int64_t h = h0 + r * g.dil_h, w = w0 + s * g.dil_w;
                                if (h < 0 || h >= g.H || w < 0 || w >= g.W) continue;
                                axpy(acc.data(), o.X(at(j.x, n, c, h, w)), &wt[(size_t)(t * K)], K);
                            }
                } else if (j.algo == 1) {
                    int64_t base = at(j.x, n, 0, h0, w0);
                    for (int64_t t = 0; t < CRS; ++t) {
                        Tap tp = ws_tap(j.ws, t);
                        int64_t h = h0 + tp.dh, w = w0 + tp.dw;
                        if (h < 0 || h >= g.H || w < 0 || w >= g.W) continue;
                        axpy(acc.data(), o.X(base + tp.xoff), &wt[(size_t)(t * K)], K);
                    }
                } else {
                    for (int64_t t = 0; t < CRS; ++t)
                        axpy(acc.data(), ws_f(j.ws, t * PQ + pq), &wt[(size_t)(t * K)], K);
                }
                for (int64_t k = 0; k < K; ++k) o.blend(at(j.y, n, k, p, q), acc[(size_t)k]);
            }
        });
    }
}

// ---- backward data: ALGO_0 (0, gathers dy per dx element), ALGO_1 (1, GEMM w^T dy into
// the workspace, then col2im) ------------------------------------------------------------
// dx[n, c, h, w] sums over its taps r, s (ALGO_0: each tap's channels k one by one;
// ALGO_1: each tap's sum over k, made first in the workspace); each position's C inputs
// at once.

// The output position (p, q) whose window puts tap (r, s) on image row h / column w, if any.
static bool source(const Shape& g, int64_t h, int64_t w, int64_t r, int64_t s, int64_t* p,
                   int64_t* q) {
    int64_t hp = h + g.pad_h - r * g.dil_h, wq = w + g.pad_w - s * g.dil_w;
    if (hp < 0 || wq < 0 || hp % g.u != 0 || wq % g.v != 0) return false;
    *p = hp / g.u;
    *q = wq / g.v;
    return *p < g.P && *q < g.Q;
}

static void backward_data(const Ops& o) {
    const Job& j = o.j;
    const Shape& g = j.g;
    int64_t PQ = g.P * g.Q, RS = g.R * g.S, C = g.C;
    std::vector<float> wc = o.w_by_channel();
    // ALGO_1's workspace: per position (p, q) and tap (r, s), the row over c of
    // sum_k w[k, c, r, s] * dy[n, k, p, q] (C*R*S*P*Q floats, the im2col matrix's size).
    auto col = [&](int64_t pq, int64_t rs) { return (pq * RS + rs) * C * 4; };
    for (int64_t n = 0; n < g.N; ++n) {
        if (j.algo == 1) {
            split(PQ, [&](int64_t a, int64_t b) {
                std::vector<float> part((size_t)C);
                for (int64_t pq = a; pq < b; ++pq)
                    for (int64_t rs = 0; rs < RS; ++rs) {
                        std::fill(part.begin(), part.end(), 0.0f);
                        for (int64_t k = 0; k < g.K; ++k)
                            axpy(part.data(), o.Y(at(j.y, n, k, pq / g.Q, pq % g.Q)),
                                 &wc[(size_t)((k * RS + rs) * C)], C);
                        memcpy((char*)j.ws + col(pq, rs), part.data(), (size_t)C * 4);
                    }
            });
        }
        split(g.H, [&](int64_t h0, int64_t h1) {
            std::vector<float> acc((size_t)C), row((size_t)C);
            for (int64_t h = h0; h < h1; ++h)
                for (int64_t w = 0; w < g.W; ++w) {
                    std::fill(acc.begin(), acc.end(), 0.0f);
                    for (int64_t r = 0; r < g.R; ++r)
                        for (int64_t s = 0; s < g.S; ++s) {
                            int64_t p, q;
                            if (!source(g, h, w, r, s, &p, &q)) continue;
                            if (j.algo == 1) {
                                memcpy(row.data(), (const char*)j.ws + col(p * g.Q + q, r * g.S + s),
                                       (size_t)C * 4);
                                add(acc.data(), row.data(), C);
                                continue;
                            }
                            for (int64_t k = 0; k < g.K; ++k)
                                axpy(acc.data(), o.Y(at(j.y, n, k, p, q)),
                                     &wc[(size_t)((k * RS + r * g.S + s) * C)], C);
                        }
                    for (int64_t c = 0; c < C; ++c) o.blend(at(j.x, n, c, h, w), acc[(size_t)c]);
                }
        });
    }
}

// ---- backward filter: ALGO_0 (0, direct), ALGO_1 (1, im2col per image in the workspace),
// ALGO_3 (3, tap offsets in the workspace) -------------------------------------------------
// dw[k, c, r, s] sums over n, p, q (ALGO_1: a partial sum per image, added image by
// image); each tap's K outputs at once.

static void backward_filter(const Ops& o) {
    const Job& j = o.j;
    const Shape& g = j.g;
    int64_t CRS = g.C * g.R * g.S, PQ = g.P * g.Q, K = g.K;
    std::vector<float> yp = o.y_by_position();
    std::vector<float> acc((size_t)(CRS * K), 0.0f);  // [c, r, s][k]
    if (j.algo == 1) {
        // Per image partial sums, added image by image (a GEMM per image, as the real
        // ALGO_1 is described: the input matrix formed explicitly).
        for (int64_t n = 0; n < g.N; ++n) {
            o.im2col(n);
            split(CRS, [&](int64_t t0, int64_t t1) {
                std::vector<float> part((size_t)K);
                for (int64_t t = t0; t < t1; ++t) {
                    std::fill(part.begin(), part.end(), 0.0f);
                    for (int64_t pq = 0; pq < PQ; ++pq)
                        axpy(part.data(), ws_f(j.ws, t * PQ + pq), &yp[(size_t)((n * PQ + pq) * K)], K);
                    add(&acc[(size_t)(t * K)], part.data(), K);
                }
            });
        }
        for (int64_t k = 0; k < K; ++k)
            for (int64_t c = 0; c < g.C; ++c)
                for (int64_t r = 0; r < g.R; ++r)
                    for (int64_t s = 0; s < g.S; ++s)
                        o.blend(at(j.w, k, c, o.wr(r), o.wc(s)),
                                acc[(size_t)(((c * g.R + r) * g.S + s) * K + k)]);
        return;
    }
    if (j.algo == 3) o.taps();
    split(CRS, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
            int64_t c = t / (g.R * g.S), r = t / g.S % g.R, s = t % g.S;
            Tap tp = j.algo == 3 ? ws_tap(j.ws, t)
                                 : Tap{at(j.x, 0, c, r * g.dil_h, s * g.dil_w),
                                       at(j.w, 0, c, o.wr(r), o.wc(s)), (int32_t)(r * g.dil_h),
                                       (int32_t)(s * g.dil_w)};
            float* row = &acc[(size_t)(t * K)];
            for (int64_t n = 0; n < g.N; ++n)
                for (int64_t p = 0; p < g.P; ++p)
                    for (int64_t q = 0; q < g.Q; ++q) {
                        int64_t h0 = p * g.u - g.pad_h, w0 = q * g.v - g.pad_w;
                        int64_t h = h0 + tp.dh, w = w0 + tp.dw;
                        if (h < 0 || h >= g.H || w < 0 || w >= g.W) continue;
                        axpy(row, o.X(at(j.x, n, 0, h0, w0) + tp.xoff),
                             &yp[(size_t)(((n * g.P + p) * g.Q + q) * K)], K);
                    }
            for (int64_t k = 0; k < K; ++k) o.blend(k * j.w.sk + tp.woff, row[(size_t)k]);
        }
    });
}

// Elements from a tensor's first to its last (the stride gaps included).
static int64_t elems(const Tensor& t) {
    return (t.n - 1) * t.sn + (t.c - 1) * t.sc + (t.h - 1) * t.sh + (t.w - 1) * t.sw + 1;
}

static void run(void* user) {
    Job* j = (Job*)user;
    Operand x, w, y;
    if (j->dir != BWD_DATA) x.fill(j->px, j->type, j->tf32, elems(j->x));
    if (j->dir != BWD_FILTER) w.fill(j->pw, j->type, j->tf32, j->w.k * j->w.c * j->w.r * j->w.s);
    if (j->dir != FWD) y.fill(j->py, j->type, j->tf32, elems(j->y));
    Ops o{*j, x.f.data(), w.f.data(), y.f.data()};
    if (j->dir == FWD)
        forward(o);
    else if (j->dir == BWD_DATA)
        backward_data(o);
    else
        backward_filter(o);
    delete j;
}

}  // namespace cudnn_standin
