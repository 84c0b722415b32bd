// Shared device helpers for the kernels in this directory.
//
// fp16 values travel as raw 16-bit patterns (unsigned short) and are converted
// with single PTX instructions, so no kernel depends on cuda_fp16.h being on
// NVRTC's include path (CuPy wheels do not always ship it).
#pragma once

typedef unsigned short half_bits;

#define NEG_INF (__int_as_float(0xff800000))
#define LOG2E_F 1.4426950408889634f

__device__ __forceinline__ float h2f(half_bits h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
}

__device__ __forceinline__ half_bits f2h(float f) {
    half_bits h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
}

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(half_bits x) { return h2f(x); }

template <typename T> __device__ __forceinline__ T from_float(float x);
template <> __device__ __forceinline__ float from_float<float>(float x) { return x; }
template <> __device__ __forceinline__ half_bits from_float<half_bits>(float x) { return f2h(x); }

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) x += __shfl_xor_sync(0xffffffffu, x, offset);
    return x;
}

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
    return x;
}
