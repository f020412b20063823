// IEEE fp16 and bfloat16 to and from f32, for the stand-ins (cublaslt.cpp, cudnn.cpp,
// nccl.cpp): narrowing rounds once to nearest even, as NVIDIA's libraries do, and a NaN
// stays a quiet NaN.
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
