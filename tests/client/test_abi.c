/* libtiletune.so exports the public tt_ API under version TILETUNE_0.1 and
 * nothing else: not the internal tt__ helpers it is built from. */
#include <dlfcn.h>

#include "tt_test.h"

TEST(exports_only_the_public_api) {
    void *h = dlopen(TT_LIB_PATH, RTLD_NOW | RTLD_LOCAL);
    if (!h) TT_FAIL_AT("dlopen: %s", dlerror());
    const char *pub[] = {"tt_client_open", "tt_client_close", "tt_lookup", "tt_client_get_stats",
                         "tt_client_flush", "tt_config_format", "tt_config_parse", "tt_config_equal",
                         "tt_config_default", "tt_strerror", "tt_match_name", "tt_sdpa_fwd",
                         "tt_sdpa_variants", "tt_sdpa_default_config", "tt_kernel_revision"};
    for (size_t i = 0; i < sizeof pub / sizeof pub[0]; i++) {
        if (!dlvsym(h, pub[i], "TILETUNE_0.1")) TT_FAIL_AT("%s is not exported as TILETUNE_0.1", pub[i]);
    }
    const char *added[] = {"tt_sdpa_fwd_kvcache", "tt_sdpa_fwd_kvcache_workspace", "tt_sdpa_fwd_varlen",
                           "tt_sdpa_fwd_varlen_workspace"};
    for (size_t i = 0; i < sizeof added / sizeof added[0]; i++)
        if (!dlvsym(h, added[i], "TILETUNE_0.2")) TT_FAIL_AT("%s is not exported as TILETUNE_0.2", added[i]);
    const char *internal[] = {"tt__proto_parse", "tt__cache_get", "tt__conn_open", "tt__key_check",
                              "tt__lookup_default", "tt__client_set_backoff"};
    for (size_t i = 0; i < sizeof internal / sizeof internal[0]; i++)
        if (dlsym(h, internal[i])) TT_FAIL_AT("%s leaks out of the library", internal[i]);
    /* and it works through the exported entry points */
    int (*open_)(const char *, int, void **) = (int (*)(const char *, int, void **))dlsym(h, "tt_client_open");
    void (*close_)(void *) = (void (*)(void *))dlsym(h, "tt_client_close");
    void *c = NULL;
    ASSERT_OK(open_("/nonexistent/x.sock", 10, &c));
    close_(c);
    dlclose(h);
}

TT_TEST_MAIN()
