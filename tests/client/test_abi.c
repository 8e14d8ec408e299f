/* libtiletune.so exports the public tt_ API under version TILETUNE_0.1 and
 * nothing else: not the internal tt__ helpers it is built from. */
#include <dlfcn.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../../include/tiletune.h" /* the types only: calls go through dlsym */
#include "tt_test.h"

TEST(exports_only_the_public_api) {
    void *h = dlopen(TT_LIB_PATH, RTLD_NOW | RTLD_LOCAL);
    if (!h) TT_FAIL_AT("dlopen: %s", dlerror());
    const char *pub[] = {"tt_client_open",      "tt_client_close",        "tt_lookup",
                         "tt_client_get_stats", "tt_client_flush",        "tt_config_format",
                         "tt_config_parse",     "tt_config_equal",        "tt_config_default",
                         "tt_strerror",         "tt_match_name",          "tt_sdpa_fwd",
                         "tt_sdpa_variants",    "tt_sdpa_default_config", "tt_kernel_revision"};
    for (size_t i = 0; i < sizeof pub / sizeof pub[0]; i++) {
        if (!dlvsym(h, pub[i], "TILETUNE_0.1")) TT_FAIL_AT("%s is not exported as TILETUNE_0.1", pub[i]);
    }
    /* added after 0.1: a binary that needs them asks for 0.2 */
    const char *v2[] = {"tt_lookup_v2",
                        "tt_config_default_v2",
                        "tt_sdpa_fwd_kvcache",
                        "tt_sdpa_fwd_kvcache_workspace",
                        "tt_sdpa_fwd_varlen",
                        "tt_sdpa_fwd_varlen_workspace",
                        "tt_sdpa_default_config_v2"};
    for (size_t i = 0; i < sizeof v2 / sizeof v2[0]; i++)
        if (!dlvsym(h, v2[i], "TILETUNE_0.2")) TT_FAIL_AT("%s is not exported as TILETUNE_0.2", v2[i]);
    const char *v3[] = {"tt_sdpa_default_config_at", "tt_sdpa_variants_v2"};
    for (size_t i = 0; i < sizeof v3 / sizeof v3[0]; i++)
        if (!dlvsym(h, v3[i], "TILETUNE_0.3")) TT_FAIL_AT("%s is not exported as TILETUNE_0.3", v3[i]);
    const char *internal[] = {"tt__proto_parse", "tt__cache_get",      "tt__conn_open",
                              "tt__key_check",   "tt__lookup_default", "tt__client_set_backoff"};
    for (size_t i = 0; i < sizeof internal / sizeof internal[0]; i++)
        if (dlsym(h, internal[i])) TT_FAIL_AT("%s leaks out of the library", internal[i]);
    /* and it works through the exported entry points */
    int (*open_)(const char *, int, void **) =
        (int (*)(const char *, int, void **))dlsym(h, "tt_client_open");
    void (*close_)(void *) = (void (*)(void *))dlsym(h, "tt_client_close");
    void *c = NULL;
    ASSERT_OK(open_("/nonexistent/x.sock", 10, &c));
    close_(c);
    dlclose(h);
}

/* The released tt_lookup reads a tt_key and not one byte past it (a
 * binary built against 0.1 passes exactly that), and asks for group 1. */
TEST(released_lookup_reads_only_the_released_key) {
    void *h = dlopen(TT_LIB_PATH, RTLD_NOW | RTLD_LOCAL);
    if (!h) TT_FAIL_AT("dlopen: %s", dlerror());
    int (*open_)(const char *, int, tt_client **) =
        (int (*)(const char *, int, tt_client **))dlsym(h, "tt_client_open");
    void (*close_)(tt_client *) = (void (*)(tt_client *))dlsym(h, "tt_client_close");
    int (*lookup1)(tt_client *, const tt_key *, tt_lookup_result *) =
        (int (*)(tt_client *, const tt_key *, tt_lookup_result *))dlvsym(h, "tt_lookup", "TILETUNE_0.1");
    int (*lookup2)(tt_client *, const tt_key_v2 *, tt_lookup_result *) =
        (int (*)(tt_client *, const tt_key_v2 *, tt_lookup_result *))dlvsym(h, "tt_lookup_v2",
                                                                            "TILETUNE_0.2");
    int (*def1)(const tt_key *, tt_config *) =
        (int (*)(const tt_key *, tt_config *))dlsym(h, "tt_config_default");
    int (*def2)(const tt_key_v2 *, tt_config *) =
        (int (*)(const tt_key_v2 *, tt_config *))dlsym(h, "tt_config_default_v2");
    ASSERT(open_ && close_ && lookup1 && lookup2 && def1 && def2);
    long page = sysconf(_SC_PAGESIZE);
    char *map = mmap(NULL, (size_t)page * 2, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT(map != MAP_FAILED);
    ASSERT_OK(mprotect(map + page, (size_t)page, PROT_NONE));
    tt_key *k = (tt_key *)(map + page - sizeof(tt_key)); /* ends at the guard page */
    memset(k, 0, sizeof *k);
    k->dtype = TT_DTYPE_BF16;
    k->head_dim = 128;
    k->causal = TT_CAUSAL_BOTTOM_RIGHT;
    k->seqlen_q = 8;
    k->seqlen_k = 32768;
    tt_client *c;
    ASSERT_OK(open_("/nonexistent/x.sock", 10, &c));
    tt_lookup_result r, r2;
    ASSERT_EQ(lookup1(c, k, &r), TT_FALLBACK);
    tt_key_v2 k2;
    memset(&k2, 0, sizeof k2);
    memcpy(&k2, k, sizeof *k);
    k2.group = 1;
    ASSERT_EQ(lookup2(c, &k2, &r2), TT_FALLBACK);
    ASSERT(memcmp(&r.config, &r2.config, sizeof r.config) == 0);
    k2.reserved[0] = 1; /* reserved space must be zero */
    ASSERT_EQ(lookup2(c, &k2, &r2), TT_ERR_INVAL);
    tt_config d1, d2;
    ASSERT_OK(def1(k, &d1));
    k2.reserved[0] = 0;
    ASSERT_OK(def2(&k2, &d2));
    ASSERT(memcmp(&d1, &d2, sizeof d1) == 0);
    close_(c);
    munmap(map, (size_t)page * 2);
    dlclose(h);
}

TT_TEST_MAIN()
