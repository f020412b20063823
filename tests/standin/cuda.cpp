// A CPU stand-in for libcuda.so.1, for tests only (never built into or shipped with tune).
// It implements the driver entry points cudarc 0.19 reaches from tune, with host memory as
// device memory, and runs src/engine/cuda/kernels.cu compiled as C++ (through
// cuda_shim.h) over each launch's grid. It exists to make bugs loud:
//   - every allocation ends at a PROT_NONE guard page (and starts after one) and is filled
//     with 0xff bytes (NaN as f32), so an out-of-bounds access faults and a skipped
//     element shows;
//   - launches are checked against Hopper's grid, block and shared-memory limits;
//   - copies and pointer arguments are checked against live allocations;
//   - each stream runs its work in order on its own thread, host-to-device and
//     device-to-device copies are slowed down (TUNE_CUDA_STANDIN_COPY_LAG_US, default 1000),
//     and cross-stream event waits are honoured, so a missing wait reads NaN.
// Timings from here are CPU timings of a reference implementation, never GPU figures.
#include <ucontext.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "cuda_shim.h"
#include "publish.h"

thread_local tune_dim3 threadIdx, blockIdx, blockDim, gridDim;

#include "kernels.cu"

#define API extern "C" __attribute__((visibility("default")))

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
enum {
    OK = 0,
    ERR_INVALID_VALUE = 1,
    ERR_OUT_OF_MEMORY = 2,
    ERR_NO_DEVICE = 100,
    ERR_INVALID_DEVICE = 101,
    ERR_INVALID_IMAGE = 200,
    ERR_INVALID_CONTEXT = 201,
    ERR_INVALID_HANDLE = 400,
    ERR_NOT_FOUND = 500,
    ERR_NOT_READY = 600,
    ERR_ILLEGAL_ADDRESS = 700,
    ERR_NOT_SUPPORTED = 801,
};

static const char* DEVICE_NAME = "tune CPU stand-in (not a GPU)";
static const size_t TOTAL_MEM = 80ull << 30;
static const unsigned MAX_SHARED = 48 * 1024;

static void say(const char* fmt, const char* a = "", unsigned long long b = 0) {
    fprintf(stderr, "tune CUDA stand-in: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, "\n");
}

// ---- the sticky error (as a real context: after a fault every call reports it) -----------

static std::atomic<int> g_sticky{0};
static void set_sticky(int e) {
    int zero = 0;
    g_sticky.compare_exchange_strong(zero, e);
}
static CUresult sticky_or(CUresult r) {
    int s = g_sticky.load();
    return s ? s : r;
}

// ---- allocations ------------------------------------------------------------------------

struct Alloc {
    char* base;      // the mapping, guard pages included
    size_t map_len;  // bytes mapped
    char* data;      // what the caller gets: ends at the trailing guard page
    size_t size;
    bool host;       // page-locked host memory (cuMemHostAlloc)
    int device;      // the device current when it was allocated (published for NVML)
};

static std::mutex g_mem_mu;
static std::map<uintptr_t, Alloc> g_allocs;  // by data address
static size_t g_used = 0;
static const size_t PAGE = 4096;

static char* map_guarded(size_t size, Alloc* a) {
    size_t body = (size + PAGE - 1) / PAGE * PAGE;
    if (body == 0) body = PAGE;
    size_t len = body + 2 * PAGE;
    void* m = mmap(nullptr, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m == MAP_FAILED) return nullptr;
    char* base = (char*)m;
    if (mprotect(base + PAGE, body, PROT_READ | PROT_WRITE) != 0) {
        munmap(m, len);
        return nullptr;
    }
    a->base = base;
    a->map_len = len;
    a->data = base + PAGE + body - size;
    a->size = size;
    memset(base + PAGE, 0xff, body);
    return a->data;
}

static CUresult do_alloc(void** out, size_t size, bool host) {
    if (!out) return ERR_INVALID_VALUE;
    Alloc a{};
    a.host = host;
    a.device = host ? -1 : act_current_device();
    if (!map_guarded(size, &a)) return ERR_OUT_OF_MEMORY;
    std::lock_guard<std::mutex> g(g_mem_mu);
    g_allocs[(uintptr_t)a.data] = a;
    if (!host) g_used += size;
    if (!host) act_mem(a.device, size, true);
    *out = a.data;
    return OK;
}

static CUresult do_free(uintptr_t p, bool host) {
    Alloc a;
    {
        std::lock_guard<std::mutex> g(g_mem_mu);
        auto it = g_allocs.find(p);
        if (it == g_allocs.end() || it->second.host != host) return ERR_INVALID_VALUE;
        a = it->second;
        g_allocs.erase(it);
        if (!host) g_used -= a.size;
        if (!host) act_mem(a.device, a.size, false);
    }
    munmap(a.base, a.map_len);
    return OK;
}

// The allocation holding [p, p + n), or false.
static bool lookup(uintptr_t p, size_t n, Alloc* out) {
    std::lock_guard<std::mutex> g(g_mem_mu);
    auto it = g_allocs.upper_bound(p);
    if (it == g_allocs.begin()) return false;
    --it;
    const Alloc& a = it->second;
    uintptr_t s = (uintptr_t)a.data;
    if (p < s || p + n > s + a.size || p + n < p) return false;
    if (out) *out = a;
    return true;
}

static bool check_range(uintptr_t p, size_t n, const char* what) {
    if (n == 0 || lookup(p, n, nullptr)) return true;
    fprintf(stderr,
            "tune CUDA stand-in: %s: [0x%llx, +%zu bytes) is not inside one live allocation\n",
            what, (unsigned long long)p, n);
    return false;
}

// ---- streams and events -------------------------------------------------------------------

struct Event {
    std::mutex mu;
    std::condition_variable cv;
    unsigned long long issued = 0, done = 0;
    std::chrono::steady_clock::time_point at;
    bool timing = true;
};

// What the current stream thread is running, for the fault handler.
static thread_local const char* t_op = nullptr;

struct Stream {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::pair<const char*, std::function<void()>>> q;
    bool busy = false, stop = false;
    int device = -1;  // the current context's device when it was created
    std::thread worker;

    Stream() {
        worker = std::thread([this] { run(); });
    }
    void run() {
        std::unique_lock<std::mutex> l(mu);
        for (;;) {
            cv.wait(l, [this] { return stop || !q.empty(); });
            if (q.empty()) return;
            auto op = std::move(q.front());
            q.pop_front();
            busy = true;
            l.unlock();
            t_op = op.first;
            op.second();
            t_op = nullptr;
            l.lock();
            busy = false;
            cv.notify_all();
        }
    }
    void push(const char* what, std::function<void()> op) {
        int d = device >= 0 ? device : act_current_device();
        op = act_timed(what, d, std::move(op));
        std::lock_guard<std::mutex> g(mu);
        q.emplace_back(what, std::move(op));
        cv.notify_all();
    }
    void drain() {
        std::unique_lock<std::mutex> l(mu);
        cv.wait(l, [this] { return q.empty() && !busy; });
    }
    ~Stream() {
        {
            std::lock_guard<std::mutex> g(mu);
            stop = true;
            cv.notify_all();
        }
        worker.join();
    }
};

static Stream* g_null_stream() {
    static Stream* s = new Stream();  // lives as long as the process
    return s;
}
// 0, CU_STREAM_LEGACY (1) and CU_STREAM_PER_THREAD (2) all mean the default stream here.
static Stream* S(void* h) { return (uintptr_t)h <= 2 ? g_null_stream() : (Stream*)h; }
static int stream_device(void* h) {
    int d = S(h)->device;
    return d >= 0 ? d : act_current_device();
}

static long copy_lag_us() {
    static long lag = [] {
        const char* v = getenv("TUNE_CUDA_STANDIN_COPY_LAG_US");
        return v ? atol(v) : 1000L;
    }();
    return lag;
}
static void lag() {
    long us = copy_lag_us();
    if (us > 0) std::this_thread::sleep_for(std::chrono::microseconds(us));
}

#include "launch.h"

// ---- the fault handler: name the kernel that touched a guard page ---------------------------

static struct sigaction g_old_segv;
static void on_segv(int sig, siginfo_t* info, void* uctx) {
    const char* k = g_kernel_name ? g_kernel_name : t_op;
    if (k) {
        char buf[256];
        int n = snprintf(buf, sizeof buf,
                         "tune CUDA stand-in: %s touched %p, outside any live buffer (a guard "
                         "page or freed memory): out-of-bounds access or a missing wait\n",
                         k, info->si_addr);
        if (n > 0) {
            ssize_t w = write(2, buf, (size_t)n);
            (void)w;
        }
    }
    // Back to the previous handler (Rust's, or the default): the access faults again there.
    sigaction(SIGSEGV, &g_old_segv, nullptr);
    (void)sig;
    (void)uctx;
}

// ---- the driver API -------------------------------------------------------------------------

// Devices: TUNE_CUDA_STANDIN_DEVICES of them (1..=8, default 1), each with its own primary
// context. Memory and kernels are shared by all of them (host memory, one kernel at a
// time), so only what a caller can observe per device differs: ordinals, contexts, UUIDs.
struct Ctx {
    int device;
};
static const int MAX_DEVICES = 8;
static Ctx g_primary[MAX_DEVICES] = {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}};
static thread_local Ctx* t_current = nullptr;
static int act_current_device() { return t_current ? t_current->device : 0; }

static int device_count() {
    static int n = [] {
        const char* v = getenv("TUNE_CUDA_STANDIN_DEVICES");
        if (!v) return 1;
        char* end = nullptr;
        long k = strtol(v, &end, 10);
        if (end == v || *end != '\0' || k < 1 || k > MAX_DEVICES) {
            fprintf(stderr,
                    "tune CUDA stand-in: TUNE_CUDA_STANDIN_DEVICES=%s is not an integer in "
                    "1..=%d; using 1 device\n",
                    v, MAX_DEVICES);
            return 1;
        }
        return (int)k;
    }();
    return n;
}
static bool valid_device(int d) { return d >= 0 && d < device_count(); }

API CUresult cuInit(unsigned) {
    static std::once_flag once;
    std::call_once(once, [] {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = on_segv;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigaction(SIGSEGV, &sa, &g_old_segv);
        act_open(device_count());
    });
    return OK;
}
API CUresult cuDriverGetVersion(int* v) {
    if (!v) return ERR_INVALID_VALUE;
    *v = 13000;
    return OK;
}
// NVRTC calls this when it finds a libcuda; an error makes it carry on without the driver.
API CUresult cuGetExportTable(const void** table, const void*) {
    if (table) *table = nullptr;
    return ERR_NOT_SUPPORTED;
}
API CUresult cuDeviceGetCount(int* n) {
    if (!n) return ERR_INVALID_VALUE;
    *n = device_count();
    return OK;
}
API CUresult cuDeviceGet(int* d, int ordinal) {
    if (!d) return ERR_INVALID_VALUE;
    if (!valid_device(ordinal)) return ERR_INVALID_DEVICE;
    *d = ordinal;
    return OK;
}
API CUresult cuDeviceGetName(char* name, int len, int dev) {
    if (!valid_device(dev)) return ERR_INVALID_DEVICE;
    if (!name || len <= 0) return ERR_INVALID_VALUE;
    snprintf(name, (size_t)len, "%s", DEVICE_NAME);
    return OK;
}
API CUresult cuDeviceTotalMem_v2(size_t* b, int dev) {
    if (!valid_device(dev)) return ERR_INVALID_DEVICE;
    *b = TOTAL_MEM;
    return OK;
}
API CUresult cuMemGetInfo_v2(size_t* free_b, size_t* total) {
    std::lock_guard<std::mutex> g(g_mem_mu);
    if (free_b) *free_b = TOTAL_MEM - g_used;
    if (total) *total = TOTAL_MEM;
    return OK;
}
API CUresult cuDeviceGetAttribute(int* v, int attr, int dev) {
    if (!valid_device(dev)) return ERR_INVALID_DEVICE;
    if (!v) return ERR_INVALID_VALUE;
    switch (attr) {
        case 1: *v = 1024; break;        // max threads per block
        case 2: *v = 1024; break;        // max block x
        case 3: *v = 1024; break;        // max block y
        case 4: *v = 64; break;          // max block z
        case 5: *v = 2147483647; break;  // max grid x
        case 6: *v = 65535; break;       // max grid y
        case 7: *v = 65535; break;       // max grid z
        case 8: *v = (int)MAX_SHARED; break;
        case 10: *v = 32; break;         // warp size
        case 16: *v = 132; break;        // multiprocessors (an H100/H200)
        case 75: *v = 9; break;          // compute capability 9.0
        case 76: *v = 0; break;
        case 115: *v = 1; break;         // memory pools: cudarc takes cuMemAllocAsync
        default: *v = 0;
    }
    return OK;
}
API CUresult cuDeviceGetUuid_v2(void* u, int dev) {
    if (!valid_device(dev)) return ERR_INVALID_DEVICE;
    if (!u) return ERR_INVALID_VALUE;
    memset(u, 0x5a, 16);
    ((unsigned char*)u)[15] = (unsigned char)dev;  // distinct per device, as NCCL requires
    return OK;
}
API CUresult cuDevicePrimaryCtxRetain(void** ctx, int dev) {
    if (!valid_device(dev)) return ERR_INVALID_DEVICE;
    if (!ctx) return ERR_INVALID_VALUE;
    *ctx = &g_primary[dev];
    act_ctx(dev);
    return OK;
}
API CUresult cuDevicePrimaryCtxRelease_v2(int dev) {
    return valid_device(dev) ? OK : ERR_INVALID_DEVICE;
}
API CUresult cuCtxSetCurrent(void* ctx) {
    t_current = (Ctx*)ctx;
    return OK;
}
API CUresult cuCtxGetCurrent(void** ctx) {
    if (!ctx) return ERR_INVALID_VALUE;
    *ctx = t_current;
    return OK;
}
API CUresult cuCtxGetDevice(int* dev) {
    if (!dev) return ERR_INVALID_VALUE;
    if (!t_current) return ERR_INVALID_CONTEXT;
    *dev = t_current->device;
    return OK;
}
// Every pair of distinct devices can reach each other's memory (it is all host memory).
API CUresult cuDeviceCanAccessPeer(int* can, int dev, int peer) {
    if (!can) return ERR_INVALID_VALUE;
    if (!valid_device(dev) || !valid_device(peer)) return ERR_INVALID_DEVICE;
    *can = dev != peer;
    return OK;
}
API CUresult cuCtxEnablePeerAccess(void* peer, unsigned) { return peer ? OK : ERR_INVALID_VALUE; }
API CUresult cuCtxDisablePeerAccess(void* peer) { return peer ? OK : ERR_INVALID_VALUE; }
API CUresult cuCtxSynchronize() {
    g_null_stream()->drain();
    return sticky_or(OK);
}

API CUresult cuStreamCreate(void** s, unsigned) {
    if (!s) return ERR_INVALID_VALUE;
    Stream* st = new Stream();
    st->device = t_current ? t_current->device : -1;
    *s = st;
    return OK;
}
API CUresult cuStreamCreateWithPriority(void** s, unsigned f, int) { return cuStreamCreate(s, f); }
API CUresult cuStreamDestroy_v2(void* h) {
    if ((uintptr_t)h <= 2) return ERR_INVALID_HANDLE;
    delete (Stream*)h;  // runs what is queued first, as the driver does
    return OK;
}
API CUresult cuStreamSynchronize(void* h) {
    S(h)->drain();
    return sticky_or(OK);
}
API CUresult cuStreamQuery(void* h) {
    Stream* s = S(h);
    std::lock_guard<std::mutex> g(s->mu);
    return sticky_or(s->q.empty() && !s->busy ? OK : ERR_NOT_READY);
}

typedef std::shared_ptr<Event> EventRef;
static Event* E(void* h) { return h ? ((EventRef*)h)->get() : nullptr; }

API CUresult cuEventCreate(void** e, unsigned flags) {
    if (!e) return ERR_INVALID_VALUE;
    auto* r = new EventRef(std::make_shared<Event>());
    (*r)->timing = (flags & 2) == 0;  // CU_EVENT_DISABLE_TIMING
    *e = r;
    return OK;
}
API CUresult cuEventDestroy_v2(void* e) {
    if (!e) return ERR_INVALID_HANDLE;
    delete (EventRef*)e;  // queued records and waits hold their own reference
    return OK;
}
API CUresult cuEventRecord(void* e, void* h) {
    if (!e) return ERR_INVALID_HANDLE;
    EventRef ev = *(EventRef*)e;
    unsigned long long seq;
    {
        std::lock_guard<std::mutex> g(ev->mu);
        seq = ++ev->issued;
    }
    S(h)->push("cuEventRecord", [ev, seq] {
        std::lock_guard<std::mutex> g(ev->mu);
        ev->at = std::chrono::steady_clock::now();
        if (seq > ev->done) ev->done = seq;
        ev->cv.notify_all();
    });
    return OK;
}
API CUresult cuEventRecordWithFlags(void* e, void* h, unsigned) { return cuEventRecord(e, h); }
API CUresult cuStreamWaitEvent(void* h, void* e, unsigned) {
    if (!e) return ERR_INVALID_HANDLE;
    EventRef ev = *(EventRef*)e;
    unsigned long long target;
    {
        std::lock_guard<std::mutex> g(ev->mu);
        target = ev->issued;  // the last record issued before this call
    }
    S(h)->push("cuStreamWaitEvent", [ev, target] {
        std::unique_lock<std::mutex> l(ev->mu);
        ev->cv.wait(l, [&] { return ev->done >= target; });
    });
    return OK;
}
API CUresult cuEventSynchronize(void* e) {
    Event* ev = E(e);
    if (!ev) return ERR_INVALID_HANDLE;
    std::unique_lock<std::mutex> l(ev->mu);
    ev->cv.wait(l, [&] { return ev->done >= ev->issued; });
    return sticky_or(OK);
}
API CUresult cuEventQuery(void* e) {
    Event* ev = E(e);
    if (!ev) return ERR_INVALID_HANDLE;
    std::lock_guard<std::mutex> g(ev->mu);
    return sticky_or(ev->done >= ev->issued ? OK : ERR_NOT_READY);
}
API CUresult cuEventElapsedTime(float* ms, void* a, void* b) {
    Event *s = E(a), *t = E(b);
    if (!s || !t || !ms) return ERR_INVALID_HANDLE;
    std::lock_guard<std::mutex> g1(s->mu);
    if (!s->timing || s->issued == 0) return ERR_INVALID_HANDLE;
    if (s->done < s->issued) return ERR_NOT_READY;
    auto sa = s->at;
    {
        std::lock_guard<std::mutex> g2(t->mu);
        if (!t->timing || t->issued == 0) return ERR_INVALID_HANDLE;
        if (t->done < t->issued) return ERR_NOT_READY;
        *ms = std::chrono::duration<float, std::milli>(t->at - sa).count();
    }
    return OK;
}
API CUresult cuEventElapsedTime_v2(float* ms, void* a, void* b) { return cuEventElapsedTime(ms, a, b); }

// Device memory. Stream-ordered allocation maps at once (the memory is valid for
// everything queued after it); the free is queued, so a later use faults.
API CUresult cuMemAllocAsync(CUdeviceptr* p, size_t n, void*) {
    return do_alloc((void**)p, n, false);
}
API CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t n) { return do_alloc((void**)p, n, false); }
API CUresult cuMemFreeAsync(CUdeviceptr p, void* h) {
    if (!lookup(p, 0, nullptr)) return ERR_INVALID_VALUE;
    S(h)->push("cuMemFreeAsync", [p] {
        if (do_free(p, false) != OK) {
            say("cuMemFreeAsync: 0x%s%llx is not a live allocation", "", p);
            set_sticky(ERR_ILLEGAL_ADDRESS);
        }
    });
    return OK;
}
API CUresult cuMemFree_v2(CUdeviceptr p) {
    cuCtxSynchronize();
    return do_free(p, false);
}
API CUresult cuMemHostAlloc(void** p, size_t n, unsigned) { return do_alloc(p, n, true); }
API CUresult cuMemAllocHost_v2(void** p, size_t n) { return do_alloc(p, n, true); }
API CUresult cuMemFreeHost(void* p) { return do_free((uintptr_t)p, true); }
API CUresult cuMemGetAddressRange_v2(CUdeviceptr* base, size_t* size, CUdeviceptr p) {
    Alloc a;
    if (!lookup(p, 1, &a)) return ERR_NOT_FOUND;
    if (base) *base = (CUdeviceptr)a.data;
    if (size) *size = a.size;
    return OK;
}

static bool is_pinned(const void* p, size_t n) {
    Alloc a;
    return lookup((uintptr_t)p, n, &a) && a.host;
}

API CUresult cuMemsetD8Async(CUdeviceptr p, unsigned char v, size_t n, void* h) {
    if (!check_range(p, n, "cuMemsetD8Async")) return ERR_INVALID_VALUE;
    S(h)->push("cuMemsetD8Async", [=] { memset((void*)p, v, n); });
    return OK;
}
API CUresult cuMemsetD8_v2(CUdeviceptr p, unsigned char v, size_t n) {
    if (!check_range(p, n, "cuMemsetD8")) return ERR_INVALID_VALUE;
    cuCtxSynchronize();
    memset((void*)p, v, n);
    return OK;
}
API CUresult cuMemsetD32Async(CUdeviceptr p, unsigned v, size_t n, void* h) {
    if (!check_range(p, n * 4, "cuMemsetD32Async")) return ERR_INVALID_VALUE;
    S(h)->push("cuMemsetD32Async", [=] {
        for (size_t i = 0; i < n; ++i) memcpy((char*)p + 4 * i, &v, 4);
    });
    return OK;
}

API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, void* h) {
    if (!check_range(dst, n, "cuMemcpyHtoDAsync destination")) return ERR_INVALID_VALUE;
    if (!src && n) return ERR_INVALID_VALUE;
    act_copy(stream_device(h), n, true);
    if (is_pinned(src, n)) {
        // Page-locked source: read when the copy runs, as the DMA engine does.
        S(h)->push("cuMemcpyHtoDAsync_v2", [=] {
            lag();
            memcpy((void*)dst, src, n);
        });
    } else {
        // Pageable source: the driver stages it before returning.
        auto staged = std::make_shared<std::vector<char>>((const char*)src, (const char*)src + n);
        S(h)->push("cuMemcpyHtoDAsync_v2", [=] {
            lag();
            memcpy((void*)dst, staged->data(), n);
        });
    }
    return OK;
}
API CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) {
    CUresult r = cuMemcpyHtoDAsync_v2(dst, src, n, nullptr);
    if (r == OK) g_null_stream()->drain();
    return sticky_or(r);
}
API CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, void* h) {
    if (!check_range(src, n, "cuMemcpyDtoHAsync source")) return ERR_INVALID_VALUE;
    if (!dst && n) return ERR_INVALID_VALUE;
    act_copy(stream_device(h), n, false);
    bool pinned = is_pinned(dst, n);
    auto done = std::make_shared<std::atomic<bool>>(false);
    Stream* s = S(h);
    s->push("cuMemcpyDtoHAsync_v2", [=] {
        memcpy(dst, (const void*)src, n);
        done->store(true);
    });
    // To pageable memory the driver returns only once the copy is done.
    if (!pinned) {
        while (!done->load()) {
            s->drain();
        }
    }
    return sticky_or(OK);
}
API CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) {
    CUresult r = cuMemcpyDtoHAsync_v2(dst, src, n, nullptr);
    g_null_stream()->drain();
    return sticky_or(r);
}
API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, void* h) {
    if (!check_range(dst, n, "cuMemcpyDtoDAsync destination")) return ERR_INVALID_VALUE;
    if (!check_range(src, n, "cuMemcpyDtoDAsync source")) return ERR_INVALID_VALUE;
    S(h)->push("cuMemcpyDtoDAsync_v2", [=] {
        lag();
        memmove((void*)dst, (const void*)src, n);
    });
    return OK;
}
API CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
    CUresult r = cuMemcpyDtoDAsync_v2(dst, src, n, nullptr);
    g_null_stream()->drain();
    return sticky_or(r);
}
API CUresult cuMemcpyPeerAsync(CUdeviceptr dst, void* dst_ctx, CUdeviceptr src, void* src_ctx,
                               size_t n, void* h) {
    if (!dst_ctx || !src_ctx) return ERR_INVALID_CONTEXT;
    return cuMemcpyDtoDAsync_v2(dst, src, n, h);
}
API CUresult cuMemcpyPeer(CUdeviceptr dst, void* dst_ctx, CUdeviceptr src, void* src_ctx,
                          size_t n) {
    CUresult r = cuMemcpyPeerAsync(dst, dst_ctx, src, src_ctx, n, nullptr);
    if (r == OK) g_null_stream()->drain();
    return sticky_or(r);
}

API CUresult cuLaunchHostFunc(void* h, void (*fn)(void*), void* user) {
    if (!fn) return ERR_INVALID_VALUE;
    S(h)->push("cuLaunchHostFunc", [=] {
        if (!g_sticky.load()) fn(user);
    });
    return OK;
}

// ---- for the NCCL stand-in (nccl.cpp), which resolves these at run time ------------------

// Queues fn(arg) on the stream's thread after what is queued there. It runs even after a
// sticky error, so that ranks waiting for each other in a collective are not left hanging;
// the collective checks its buffers itself (tune_standin_check_range).
API int tune_standin_enqueue(void* stream, const char* what, void (*fn)(void*), void* arg) {
    if (!fn) return ERR_INVALID_VALUE;
    S(stream)->push(what ? what : "tune_standin_enqueue", [=] { fn(arg); });
    return OK;
}
// 1 when [p, p + bytes) lies inside one live allocation; else says so, makes the error
// sticky (as a kernel touching it would) and returns 0.
API int tune_standin_check_range(const void* p, size_t bytes, const char* what) {
    if (check_range((uintptr_t)p, bytes, what ? what : "tune_standin_check_range")) return 1;
    set_sticky(ERR_ILLEGAL_ADDRESS);
    return 0;
}
API int tune_standin_current_device(void) { return t_current ? t_current->device : -1; }
// The device whose context created the stream (the default stream belongs to the caller's
// current device), -1 when none was current: a collective on another device's stream is
// a caller's bug that real NCCL reports too.
API int tune_standin_stream_device(void* stream) {
    if ((uintptr_t)stream <= 2) return tune_standin_current_device();
    return ((Stream*)stream)->device;
}

// Modules: the image is NVRTC's PTX for tune's kernels; each `.entry` must be one this
// stand-in was built with (else the build is stale: the test builder rebuilds on change).
struct Module {
    std::set<std::string> names;
};
API CUresult cuModuleLoadData(void** m, const void* image) {
    if (!m || !image) return ERR_INVALID_VALUE;
    std::string ptx((const char*)image);
    auto* mod = new Module();
    size_t at = 0;
    while ((at = ptx.find(".entry ", at)) != std::string::npos) {
        at += 7;
        size_t end = ptx.find('(', at);
        if (end == std::string::npos) break;
        std::string name = ptx.substr(at, end - at);
        while (!name.empty() && name.back() == ' ') name.pop_back();
        if (!find_kernel(name)) {
            say("module has kernel %s, which this stand-in was not built with", name.c_str());
            delete mod;
            return ERR_INVALID_IMAGE;
        }
        mod->names.insert(name);
    }
    if (mod->names.empty()) {
        delete mod;
        return ERR_INVALID_IMAGE;
    }
    *m = mod;
    return OK;
}
API CUresult cuModuleUnload(void* m) {
    delete (Module*)m;
    return OK;
}
API CUresult cuModuleGetFunction(void** f, void* m, const char* name) {
    if (!f || !m || !name) return ERR_INVALID_VALUE;
    if (!((Module*)m)->names.count(name)) return ERR_NOT_FOUND;
    const Kernel* k = find_kernel(name);
    if (!k) return ERR_NOT_FOUND;
    *f = (void*)k;
    return OK;
}

API CUresult cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                            unsigned by, unsigned bz, unsigned shared, void* h, void** params,
                            void** extra) {
    const Kernel* k = (const Kernel*)f;
    if (!k) return ERR_INVALID_HANDLE;
    if (extra) return ERR_NOT_SUPPORTED;
    size_t static_shared = (size_t)(__stop_tune_shared - __start_tune_shared);
    unsigned long long threads = (unsigned long long)bx * by * bz;
    bool bad = gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0 ||
               gx > 2147483647u || gy > 65535 || gz > 65535 || bx > 1024 || by > 1024 ||
               bz > 64 || threads > 1024 || shared + static_shared > MAX_SHARED;
    if (bad) {
        fprintf(stderr,
                "tune CUDA stand-in: kernel %s: launch grid (%u,%u,%u) block (%u,%u,%u) "
                "shared %u B is over the device's limits\n",
                k->name, gx, gy, gz, bx, by, bz, shared);
        return ERR_INVALID_VALUE;
    }
    return k->enqueue(k, S(h), LaunchGeom{gx, gy, gz, bx, by, bz}, params);
}

static const char* error_name(int e) {
    switch (e) {
        case OK: return "CUDA_SUCCESS";
        case ERR_INVALID_VALUE: return "CUDA_ERROR_INVALID_VALUE";
        case ERR_OUT_OF_MEMORY: return "CUDA_ERROR_OUT_OF_MEMORY";
        case ERR_NO_DEVICE: return "CUDA_ERROR_NO_DEVICE";
        case ERR_INVALID_DEVICE: return "CUDA_ERROR_INVALID_DEVICE";
        case ERR_INVALID_IMAGE: return "CUDA_ERROR_INVALID_IMAGE";
        case ERR_INVALID_CONTEXT: return "CUDA_ERROR_INVALID_CONTEXT";
        case ERR_INVALID_HANDLE: return "CUDA_ERROR_INVALID_HANDLE";
        case ERR_NOT_FOUND: return "CUDA_ERROR_NOT_FOUND";
        case ERR_NOT_READY: return "CUDA_ERROR_NOT_READY";
        case ERR_ILLEGAL_ADDRESS: return "CUDA_ERROR_ILLEGAL_ADDRESS";
        case ERR_NOT_SUPPORTED: return "CUDA_ERROR_NOT_SUPPORTED";
        default: return nullptr;
    }
}
API CUresult cuGetErrorName(int e, const char** s) {
    const char* n = error_name(e);
    if (!n) return ERR_INVALID_VALUE;
    *s = n;
    return OK;
}
API CUresult cuGetErrorString(int e, const char** s) {
    const char* n = error_name(e);
    if (!n) return ERR_INVALID_VALUE;
    *s = n;
    return OK;
}
