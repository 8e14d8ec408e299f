/* The compile pool on the CPU (NVRTC needs no GPU): items in order, cancel,
 * one compile a program, errors and failed checks kept with their item,
 * no thread: the waiting caller compiles. */
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda_api.h"
#include "kernels/family.h"
#include "kernels/pool.h"
#include "kernels/variants.h"
#include "tt_test.h"

static void need_nvrtc(void) {
    const tt__nvrtc *nv;
    char err[512];
    if (tt__nvrtc_get(&nv, err, sizeof err) < 0) TT_SKIP("%s", err);
}

/* The first n variants of family `family` in the space of a key on `arch`
 * (distinct programs unless the family has host-only knobs). */
static void space_variants(int family, int32_t head_dim, int64_t seqlen_q, int arch, tt__variant *out,
                           size_t n) {
    tt__device_limits d;
    ASSERT_OK(tt__device_limits_nominal(arch, &d));
    tt_key k;
    memset(&k, 0, sizeof k);
    k.head_dim = head_dim;
    k.dtype = TT_DTYPE_FP16;
    k.seqlen_q = seqlen_q;
    k.seqlen_k = seqlen_q ? 4096 : 0;
    tt__space_entry *e = NULL;
    size_t m = 0, got = 0;
    ASSERT_OK(tt__space_enumerate(&k, &d, 0, NULL, 1, &e, &m, NULL, 0));
    for (size_t i = 0; i < m && got < n; i++)
        if (e[i].variant.config.family == family) out[got++] = e[i].variant;
    free(e);
    ASSERT_EQ(got, n);
}

static tt__pool_opts opts(int arch, int threads) {
    tt__pool_opts o;
    memset(&o, 0, sizeof o);
    o.jo.no_cache = 1; /* every compile real: none is a cache hit from another test */
    ASSERT_OK(tt__device_limits_nominal(arch, &o.dev));
    o.threads = threads;
    o.keep_cubins = 1;
    return o;
}

/* Each item gets its own variant's program: the cubin a direct compile of
 * that variant gives, whichever thread compiled it. */
TEST(items_in_order_on_threads) {
    need_nvrtc();
    tt__variant v[4];
    space_variants(TT_FAMILY_MMA, 32, 0, 80, v, 4);
    tt__pool_opts o = opts(80, 2);
    tt__pool *p = NULL;
    char err[256];
    ASSERT_OK(tt__pool_start(v, 4, &o, &p, err, sizeof err));
    ASSERT_EQ(tt__pool_programs(p), 4);
    for (size_t i = 0; i < 4; i++) {
        ASSERT_EQ(tt__pool_wait(p, i), TT_VARIANT_OK);
        const tt__cubin *cb = tt__pool_cubin(p, i);
        ASSERT(cb);
        ASSERT_STREQ(tt__pool_error(p, i), "");
        ASSERT_EQ(tt__pool_report(p, i)->registers, cb->report.registers);
        tt__cubin *direct = NULL;
        ASSERT_OK(tt__jit_compile(&o.jo, &v[i], &direct, err, sizeof err));
        ASSERT_EQ(direct->len, cb->len);
        ASSERT(memcmp(direct->data, cb->data, cb->len) == 0);
        tt__cubin_free(direct);
    }
    ASSERT_EQ(tt__pool_wait(p, 4), TT_VARIANT_UNCHECKED); /* no such item */
    tt__pool_free(p);
}

/* No thread: a wait compiles in the caller, its item's program and those
 * before it, nothing later; after a cancel the rest is never compiled. */
TEST(no_thread_compiles_in_the_caller) {
    need_nvrtc();
    tt__variant v[4];
    space_variants(TT_FAMILY_MMA, 32, 0, 80, v, 4);
    tt__pool_opts o = opts(80, 0);
    o.keep_cubins = 0;
    tt__pool *p = NULL;
    ASSERT_OK(tt__pool_start(v, 4, &o, &p, NULL, 0));
    ASSERT_EQ(tt__pool_wait(p, 1), TT_VARIANT_OK);
    ASSERT(tt__pool_report(p, 0)->registers > 0); /* compiled on the way to item 1 */
    ASSERT_EQ(tt__pool_report(p, 2)->registers, 0);
    ASSERT(!tt__pool_cubin(p, 1)); /* keep_cubins 0: the report only */
    tt__pool_cancel(p);
    ASSERT_EQ(tt__pool_wait(p, 0), TT_VARIANT_OK);
    ASSERT_EQ(tt__pool_wait(p, 2), TT_VARIANT_UNCHECKED);
    ASSERT_EQ(tt__pool_wait(p, 3), TT_VARIANT_UNCHECKED);
    ASSERT_EQ(tt__pool_report(p, 3)->registers, 0);
    tt__pool_free(p);
}

/* A cancel lets the compiles under way finish and starts none: with one
 * thread and 16 programs of a fifth of a second or more each, the last is
 * not reached in the moment between the first's end and the cancel. The
 * pool is freed with a compile in flight too. */
TEST(cancel_starts_nothing_new) {
    need_nvrtc();
    enum { N = 16 };
    tt__variant v[N];
    space_variants(TT_FAMILY_MMA, 32, 0, 80, v, N);
    tt__pool_opts o = opts(80, 1);
    tt__pool *p = NULL;
    ASSERT_OK(tt__pool_start(v, N, &o, &p, NULL, 0));
    ASSERT_EQ(tt__pool_wait(p, 0), TT_VARIANT_OK);
    tt__pool_cancel(p);
    int ok = 0;
    for (size_t i = 0; i < N; i++) {
        tt__variant_status st = tt__pool_wait(p, i);
        ASSERT(st == TT_VARIANT_OK || st == TT_VARIANT_UNCHECKED);
        ok += st == TT_VARIANT_OK;
        ASSERT((st == TT_VARIANT_OK) == (tt__pool_cubin(p, i) != NULL));
        if (i > 0 && st == TT_VARIANT_OK) ASSERT_EQ(tt__pool_wait(p, i - 1), TT_VARIANT_OK); /* in order */
    }
    ASSERT(ok >= 1 && ok < N);
    ASSERT_EQ(tt__pool_wait(p, N - 1), TT_VARIANT_UNCHECKED);
    tt__pool_free(p);
    ASSERT_OK(tt__pool_start(v, N, &o, &p, NULL, 0));
    tt__pool_free(p); /* joins the compile under way, leaks nothing (ASan) */
}

/* splitkv's split_ctas is read by the launch only: variants that differ
 * there are one program, compiled once, its cubin shared by the items. */
TEST(host_knob_variants_compile_once) {
    need_nvrtc();
    tt__variant v[3];
    space_variants(TT_FAMILY_SPLITKV, 64, 1, 80, v, 1);
    space_variants(TT_FAMILY_MMA, 32, 0, 80, &v[1], 1);
    v[2] = v[0];
    v[2].config.split_ctas = v[0].config.split_ctas == 4 ? 2 : 4;
    tt__pool_opts o = opts(80, 0);
    tt__pool *p = NULL;
    ASSERT_OK(tt__pool_start(v, 3, &o, &p, NULL, 0));
    ASSERT_EQ(tt__pool_programs(p), 2);
    /* item 2 is item 0's program: waiting for it compiles that alone */
    ASSERT_EQ(tt__pool_wait(p, 2), TT_VARIANT_OK);
    ASSERT(tt__pool_cubin(p, 0) && tt__pool_cubin(p, 0) == tt__pool_cubin(p, 2));
    tt__pool_cancel(p);
    ASSERT_EQ(tt__pool_wait(p, 1), TT_VARIANT_UNCHECKED);
    tt__pool_free(p);
    /* a fault-injected variant is a program of its own */
    v[1] = v[0];
    v[1].fault = TT_FAULT_OOB_WRITE;
    ASSERT_OK(tt__pool_start(v, 3, &o, &p, NULL, 0));
    ASSERT_EQ(tt__pool_programs(p), 2);
    tt__pool_free(p);
}

/* An item whose compile fails carries NVRTC's message and no cubin; the
 * items around it are unaffected. */
TEST(failing_compile_marks_its_item) {
    need_nvrtc();
    tt__variant v[3];
    space_variants(TT_FAMILY_MMA, 32, 0, 80, v, 3);
    v[1].config.block_m = 48; /* 12 rows per warp: the source's #error */
    tt__pool_opts o = opts(80, 2);
    tt__pool *p = NULL;
    ASSERT_OK(tt__pool_start(v, 3, &o, &p, NULL, 0));
    ASSERT_EQ(tt__pool_wait(p, 0), TT_VARIANT_OK);
    ASSERT_EQ(tt__pool_wait(p, 1), TT_VARIANT_COMPILE_ERROR);
    ASSERT_CONTAINS(tt__pool_error(p, 1), "TT_BLOCK_M");
    ASSERT(!tt__pool_cubin(p, 1));
    ASSERT_EQ(tt__pool_report(p, 1)->registers, 0);
    ASSERT_EQ(tt__pool_wait(p, 2), TT_VARIANT_OK);
    ASSERT_STREQ(tt__pool_error(p, 2), "");
    tt__pool_free(p);
}

/* The check after the compile, with the pool's limits: a program over the
 * shared memory limit is invalid, with its report and no cubin. */
TEST(compiled_over_the_limit_is_invalid) {
    need_nvrtc();
    tt__variant v;
    space_variants(TT_FAMILY_MMA, 32, 0, 80, &v, 1);
    tt__pool_opts o = opts(80, 1);
    o.dev.smem_optin = 1024;
    tt__pool *p = NULL;
    ASSERT_OK(tt__pool_start(&v, 1, &o, &p, NULL, 0));
    ASSERT_EQ(tt__pool_wait(p, 0), TT_VARIANT_SMEM);
    ASSERT_STREQ(tt__pool_error(p, 0), "shared memory over the device limit");
    ASSERT(tt__pool_report(p, 0)->dynamic_smem > 1024);
    ASSERT(!tt__pool_cubin(p, 0));
    tt__pool_free(p);
}

TEST(check_report_rules) {
    tt__device_limits d;
    ASSERT_OK(tt__device_limits_nominal(90, &d));
    tt__report r;
    memset(&r, 0, sizeof r);
    r.registers = 128;
    r.dynamic_smem = 64 * 1024;
    char err[128] = "";
    ASSERT_EQ(tt__variant_check_report(&r, &d, err, sizeof err), TT_VARIANT_OK);
    r.spill_stores = 16;
    r.spill_loads = 8;
    ASSERT_EQ(tt__variant_check_report(&r, &d, err, sizeof err), TT_VARIANT_SPILLS);
    ASSERT_STREQ(err, "spills 24 bytes, stack frame 0 bytes");
    r.spill_stores = r.spill_loads = 0;
    r.stack_frame = 8; /* local memory too */
    ASSERT_EQ(tt__variant_check_report(&r, &d, NULL, 0), TT_VARIANT_SPILLS);
    r.stack_frame = 0;
    r.static_smem = d.smem_optin - r.dynamic_smem + 1;
    ASSERT_EQ(tt__variant_check_report(&r, &d, err, sizeof err), TT_VARIANT_SMEM);
    ASSERT_STREQ(err, "shared memory over the device limit");
    r.static_smem--;
    ASSERT_EQ(tt__variant_check_report(&r, &d, err, sizeof err), TT_VARIANT_OK);
}

TEST(bad_arguments) {
    tt__pool_opts o;
    memset(&o, 0, sizeof o);
    tt__pool *p = NULL;
    char err[128];
    ASSERT_EQ(tt__pool_start(NULL, 2, &o, &p, err, sizeof err), TT_ERR_INVAL);
    ASSERT_OK(tt__pool_start(NULL, 0, &o, &p, err, sizeof err)); /* an empty list */
    ASSERT_EQ(tt__pool_programs(p), 0);
    ASSERT_EQ(tt__pool_wait(p, 0), TT_VARIANT_UNCHECKED);
    tt__pool_free(p);
    tt__pool_free(NULL);
}

TT_TEST_MAIN()
