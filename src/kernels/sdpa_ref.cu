// The reference SDPA forward: obviously correct rather than fast. fp32
// throughout (natural exp, no tiling), one warp per query row. The tuner's
// worker checks every candidate against it on shapes too large for a CPU
// reference, and tests/gpu checks it against float64 on the CPU.
//
// Same contract as sdpa.cu (sdpa_params.h): entry tt_sdpa_fwd_kernel,
// grid (ceil(seqlen_q / TT_BLOCK_M), heads_q, batch), TT_WARPS * 32 threads.
// Knobs other than TT_BLOCK_M and TT_WARPS are ignored, and so is the
// dynamic shared memory. No includes: it compiles without the toolkit's
// headers; fp16/bf16 conversions are single PTX instructions.
#include "sdpa_params.h"

#define REF_PER_LANE ((TT_HEAD_DIM + 31) / 32)
#define REF_INF __int_as_float(0x7f800000)

static __device__ __forceinline__ float ref_load(const unsigned short *p) {
#if TT_DTYPE == 0
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(*p));
    return f;
#else
    return __uint_as_float(((unsigned)*p) << 16);
#endif
}

static __device__ __forceinline__ unsigned short ref_store(float f) {
    unsigned short h;
#if TT_DTYPE == 0
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
#else
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(f));
#endif
    return h;
}

static __device__ __forceinline__ float ref_warp_sum(float x) {
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

extern "C" __global__ void __launch_bounds__(TT_WARPS * 32)
tt_sdpa_fwd_kernel(tt_sdpa_params p) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int h = blockIdx.y, b = blockIdx.z;
    const int hk = h / (p.heads_q / p.heads_kv);
    const unsigned short *q = (const unsigned short *)p.q + b * p.q_batch_stride + h * p.q_head_stride;
    const unsigned short *k = (const unsigned short *)p.k + b * p.k_batch_stride + hk * p.k_head_stride;
    const unsigned short *v = (const unsigned short *)p.v + b * p.v_batch_stride + hk * p.v_head_stride;
    unsigned short *o = (unsigned short *)p.o + b * p.o_batch_stride + h * p.o_head_stride;
    for (int r = warp; r < TT_BLOCK_M; r += TT_WARPS) {
        const int i = blockIdx.x * TT_BLOCK_M + r;
        if (i >= p.seqlen_q) break;
        float qr[REF_PER_LANE], acc[REF_PER_LANE];
        for (int t = 0; t < REF_PER_LANE; t++) {
            const int d = lane + 32 * t;
            qr[t] = d < TT_HEAD_DIM ? ref_load(q + i * p.q_row_stride + d) : 0.f;
            acc[t] = 0.f;
        }
        // Causal 1, PyTorch's is_causal: query i sees keys j <= i (top-left
        // aligned); 2, flash-attn's bottom-right: j <= i + seqlen_k - seqlen_q
        // (no key at all for the first seqlen_q - seqlen_k rows).
        const int last = TT_CAUSAL == 2 ? i + (p.seqlen_k - p.seqlen_q) : i;
        const int nk = TT_CAUSAL ? max(0, min(p.seqlen_k, last + 1)) : p.seqlen_k;
        float m = -REF_INF, l = 0.f;
        for (int j = 0; j < nk; j++) {
            float s = 0.f;
            for (int t = 0; t < REF_PER_LANE; t++) {
                const int d = lane + 32 * t;
                if (d < TT_HEAD_DIM) s += qr[t] * ref_load(k + j * p.k_row_stride + d);
            }
            s = ref_warp_sum(s) * p.scale;
            const float m_new = fmaxf(m, s);
            const float corr = expf(m - m_new), e = expf(s - m_new);
            l = l * corr + e;
            for (int t = 0; t < REF_PER_LANE; t++) {
                const int d = lane + 32 * t;
                const float vj = d < TT_HEAD_DIM ? ref_load(v + j * p.v_row_stride + d) : 0.f;
                acc[t] = acc[t] * corr + e * vj;
            }
            m = m_new;
        }
        for (int t = 0; t < REF_PER_LANE; t++) {
            const int d = lane + 32 * t;
            if (d < TT_HEAD_DIM) o[i * p.o_row_stride + d] = ref_store(nk > 0 ? acc[t] / l : 0.f);
        }
        if (p.lse && lane == 0)
            p.lse[b * p.lse_batch_stride + h * p.lse_head_stride + i] = nk > 0 ? m + logf(l) : -REF_INF;
    }
}
