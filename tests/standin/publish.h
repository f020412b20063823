// The driver stand-in's side of activity.h: it publishes what each device really did, for
// the NVML stand-in. Kept apart so cuda.cpp stays readable; nothing here changes what the
// driver stand-in computes. Without TUNE_STANDIN_ACTIVITY_DIR nothing is published.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "activity.h"

static TuneActFile* g_act = nullptr;
static char g_act_path[4096];
// Time inside the current stream op spent waiting rather than working (for the
// process-wide kernel lock): subtracted from the op's busy time.
static thread_local uint64_t t_unbusy_ns = 0;
// The device current on the calling thread (defined with the contexts in cuda.cpp).
static int act_current_device();

static uint64_t act_now_ns() {
    return (uint64_t)std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

static void act_unlink() {
    if (g_act_path[0]) unlink(g_act_path);
}

static void act_open(int ndev) {
    const char* dir = getenv(TUNE_ACT_ENV);
    if (!dir || !*dir) return;
    snprintf(g_act_path, sizeof g_act_path, "%s/cuda-%d.act", dir, (int)getpid());
    int fd = open(g_act_path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    void* m = MAP_FAILED;
    if (fd >= 0 && ftruncate(fd, sizeof(TuneActFile)) == 0)
        m = mmap(nullptr, sizeof(TuneActFile), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (fd >= 0) close(fd);
    if (m == MAP_FAILED) {
        fprintf(stderr, "tune CUDA stand-in: cannot publish activity to %s (%s=%s): %s\n",
                g_act_path, TUNE_ACT_ENV, dir, strerror(errno));
        g_act_path[0] = 0;
        return;
    }
    g_act = (TuneActFile*)m;
    g_act->pid = (uint32_t)getpid();
    g_act->ndev = (uint32_t)ndev;
    g_act->start_ns = act_now_ns();
    g_act->magic.store(TUNE_ACT_MAGIC, std::memory_order_release);
    atexit(act_unlink);
}

static TuneActDev* act_dev(int d) {
    return g_act && d >= 0 && d < TUNE_ACT_DEVICES ? &g_act->dev[d] : nullptr;
}
static void act_ctx(int d) {
    if (TuneActDev* a = act_dev(d)) a->ctx.store(1);
}
static void act_mem(int d, size_t bytes, bool add) {
    if (TuneActDev* a = act_dev(d)) {
        if (add)
            a->mem_bytes.fetch_add(bytes);
        else
            a->mem_bytes.fetch_sub(bytes);
    }
}
static void act_copy(int d, size_t bytes, bool h2d) {
    if (TuneActDev* a = act_dev(d)) (h2d ? a->h2d_bytes : a->d2h_bytes).fetch_add(bytes);
}

// Wraps a stream op so that its run time counts as device d's busy time, unless the op is
// bookkeeping (event records and waits, frees) rather than work.
template <typename F>
static F act_timed(const char* what, int d, F op) {
    if (!g_act || !what || !strcmp(what, "cuEventRecord") || !strcmp(what, "cuStreamWaitEvent") ||
        !strcmp(what, "cuMemFreeAsync"))
        return op;
    bool mem = !strncmp(what, "cuMemcpy", 8) || !strncmp(what, "cuMemset", 8);
    return [d, mem, op] {
        t_unbusy_ns = 0;
        uint64_t t0 = act_now_ns();
        op();
        uint64_t dt = act_now_ns() - t0;
        dt = dt > t_unbusy_ns ? dt - t_unbusy_ns : 0;
        if (TuneActDev* a = act_dev(d)) {
            a->busy_ns.fetch_add(dt);
            if (mem) a->mem_busy_ns.fetch_add(dt);
        }
    };
}
