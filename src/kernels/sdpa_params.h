/*
 * The contract between the SDPA kernel source (compiled by NVRTC as C++)
 * and the host launcher (C11). Plain C, no includes: NVRTC gets this file as
 * an embedded header.
 *
 * A variant is compiled with -D macros: the knobs of src/common/knobs.def
 * (TT_FAMILY, TT_BLOCK_M, TT_BLOCK_N, TT_WARPS, TT_STAGES, TT_LAYOUT,
 * TT_Q_IN_REGS) plus the problem's compile-time facts TT_HEAD_DIM,
 * TT_DTYPE (0 fp16, 1 bf16) and TT_CAUSAL, and TT_MAINLOOP, the family's
 * device file. The target arch, threads per CTA and dynamic shared memory
 * of a variant are its family descriptor's (src/kernels/family.h).
 *
 * Entry: extern "C" __global__ void tt_sdpa_fwd_kernel(tt_sdpa_params p);
 * Grid: (ceil(seqlen_q / TT_BLOCK_M), heads_q, batch). A family may add
 * parameters after the struct and change the grid (its descriptor's
 * launch_extra: family ws takes four CUtensorMaps and, persistent, one CTA
 * an SM).
 *
 * Semantics: torch.nn.functional.scaled_dot_product_attention. Causal is
 * PyTorch's alignment (top-left: query i sees keys j <= i). GQA: query head
 * h reads K/V head h / (heads_q / heads_kv). Strides are in elements; the
 * last dimension is contiguous; pointers are 16-byte aligned and row strides
 * multiples of 8 elements (checked by the launcher).
 */
#ifndef TT_SDPA_PARAMS_H
#define TT_SDPA_PARAMS_H

#ifdef __CUDACC_RTC__
typedef long long tt_i64;
#else
#include <stdint.h>
typedef int64_t tt_i64;
#endif

typedef struct tt_sdpa_params {
    const void *q, *k, *v; /* [batch, heads, seqlen, head_dim] by strides */
    void *o;               /* same shape as q */
    float *lse;            /* [batch, heads_q, seqlen_q], may be NULL */
    tt_i64 q_batch_stride, q_head_stride, q_row_stride;
    tt_i64 k_batch_stride, k_head_stride, k_row_stride;
    tt_i64 v_batch_stride, v_head_stride, v_row_stride;
    tt_i64 o_batch_stride, o_head_stride, o_row_stride;
    tt_i64 lse_batch_stride, lse_head_stride; /* row stride is 1 */
    int batch, heads_q, heads_kv, seqlen_q, seqlen_k;
    float scale;      /* softmax scale (1/sqrt(head_dim) by default); > 0: the
                         kernel takes row maxima of the unscaled scores */
    float scale_log2; /* scale * log2(e): the kernel works in exp2 */
    /* A packed variable-length batch (family ws, one CTA a tile): sequence
     * b is rows cu_seqlens_q[b] .. cu_seqlens_q[b + 1] of q and o (and of
     * the lse's row index), likewise of k and v; batch strides 0, seqlen_q
     * and seqlen_k the maxima, total_q and total_k the packed rows. The
     * kernel takes only the sequences tt_varlen_dense_takes gives it, the
     * family splitkv launch the rest. NULL: the dense batch. */
    const int *cu_seqlens_q, *cu_seqlens_k;
    int total_q, total_k;
    int varlen_min_q; /* the fewest query rows of a sequence it takes */
} tt_sdpa_params;

#ifdef __CUDACC_RTC__
#define TT_SDPA_FN __device__ __forceinline__
#else
#define TT_SDPA_FN static inline
#endif
/* Which sequences of a varlen batch a dense family runs (the others run on
 * splitkv in a launch of their own): at least min_q query rows, some key,
 * and every row seeing a key (a bottom-right mask over fewer keys than
 * queries leaves rows empty, which the ws mainloop does not take). Host
 * and both kernels decide by this one rule; min_q 0: none. */
TT_SDPA_FN int tt_varlen_dense_takes(int min_q, int causal, int lq, int lk) {
    return min_q > 0 && lq >= min_q && lk >= 1 && !(causal == 2 && lq > lk);
}

#endif
