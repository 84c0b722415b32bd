// Row softmax over the last axis: one warp per row, float32 arithmetic.
// Pass 1 keeps an online (max, sum) pair per lane; pass 2 writes exp(x - max) / sum.
#include "common.cuh"

template <typename T>
__global__ void softmax_rows(const T* __restrict__ x, T* __restrict__ y, long long rows, int n) {
    const long long row = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const T* xr = x + row * (long long)n;
    T* yr = y + row * (long long)n;

    float m = NEG_INF, s = 0.0f;
    for (int i = lane; i < n; i += 32) {
        const float v = to_float(xr[i]);
        if (v > m) {
            s = s * expf(m - v) + 1.0f;  // expf(-inf) == 0 on the first element
            m = v;
        } else if (v != NEG_INF) {
            s += expf(v - m);
        }
    }
    const float row_max = warp_max(m);
    // Rescale each lane's partial sum to the row max; a lane that saw only -inf adds nothing.
    s = (m == NEG_INF) ? 0.0f : s * expf(m - row_max);
    const float inv = 1.0f / warp_sum(s);
    for (int i = lane; i < n; i += 32) {
        yr[i] = from_float<T>(expf(to_float(xr[i]) - row_max) * inv);
    }
}
