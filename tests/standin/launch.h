// Part of the driver stand-in (cuda.cpp includes it once, after its allocations, streams
// and sticky error, which this uses): kernels.cu's functions run over a launch grid on the
// launching stream's thread, one kernel at a time process-wide, with a fiber per CUDA
// thread once a block reaches __syncthreads. Kept apart so cuda.cpp stays readable.
#pragma once

// ---- kernels over the grid ----------------------------------------------------------------

static std::mutex g_kernel_mu;  // one kernel at a time process-wide (the globals above)
extern "C" char __start_tune_shared[], __stop_tune_shared[];
static const char* g_kernel_name = nullptr;  // for the fault handler

// Fibers for blocks that reach __syncthreads.
struct Fiber {
    ucontext_t ctx;
    char* stack = nullptr;
    bool done = false, waiting = false;
    tune_dim3 tid;
};
static ucontext_t g_sched;
static Fiber* g_cur = nullptr;
static std::function<void()>* g_body = nullptr;
static std::vector<Fiber> g_fibers;
static bool g_bad_sync = false;
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
static void run_block(std::function<void()>& body, unsigned nthreads) {
    size_t shared = (size_t)(__stop_tune_shared - __start_tune_shared);
    if (shared) memset(__start_tune_shared, 0xff, shared);
    if (g_fibers.size() < nthreads) g_fibers.resize(nthreads);
    g_body = &body;
    for (unsigned t = 0; t < nthreads; ++t) {
        Fiber& f = g_fibers[t];
        f.tid.x = t % blockDim.x;
        f.tid.y = (t / blockDim.x) % blockDim.y;
        f.tid.z = t / (blockDim.x * blockDim.y);
    }
    start_fiber(g_fibers[0]);
    resume(g_fibers[0]);
    if (g_fibers[0].done) {
        for (unsigned t = 1; t < nthreads; ++t) {
            threadIdx = g_fibers[t].tid;
            body();
        }
        return;
    }
    for (unsigned t = 1; t < nthreads; ++t) {
        start_fiber(g_fibers[t]);
        resume(g_fibers[t]);
    }
    for (;;) {
        bool any = false;
        for (unsigned t = 0; t < nthreads; ++t) {
            if (!g_fibers[t].done) {
                any = true;
                resume(g_fibers[t]);
            }
        }
        if (!any) break;
    }
}

struct LaunchGeom {
    unsigned gx, gy, gz, bx, by, bz;
};

static void run_grid(const char* name, const LaunchGeom& g, std::function<void()> body) {
    uint64_t w0 = act_now_ns();
    std::lock_guard<std::mutex> l(g_kernel_mu);
    t_unbusy_ns += act_now_ns() - w0;  // another device's kernel ran meanwhile: not busy
    g_kernel_name = name;
    gridDim = {g.gx, g.gy, g.gz};
    blockDim = {g.bx, g.by, g.bz};
    unsigned nthreads = g.bx * g.by * g.bz;
    g_bad_sync = false;
    for (unsigned z = 0; z < g.gz; ++z)
        for (unsigned y = 0; y < g.gy; ++y)
            for (unsigned x = 0; x < g.gx; ++x) {
                blockIdx = {x, y, z};
                run_block(body, nthreads);
            }
    if (g_bad_sync) {
        say("kernel %s: a thread reached __syncthreads after thread 0 had finished without one "
            "(divergent barrier)", name);
        set_sticky(ERR_ILLEGAL_ADDRESS);
    }
    g_kernel_name = nullptr;
}

// A kernel as the driver sees it: its name and how to turn cuLaunchKernel's parameter
// pointers into a call over the grid.
struct Kernel {
    const char* name;
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
    s->push("kernel", [=] {
        if (g_sticky.load()) return;
        bool ok = true;
        ((ok = arg_ok(name, (int)I, std::get<I>(args)) && ok), ...);
        if (!ok) {
            set_sticky(ERR_ILLEGAL_ADDRESS);
            return;
        }
        run_grid(name, g, [&] { fn(std::get<I>(args)...); });
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
    return Kernel{name, &enqueue<A...>, reinterpret_cast<void*>(f)};
}

// Every kernel of kernels.cu, by name. kernel_table.h is written by the stand-in's build
// (tests/common/standin.rs) from `kernels::names()`, the list the engine loads, read from
// kernels.cu itself: no list is kept by hand here.
#include "kernel_table.h"
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
