// What NVRTC provides to kernels.cu, for a host C++ build of the same file (the CPU
// stand-in for the driver, tests only). The driver stand-in (cuda.cpp) runs each launch's
// blocks on the launching stream's thread, so the CUDA indices are per host thread, and
// kernels of different streams run at the same time. `__shared__` storage lives in one
// section of its own, which the launcher fills with NaN before every block so a read
// before the block's writes (a missing __syncthreads) shows; a kernel that uses it (or a
// barrier, or atomics) runs alone (launch.h).
#pragma once
#include <math.h>
#include <stdint.h>
#include <string.h>

struct tune_dim3 {
    unsigned x, y, z;
};
extern thread_local tune_dim3 threadIdx, blockIdx, blockDim, gridDim;

#define __global__ __attribute__((visibility("hidden")))
#define __device__
#define __forceinline__ inline
#define __shared__ static __attribute__((section("tune_shared")))

// A barrier across the block's threads (run as fibers when a block reaches one).
void __syncthreads();

// Blocks run one at a time on one host thread, and a kernel that uses atomics runs alone
// (launch.h), so a plain add is atomic here.
inline float atomicAdd(float* p, float v) {
    float old = *p;
    *p = old + v;
    return old;
}

inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline unsigned int __float_as_uint(float f) {
    unsigned int u;
    memcpy(&u, &f, 4);
    return u;
}
inline float __uint_as_float(unsigned int u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
inline float __int_as_float(int i) {
    float f;
    memcpy(&f, &i, 4);
    return f;
}
