// Fused attention forward, flash style: softmax(q k^T * scale) v without
// materialising the [seq_q, seq_k] score matrix. Each block owns 64 query rows of
// one (batch, head); it walks the keys in tiles of 64, keeps a running row max and
// row sum (online softmax, base 2 with log2(e) folded into the scale), and
// rescales its float32 output accumulator whenever the max grows.
//
// Causal masking is aligned to the bottom-right corner (as FlashAttention >= 2.1):
// query i sees key j when j <= i + (seq_k - seq_q). A query row that sees no key
// gets zeros.
//
// DP is the head dim rounded up to a multiple of 16; the tail is zero-filled in
// shared memory so it adds nothing to q.k and writes nothing back.
#include "common.cuh"

#define ATT_BM 64  // query rows per block
#define ATT_BN 64  // keys per tile

// ---------------------------------------------------------------- fp16: tensor cores

__device__ __forceinline__ void mma_16816(float c[4], const unsigned a[4], const unsigned b[2]) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Two 8x8 fp16 matrices, transposed on the way in: the B operand of P.V straight
// from V stored [key][dim].
__device__ __forceinline__ void ldmatrix_x2_trans(unsigned b[2], const void* smem) {
    const unsigned addr = (unsigned)__cvta_generic_to_shared(smem);
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
                 : "=r"(b[0]), "=r"(b[1])
                 : "r"(addr));
}

__device__ __forceinline__ unsigned pack_half2(float lo, float hi) {
    return (unsigned)f2h(lo) | ((unsigned)f2h(hi) << 16);
}

// Rows [row0, row0 + 64) of a [rows, dim] fp16 matrix into smem[64][DP + 8], zero-padded.
template <int DP>
__device__ __forceinline__ void load_tile_f16(half_bits (*dst)[DP + 8], const half_bits* src,
                                              int row0, int rows, int dim, bool vec) {
    if (vec) {  // dim % 8 == 0 and 16-byte aligned rows: one uint4 (8 halves) per access
        constexpr int CPR = DP / 8;
        for (int idx = threadIdx.x; idx < ATT_BN * CPR; idx += 128) {
            const int r = idx / CPR, c = (idx % CPR) * 8, gr = row0 + r;
            uint4 val = make_uint4(0u, 0u, 0u, 0u);
            if (gr < rows && c < dim)
                val = *reinterpret_cast<const uint4*>(src + (long long)gr * dim + c);
            *reinterpret_cast<uint4*>(&dst[r][c]) = val;
        }
    } else {
        for (int idx = threadIdx.x; idx < ATT_BN * DP; idx += 128) {
            const int r = idx / DP, c = idx % DP, gr = row0 + r;
            dst[r][c] = (gr < rows && c < dim) ? src[(long long)gr * dim + c] : (half_bits)0;
        }
    }
}

// 4 warps; warp w owns query rows [16w, 16w + 16) of the block. The score tile
// S (16 x 64 per warp) lives in mma accumulators and is reused in registers as the
// A operand of P.V (the C layout of two n=8 tiles is the A layout of one k=16 step).
template <int DP>
__global__ void __launch_bounds__(128)
attention_fwd_f16(const half_bits* __restrict__ q, const half_bits* __restrict__ k,
                  const half_bits* __restrict__ v, half_bits* __restrict__ out, int seq_q,
                  int seq_k, int dim, float scale_log2, int causal, int vec) {
    __shared__ __align__(16) half_bits ks[ATT_BN][DP + 8];  // +8: conflict-free fragment reads
    __shared__ __align__(16) half_bits vs[ATT_BN][DP + 8];

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int g = lane >> 2, t = lane & 3;
    const int q0 = blockIdx.x * ATT_BM;
    const long long bh = blockIdx.y;
    const half_bits* qb = q + bh * seq_q * dim;
    const half_bits* kb = k + bh * seq_k * dim;
    const half_bits* vb = v + bh * seq_k * dim;
    half_bits* ob = out + bh * seq_q * dim;
    const int wr = warp * 16;

    // Q goes through the K buffer once, into registers for the whole key loop.
    load_tile_f16<DP>(ks, qb, q0, seq_q, dim, vec);
    __syncthreads();
    unsigned qf[DP / 16][4];
#pragma unroll
    for (int kk = 0; kk < DP / 16; ++kk) {
        qf[kk][0] = *reinterpret_cast<const unsigned*>(&ks[wr + g][kk * 16 + 2 * t]);
        qf[kk][1] = *reinterpret_cast<const unsigned*>(&ks[wr + g + 8][kk * 16 + 2 * t]);
        qf[kk][2] = *reinterpret_cast<const unsigned*>(&ks[wr + g][kk * 16 + 2 * t + 8]);
        qf[kk][3] = *reinterpret_cast<const unsigned*>(&ks[wr + g + 8][kk * 16 + 2 * t + 8]);
    }
    __syncthreads();

    float o[DP / 8][4];
#pragma unroll
    for (int j = 0; j < DP / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    float m_i[2] = {NEG_INF, NEG_INF};
    float l_i[2] = {0.0f, 0.0f};  // this thread's share of the row sums; reduced at the end

    const int diag = seq_k - seq_q;
    const int n_end = causal ? min(seq_k, q0 + ATT_BM + diag) : seq_k;
    const int row_a = q0 + wr + g, row_b = row_a + 8;

    for (int n0 = 0; n0 < n_end; n0 += ATT_BN) {
        load_tile_f16<DP>(ks, kb, n0, seq_k, dim, vec);
        load_tile_f16<DP>(vs, vb, n0, seq_k, dim, vec);
        __syncthreads();

        float s[8][4];
#pragma unroll
        for (int j = 0; j < 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < DP / 16; ++kk) {
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                unsigned b[2];
                b[0] = *reinterpret_cast<const unsigned*>(&ks[j * 8 + g][kk * 16 + 2 * t]);
                b[1] = *reinterpret_cast<const unsigned*>(&ks[j * 8 + g][kk * 16 + 2 * t + 8]);
                mma_16816(s[j], qf[kk], b);
            }
        }

        float mx[2] = {m_i[0], m_i[1]};
#pragma unroll
        for (int j = 0; j < 8; ++j) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int col = n0 + j * 8 + 2 * t + (e & 1);
                const int row = (e < 2) ? row_a : row_b;
                float x = s[j][e] * scale_log2;
                if (col >= seq_k || (causal && col > row + diag)) x = NEG_INF;
                s[j][e] = x;
            }
            mx[0] = fmaxf(mx[0], fmaxf(s[j][0], s[j][1]));
            mx[1] = fmaxf(mx[1], fmaxf(s[j][2], s[j][3]));
        }
        float alpha[2], base[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            // the 4 threads of a quad share a row
            mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
            mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
            base[h] = (mx[h] == NEG_INF) ? 0.0f : mx[h];  // all-masked so far: avoid inf - inf
            alpha[h] = exp2f(m_i[h] - base[h]);
            m_i[h] = mx[h];
        }
        float rs[2] = {0.0f, 0.0f};
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            s[j][0] = exp2f(s[j][0] - base[0]);
            s[j][1] = exp2f(s[j][1] - base[0]);
            s[j][2] = exp2f(s[j][2] - base[1]);
            s[j][3] = exp2f(s[j][3] - base[1]);
            rs[0] += s[j][0] + s[j][1];
            rs[1] += s[j][2] + s[j][3];
        }
        l_i[0] = l_i[0] * alpha[0] + rs[0];
        l_i[1] = l_i[1] * alpha[1] + rs[1];
#pragma unroll
        for (int j = 0; j < DP / 8; ++j) {
            o[j][0] *= alpha[0];
            o[j][1] *= alpha[0];
            o[j][2] *= alpha[1];
            o[j][3] *= alpha[1];
        }
#pragma unroll
        for (int kk = 0; kk < ATT_BN / 16; ++kk) {
            unsigned a[4];
            a[0] = pack_half2(s[2 * kk][0], s[2 * kk][1]);
            a[1] = pack_half2(s[2 * kk][2], s[2 * kk][3]);
            a[2] = pack_half2(s[2 * kk + 1][0], s[2 * kk + 1][1]);
            a[3] = pack_half2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
            for (int j = 0; j < DP / 8; ++j) {
                unsigned b[2];
                ldmatrix_x2_trans(b, &vs[kk * 16 + (lane & 15)][j * 8]);
                mma_16816(o[j], a, b);
            }
        }
        __syncthreads();  // before the next tile overwrites ks / vs
    }

    float inv[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float l = l_i[h];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        inv[h] = (l > 0.0f) ? 1.0f / l : 0.0f;
    }
#pragma unroll
    for (int j = 0; j < DP / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
            const int row = (e < 2) ? row_a : row_b;
            const int col = j * 8 + 2 * t + (e & 1);
            if (row < seq_q && col < dim)
                ob[(long long)row * dim + col] = f2h(o[j][e] * inv[e >> 1]);
        }
    }
}

// ---------------------------------------------------------------- fp32: CUDA cores

// Rows [row0, row0 + 64) of a [rows, dim] fp32 matrix into dst[64][DP + 4], zero-padded.
template <int DP>
__device__ __forceinline__ void load_tile_f32(float* dst, const float* src, int row0, int rows,
                                              int dim, bool vec) {
    constexpr int LD = DP + 4;
    if (vec) {  // dim % 4 == 0 and 16-byte aligned rows
        constexpr int CPR = DP / 4;
        for (int idx = threadIdx.x; idx < ATT_BN * CPR; idx += 256) {
            const int r = idx / CPR, c = (idx % CPR) * 4, gr = row0 + r;
            float4 val = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (gr < rows && c < dim)
                val = *reinterpret_cast<const float4*>(src + (long long)gr * dim + c);
            *reinterpret_cast<float4*>(dst + r * LD + c) = val;
        }
    } else {
        for (int idx = threadIdx.x; idx < ATT_BN * DP; idx += 256) {
            const int r = idx / DP, c = idx % DP, gr = row0 + r;
            dst[r * LD + c] = (gr < rows && c < dim) ? src[(long long)gr * dim + c] : 0.0f;
        }
    }
}

// 256 threads as 16 x 16; thread (ty, tx) owns query rows 4ty..4ty+3, score columns
// tx + 16j and output columns tx + 16j. A row's 16 owners are one half-warp, so
// row max and row sum reduce with shuffles. Dynamic shared memory:
// Q [64][DP+4], K or V [64][DP+4] (V overwrites K), P [64][68].
template <int DP>
__global__ void __launch_bounds__(256)
attention_fwd_f32(const float* __restrict__ q, const float* __restrict__ k,
                  const float* __restrict__ v, float* __restrict__ out, int seq_q, int seq_k,
                  int dim, float scale_log2, int causal, int vec) {
    constexpr int LD = DP + 4;
    constexpr int PLD = ATT_BN + 4;
    extern __shared__ __align__(16) float smem[];
    float* qs = smem;
    float* kvs = qs + ATT_BM * LD;
    float* ps = kvs + ATT_BN * LD;

    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
    const int q0 = blockIdx.x * ATT_BM;
    const long long bh = blockIdx.y;
    const float* qb = q + bh * seq_q * dim;
    const float* kb = k + bh * seq_k * dim;
    const float* vb = v + bh * seq_k * dim;
    float* ob = out + bh * seq_q * dim;

    load_tile_f32<DP>(qs, qb, q0, seq_q, dim, vec);

    float o[4][DP / 16];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < DP / 16; ++j) o[i][j] = 0.0f;
    float m_i[4], l_i[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        m_i[i] = NEG_INF;
        l_i[i] = 0.0f;
    }

    const int diag = seq_k - seq_q;
    const int n_end = causal ? min(seq_k, q0 + ATT_BM + diag) : seq_k;

    for (int n0 = 0; n0 < n_end; n0 += ATT_BN) {
        load_tile_f32<DP>(kvs, kb, n0, seq_k, dim, vec);
        __syncthreads();

        float s[4][4];
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j) s[i][j] = 0.0f;
#pragma unroll 4
        for (int d = 0; d < DP; d += 4) {
            float4 qv[4], kv[4];
#pragma unroll
            for (int i = 0; i < 4; ++i)
                qv[i] = *reinterpret_cast<const float4*>(qs + (ty * 4 + i) * LD + d);
#pragma unroll
            for (int j = 0; j < 4; ++j)
                kv[j] = *reinterpret_cast<const float4*>(kvs + (tx + 16 * j) * LD + d);
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j)
                    s[i][j] += qv[i].x * kv[j].x + qv[i].y * kv[j].y + qv[i].z * kv[j].z +
                               qv[i].w * kv[j].w;
        }

#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int row = q0 + ty * 4 + i;
            float mx = m_i[i];
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int col = n0 + tx + 16 * j;
                float x = s[i][j] * scale_log2;
                if (col >= seq_k || (causal && col > row + diag)) x = NEG_INF;
                s[i][j] = x;
                mx = fmaxf(mx, x);
            }
#pragma unroll
            for (int offset = 8; offset > 0; offset >>= 1)
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, offset));
            const float base = (mx == NEG_INF) ? 0.0f : mx;
            const float alpha = exp2f(m_i[i] - base);
            m_i[i] = mx;
            float rs = 0.0f;
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const float p = exp2f(s[i][j] - base);
                rs += p;
                ps[(ty * 4 + i) * PLD + tx + 16 * j] = p;
            }
            l_i[i] = l_i[i] * alpha + rs;
#pragma unroll
            for (int j = 0; j < DP / 16; ++j) o[i][j] *= alpha;
        }
        __syncthreads();  // P complete, K no longer read
        load_tile_f32<DP>(kvs, vb, n0, seq_k, dim, vec);
        __syncthreads();

#pragma unroll 2
        for (int kk = 0; kk < ATT_BN; kk += 4) {
            float4 pv[4];
#pragma unroll
            for (int i = 0; i < 4; ++i)
                pv[i] = *reinterpret_cast<const float4*>(ps + (ty * 4 + i) * PLD + kk);
#pragma unroll
            for (int j = 0; j < DP / 16; ++j) {
                const float v0 = kvs[(kk + 0) * LD + tx + 16 * j];
                const float v1 = kvs[(kk + 1) * LD + tx + 16 * j];
                const float v2 = kvs[(kk + 2) * LD + tx + 16 * j];
                const float v3 = kvs[(kk + 3) * LD + tx + 16 * j];
#pragma unroll
                for (int i = 0; i < 4; ++i)
                    o[i][j] += pv[i].x * v0 + pv[i].y * v1 + pv[i].z * v2 + pv[i].w * v3;
            }
        }
        __syncthreads();  // before the next tile overwrites K/V and P
    }

#pragma unroll
    for (int i = 0; i < 4; ++i) {
        float l = l_i[i];
#pragma unroll
        for (int offset = 8; offset > 0; offset >>= 1) l += __shfl_xor_sync(0xffffffffu, l, offset);
        const float inv = (l > 0.0f) ? 1.0f / l : 0.0f;
        const int row = q0 + ty * 4 + i;
#pragma unroll
        for (int j = 0; j < DP / 16; ++j) {
            const int col = tx + 16 * j;
            if (row < seq_q && col < dim) ob[(long long)row * dim + col] = o[i][j] * inv;
        }
    }
}
