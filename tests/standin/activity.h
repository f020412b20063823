// What a process's driver stand-in (cuda.cpp) really did on each device, published for
// the NVML stand-in (nvml.cpp), which may run in another process (`tune watch`, a sweep's
// runner). Test-only, like everything in this folder.
//
// Under TUNE_STANDIN_ACTIVITY_DIR each process using the driver stand-in keeps one file,
// `<dir>/cuda-<pid>.act`, mapped shared: per device the time its streams ran work, the
// bytes of its live device allocations, the bytes copied over "PCIe" and whether the
// process holds the device's primary context. The NVML stand-in sums the files of live
// processes. Counters only grow (except memory), so a reader takes differences.
#pragma once

#include <atomic>
#include <cstdint>

#define TUNE_ACT_MAGIC 0x3174636165757475ull  // "tuteacT1", little-endian
#define TUNE_ACT_DEVICES 8
#define TUNE_ACT_ENV "TUNE_STANDIN_ACTIVITY_DIR"

struct TuneActDev {
    // Time (ns) this device's streams ran work: kernels (inside the process's kernel lock,
    // not the wait for it), GEMMs, convolutions, copies, memsets, collectives. Event
    // records and event waits are not work, as on a GPU.
    std::atomic<uint64_t> busy_ns;
    // The part of busy_ns spent moving memory (copies, memsets): NVML's memory utilisation.
    std::atomic<uint64_t> mem_busy_ns;
    std::atomic<uint64_t> mem_bytes;  // live device allocations made with this device current
    std::atomic<uint64_t> h2d_bytes;  // host-to-device copies (NVML's PCIe RX)
    std::atomic<uint64_t> d2h_bytes;  // device-to-host copies (NVML's PCIe TX)
    std::atomic<uint32_t> ctx;        // 1 once the process retained the primary context
    uint32_t pad;
};

struct TuneActFile {
    std::atomic<uint64_t> magic;  // written last: a reader skips a file still being set up
    uint32_t pid;
    uint32_t ndev;
    uint64_t start_ns;  // CLOCK_MONOTONIC (steady_clock) when the file was set up
    TuneActDev dev[TUNE_ACT_DEVICES];
};

static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared counters need lock-free atomics");
