/* tt_sdpa_fwd's argument checks, without a GPU: each class of bad argument
 * gets its own error and message, and nothing is launched. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "kernels/cuda_api.h"
#include "kernels/family.h"
#include "kernels/launch.h"
#include "tt_test.h"

/* Well-formed arguments: [2, 8, 100, 64] Q, [2, 2, 130, 64] K/V in the
 * [B, L, H, D] layout, at fake (aligned) addresses. */
static tt_sdpa_args good(void) {
    tt_sdpa_args a;
    memset(&a, 0, sizeof a);
    a.q = (const void *)(uintptr_t)0x100000;
    a.k = (const void *)(uintptr_t)0x200000;
    a.v = (const void *)(uintptr_t)0x300000;
    a.o = (void *)(uintptr_t)0x400000;
    a.lse = (float *)(uintptr_t)0x500000;
    a.batch = 2;
    a.heads_q = 8;
    a.heads_kv = 2;
    a.seqlen_q = 100;
    a.seqlen_k = 130;
    a.head_dim = 64;
    int64_t q[3] = {100 * 8 * 64, 64, 8 * 64}, kv[3] = {130 * 2 * 64, 64, 2 * 64};
    memcpy(a.q_stride, q, sizeof q);
    memcpy(a.o_stride, q, sizeof q);
    memcpy(a.k_stride, kv, sizeof kv);
    memcpy(a.v_stride, kv, sizeof kv);
    a.dtype = TT_DTYPE_BF16;
    a.causal = 1;
    return a;
}

static void expect(const tt_sdpa_args *a, int code, const char *needle) {
    char err[512] = "";
    int rc = tt_sdpa_fwd(a, err, sizeof err);
    if (rc != code) TT_FAIL_AT("expected %d (%s), got %d: %s", code, needle, rc, err);
    ASSERT_CONTAINS(err, needle);
}

static int have_gpu(void) {
    const tt__cuda *cu;
    return tt__cuda_get(&cu, NULL, 0) == 0;
}

TEST(params_from_good_args) {
    tt_sdpa_args a = good();
    tt_sdpa_params p;
    char err[256];
    ASSERT_OK(tt__sdpa_params_from_args(&a, &p, err, sizeof err));
    ASSERT_EQ(p.q_row_stride, 8 * 64);
    ASSERT_EQ(p.k_head_stride, 64);
    ASSERT_EQ(p.v_batch_stride, 130 * 2 * 64);
    ASSERT_EQ(p.lse_batch_stride, 8 * 100); /* packed [B, Hq, Lq] */
    ASSERT_EQ(p.lse_head_stride, 100);
    ASSERT_EQ(p.heads_kv, 2);
    ASSERT(fabsf(p.scale - 0.125f) < 1e-7f);
    ASSERT(fabsf(p.scale_log2 - 0.125f * 1.44269504f) < 1e-6f);
    a.scale = 0.5f;
    a.lse_stride[0] = 1000;
    a.lse_stride[1] = 100;
    ASSERT_OK(tt__sdpa_params_from_args(&a, &p, err, sizeof err));
    ASSERT(p.scale == 0.5f);
    ASSERT_EQ(p.lse_batch_stride, 1000);
}

/* Family ws runs only what its copy engine can address (byte strides
 * positive multiples of 16, below 2^40, for Q, K, V and O); every other
 * checked call goes to another family (tt__sdpa_launch). */
TEST(ws_runs_only_strides_the_copy_engine_takes) {
    const tt__family *ws = tt__family_of(TT_FAMILY_WS);
    ASSERT(ws && ws->runs && ws->launch_extra);
    tt_sdpa_args a = good();
    tt_sdpa_params p;
    char err[256];
    ASSERT_OK(tt__sdpa_params_from_args(&a, &p, err, sizeof err));
    ASSERT(ws->runs(&p, 0)); /* [B, L, H, D] with GQA */
    tt_sdpa_params q = p;
    q.k_batch_stride = 0; /* K expanded over the batch */
    ASSERT(!ws->runs(&q, 0));
    q = p;
    q.v_head_stride = 64 + 4; /* 136 bytes: not a multiple of 16 */
    ASSERT(!ws->runs(&q, 0));
    q = p;
    q.o_batch_stride = (tt_i64)1 << 39; /* 2^40 bytes */
    ASSERT(!ws->runs(&q, 0));
    q = p;
    q.q_head_stride = 72; /* 144 bytes */
    ASSERT(ws->runs(&q, 0));
    /* bottom-right with more queries than keys: rows see no key, which the
     * ws loop does not take; as many or fewer queries it runs */
    q = p;
    q.seqlen_q = q.seqlen_k + 1;
    ASSERT(ws->runs(&q, 1));
    ASSERT(!ws->runs(&q, 2));
    q.seqlen_q = q.seqlen_k;
    ASSERT(ws->runs(&q, 2));
    /* the other families run every checked call */
    ASSERT(!tt__family_of(TT_FAMILY_MMA)->runs && !tt__family_of(TT_FAMILY_WGMMA)->runs);
}

TEST(null_arguments) {
    char err[256];
    ASSERT_EQ(tt_sdpa_fwd(NULL, err, sizeof err), TT_ERR_INVAL);
    ASSERT_EQ(tt_sdpa_fwd(NULL, NULL, 0), TT_ERR_INVAL); /* no buffer: no crash */
    const char *names[4] = {"q is NULL", "k is NULL", "v is NULL", "o is NULL"};
    for (int i = 0; i < 4; i++) {
        tt_sdpa_args a = good();
        if (i == 0) a.q = NULL;
        if (i == 1) a.k = NULL;
        if (i == 2) a.v = NULL;
        if (i == 3) a.o = NULL;
        expect(&a, TT_ERR_INVAL, names[i]);
    }
}

TEST(misaligned_pointers) {
    tt_sdpa_args a = good();
    a.k = (const char *)a.k + 8;
    expect(&a, TT_ERR_INVAL, "k is not 16-byte aligned");
    a = good();
    a.o = (char *)a.o + 2;
    expect(&a, TT_ERR_INVAL, "o is not 16-byte aligned");
    a = good();
    a.lse = (float *)((char *)a.lse + 2);
    expect(&a, TT_ERR_INVAL, "lse is not 4-byte aligned");
}

TEST(unsupported_dtype_and_head_dim) {
    tt_sdpa_args a = good();
    a.dtype = 2;
    expect(&a, TT_ERR_UNSUPPORTED, "dtype 2");
    /* the negative ones truncate to 64 and 128 as int32 */
    int64_t bad_d[7] = {0, 80, 512, (int64_t)1 << 40, -1, -((int64_t)1 << 32) + 64, INT64_MIN + 128};
    for (int i = 0; i < 7; i++) {
        a = good();
        a.head_dim = bad_d[i];
        expect(&a, TT_ERR_UNSUPPORTED, "head_dim");
    }
}

TEST(sizes) {
    tt_sdpa_args a = good();
    a.batch = 0;
    expect(&a, TT_ERR_INVAL, "batch is 0");
    a = good();
    a.seqlen_q = 0;
    expect(&a, TT_ERR_INVAL, "seqlen_q is 0");
    a = good();
    a.seqlen_k = -5;
    expect(&a, TT_ERR_INVAL, "seqlen_k is -5");
    a = good();
    a.heads_kv = 0;
    expect(&a, TT_ERR_INVAL, "heads_kv is 0");
    a = good();
    a.batch = 70000;
    expect(&a, TT_ERR_RANGE, "batch 70000");
    a = good();
    a.seqlen_q = (int64_t)1 << 33;
    expect(&a, TT_ERR_RANGE, "seqlen_q");
}

TEST(gqa_heads_must_divide) {
    tt_sdpa_args a = good();
    a.heads_q = 6;
    a.heads_kv = 4;
    expect(&a, TT_ERR_INVAL, "heads_q 6 is not a multiple of heads_kv 4");
}

TEST(strides) {
    tt_sdpa_args a = good();
    a.q_stride[2] = 100;
    expect(&a, TT_ERR_INVAL, "q row stride 100 is not a multiple of 8");
    a = good();
    a.v_stride[1] = 68;
    expect(&a, TT_ERR_INVAL, "v head stride 68");
    a = good();
    a.k_stride[0] = -64;
    expect(&a, TT_ERR_INVAL, "k batch stride -64 is negative");
    a = good();
    a.o_stride[2] = 32;
    expect(&a, TT_ERR_INVAL, "rows overlap");
    a = good();
    a.lse_stride[1] = -1;
    expect(&a, TT_ERR_INVAL, "lse strides");
}

/* Outputs that alias across batches or heads (stride 0, an expanded
 * tensor) would be written by several CTAs at once. */
TEST(expanded_outputs) {
    tt_sdpa_args a = good();
    a.o_stride[1] = 0;
    expect(&a, TT_ERR_INVAL, "o head stride is 0 with heads_q 8: outputs overlap");
    a = good();
    a.o_stride[0] = 0;
    expect(&a, TT_ERR_INVAL, "o batch stride is 0 with batch 2");
    a = good();
    a.lse_stride[0] = 800;
    a.lse_stride[1] = 0;
    expect(&a, TT_ERR_INVAL, "lse head stride is 0");
    /* one batch: its stride is never used; no lse: its strides neither */
    a = good();
    a.batch = 1;
    a.o_stride[0] = 0;
    a.lse_stride[0] = 0;
    a.lse_stride[1] = 100;
    tt_sdpa_params p;
    char err[256];
    ASSERT_OK(tt__sdpa_params_from_args(&a, &p, err, sizeof err));
    a = good();
    a.lse = NULL;
    a.lse_stride[0] = 800;
    ASSERT_OK(tt__sdpa_params_from_args(&a, &p, err, sizeof err));
}

/* Offsets the kernel forms in int64 (b*s0 + h*s1 + row*s2, then bytes)
 * must not wrap: such strides are refused, not launched. */
TEST(extents_past_the_address_space) {
    tt_sdpa_args a = good();
    a.q_stride[2] = (int64_t)1 << 62; /* 99 rows of it wrap the element offset */
    expect(&a, TT_ERR_INVAL, "q: its strides and sizes address past");
    a = good();
    a.k_stride[0] = INT64_MAX - 7; /* one batch step, then + head_dim wraps */
    expect(&a, TT_ERR_INVAL, "k: its strides");
    a = good();
    a.v_stride[1] = (int64_t)1 << 62; /* the elements fit, their bytes do not */
    a.heads_kv = 2;
    expect(&a, TT_ERR_INVAL, "v: its strides");
    a = good();
    a.o = (void *)(uintptr_t)(UINTPTR_MAX - 4095); /* aligned, too close to the top */
    expect(&a, TT_ERR_INVAL, "o: its strides");
    /* lse: its elements fit int64, its 4-byte words do not */
    a = good();
    a.lse_stride[0] = (int64_t)1 << 61;
    a.lse_stride[1] = 100;
    expect(&a, TT_ERR_INVAL, "lse: its strides");
    a.lse = NULL; /* no lse: its strides address nothing */
    tt_sdpa_params p;
    char err[256];
    ASSERT_OK(tt__sdpa_params_from_args(&a, &p, err, sizeof err));
    /* the largest offsets that still fit are accepted */
    a = good();
    a.q_stride[0] = ((INT64_MAX / 2 - 8 * 64 * 100) / 8) * 8;
    ASSERT_OK(tt__sdpa_params_from_args(&a, &p, err, sizeof err));
}

TEST(flags_scale_reserved) {
    tt_sdpa_args a = good();
    a.causal = 3;
    expect(&a, TT_ERR_INVAL, "causal");
    a.causal = -1;
    expect(&a, TT_ERR_INVAL, "causal");
    /* bottom-right is a causal mode: its arguments pass */
    a = good();
    a.causal = 2;
    tt_sdpa_params p;
    char err[256];
    ASSERT_OK(tt__sdpa_params_from_args(&a, &p, err, sizeof err));
    a = good();
    a.scale = NAN;
    expect(&a, TT_ERR_INVAL, "scale");
    a = good();
    a.scale = INFINITY;
    expect(&a, TT_ERR_INVAL, "scale");
    a = good();
    a.scale = -0.5f; /* the kernel's max-then-scale needs a positive scale */
    expect(&a, TT_ERR_INVAL, "must be finite and > 0");
    a = good();
    a.reserved[3] = 1;
    expect(&a, TT_ERR_INVAL, "reserved");
    a = good();
    a.reserved0 = 1;
    expect(&a, TT_ERR_INVAL, "reserved");
}

TEST(config_invalid_for_the_shape) {
    tt_key key = {.dtype = TT_DTYPE_BF16, .head_dim = 64, .causal = 1, .seqlen_q = 100, .seqlen_k = 130};
    tt_config c;
    ASSERT_OK(tt_config_default(&key, &c));
    tt_sdpa_args a = good();
    a.config = &c;
    c.block_m = 48;
    expect(&a, TT_ERR_INVAL, "rows per warp");
    ASSERT_OK(tt_config_default(&key, &c));
    c.block_n = 40;
    expect(&a, TT_ERR_INVAL, "block_n=40");
    ASSERT_OK(tt_config_default(&key, &c));
    c.stages = 7;
    expect(&a, TT_ERR_INVAL, "stages=7 is out of range");
    ASSERT_OK(tt_config_default(&key, &c));
    a.head_dim = 256;
    int64_t s[3] = {100 * 8 * 256, 256, 8 * 256};
    memcpy(a.q_stride, s, sizeof s);
    memcpy(a.o_stride, s, sizeof s);
    c.block_m = 128;
    c.warps = 4; /* two m16 tiles per warp */
    c.block_n = 128;
    expect(&a, TT_ERR_INVAL, "exceed 255 registers");
}

TEST(good_arguments_without_a_gpu) {
    tt_sdpa_args a = good();
    char err[512] = "";
    int rc = tt_sdpa_fwd(&a, err, sizeof err);
    if (have_gpu()) {
        /* fake addresses: caught before any launch */
        ASSERT_EQ(rc, TT_ERR_INVAL);
        ASSERT_CONTAINS(err, "not CUDA device memory");
    } else {
        ASSERT_EQ(rc, TT_ERR_NOGPU);
        ASSERT(strlen(err) > 10);
        printf("no GPU: %s\n", err);
    }
}

TEST(variants_and_device_without_a_gpu) {
    if (have_gpu()) TT_SKIP("a GPU is present");
    tt_key key = {.dtype = TT_DTYPE_FP16, .head_dim = 64, .seqlen_q = 128, .seqlen_k = 128};
    size_t n = 0;
    char err[512];
    ASSERT_EQ(tt_sdpa_variants(&key, 0, NULL, 0, &n, err, sizeof err), TT_ERR_NOGPU);
    tt_key_v2 k2 = {.dtype = TT_DTYPE_BF16, .head_dim = 128, .seqlen_q = 1, .seqlen_k = 8192, .group = 4};
    ASSERT_EQ(tt_sdpa_variants_v2(&k2, 0, NULL, 0, &n, err, sizeof err), TT_ERR_NOGPU);
    /* a group no kernel packs is the key's fault, said on any machine */
    k2.group = 257;
    ASSERT_EQ(tt_sdpa_variants_v2(&k2, 0, NULL, 0, &n, err, sizeof err), TT_ERR_RANGE);
    ASSERT_CONTAINS(err, "group 257");
    tt__device d;
    ASSERT_EQ(tt__device_open(0, &d, err, sizeof err), TT_ERR_NOGPU);
    ASSERT_CONTAINS(err, "libcuda.so.1");
    tt_config c;
    ASSERT_EQ(tt_sdpa_default_config(&key, 0, &c, err, sizeof err), TT_ERR_NOGPU);
}

TEST(device_default_refuses_bad_keys_before_the_device) {
    tt_config c;
    char err[256];
    ASSERT_EQ(tt_sdpa_default_config(NULL, 0, &c, err, sizeof err), TT_ERR_INVAL);
    tt_key key = {.dtype = TT_DTYPE_FP16, .head_dim = 100, .seqlen_q = 128, .seqlen_k = 128};
    ASSERT_EQ(tt_sdpa_default_config(&key, 0, &c, err, sizeof err), TT_ERR_UNSUPPORTED);
    ASSERT_CONTAINS(err, "head_dim 100");
    key.head_dim = 128;
    key.dtype = (tt_dtype)7;
    ASSERT_EQ(tt_sdpa_default_config(&key, 0, &c, err, sizeof err), TT_ERR_UNSUPPORTED);
    ASSERT_CONTAINS(err, "dtype 7");
}

TT_TEST_MAIN()
