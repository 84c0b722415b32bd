// Layer normalisation over the last axis: one warp per row, float32 arithmetic.
// Two passes for the statistics (mean, then centred variance) so a large mean
// does not cancel the variance, then one pass to write.
#include "common.cuh"

template <typename T>
__global__ void layer_norm_rows(const T* __restrict__ x, const T* __restrict__ weight,
                                const T* __restrict__ bias, T* __restrict__ y, long long rows,
                                int n, float eps) {
    const long long row = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x & 31;
    if (row >= rows) return;
    const T* xr = x + row * (long long)n;
    T* yr = y + row * (long long)n;

    float sum = 0.0f;
    for (int i = lane; i < n; i += 32) sum += to_float(xr[i]);
    const float mean = warp_sum(sum) / (float)n;
    float sq = 0.0f;
    for (int i = lane; i < n; i += 32) {
        const float d = to_float(xr[i]) - mean;
        sq += d * d;
    }
    const float rstd = rsqrtf(warp_sum(sq) / (float)n + eps);
    for (int i = lane; i < n; i += 32) {
        const float v = (to_float(xr[i]) - mean) * rstd;
        yr[i] = from_float<T>(v * to_float(weight[i]) + to_float(bias[i]));
    }
}
