/* The in-memory index: exact, nearest in log space, default; replace,
 * remove, growth. */
#include "tuner/daemon/index.h"
#include "tt_test.h"

static tt_key_v2 key(const char *gpu, int hdim, int causal, int64_t sq, int64_t sk) {
    tt_key_v2 k;
    memset(&k, 0, sizeof k);
    k.dtype = TT_DTYPE_BF16;
    k.head_dim = hdim;
    k.causal = causal;
    k.seqlen_q = sq;
    k.seqlen_k = sk;
    snprintf(k.gpu, sizeof k.gpu, "%s", gpu);
    snprintf(k.rev, sizeof k.rev, "beef");
    return k;
}

static tt_config cfg(int block_m) {
    tt_config c;
    tt_key_v2 k = key("a", 128, 0, 1, 1);
    ASSERT_OK(tt_config_default_v2(&k, &c));
    c.block_m = block_m;
    return c;
}

TEST(exact_nearest_default) {
    tt_index *ix;
    ASSERT_OK(tt_index_new(&ix));
    tt_key_v2 k = key("a1", 128, 0, 512, 512);
    tt_config c512 = cfg(64), c4k = cfg(128);
    ASSERT_OK(tt_index_put(ix, &k, &c512, 100));
    k = key("a1", 128, 0, 4096, 4096);
    ASSERT_OK(tt_index_put(ix, &k, &c4k, 200));
    tt_lookup_result r;
    k = key("a1", 128, 0, 512, 512);
    ASSERT_OK(tt_index_lookup(ix, &k, &r));
    ASSERT_EQ(r.match, TT_MATCH_EXACT);
    ASSERT(r.tflops == 100);
    k = key("a1", 128, 0, 1000, 1000);
    ASSERT_OK(tt_index_lookup(ix, &k, &r));
    ASSERT_EQ(r.match, TT_MATCH_NEAREST);
    ASSERT_EQ(r.seqlen_q, 512);
    ASSERT(tt_config_equal(&r.config, &c512));
    k = key("a1", 128, 0, 3000, 3000);
    ASSERT_OK(tt_index_lookup(ix, &k, &r));
    ASSERT_EQ(r.seqlen_q, 4096);
    /* seqlen_k counts too: (512, 4096) is nearer (4096, 4096) than (512, 512) */
    k = key("a1", 128, 0, 600, 4096);
    ASSERT_OK(tt_index_lookup(ix, &k, &r));
    ASSERT_EQ(r.seqlen_k, 4096);
    /* either side of the geometric mean of 512 and 4096 (1448.2) */
    k = key("a1", 128, 0, 1448, 1448);
    ASSERT_OK(tt_index_lookup(ix, &k, &r));
    k = key("a1", 128, 0, 1449, 1449);
    tt_lookup_result r2;
    ASSERT_OK(tt_index_lookup(ix, &k, &r2));
    ASSERT_EQ(r.seqlen_q, 512);
    ASSERT_EQ(r2.seqlen_q, 4096);
    /* another group: default */
    k = key("a1", 128, 1, 512, 512);
    ASSERT_OK(tt_index_lookup(ix, &k, &r));
    ASSERT_EQ(r.match, TT_MATCH_DEFAULT);
    ASSERT_EQ(r.seqlen_q, 512);
    k = key("a2", 128, 0, 512, 512);
    ASSERT_OK(tt_index_lookup(ix, &k, &r));
    ASSERT_EQ(r.match, TT_MATCH_DEFAULT);
    ASSERT(r.tflops == 0);
    tt_index_free(ix);
}

/* The lookup of the issue that defined regimes: with only square keys
 * tuned, a decode key answered the config of seqlen 128. */
TEST(nearest_never_crosses_regimes) {
    tt_index *ix;
    ASSERT_OK(tt_index_new(&ix));
    tt_config sq = cfg(192), dec = cfg(16), chunk = cfg(64);
    int64_t squares[] = {128, 1024, 32768};
    for (int i = 0; i < 3; i++) {
        tt_key_v2 k = key("a1", 128, 0, squares[i], squares[i]);
        ASSERT_OK(tt_index_put(ix, &k, &sq, 300));
    }
    tt_lookup_result r;
    tt_config def;
    /* decode over a long cache: nothing of its regime is tuned */
    tt_key_v2 k = key("a1", 128, 0, 1, 32768);
    ASSERT_OK(tt_index_lookup(ix, &k, &r));
    ASSERT_EQ(r.match, TT_MATCH_DEFAULT);
    ASSERT_EQ(r.seqlen_q, 1);
    ASSERT_EQ(r.seqlen_k, 32768);
    ASSERT_OK(tt_config_default_v2(&k, &def));
    ASSERT(tt_config_equal(&r.config, &def));
    /* chunked prefill: neither */
    k = key("a1", 128, 0, 512, 32768);
    ASSERT_OK(tt_index_lookup(ix, &k, &r));
    ASSERT_EQ(r.match, TT_MATCH_DEFAULT);
    /* one decode and one chunk key tuned: each regime answers its own,
     * however near the other regime's key is in log space */
    k = key("a1", 128, 0, 16, 4096);
    ASSERT_OK(tt_index_put(ix, &k, &dec, 5));
    k = key("a1", 128, 0, 512, 131072);
    ASSERT_OK(tt_index_put(ix, &k, &chunk, 50));
    k = key("a1", 128, 0, 17, 4096); /* chunk, next to the decode key */
    ASSERT_OK(tt_index_lookup(ix, &k, &r));
    ASSERT_EQ(r.match, TT_MATCH_NEAREST);
    ASSERT_EQ(r.seqlen_q, 512);
    ASSERT(tt_config_equal(&r.config, &chunk));
    k = key("a1", 128, 0, 1, 131072);
    ASSERT_OK(tt_index_lookup(ix, &k, &r));
    ASSERT_EQ(r.seqlen_q, 16);
    ASSERT(tt_config_equal(&r.config, &dec));
    k = key("a1", 128, 0, 17, 64); /* prefill (17 x 4 > 64) */
    ASSERT_OK(tt_index_lookup(ix, &k, &r));
    ASSERT_EQ(r.seqlen_q, 128);
    ASSERT(tt_config_equal(&r.config, &sq));
    tt_index_free(ix);
}

TEST(group_and_causal_alignment_are_part_of_the_key) {
    tt_index *ix;
    ASSERT_OK(tt_index_new(&ix));
    tt_config g1 = cfg(16), g8 = cfg(64), tl = cfg(128);
    tt_key_v2 k = key("a1", 128, 2, 8, 32768);
    k.group = 1;
    ASSERT_OK(tt_index_put(ix, &k, &g1, 1));
    k.group = 8;
    ASSERT_OK(tt_index_put(ix, &k, &g8, 2));
    tt_lookup_result r;
    ASSERT_OK(tt_index_lookup(ix, &k, &r));
    ASSERT_EQ(r.match, TT_MATCH_EXACT);
    ASSERT(tt_config_equal(&r.config, &g8));
    /* distance in log(group): 4 and 6 are nearer 8, 2 nearer 1 */
    k.group = 4;
    ASSERT_OK(tt_index_lookup(ix, &k, &r));
    ASSERT_EQ(r.match, TT_MATCH_NEAREST);
    ASSERT(tt_config_equal(&r.config, &g8));
    ASSERT_EQ(r.group, 8); /* the record that answered */
    k.group = 6;
    ASSERT_OK(tt_index_lookup(ix, &k, &r));
    ASSERT(tt_config_equal(&r.config, &g8));
    k.group = 2;
    ASSERT_OK(tt_index_lookup(ix, &k, &r));
    ASSERT(tt_config_equal(&r.config, &g1));
    /* group 0 reads as 1 */
    k.group = 0;
    ASSERT_OK(tt_index_lookup(ix, &k, &r));
    ASSERT_EQ(r.match, TT_MATCH_EXACT);
    ASSERT(tt_config_equal(&r.config, &g1));
    /* top-left is another mask: its own keys, never bottom-right's */
    k = key("a1", 128, 1, 8, 32768);
    ASSERT_OK(tt_index_lookup(ix, &k, &r));
    ASSERT_EQ(r.match, TT_MATCH_DEFAULT);
    ASSERT_OK(tt_index_put(ix, &k, &tl, 3));
    k.causal = 2;
    k.group = 1;
    ASSERT_OK(tt_index_lookup(ix, &k, &r));
    ASSERT(tt_config_equal(&r.config, &g1));
    /* equal masks are one key: bottom-right over one query row is no
     * mask; over a square problem it is top-left */
    tt_key_v2 one = key("a1", 64, 0, 1, 4096);
    ASSERT_OK(tt_index_put(ix, &one, &g1, 4));
    one.causal = 2;
    ASSERT_OK(tt_index_lookup(ix, &one, &r));
    ASSERT_EQ(r.match, TT_MATCH_EXACT);
    tt_key_v2 square = key("a1", 64, 1, 2048, 2048);
    ASSERT_OK(tt_index_put(ix, &square, &tl, 5));
    square.causal = 2;
    ASSERT_OK(tt_index_lookup(ix, &square, &r));
    ASSERT_EQ(r.match, TT_MATCH_EXACT);
    /* a prefill key is the same problem whatever the group */
    square.group = 8;
    ASSERT_OK(tt_index_lookup(ix, &square, &r));
    ASSERT_EQ(r.match, TT_MATCH_EXACT);
    ASSERT_EQ(tt_index_remove(ix, &square), 1);
    ASSERT_EQ(tt_index_remove(ix, &square), 0);
    tt_index_free(ix);
}

TEST(replace_and_remove) {
    tt_index *ix;
    ASSERT_OK(tt_index_new(&ix));
    tt_key_v2 k = key("a1", 64, 0, 128, 128);
    tt_config c1 = cfg(64), c2 = cfg(32);
    ASSERT_OK(tt_index_put(ix, &k, &c1, 1));
    ASSERT_OK(tt_index_put(ix, &k, &c2, 2));
    ASSERT_EQ(tt_index_count(ix), 1);
    tt_lookup_result r;
    ASSERT_OK(tt_index_lookup(ix, &k, &r));
    ASSERT(tt_config_equal(&r.config, &c2));
    ASSERT_EQ(tt_index_remove(ix, &k), 1);
    ASSERT_EQ(tt_index_remove(ix, &k), 0);
    ASSERT_EQ(tt_index_count(ix), 0);
    ASSERT_OK(tt_index_lookup(ix, &k, &r));
    ASSERT_EQ(r.match, TT_MATCH_DEFAULT);
    tt_key_v2 nogpu = key("", 64, 0, 1, 1);
    ASSERT_EQ(tt_index_put(ix, &nogpu, &c1, 1), TT_ERR_INVAL);
    tt_index_free(ix);
    tt_index_free(NULL);
}

TEST(many_keys_grow_and_shrink) {
    tt_index *ix;
    ASSERT_OK(tt_index_new(&ix));
    tt_config c = cfg(64);
    char gpu[8];
    for (int g = 0; g < 8; g++)
        for (int s = 1; s <= 2000; s++) {
            snprintf(gpu, sizeof gpu, "%x", g + 10);
            tt_key_v2 k = key(gpu, 128, s & 1, s, s);
            ASSERT_OK(tt_index_put(ix, &k, &c, s));
        }
    ASSERT_EQ(tt_index_count(ix), 16000);
    /* remove every other key; the rest must still be found exactly */
    for (int g = 0; g < 8; g++)
        for (int s = 2; s <= 2000; s += 2) {
            snprintf(gpu, sizeof gpu, "%x", g + 10);
            tt_key_v2 k = key(gpu, 128, s & 1, s, s);
            ASSERT_EQ(tt_index_remove(ix, &k), 1);
        }
    ASSERT_EQ(tt_index_count(ix), 8000);
    tt_lookup_result r;
    for (int g = 0; g < 8; g++)
        for (int s = 1; s <= 2000; s++) {
            snprintf(gpu, sizeof gpu, "%x", g + 10);
            tt_key_v2 k = key(gpu, 128, s & 1, s, s);
            ASSERT_OK(tt_index_lookup(ix, &k, &r));
            if (s & 1) {
                ASSERT_EQ(r.match, TT_MATCH_EXACT);
                ASSERT(r.tflops == s);
            } else {
                /* causal=0 group lost all its members: default */
                ASSERT_EQ(r.match, TT_MATCH_DEFAULT);
            }
        }
    tt_index_free(ix);
}

TT_TEST_MAIN()
