// A CPU stand-in for libcudnn.so.9 (cuDNN 9's legacy convolution API), for tests only.
// The entry points, enums and structs are cuDNN 9's as cudarc 0.19 declares them (its
// bindings mirror cudnn.h); the semantics are those of NVIDIA's API reference, not of
// tune's conv code, so the two cannot share one misunderstanding. The arithmetic lives in
// cudnn_conv.h. What it holds a caller to:
//   - descriptors must agree (channels, batch, y's dims = the conv's output dims, one
//     data type), else CUDNN_STATUS_BAD_PARAM; only FLOAT, PSEUDO_HALF and
//     PSEUDO_BFLOAT16 configurations (FLOAT compute) run, others are NOT_SUPPORTED;
//   - the algorithm must be one the stand-in offers (the _v7 queries list every
//     algorithm, the ones it does not run with status NOT_SUPPORTED, as cuDNN lists
//     algorithms that do not apply), and the workspace passed at least its need;
//   - every buffer (and the workspace, for the size the caller claims) lies inside one
//     live allocation of the driver stand-in, and the output overlaps no input; else
//     BAD_PARAM and one line on stderr, before anything is queued;
//   - the work runs on the handle's stream (cudnnSetStream) in stream order, through the
//     driver stand-in's cuLaunchHostFunc.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>

#include "cudnn_conv.h"

using namespace cudnn_standin;

#define API extern "C" __attribute__((visibility("default")))

typedef int Status;
// cuDNN 9's status codes (cudnnStatus_t in cudnn_graph.h).
enum {
    SUCCESS = 0,
    NOT_INITIALIZED = 1001,
    BAD_PARAM = 2000,
    BAD_PARAM_NULL_POINTER = 2002,
    INVALID_VALUE = 2001,
    NOT_SUPPORTED = 3000,
    INTERNAL_ERROR = 4000,
    EXECUTION_FAILED = 5000,
};
enum { NON_DETERMINISTIC = 0, DETERMINISTIC = 1 };
enum { FORMAT_NCHW = 0, FORMAT_NHWC = 1 };

extern "C" int cuLaunchHostFunc(void* stream, void (*fn)(void*), void* user);
extern "C" int cuMemGetAddressRange_v2(unsigned long long* base, size_t* size,
                                       unsigned long long p);

// Marks telling the stand-in's own objects apart (and from a null or stray pointer).
static const int HANDLE = 0x0dd17e, TENSOR = 0x7e5011, FILTER = 0xf117e2, CONV = 0xc0417;

struct Handle {
    int magic;
    void* stream;
};

// cudnnConvolution{Fwd,BwdData,BwdFilter}AlgoPerf_t: the same layout for all three.
struct Perf {
    int algo;
    int status;
    float time;
    size_t memory;
    int determinism;
    int math;
    int reserved[3];
};

API size_t cudnnGetVersion() { return 91000; }  // 9.10.0: major*10000 + minor*100 + patch

API const char* cudnnGetErrorString(Status s) {
    switch (s) {
        case SUCCESS: return "CUDNN_STATUS_SUCCESS";
        case NOT_INITIALIZED: return "CUDNN_STATUS_NOT_INITIALIZED";
        case BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
        case BAD_PARAM_NULL_POINTER: return "CUDNN_STATUS_BAD_PARAM_NULL_POINTER";
        case INVALID_VALUE: return "CUDNN_STATUS_INVALID_VALUE";
        case NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
        case INTERNAL_ERROR: return "CUDNN_STATUS_INTERNAL_ERROR";
        case EXECUTION_FAILED: return "CUDNN_STATUS_EXECUTION_FAILED";
        default: return "CUDNN_UNKNOWN_STATUS";
    }
}

API Status cudnnCreate(Handle** h) {
    if (!h) return BAD_PARAM;
    *h = new Handle{HANDLE, nullptr};
    return SUCCESS;
}
API Status cudnnDestroy(Handle* h) {
    if (!h || h->magic != HANDLE) return BAD_PARAM;
    h->magic = 0;
    delete h;
    return SUCCESS;
}
API Status cudnnSetStream(Handle* h, void* stream) {
    if (!h || h->magic != HANDLE) return BAD_PARAM;
    h->stream = stream;
    return SUCCESS;
}
API Status cudnnGetStream(Handle* h, void** stream) {
    if (!h || h->magic != HANDLE || !stream) return BAD_PARAM;
    *stream = h->stream;
    return SUCCESS;
}

// ---- descriptors ----------------------------------------------------------------------------

// Any cudnnDataType_t enumerant is accepted into a descriptor, as cuDNN does; which ones a
// convolution runs is decided when it is asked for.
static bool type_ok(int t) { return t >= 0 && t <= 21; }

API Status cudnnCreateTensorDescriptor(Tensor** d) {
    if (!d) return BAD_PARAM;
    *d = new Tensor{};
    (*d)->magic = TENSOR;
    return SUCCESS;
}
API Status cudnnDestroyTensorDescriptor(Tensor* d) {
    if (!d) return SUCCESS;
    if (d->magic != TENSOR) return BAD_PARAM;
    d->magic = 0;
    delete d;
    return SUCCESS;
}
API Status cudnnSetTensor4dDescriptorEx(Tensor* d, int type, int n, int c, int h, int w, int sn,
                                        int sc, int sh, int sw) {
    if (!d || d->magic != TENSOR || !type_ok(type)) return BAD_PARAM;
    if (n <= 0 || c <= 0 || h <= 0 || w <= 0) return BAD_PARAM;
    // Zero or negative strides (broadcast, reversed) are not what tune needs; cuDNN's
    // convolutions do not support negative ones either.
    if (sn <= 0 || sc <= 0 || sh <= 0 || sw <= 0) return NOT_SUPPORTED;
    d->type = type;
    d->n = n, d->c = c, d->h = h, d->w = w;
    d->sn = sn, d->sc = sc, d->sh = sh, d->sw = sw;
    d->set = true;
    return SUCCESS;
}
API Status cudnnSetTensor4dDescriptor(Tensor* d, int format, int type, int n, int c, int h,
                                      int w) {
    if (format == FORMAT_NCHW) return cudnnSetTensor4dDescriptorEx(d, type, n, c, h, w, c * h * w, h * w, w, 1);
    if (format == FORMAT_NHWC) return cudnnSetTensor4dDescriptorEx(d, type, n, c, h, w, h * w * c, 1, w * c, c);
    return format == 2 ? NOT_SUPPORTED : BAD_PARAM;  // 2: NCHW_VECT_C, int8 only
}

API Status cudnnCreateFilterDescriptor(Filter** d) {
    if (!d) return BAD_PARAM;
    *d = new Filter{};
    (*d)->magic = FILTER;
    return SUCCESS;
}
API Status cudnnDestroyFilterDescriptor(Filter* d) {
    if (!d) return SUCCESS;
    if (d->magic != FILTER) return BAD_PARAM;
    d->magic = 0;
    delete d;
    return SUCCESS;
}
// Note the argument order, unlike the tensor's: data type first, then format.
API Status cudnnSetFilter4dDescriptor(Filter* d, int type, int format, int k, int c, int h,
                                      int w) {
    if (!d || d->magic != FILTER || !type_ok(type)) return BAD_PARAM;
    if (k <= 0 || c <= 0 || h <= 0 || w <= 0) return BAD_PARAM;
    if (format == FORMAT_NCHW) {  // KCRS
        d->sk = (int64_t)c * h * w, d->sc = (int64_t)h * w, d->sr = w, d->ss = 1;
    } else if (format == FORMAT_NHWC) {  // KRSC
        d->sk = (int64_t)h * w * c, d->sc = 1, d->sr = (int64_t)w * c, d->ss = c;
    } else {
        return format == 2 ? NOT_SUPPORTED : BAD_PARAM;
    }
    d->type = type, d->format = format;
    d->k = k, d->c = c, d->r = h, d->s = w;
    d->set = true;
    return SUCCESS;
}

API Status cudnnCreateConvolutionDescriptor(Conv** d) {
    if (!d) return BAD_PARAM;
    *d = new Conv{};
    (*d)->magic = CONV;
    (*d)->groups = 1;
    (*d)->math = MATH_DEFAULT;
    return SUCCESS;
}
API Status cudnnDestroyConvolutionDescriptor(Conv* d) {
    if (!d) return SUCCESS;
    if (d->magic != CONV) return BAD_PARAM;
    d->magic = 0;
    delete d;
    return SUCCESS;
}
API Status cudnnSetConvolution2dDescriptor(Conv* d, int pad_h, int pad_w, int u, int v,
                                           int dil_h, int dil_w, int mode, int compute) {
    if (!d || d->magic != CONV || !type_ok(compute)) return BAD_PARAM;
    if (pad_h < 0 || pad_w < 0 || u <= 0 || v <= 0 || dil_h <= 0 || dil_w <= 0) return BAD_PARAM;
    if (mode != MODE_CONVOLUTION && mode != MODE_CROSS_CORRELATION) return BAD_PARAM;
    d->pad_h = pad_h, d->pad_w = pad_w, d->u = u, d->v = v, d->dil_h = dil_h, d->dil_w = dil_w;
    d->mode = mode, d->compute = compute;
    d->set = true;
    return SUCCESS;
}
API Status cudnnSetConvolutionMathType(Conv* d, int math) {
    if (!d || d->magic != CONV || math < MATH_DEFAULT || math > MATH_FMA) return BAD_PARAM;
    d->math = math;
    return SUCCESS;
}
// Grouped convolutions are cuDNN's, but not the stand-in's.
API Status cudnnSetConvolutionGroupCount(Conv* d, int groups) {
    if (!d || d->magic != CONV || groups < 1) return BAD_PARAM;
    if (groups != 1) return NOT_SUPPORTED;
    d->groups = 1;
    return SUCCESS;
}

static bool tensor_ok(const Tensor* t) { return t && t->magic == TENSOR && t->set; }
static bool filter_ok(const Filter* f) { return f && f->magic == FILTER && f->set; }
static bool conv_ok(const Conv* c) { return c && c->magic == CONV && c->set; }
static bool handle_ok(const Handle* h) { return h && h->magic == HANDLE; }

// The output size along one dimension (cudnnGetConvolution2dForwardOutputDim), or <= 0
// when the dilated filter is larger than the padded input.
static int64_t out_dim(int64_t in, int64_t pad, int64_t filt, int64_t dil, int64_t stride) {
    int64_t span = (filt - 1) * dil + 1;
    if (in + 2 * pad < span) return 0;
    return 1 + (in + 2 * pad - span) / stride;
}

API Status cudnnGetConvolution2dForwardOutputDim(const Conv* conv, const Tensor* x,
                                                 const Filter* w, int* n, int* c, int* h,
                                                 int* wo) {
    if (!conv_ok(conv) || !tensor_ok(x) || !filter_ok(w) || !n || !c || !h || !wo)
        return BAD_PARAM;
    if (x->c != w->c * conv->groups) return BAD_PARAM;
    int64_t p = out_dim(x->h, conv->pad_h, w->r, conv->dil_h, conv->u);
    int64_t q = out_dim(x->w, conv->pad_w, w->s, conv->dil_w, conv->v);
    if (p <= 0 || q <= 0) return BAD_PARAM;
    *n = (int)x->n, *c = (int)w->k, *h = (int)p, *wo = (int)q;
    return SUCCESS;
}

// ---- one convolution's checks ----------------------------------------------------------------

// Whether the descriptors describe one convolution (x: input image, y: output image, as
// in the forward direction), filling its geometry.
static Status geometry(const Tensor* x, const Filter* w, const Conv* cv, const Tensor* y,
                       Shape* g) {
    if (!tensor_ok(x) || !filter_ok(w) || !conv_ok(cv) || !tensor_ok(y)) return BAD_PARAM;
    if (x->c != w->c * cv->groups || y->n != x->n || y->c != w->k) return BAD_PARAM;
    int64_t p = out_dim(x->h, cv->pad_h, w->r, cv->dil_h, cv->u);
    int64_t q = out_dim(x->w, cv->pad_w, w->s, cv->dil_w, cv->v);
    if (p <= 0 || q <= 0 || y->h != p || y->w != q) return BAD_PARAM;
    *g = Shape{x->n, x->c, x->h, x->w, w->k, w->r, w->s, p, q,
               cv->pad_h, cv->pad_w, cv->u, cv->v, cv->dil_h, cv->dil_w,
               cv->mode == MODE_CONVOLUTION};
    return SUCCESS;
}

// The data-type configurations cuDNN documents for these calls that the stand-in runs:
// FLOAT_CONFIG (all FLOAT, FLOAT compute), PSEUDO_HALF_CONFIG and PSEUDO_BFLOAT16_CONFIG
// (all HALF or all BFLOAT16, FLOAT compute). Differing types are a caller's error.
static Status types(const Tensor* x, const Filter* w, const Conv* cv, const Tensor* y) {
    if (x->type != w->type || x->type != y->type) return BAD_PARAM;
    if (esize(x->type) == 0 || cv->compute != T_FLOAT) return NOT_SUPPORTED;
    return SUCCESS;
}

static bool tf32_on(const Conv* cv, int type) {
    if (type != T_FLOAT || cv->math == MATH_FMA) return false;
    const char* o = getenv("NVIDIA_TF32_OVERRIDE");
    return !(o && strcmp(o, "0") == 0);
}

// An algorithm of one direction as the stand-in offers it.
struct Algo {
    int id;
    int determinism;
    float cost;  // relative to the direction's plain loop, for the _v7 time estimate
};
static const Algo FWD_ALGOS[] = {{1, DETERMINISTIC, 0.8f}, {0, DETERMINISTIC, 1.0f}, {2, DETERMINISTIC, 1.3f}};
// ALGO_0 sums with atomics on a GPU: cuDNN calls it non-deterministic, and so does this.
static const Algo BWD_DATA_ALGOS[] = {{1, DETERMINISTIC, 0.9f}, {0, NON_DETERMINISTIC, 1.0f}};
static const Algo BWD_FILTER_ALGOS[] = {{1, DETERMINISTIC, 0.9f}, {3, NON_DETERMINISTIC, 0.95f}, {0, NON_DETERMINISTIC, 1.0f}};
static const int ALGO_COUNT[] = {8, 6, 7};  // CUDNN_CONVOLUTION_*_ALGO_COUNT

static const Algo* find(Dir d, int id) {
    const Algo* list = d == FWD ? FWD_ALGOS : d == BWD_DATA ? BWD_DATA_ALGOS : BWD_FILTER_ALGOS;
    int n = d == FWD ? 3 : d == BWD_DATA ? 2 : 3;
    for (int i = 0; i < n; ++i)
        if (list[i].id == id) return &list[i];
    return nullptr;
}

// Workspace bytes of algorithm `id` in direction `d`:
//   an im2col / col2im matrix of one image, C*R*S x P*Q floats (forward GEMM, backward
//   data ALGO_1, backward filter ALGO_1); a table of C*R*S taps of 24 bytes (forward
//   IMPLICIT_PRECOMP_GEMM, backward filter ALGO_3); nothing for the others.
static size_t need(Dir d, int id, const Shape& g) {
    size_t crs = (size_t)(g.C * g.R * g.S), pq = (size_t)(g.P * g.Q);
    bool col = (d == FWD && id == 2) || (d != FWD && id == 1);
    bool tap = (d == FWD && id == 1) || (d == BWD_FILTER && id == 3);
    return col ? crs * pq * 4 : tap ? crs * sizeof(Tap) : 0;
}

// The four descriptors of a direction in forward terms (x, w, y).
struct Descs {
    const Tensor* x;
    const Filter* w;
    const Conv* cv;
    const Tensor* y;
};

// Test hook: TUNE_CUDNN_STANDIN_NO_ALGO_C=<C> lists nothing runnable for convolutions of
// C input channels, as cuDNN does for a configuration it has no kernel for, so that a
// caller's fallback can be tested.
static bool no_kernel(const Shape& g) {
    const char* v = getenv("TUNE_CUDNN_STANDIN_NO_ALGO_C");
    return v && *v && atoi(v) == g.C;
}

static Status list_algos(const Handle* h, Dir d, Descs ds, int requested, int* returned,
                         Perf* out) {
    if (!handle_ok(h) || !returned || !out || requested < 1) return BAD_PARAM;
    Shape g;
    Status s = geometry(ds.x, ds.w, ds.cv, ds.y, &g);
    if (s != SUCCESS) return s;
    Status t = types(ds.x, ds.w, ds.cv, ds.y);
    if (t == BAD_PARAM) return t;
    const Algo* list = d == FWD ? FWD_ALGOS : d == BWD_DATA ? BWD_DATA_ALGOS : BWD_FILTER_ALGOS;
    bool ok = t == SUCCESS && !no_kernel(g);
    int runnable = ok ? (d == BWD_DATA ? 2 : 3) : 0;
    // Every enumerant of the direction: the runnable ones first, best first, then the
    // others with status NOT_SUPPORTED (a caller must skip those, as with cuDNN).
    int order[8], n = 0;
    for (int i = 0; i < runnable; ++i) order[n++] = list[i].id;
    for (int id = 0; id < ALGO_COUNT[d]; ++id)
        if (!ok || !find(d, id)) order[n++] = id;
    double flops = 2.0 * g.N * g.K * g.C * g.R * g.S * g.P * g.Q;
    int got = std::min(requested, n);
    for (int i = 0; i < got; ++i) {
        const Algo* a = i < runnable ? find(d, order[i]) : nullptr;
        Perf& p = out[i];
        memset(&p, 0, sizeof(Perf));
        p.algo = order[i];
        p.status = a ? SUCCESS : NOT_SUPPORTED;
        p.time = a ? (float)(flops / 1e9 * a->cost) : -1.0f;  // an estimate, never measured
        p.memory = a ? need(d, order[i], g) : 0;
        p.determinism = a ? a->determinism : NON_DETERMINISTIC;
        p.math = ds.cv->math;
    }
    *returned = got;
    return SUCCESS;
}

static Status workspace_size(const Handle* h, Dir d, Descs ds, int algo, size_t* size) {
    if (!handle_ok(h) || !size) return BAD_PARAM;
    Shape g;
    Status s = geometry(ds.x, ds.w, ds.cv, ds.y, &g);
    if (s != SUCCESS) return s;
    s = types(ds.x, ds.w, ds.cv, ds.y);
    if (s != SUCCESS) return s;
    if (algo < 0 || algo >= ALGO_COUNT[d]) return BAD_PARAM;
    if (!find(d, algo)) return NOT_SUPPORTED;
    *size = need(d, algo, g);
    return SUCCESS;
}

// Bytes from a tensor's first element to one past its last.
static size_t extent(const Tensor* t) {
    int64_t last = (t->n - 1) * t->sn + (t->c - 1) * t->sc + (t->h - 1) * t->sh + (t->w - 1) * t->sw;
    return (size_t)(last + 1) * (size_t)esize(t->type);
}
static size_t extent(const Filter* f) { return (size_t)(f->k * f->c * f->r * f->s) * (size_t)esize(f->type); }

// Whether no two elements of an output tensor share an address (cuDNN writes each once,
// in parallel: overlapping outputs would be a race on a GPU).
static bool distinct(const Tensor* t) {
    struct Dim {
        int64_t stride, size;
    } dims[4] = {{t->sn, t->n}, {t->sc, t->c}, {t->sh, t->h}, {t->sw, t->w}};
    std::sort(dims, dims + 4, [](const Dim& a, const Dim& b) { return a.stride < b.stride; });
    int64_t reach = 1;  // elements spanned by the dimensions of smaller stride
    for (const Dim& d : dims) {
        if (d.size == 1) continue;
        if (d.stride < reach) return false;
        reach = d.stride * d.size;
    }
    return true;
}

static const char* const NAMES[] = {"cudnnConvolutionForward", "cudnnConvolutionBackwardData",
                                    "cudnnConvolutionBackwardFilter"};

static bool inside(Dir d, const void* p, size_t n, const char* what) {
    if (n == 0) return true;
    unsigned long long base = 0;
    size_t size = 0;
    unsigned long long q = (unsigned long long)(uintptr_t)p;
    if (p && cuMemGetAddressRange_v2(&base, &size, q) == 0 && q + n <= base + size) return true;
    fprintf(stderr,
            "tune cuDNN stand-in: %s: %s: %zu bytes at %p are not inside one live allocation\n",
            NAMES[d], what, n, p);
    return false;
}
static bool apart(Dir d, const void* out, size_t n_out, const void* in, size_t n_in,
                  const char* what) {
    uintptr_t a = (uintptr_t)out, b = (uintptr_t)in;
    if (n_out == 0 || n_in == 0 || a + n_out <= b || b + n_in <= a) return true;
    fprintf(stderr, "tune cuDNN stand-in: %s: the output overlaps %s (cuDNN runs out of place)\n",
            NAMES[d], what);
    return false;
}

// Checks one call and queues it on the handle's stream. `px`, `pw` and `py` are the data
// of x, w and y in forward terms; `out` is the one of them this direction writes.
static Status launch(const Handle* h, Dir d, Descs ds, int algo, void* ws, size_t ws_size,
                     const void* alpha, const void* beta, const void* px, const void* pw,
                     const void* py, void* out) {
    if (!handle_ok(h) || !alpha || !beta || !out) return BAD_PARAM;
    Shape g;
    Status s = geometry(ds.x, ds.w, ds.cv, ds.y, &g);
    if (s != SUCCESS) return s;
    s = types(ds.x, ds.w, ds.cv, ds.y);
    if (s != SUCCESS) return s;
    if (algo < 0 || algo >= ALGO_COUNT[d]) return BAD_PARAM;
    if (!find(d, algo)) return NOT_SUPPORTED;
    size_t want = need(d, algo, g);
    if (ws_size < want) {
        fprintf(stderr, "tune cuDNN stand-in: %s: algorithm %d needs %zu workspace bytes, got %zu\n",
                NAMES[d], algo, want, ws_size);
        return BAD_PARAM;
    }
    if (d != BWD_FILTER && !distinct(d == FWD ? ds.y : ds.x)) {
        fprintf(stderr, "tune cuDNN stand-in: %s: the output tensor's strides overlap\n", NAMES[d]);
        return BAD_PARAM;
    }
    Job* j = new Job{d, algo, g, *ds.x, *ds.y, *ds.w, ds.x->type, tf32_on(ds.cv, ds.x->type),
                     0.0f, 0.0f, px, pw, py, out, ws};
    memcpy(&j->alpha, alpha, 4);  // a float for FLOAT, HALF and BFLOAT16 data alike
    memcpy(&j->beta, beta, 4);
    size_t nx = extent(ds.x), nw = extent(ds.w), ny = extent(ds.y);
    size_t n_out = d == FWD ? ny : d == BWD_DATA ? nx : nw;
    const void* ins[3] = {px, pw, py};
    size_t lens[3] = {nx, nw, ny};
    const char* names[3] = {d == BWD_DATA ? "dx" : "x", d == BWD_FILTER ? "dw" : "w",
                            d == FWD ? "y" : "dy"};
    int mine = d == FWD ? 2 : d == BWD_DATA ? 0 : 1;  // which of the three is the output
    bool ok = inside(d, ws, ws_size, "workspace") && apart(d, out, n_out, ws, ws_size, "the workspace");
    for (int i = 0; i < 3 && ok; ++i) {
        if (i == mine) {
            ok = inside(d, out, n_out, names[i]);
        } else {
            ok = inside(d, ins[i], lens[i], names[i]) && apart(d, out, n_out, ins[i], lens[i], names[i]);
        }
    }
    if (!ok) {
        delete j;
        return BAD_PARAM;
    }
    if (cuLaunchHostFunc(h->stream, run, j) != 0) {
        delete j;
        return EXECUTION_FAILED;
    }
    return SUCCESS;
}

// ---- the entry points ------------------------------------------------------------------------

API Status cudnnGetConvolutionForwardAlgorithm_v7(const Handle* h, const Tensor* x,
                                                  const Filter* w, const Conv* cv,
                                                  const Tensor* y, int requested,
                                                  int* returned, Perf* out) {
    return list_algos(h, FWD, Descs{x, w, cv, y}, requested, returned, out);
}
API Status cudnnGetConvolutionBackwardDataAlgorithm_v7(const Handle* h, const Filter* w,
                                                       const Tensor* dy, const Conv* cv,
                                                       const Tensor* dx, int requested,
                                                       int* returned, Perf* out) {
    return list_algos(h, BWD_DATA, Descs{dx, w, cv, dy}, requested, returned, out);
}
API Status cudnnGetConvolutionBackwardFilterAlgorithm_v7(const Handle* h, const Tensor* x,
                                                         const Tensor* dy, const Conv* cv,
                                                         const Filter* dw, int requested,
                                                         int* returned, Perf* out) {
    return list_algos(h, BWD_FILTER, Descs{x, dw, cv, dy}, requested, returned, out);
}

API Status cudnnGetConvolutionForwardWorkspaceSize(const Handle* h, const Tensor* x,
                                                   const Filter* w, const Conv* cv,
                                                   const Tensor* y, int algo, size_t* size) {
    return workspace_size(h, FWD, Descs{x, w, cv, y}, algo, size);
}
API Status cudnnGetConvolutionBackwardDataWorkspaceSize(const Handle* h, const Filter* w,
                                                        const Tensor* dy, const Conv* cv,
                                                        const Tensor* dx, int algo,
                                                        size_t* size) {
    return workspace_size(h, BWD_DATA, Descs{dx, w, cv, dy}, algo, size);
}
API Status cudnnGetConvolutionBackwardFilterWorkspaceSize(const Handle* h, const Tensor* x,
                                                          const Tensor* dy, const Conv* cv,
                                                          const Filter* dw, int algo,
                                                          size_t* size) {
    return workspace_size(h, BWD_FILTER, Descs{x, dw, cv, dy}, algo, size);
}

API Status cudnnConvolutionForward(const Handle* h, const void* alpha, const Tensor* xd,
                                   const void* x, const Filter* wd, const void* w,
                                   const Conv* cv, int algo, void* ws, size_t ws_size,
                                   const void* beta, const Tensor* yd, void* y) {
    if (!x || !w) return BAD_PARAM;
    return launch(h, FWD, Descs{xd, wd, cv, yd}, algo, ws, ws_size, alpha, beta, x, w, y, y);
}
API Status cudnnConvolutionBackwardData(const Handle* h, const void* alpha, const Filter* wd,
                                        const void* w, const Tensor* dyd, const void* dy,
                                        const Conv* cv, int algo, void* ws, size_t ws_size,
                                        const void* beta, const Tensor* dxd, void* dx) {
    if (!w || !dy) return BAD_PARAM;
    return launch(h, BWD_DATA, Descs{dxd, wd, cv, dyd}, algo, ws, ws_size, alpha, beta, dx, w,
                  dy, dx);
}
API Status cudnnConvolutionBackwardFilter(const Handle* h, const void* alpha, const Tensor* xd,
                                          const void* x, const Tensor* dyd, const void* dy,
                                          const Conv* cv, int algo, void* ws, size_t ws_size,
                                          const void* beta, const Filter* dwd, void* dw) {
    if (!x || !dy) return BAD_PARAM;
    return launch(h, BWD_FILTER, Descs{xd, dwd, cv, dyd}, algo, ws, ws_size, alpha, beta, x, dw,
                  dy, dw);
}
