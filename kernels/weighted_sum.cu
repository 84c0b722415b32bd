// Batched weights @ V: out[b] = weights[b] (M x K) @ v[b] (K x N), float32 accumulation.
// A 64x64 output tile per block of 16x16 threads, each thread a 4x4 micro-tile
// (rows ty + 16i, cols tx + 16j so shared-memory reads are broadcast or consecutive).
#include "common.cuh"

#define WS_TILE 64
#define WS_K 16

template <typename T>
__global__ void __launch_bounds__(256)
weighted_sum_tiled(const T* __restrict__ w, const T* __restrict__ v, T* __restrict__ out, int m,
                   int k, int n) {
    __shared__ float ws[WS_K][WS_TILE + 1];  // transposed weights tile: ws[kk][row]
    __shared__ float vs[WS_K][WS_TILE];
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const long long batch = blockIdx.z;
    const int row0 = blockIdx.y * WS_TILE, col0 = blockIdx.x * WS_TILE;
    const T* wb = w + batch * (long long)m * k;
    const T* vb = v + batch * (long long)k * n;

    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;

    for (int k0 = 0; k0 < k; k0 += WS_K) {
        for (int idx = threadIdx.x; idx < WS_TILE * WS_K; idx += 256) {
            const int r = idx / WS_K, kk = idx % WS_K;
            const int gr = row0 + r, gk = k0 + kk;
            ws[kk][r] = (gr < m && gk < k) ? to_float(wb[(long long)gr * k + gk]) : 0.0f;
            const int kr = idx / WS_TILE, c = idx % WS_TILE;
            const int gkr = k0 + kr, gc = col0 + c;
            vs[kr][c] = (gkr < k && gc < n) ? to_float(vb[(long long)gkr * n + gc]) : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < WS_K; ++kk) {
            float a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; ++i) a[i] = ws[kk][ty + 16 * i];
#pragma unroll
            for (int j = 0; j < 4; ++j) b[j] = vs[kk][tx + 16 * j];
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] += a[i] * b[j];
        }
        __syncthreads();
    }
    T* ob = out + batch * (long long)m * n;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int r = row0 + ty + 16 * i;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int c = col0 + tx + 16 * j;
            if (r < m && c < n) ob[(long long)r * n + c] = from_float<T>(acc[i][j]);
        }
    }
}
