// The reduced number formats of the stand-ins (cublaslt.cpp, cudnn.cpp, nccl.cpp): IEEE
// fp16 and bfloat16 to and from f32 (narrowing rounds once to nearest even, as NVIDIA's
// libraries do, and a NaN stays a quiet NaN), and TF32 as tensor cores read an f32.
#pragma once
#include <stdint.h>
#include <string.h>

static inline float f16_to_f32(uint16_t h) {
    _Float16 f;
    memcpy(&f, &h, 2);
    return (float)f;
}
static inline uint16_t f32_to_f16(float v) {
    _Float16 f = (_Float16)v;  // IEEE conversion: nearest even
    uint16_t h;
    memcpy(&h, &f, 2);
    return h;
}
static inline float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline uint16_t f32_to_bf16(float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);  // NaN
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
// TF32 as tensor cores read an f32 operand (under CUBLAS_COMPUTE_32F_FAST_TF32, or cuDNN's
// FLOAT data without CUDNN_FMA_MATH): 10 mantissa bits, nearest with ties away from zero
// (PTX cvt.rna.tf32.f32), so the compute type an operation asked for shows in its result.
static inline float tf32(float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & 0xffffe000u;
    memcpy(&v, &u, 4);
    return v;
}
