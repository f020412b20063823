// Part of the driver stand-in (cuda.cpp includes it once, after its allocations, streams
// and sticky error, which this uses): kernels.cu's functions run over a launch grid on the
// launching stream's thread, with a fiber per CUDA thread once a block reaches
// __syncthreads. Kept apart so cuda.cpp stays readable.
//
// Kernels of different streams (DDP's ranks, DP's replicas, a copy beside a compute
// stream) run at the same time, as on a GPU: the CUDA indices and the fibers are per host
// thread. The `__shared__` section is one for the process, so a kernel that uses it, a
// barrier or atomics (the generated table's TUNE_EXCLUSIVE_KERNELS, read from kernels.cu)
// runs alone and leaves the section NaN-filled again; every other kernel must leave it
// untouched, which is checked after each such launch, so a kernel the table failed to
// mark is reported, not raced.
#pragma once

#include <shared_mutex>

#include "kernel_table.h"  // generated: TUNE_KERNEL_TABLE, TUNE_EXCLUSIVE_KERNELS

// ---- kernels over the grid ----------------------------------------------------------------

// Shared by concurrent kernels, held alone by an exclusive one. A writer first takes the
// turnstile, which new readers also pass through, so a stream of concurrent kernels cannot
// starve an exclusive one.
static std::shared_mutex g_kernel_rw;
static std::mutex g_kernel_turnstile;
extern "C" char __start_tune_shared[], __stop_tune_shared[];
static thread_local const char* g_kernel_name = nullptr;  // for the fault handler

static size_t shared_bytes() { return (size_t)(__stop_tune_shared - __start_tune_shared); }

// Whether the `__shared__` section still holds the NaN fill (0xff bytes) every exclusive
// kernel leaves behind.
static bool shared_untouched() {
    for (size_t i = 0; i < shared_bytes(); ++i)
        if ((unsigned char)__start_tune_shared[i] != 0xff) return false;
    return true;
}

// Filled once at load (the section starts zeroed), so the first concurrent kernel finds
// it as every exclusive kernel leaves it.
static const bool g_shared_filled = [] {
    if (shared_bytes()) memset(__start_tune_shared, 0xff, shared_bytes());
    return true;
}();

// TUNE_CUDA_STANDIN_SERIAL=1: every kernel runs alone, as the stand-in did before kernels
// of different streams ran at the same time (to compare the two).
static bool is_exclusive(const char* name) {
    static const bool serial = [] {
        const char* v = getenv("TUNE_CUDA_STANDIN_SERIAL");
        return v && strcmp(v, "1") == 0;
    }();
    if (serial) return true;
    static const std::vector<std::string> all = {TUNE_EXCLUSIVE_KERNELS};
    for (const std::string& n : all)
        if (n == name) return true;
    return false;
}

// Fibers for blocks that reach __syncthreads, per host thread.
struct Fiber {
    ucontext_t ctx;
    char* stack = nullptr;
    bool done = false, waiting = false;
    tune_dim3 tid;
};
static thread_local ucontext_t g_sched;
static thread_local Fiber* g_cur = nullptr;
static thread_local std::function<void()>* g_body = nullptr;
// A host thread's fibers; their stacks go with the thread (a stream's worker).
struct Fibers {
    std::vector<Fiber> v;
    ~Fibers() {
        for (Fiber& f : v) free(f.stack);
    }
};
static thread_local Fibers g_fibers;
static thread_local bool g_bad_sync = false;
static const size_t FIBER_STACK = 256 * 1024;

void __syncthreads() {
    if (!g_cur) {
        g_bad_sync = true;  // a thread run without a fiber reached a barrier
        return;
    }
    g_cur->waiting = true;
    swapcontext(&g_cur->ctx, &g_sched);
    threadIdx = g_cur->tid;
}

static void fiber_entry() {
    (*g_body)();
    g_cur->done = true;
}

static void start_fiber(Fiber& f) {
    if (!f.stack) f.stack = (char*)malloc(FIBER_STACK);
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack;
    f.ctx.uc_stack.ss_size = FIBER_STACK;
    f.ctx.uc_link = &g_sched;
    f.done = f.waiting = false;
    makecontext(&f.ctx, fiber_entry, 0);
}
static void resume(Fiber& f) {
    g_cur = &f;
    threadIdx = f.tid;
    f.waiting = false;
    swapcontext(&g_sched, &f.ctx);
    g_cur = nullptr;
}

// Runs one block: thread 0 as a fiber; when it finishes without reaching a barrier the
// rest run as plain calls (fast), else every thread runs as a fiber and they meet at each
// barrier in thread order (so thread 0 reads what the others wrote only after the barrier).
static void run_block(std::function<void()>& body, unsigned nthreads, bool exclusive) {
    if (exclusive && shared_bytes()) memset(__start_tune_shared, 0xff, shared_bytes());
    if (g_fibers.v.size() < nthreads) g_fibers.v.resize(nthreads);
    g_body = &body;
    for (unsigned t = 0; t < nthreads; ++t) {
        Fiber& f = g_fibers.v[t];
        f.tid.x = t % blockDim.x;
        f.tid.y = (t / blockDim.x) % blockDim.y;
        f.tid.z = t / (blockDim.x * blockDim.y);
    }
    start_fiber(g_fibers.v[0]);
    resume(g_fibers.v[0]);
    if (g_fibers.v[0].done) {
        for (unsigned t = 1; t < nthreads; ++t) {
            threadIdx = g_fibers.v[t].tid;
            body();
        }
        return;
    }
    for (unsigned t = 1; t < nthreads; ++t) {
        start_fiber(g_fibers.v[t]);
        resume(g_fibers.v[t]);
    }
    for (;;) {
        bool any = false;
        for (unsigned t = 0; t < nthreads; ++t) {
            if (!g_fibers.v[t].done) {
                any = true;
                resume(g_fibers.v[t]);
            }
        }
        if (!any) break;
    }
}

struct LaunchGeom {
    unsigned gx, gy, gz, bx, by, bz;
};

static void run_grid(const char* name, bool exclusive, const LaunchGeom& g,
                     std::function<void()> body) {
    uint64_t w0 = act_now_ns();
    std::unique_lock<std::shared_mutex> alone(g_kernel_rw, std::defer_lock);
    std::shared_lock<std::shared_mutex> beside(g_kernel_rw, std::defer_lock);
    if (exclusive) {
        std::lock_guard<std::mutex> t(g_kernel_turnstile);
        alone.lock();
    } else {
        { std::lock_guard<std::mutex> t(g_kernel_turnstile); }
        beside.lock();
    }
    t_unbusy_ns += act_now_ns() - w0;  // an exclusive kernel ran meanwhile: not busy
    g_kernel_name = name;
    gridDim = {g.gx, g.gy, g.gz};
    blockDim = {g.bx, g.by, g.bz};
    unsigned nthreads = g.bx * g.by * g.bz;
    g_bad_sync = false;
    for (unsigned z = 0; z < g.gz; ++z)
        for (unsigned y = 0; y < g.gy; ++y)
            for (unsigned x = 0; x < g.gx; ++x) {
                blockIdx = {x, y, z};
                run_block(body, nthreads, exclusive);
            }
    if (g_bad_sync) {
        say("kernel %s: a thread reached __syncthreads after thread 0 had finished without one "
            "(divergent barrier)", name);
        set_sticky(ERR_ILLEGAL_ADDRESS);
    }
    if (exclusive) {
        if (shared_bytes()) memset(__start_tune_shared, 0xff, shared_bytes());
    } else if (!shared_untouched()) {
        say("kernel %s wrote __shared__ memory while running beside other kernels: the "
            "stand-in's table (tests/common/standin.rs) did not mark it exclusive", name);
        set_sticky(ERR_ILLEGAL_ADDRESS);
    }
    g_kernel_name = nullptr;
}

// A kernel as the driver sees it: its name and how to turn cuLaunchKernel's parameter
// pointers into a call over the grid.
struct Kernel {
    const char* name;
    bool exclusive;
    CUresult (*enqueue)(const Kernel*, Stream*, const LaunchGeom&, void**);
    void* fn;
};

template <typename T>
static bool arg_ok(const char* kernel, int i, const T&) {
    return true;
}
template <typename T>
static bool arg_ok(const char* kernel, int i, T* const& p) {
    if (!p || lookup((uintptr_t)p, 1, nullptr)) return true;
    fprintf(stderr,
            "tune CUDA stand-in: kernel %s: pointer argument %d (%p) is not inside a live "
            "allocation\n",
            kernel, i, (const void*)p);
    return false;
}

template <typename... A, size_t... I>
static CUresult enqueue_impl(const Kernel* k, Stream* s, const LaunchGeom& g, void** params,
                             std::index_sequence<I...>) {
    // Arguments are read at launch, as the driver does: the caller may reuse its locals.
    auto args = std::make_tuple(*static_cast<A*>(params[I])...);
    auto fn = reinterpret_cast<void (*)(A...)>(k->fn);
    const char* name = k->name;
    bool exclusive = k->exclusive;
    s->push("kernel", [=] {
        if (g_sticky.load()) return;
        bool ok = true;
        ((ok = arg_ok(name, (int)I, std::get<I>(args)) && ok), ...);
        if (!ok) {
            set_sticky(ERR_ILLEGAL_ADDRESS);
            return;
        }
        run_grid(name, exclusive, g, [&] { fn(std::get<I>(args)...); });
    });
    return OK;
}

template <typename... A>
static CUresult enqueue(const Kernel* k, Stream* s, const LaunchGeom& g, void** params) {
    if (!params && sizeof...(A) > 0) return ERR_INVALID_VALUE;
    return enqueue_impl<A...>(k, s, g, params, std::index_sequence_for<A...>{});
}

template <typename... A>
static Kernel make_kernel(const char* name, void (*f)(A...)) {
    return Kernel{name, is_exclusive(name), &enqueue<A...>, reinterpret_cast<void*>(f)};
}

// Every kernel of kernels.cu, by name. kernel_table.h is written by the stand-in's build
// (tests/common/standin.rs) from `kernels::names()`, the list the engine loads, read from
// kernels.cu itself: no list is kept by hand here.
#define K(n) make_kernel(#n, &n),
static const std::vector<Kernel>& kernels() {
    static const std::vector<Kernel> all = {TUNE_KERNEL_TABLE};
    return all;
}
#undef K

static const Kernel* find_kernel(const std::string& name) {
    for (const Kernel& k : kernels())
        if (name == k.name) return &k;
    return nullptr;
}
