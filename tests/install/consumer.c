/*
 * A program an application would write, built against the INSTALLED
 * tiletune (once with find_package, once with pkg-config). It prints what
 * it got; tests/install/install_test.sh checks the lines.
 */
#include <stdio.h>
#include <string.h>

#include <tiletune.h>

#define CHECK(cond)                                                 \
    do {                                                            \
        if (!(cond)) {                                              \
            fprintf(stderr, "consumer: check failed: %s\n", #cond); \
            return 1;                                               \
        }                                                           \
    } while (0)

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: consumer SOCKET\n");
        return 2;
    }
    tt_key key;
    memset(&key, 0, sizeof key);
    key.dtype = TT_DTYPE_FP16;
    key.head_dim = 128;
    key.causal = 1;
    key.seqlen_q = 4096;
    key.seqlen_k = 4096;

    tt_config def, back;
    char text[TT_CONFIG_TEXT_MAX];
    CHECK(tt_config_default(&key, &def) == 0);
    CHECK(tt_config_format(&def, text, sizeof text) > 0);
    CHECK(tt_config_parse(text, &back) == 0);
    CHECK(tt_config_equal(&def, &back) == 1);

    /* The socket does not exist: open still succeeds (it connects lazily)
     * and the lookup falls back to the same built-in default. */
    tt_client *c = NULL;
    CHECK(tt_client_open(argv[1], 200, &c) == 0);
    tt_lookup_result r;
    int rc = tt_lookup(c, &key, &r);
    tt_client_close(c);
    CHECK(rc == TT_FALLBACK);
    CHECK(r.match == TT_MATCH_DEFAULT);
    CHECK(tt_config_equal(&r.config, &def) == 1);

    printf("version=%s\n", TT_VERSION_STRING);
    printf("default=%s\n", text);
    printf("lookup=%s match=%s\n", rc == TT_FALLBACK ? "fallback" : "answered", tt_match_name(r.match));
    printf("strerror=%s\n", tt_strerror(TT_ERR_NODAEMON));
    return 0;
}
