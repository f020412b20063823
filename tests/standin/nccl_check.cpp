// Checks the NCCL stand-in (nccl.cpp) and the driver stand-in's devices (cuda.cpp) from C++,
// linked straight against both; built and run by tests/gpu_nccl_standin.rs with
// TUNE_CUDA_STANDIN_DEVICES=2 and 3. Prints "ok <check>" per passing check and
// "FAIL <check>: why" otherwise; exits 1 if any failed. `nccl_check count` only prints the
// device count (for the bad-variable check); `nccl_check timeout` runs the checks that
// wait for the stand-in's timeout (TUNE_NCCL_STANDIN_TIMEOUT_S=1).
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
struct ncclUniqueId {
    char internal[128];
};
extern "C" {
CUresult cuInit(unsigned);
CUresult cuDeviceGetCount(int*);
CUresult cuDeviceGet(int*, int);
CUresult cuDeviceGetUuid_v2(void*, int);
CUresult cuDeviceCanAccessPeer(int*, int, int);
CUresult cuDevicePrimaryCtxRetain(void**, int);
CUresult cuCtxSetCurrent(void*);
CUresult cuCtxGetDevice(int*);
CUresult cuStreamCreate(void**, unsigned);
CUresult cuStreamSynchronize(void*);
CUresult cuEventCreate(void**, unsigned);
CUresult cuEventRecord(void*, void*);
CUresult cuEventSynchronize(void*);
CUresult cuLaunchHostFunc(void*, void (*)(void*), void*);
CUresult cuMemAlloc_v2(CUdeviceptr*, size_t);
CUresult cuMemcpyHtoD_v2(CUdeviceptr, const void*, size_t);
CUresult cuMemcpyDtoH_v2(void*, CUdeviceptr, size_t);
CUresult cuMemsetD32Async(CUdeviceptr, unsigned, size_t, void*);
CUresult cuMemcpyPeerAsync(CUdeviceptr, void*, CUdeviceptr, void*, size_t, void*);
int ncclGetVersion(int*);
int ncclGetUniqueId(ncclUniqueId*);
int ncclCommInitRank(void**, int, ncclUniqueId, int);
int ncclCommInitAll(void**, int, const int*);
int ncclCommDestroy(void*);
int ncclCommAbort(void*);
int ncclCommCount(void*, int*);
int ncclCommCuDevice(void*, int*);
int ncclCommUserRank(void*, int*);
int ncclCommGetAsyncError(void*, int*);
int ncclGroupStart();
int ncclGroupEnd();
int ncclAllReduce(const void*, void*, size_t, int, int, void*, void*);
int ncclBroadcast(const void*, void*, size_t, int, int, void*, void*);
int ncclReduce(const void*, void*, size_t, int, int, int, void*, void*);
int ncclAllGather(const void*, void*, size_t, int, void*, void*);
int ncclReduceScatter(const void*, void*, size_t, int, int, void*, void*);
}
enum { I32 = 2, F16 = 6, F32 = 7, F64 = 8, BF16 = 9 };
enum { SUM = 0, PROD = 1, MAX = 2, MIN = 3, AVG = 4 };
enum { UnhandledCuda = 1, SystemError = 2, InvalidUsage = 5, RemoteError = 6 };

static int g_failed = 0;
static std::string g_why;
#define EXPECT(cond, ...)                                                 \
    do {                                                                  \
        if (!(cond)) {                                                    \
            char b_[300];                                                 \
            snprintf(b_, sizeof b_, __VA_ARGS__);                         \
            if (g_why.empty()) g_why = std::string(#cond) + " -- " + b_;  \
        }                                                                 \
    } while (0)

static void check(const char* name, const std::function<void()>& body) {
    g_why.clear();
    body();
    if (g_why.empty()) {
        printf("ok %s\n", name);
    } else {
        printf("FAIL %s: %s\n", name, g_why.c_str());
        ++g_failed;
    }
    fflush(stdout);
}

static int N = 0;
static std::vector<void*> g_ctx, g_stream;

static CUdeviceptr dalloc(size_t bytes) {
    CUdeviceptr p = 0;
    cuMemAlloc_v2(&p, bytes);
    return p;
}
template <typename T> static CUdeviceptr upload(const std::vector<T>& v) {
    CUdeviceptr p = dalloc(v.size() * sizeof(T));
    cuMemcpyHtoD_v2(p, v.data(), v.size() * sizeof(T));
    return p;
}
template <typename T> static std::vector<T> download(CUdeviceptr p, size_t n) {
    std::vector<T> v(n);
    cuMemcpyDtoH_v2(v.data(), p, n * sizeof(T));
    return v;
}
static void sync_all() {
    for (int r = 0; r < N; ++r) cuStreamSynchronize(g_stream[r]);
}
static bool same_bits(const void* a, const void* b, size_t n) { return memcmp(a, b, n) == 0; }

// Communicators by one thread per device, rank r joining 100 ms after rank r - 1:
// ncclCommInitRank returns to none of them before the last has joined.
static std::vector<void*> init_threads() {
    ncclUniqueId id;
    ncclGetUniqueId(&id);
    std::vector<void*> comms(N, nullptr);
    std::vector<int> rc(N, -1);
    typedef std::chrono::steady_clock Clock;
    std::vector<Clock::time_point> called(N), returned(N);
    std::vector<std::thread> t;
    for (int r = 0; r < N; ++r)
        t.emplace_back([&, r] {
            cuCtxSetCurrent(g_ctx[r]);
            std::this_thread::sleep_for(std::chrono::milliseconds(100 * r));
            called[r] = Clock::now();
            rc[r] = ncclCommInitRank(&comms[r], N, id, r);
            returned[r] = Clock::now();
        });
    for (auto& x : t) x.join();
    for (int r = 0; r < N; ++r) {
        EXPECT(rc[r] == 0, "rank %d: ncclCommInitRank gave %d", r, rc[r]);
        EXPECT(returned[r] >= called[N - 1], "rank %d returned before rank %d joined", r, N - 1);
    }
    return comms;
}
static void expect_ranks(const std::vector<void*>& comms) {
    for (int r = 0; r < N; ++r) {
        int n = -1, dev = -1, rank = -1;
        ncclCommCount(comms[r], &n);
        ncclCommCuDevice(comms[r], &dev);
        ncclCommUserRank(comms[r], &rank);
        EXPECT(n == N && dev == r && rank == r, "rank %d: count %d device %d rank %d", r, n, dev,
               rank);
    }
}

// Host references: in rank order, in the element type, as the stand-in documents.
static float ref_f32(const std::vector<std::vector<float>>& in, size_t i, int op) {
    float scale = 1.0f / (float)N;
    float acc = op == AVG ? in[0][i] * scale : in[0][i];
    for (int r = 1; r < N; ++r) {
        float x = in[r][i];
        if (op == SUM) acc = acc + x;
        if (op == AVG) acc = acc + x * scale;
        if (op == MAX) acc = x > acc ? x : acc;
    }
    return acc;
}

// Round v in [1, 2) to `mant` mantissa bits, nearest even: the half types' rule.
static uint32_t round_mantissa(double v, int mant) {
    double m = (v - 1.0) * (double)(1 << mant);
    double fl = (double)(uint32_t)m;
    uint32_t k = (uint32_t)fl;
    if (m - fl > 0.5 || (m - fl == 0.5 && (k & 1))) ++k;
    return k;
}

static void gate_fn(void* p) {
    auto* flag = (std::atomic<bool>*)p;
    while (!flag->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

int main(int argc, char** argv) {
    cuInit(0);
    cuDeviceGetCount(&N);
    if (argc > 1 && !strcmp(argv[1], "count")) {
        printf("devices %d\n", N);
        return 0;
    }
    if (argc > 1 && !strcmp(argv[1], "timeout")) {  // run with TUNE_NCCL_STANDIN_TIMEOUT_S=1
        g_ctx.assign(N, nullptr);
        g_stream.assign(N, nullptr);
        for (int r = 0; r < N; ++r) {
            cuDevicePrimaryCtxRetain(&g_ctx[r], r);
            cuCtxSetCurrent(g_ctx[r]);
            cuStreamCreate(&g_stream[r], 0);
        }
        check("init_with_a_missing_rank_times_out", [] {
            ncclUniqueId id;
            ncclGetUniqueId(&id);
            void* c = nullptr;
            cuCtxSetCurrent(g_ctx[0]);
            int rc = ncclCommInitRank(&c, 2, id, 0);
            EXPECT(rc == SystemError, "gave %d", rc);
        });
        check("collective_with_a_missing_rank_times_out", [] {
            std::vector<void*> c(N, nullptr);
            ncclCommInitAll(c.data(), N, nullptr);
            CUdeviceptr d = upload(std::vector<float>(8, 1.0f));
            ncclAllReduce((void*)d, (void*)d, 8, F32, SUM, c[0], g_stream[0]);
            cuStreamSynchronize(g_stream[0]);
            int e = -1;
            ncclCommGetAsyncError(c[0], &e);
            EXPECT(e == SystemError, "async error %d", e);
            EXPECT(download<float>(d, 8) == std::vector<float>(8, 1.0f), "buffer written");
            for (void* x : c) ncclCommAbort(x);
        });
        return g_failed ? 1 : 0;
    }
    const char* want = getenv("TUNE_CUDA_STANDIN_DEVICES");
    printf("[CPU stand-in, not a GPU] %d devices\n", N);

    // Before any stream thread exists: an id from a process that has exited cannot be
    // joined (its bootstrap listener is gone), and the init says so instead of waiting.
    check("dead_process_id_refused", [] {
        int fd[2];
        EXPECT(pipe(fd) == 0, "pipe");
        pid_t child = fork();
        if (child == 0) {
            ncclUniqueId id;
            ncclGetUniqueId(&id);
            ssize_t w = write(fd[1], &id, sizeof id);
            _exit(w == (ssize_t)sizeof id ? 0 : 1);
        }
        ncclUniqueId id;
        ssize_t got = read(fd[0], &id, sizeof id);
        waitpid(child, nullptr, 0);
        EXPECT(got == (ssize_t)sizeof id, "read %zd bytes", got);
        void* comm = nullptr;
        int rc = ncclCommInitRank(&comm, 1, id, 0);
        EXPECT(rc == SystemError, "ncclCommInitRank with an exited child's id gave %d", rc);
    });

    check("devices", [&] {
        EXPECT(want && N == atoi(want), "cuDeviceGetCount %d, TUNE_CUDA_STANDIN_DEVICES %s", N,
               want ? want : "unset");
        int d = -1;
        EXPECT(cuDeviceGet(&d, N) == 101, "device %d accepted", N);
        void* none = nullptr;
        EXPECT(cuDevicePrimaryCtxRetain(&none, N) == 101, "context of device %d", N);
        g_ctx.assign(N, nullptr);
        g_stream.assign(N, nullptr);
        for (int r = 0; r < N; ++r) {
            cuDevicePrimaryCtxRetain(&g_ctx[r], r);
            for (int s = 0; s < r; ++s) EXPECT(g_ctx[s] != g_ctx[r], "contexts %d %d", s, r);
            cuCtxSetCurrent(g_ctx[r]);
            int dev = -1;
            cuCtxGetDevice(&dev);
            EXPECT(dev == r, "cuCtxGetDevice %d in context %d", dev, r);
            unsigned char u[16];
            cuDeviceGetUuid_v2(u, r);
            EXPECT(u[15] == r, "uuid of %d ends in %d", r, u[15]);
            cuStreamCreate(&g_stream[r], 0);
            int can = -1;
            cuDeviceCanAccessPeer(&can, r, (r + 1) % N);
            EXPECT(can == 1, "peer access %d -> %d: %d", r, (r + 1) % N, can);
            cuDeviceCanAccessPeer(&can, r, r);
            EXPECT(can == 0, "peer access to itself: %d", can);
        }
        // A peer copy lands.
        std::vector<int> v = {1, 2, 3};
        CUdeviceptr a = upload(v), b = dalloc(12);
        cuMemcpyPeerAsync(b, g_ctx[1], a, g_ctx[0], 12, g_stream[0]);
        cuStreamSynchronize(g_stream[0]);
        EXPECT(download<int>(b, 3) == v, "peer copy");
        int ver = 0;
        ncclGetVersion(&ver);
        EXPECT(ver == 22700, "ncclGetVersion %d", ver);
    });

    std::vector<void*> comms;
    check("init_one_thread_per_device", [&] {
        comms = init_threads();
        expect_ranks(comms);
    });
    check("init_all", [&] {
        std::vector<void*> c(N, nullptr);
        int rc = ncclCommInitAll(c.data(), N, nullptr);
        EXPECT(rc == 0, "ncclCommInitAll %d", rc);
        expect_ranks(c);
        for (void* x : c) EXPECT(ncclCommDestroy(x) == 0, "destroy");
    });
    check("init_in_group_from_one_thread", [&] {
        ncclUniqueId id;
        ncclGetUniqueId(&id);
        std::vector<void*> c(N, nullptr);
        ncclGroupStart();
        for (int r = 0; r < N; ++r) {
            cuCtxSetCurrent(g_ctx[r]);
            EXPECT(ncclCommInitRank(&c[r], N, id, r) == 0, "deferred init %d", r);
        }
        int rc = ncclGroupEnd();
        EXPECT(rc == 0, "ncclGroupEnd %d", rc);
        expect_ranks(c);
        for (void* x : c) ncclCommAbort(x);
    });
    check("duplicate_gpu_refused", [&] {
        ncclUniqueId id;
        ncclGetUniqueId(&id);
        std::vector<void*> c(2, nullptr);
        std::vector<int> rc(2, -1);
        std::vector<std::thread> t;
        for (int r = 0; r < 2; ++r)
            t.emplace_back([&, r] {
                cuCtxSetCurrent(g_ctx[0]);
                rc[r] = ncclCommInitRank(&c[r], 2, id, r);
            });
        for (auto& x : t) x.join();
        EXPECT(rc[0] == InvalidUsage && rc[1] == InvalidUsage, "rcs %d %d", rc[0], rc[1]);
    });

    // Data with 3+ ranks in which the summation order shows in the bits.
    const size_t n = 1000;
    std::vector<std::vector<float>> fin(N, std::vector<float>(n));
    for (int r = 0; r < N; ++r)
        for (size_t i = 0; i < n; ++i)
            fin[r][i] = (float)((i * 7919 + r * 104729) % 2003) / 7.0f * (r == 1 ? 1e-3f : 1.0f) -
                        (float)r * 33.3f;
    check("all_reduce_f32_sum_avg_max_in_and_out_of_place", [&] {
        for (int op : {SUM, AVG, MAX}) {
            for (bool in_place : {false, true}) {
                std::vector<CUdeviceptr> s(N), d(N);
                for (int r = 0; r < N; ++r) {
                    s[r] = upload(fin[r]);
                    d[r] = in_place ? s[r] : dalloc(n * 4);
                }
                ncclGroupStart();
                for (int r = 0; r < N; ++r)
                    ncclAllReduce((void*)s[r], (void*)d[r], n, F32, op, comms[r], g_stream[r]);
                ncclGroupEnd();
                sync_all();
                for (int r = 0; r < N; ++r) {
                    auto got = download<float>(d[r], n);
                    for (size_t i = 0; i < n; ++i) {
                        float want_v = ref_f32(fin, i, op);
                        if (!same_bits(&got[i], &want_v, 4)) {
                            EXPECT(false, "op %d in_place %d rank %d [%zu]: %.9g, reference %.9g",
                                   op, in_place, r, i, got[i], want_v);
                            break;
                        }
                    }
                }
            }
        }
    });
    check("all_reduce_f64_sum", [&] {
        std::vector<CUdeviceptr> s(N);
        std::vector<std::vector<double>> in(N, std::vector<double>(n));
        for (int r = 0; r < N; ++r) {
            for (size_t i = 0; i < n; ++i) in[r][i] = (double)fin[r][i] / 3.0 + 1e-9 * (double)i;
            s[r] = upload(in[r]);
        }
        for (int r = 0; r < N; ++r)
            ncclAllReduce((void*)s[r], (void*)s[r], n, F64, SUM, comms[r], g_stream[r]);
        sync_all();
        for (int r = 0; r < N; ++r) {
            auto got = download<double>(s[r], n);
            for (size_t i = 0; i < n; ++i) {
                double acc = in[0][i];
                for (int q = 1; q < N; ++q) acc += in[q][i];
                if (!same_bits(&acc, &got[i], 8)) {
                    EXPECT(false, "rank %d [%zu]: %.17g, reference %.17g", r, i, got[i], acc);
                    break;
                }
            }
        }
    });
    check("half_types_sum_in_float_round_to_nearest_even", [&] {
        // Rank 0 holds 1.0 and the next value up; every other rank the half of one step:
        // with 2 ranks each sum is a tie (to even), with 3 it is exact (no double rounding).
        struct Case {
            int type, mant;
            uint16_t one, step_half;
        };
        for (Case c : {Case{BF16, 7, 0x3f80, 0x3b80}, Case{F16, 10, 0x3c00, 0x1000}}) {
            std::vector<CUdeviceptr> s(N);
            for (int r = 0; r < N; ++r) {
                std::vector<uint16_t> v = r == 0 ? std::vector<uint16_t>{c.one, (uint16_t)(c.one + 1)}
                                                 : std::vector<uint16_t>{c.step_half, c.step_half};
                s[r] = upload(v);
            }
            for (int r = 0; r < N; ++r)
                ncclAllReduce((void*)s[r], (void*)s[r], 2, c.type, SUM, comms[r], g_stream[r]);
            sync_all();
            double step = 1.0 / (double)(1 << c.mant);
            for (int k = 0; k < 2; ++k) {
                double exact = 1.0 + k * step + (N - 1) * step / 2;
                uint16_t want_b = (uint16_t)(c.one + round_mantissa(exact, c.mant));
                for (int r = 0; r < N; ++r) {
                    uint16_t got = download<uint16_t>(s[r], 2)[k];
                    EXPECT(got == want_b, "type %d element %d rank %d: 0x%04x, want 0x%04x", c.type,
                           k, r, got, want_b);
                }
                if (N == 2) {  // written out: the two ties go to the even neighbour
                    uint16_t tie = k == 0 ? c.one : (uint16_t)(c.one + 2);
                    EXPECT(want_b == tie, "reference 0x%04x", want_b);
                }
            }
        }
    });
    check("broadcast_from_root_1", [&] {
        std::vector<CUdeviceptr> s(N), d(N);
        for (int r = 0; r < N; ++r) {
            s[r] = upload(fin[r]);
            d[r] = dalloc(n * 4);
        }
        for (int r = 0; r < N; ++r)  // cudarc passes no send buffer on the other ranks
            ncclBroadcast(r == 1 ? (void*)s[r] : nullptr, (void*)d[r], n, F32, 1, comms[r],
                          g_stream[r]);
        for (int r = 0; r < N; ++r)  // and in place
            ncclBroadcast((void*)s[r], (void*)s[r], n, F32, 1, comms[r], g_stream[r]);
        sync_all();
        for (int r = 0; r < N; ++r) {
            EXPECT(download<float>(d[r], n) == fin[1], "rank %d out of place", r);
            EXPECT(download<float>(s[r], n) == fin[1], "rank %d in place", r);
        }
    });
    check("reduce_to_last_rank", [&] {
        std::vector<CUdeviceptr> s(N);
        CUdeviceptr d = dalloc(n * 4);
        for (int r = 0; r < N; ++r) s[r] = upload(fin[r]);
        for (int r = 0; r < N; ++r)
            ncclReduce((void*)s[r], r == N - 1 ? (void*)d : nullptr, n, F32, SUM, N - 1, comms[r],
                       g_stream[r]);
        sync_all();
        auto got = download<float>(d, n);
        for (size_t i = 0; i < n; ++i) {
            float w = ref_f32(fin, i, SUM);
            if (!same_bits(&w, &got[i], 4)) {
                EXPECT(false, "[%zu] %.9g vs %.9g", i, got[i], w);
                break;
            }
        }
    });
    check("all_gather", [&] {
        std::vector<CUdeviceptr> s(N), d(N);
        for (int r = 0; r < N; ++r) {
            s[r] = upload(fin[r]);
            d[r] = dalloc(n * 4 * N);
        }
        for (int r = 0; r < N; ++r)
            ncclAllGather((void*)s[r], (void*)d[r], n, F32, comms[r], g_stream[r]);
        sync_all();
        std::vector<float> want_v;
        for (int r = 0; r < N; ++r) want_v.insert(want_v.end(), fin[r].begin(), fin[r].end());
        for (int r = 0; r < N; ++r)
            EXPECT(download<float>(d[r], n * N) == want_v, "rank %d", r);
    });
    check("reduce_scatter", [&] {
        const size_t per = n / 10;  // each rank sends N * per
        std::vector<std::vector<int32_t>> in(N, std::vector<int32_t>(per * N));
        std::vector<CUdeviceptr> s(N), d(N);
        for (int r = 0; r < N; ++r) {
            for (size_t i = 0; i < per * N; ++i) in[r][i] = (int32_t)(i * 3 + r * 1000);
            s[r] = upload(in[r]);
            d[r] = dalloc(per * 4);
        }
        for (int r = 0; r < N; ++r)
            ncclReduceScatter((void*)s[r], (void*)d[r], per, I32, SUM, comms[r], g_stream[r]);
        sync_all();
        for (int r = 0; r < N; ++r) {
            auto got = download<int32_t>(d[r], per);
            for (size_t i = 0; i < per; ++i) {
                int32_t w = 0;
                for (int q = 0; q < N; ++q) w += in[q][r * per + i];
                if (got[i] != w) {
                    EXPECT(false, "rank %d [%zu]: %d, want %d", r, i, got[i], w);
                    break;
                }
            }
        }
    });
    check("stream_order_memset_before_collective_event_after", [&] {
        // Each stream is held at a gate until every call is queued, so nothing below can
        // have run when ncclAllReduce is called: only stream order makes the result right.
        std::atomic<bool> open{false};
        std::vector<CUdeviceptr> s(N), d(N);
        std::vector<void*> ev(N);
        for (int r = 0; r < N; ++r) {
            s[r] = upload(fin[r]);
            d[r] = dalloc(n * 4);
            cuEventCreate(&ev[r], 0);
        }
        for (int r = 0; r < N; ++r) {
            cuLaunchHostFunc(g_stream[r], gate_fn, &open);
            float v = (float)(r + 1);
            unsigned u;
            memcpy(&u, &v, 4);
            cuMemsetD32Async(s[r], u, n, g_stream[r]);
            ncclAllReduce((void*)s[r], (void*)d[r], n, F32, SUM, comms[r], g_stream[r]);
            cuEventRecord(ev[r], g_stream[r]);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        open = true;
        float w = 0;
        for (int r = 0; r < N; ++r) w += (float)(r + 1);
        for (int r = 0; r < N; ++r) {
            cuEventSynchronize(ev[r]);  // the copy below runs on another stream
            auto got = download<float>(d[r], n);
            EXPECT(got[0] == w && got[n - 1] == w, "rank %d: %g, want %g", r, got[0], w);
        }
    });
    check("collective_on_another_devices_stream_refused", [&] {
        CUdeviceptr s = dalloc(16);
        int rc = ncclAllReduce((void*)s, (void*)s, 4, F32, SUM, comms[0], g_stream[1]);
        EXPECT(rc == InvalidUsage, "gave %d", rc);
    });
    check("count_mismatch_is_an_error_not_a_hang", [&] {
        std::vector<void*> c(N, nullptr);
        ncclCommInitAll(c.data(), N, nullptr);
        std::vector<CUdeviceptr> d(N);
        std::vector<float> before(8, 5.0f);
        for (int r = 0; r < N; ++r) d[r] = upload(before);
        auto t0 = std::chrono::steady_clock::now();
        for (int r = 0; r < N; ++r)
            ncclAllReduce((void*)d[r], (void*)d[r], r == 0 ? 8 : 4, F32, SUM, c[r], g_stream[r]);
        sync_all();
        double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        EXPECT(secs < 10, "took %.1fs", secs);
        for (int r = 0; r < N; ++r) {
            int e = -1;
            ncclCommGetAsyncError(c[r], &e);
            EXPECT(e == InvalidUsage, "rank %d async error %d", r, e);
            EXPECT(download<float>(d[r], 8) == before, "rank %d buffer written", r);
            EXPECT(ncclCommAbort(c[r]) == 0, "abort");
        }
    });
    check("abort_while_a_peer_waits_returns", [&] {
        std::vector<void*> c(N, nullptr);
        ncclCommInitAll(c.data(), N, nullptr);
        CUdeviceptr d = upload(std::vector<float>(8, 1.0f));
        ncclAllReduce((void*)d, (void*)d, 8, F32, SUM, c[0], g_stream[0]);  // no peer joins
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
        auto t0 = std::chrono::steady_clock::now();
        EXPECT(ncclCommAbort(c[1]) == 0, "abort of rank 1");
        cuStreamSynchronize(g_stream[0]);
        double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        EXPECT(secs < 5, "rank 0's stream waited %.1fs after the abort", secs);
        int e = -1;
        ncclCommGetAsyncError(c[0], &e);
        EXPECT(e == RemoteError, "rank 0 async error %d", e);
        for (int r = 0; r < N; ++r)
            if (r != 1) EXPECT(ncclCommAbort(c[r]) == 0, "abort of rank %d", r);
    });
    // Last: a bad buffer makes the CUDA error sticky for the rest of the process.
    check("out_of_bounds_buffer_is_a_sticky_error", [&] {
        std::vector<CUdeviceptr> d(N);
        for (int r = 0; r < N; ++r) d[r] = dalloc(r == 0 ? 16 : 32);  // rank 0's is short
        for (int r = 0; r < N; ++r)
            ncclAllReduce((void*)d[r], (void*)d[r], 8, F32, SUM, comms[r], g_stream[r]);
        int rc = cuStreamSynchronize(g_stream[0]);
        sync_all();
        EXPECT(rc == 700, "cuStreamSynchronize gave %d, want CUDA_ERROR_ILLEGAL_ADDRESS", rc);
        for (int r = 0; r < N; ++r) {
            int e = -1;
            ncclCommGetAsyncError(comms[r], &e);
            EXPECT(e == UnhandledCuda, "rank %d async error %d", r, e);
        }
    });
    for (void* c : comms) ncclCommDestroy(c);
    printf("%s\n", g_failed ? "FAILED" : "ALL OK");
    return g_failed ? 1 : 0;
}
