/* STATS bodies (tt_stats_format) when memory runs out: the line count the
 * header will carry must match the lines in the body, or the client's
 * framing breaks. Allocation failures come from the linker: this test is
 * linked with --wrap=realloc, so tt_buf's realloc goes through
 * __wrap_realloc below, which fails the call numbered `fail_at`. */
#include <stddef.h>

#include "tuner/daemon/stats.h"
#include "tt_test.h"

void *__real_realloc(void *p, size_t n);
void *__wrap_realloc(void *p, size_t n);

static int calls, fail_at = -1, fail_rest; /* fail_rest: every call from fail_at on */

void *__wrap_realloc(void *p, size_t n) {
    int i = calls++;
    if (i == fail_at || (fail_rest && fail_at >= 0 && i > fail_at)) return NULL;
    return __real_realloc(p, n);
}

static void fill(tt_stats *s, tt_stats_gauges *g) {
    memset(s, 0, sizeof *s);
    memset(g, 0, sizeof *g);
    for (int i = 0; i < TT_VERB_COUNT; i++) s->requests[i] = 1000000u + (uint64_t)i;
    for (int i = 0; i < TT_ERRC_COUNT; i++) s->errors[i] = (uint64_t)i * 7;
    s->conn_accepted = 123456789;
    g->uptime_s = 86400;
    g->jobs[0] = 3;
    g->table = "0123456789abcdef";
}

static int count_lines(const tt_buf *b) {
    int n = 0;
    for (size_t i = 0; i < b->len; i++) n += b->data[i] == '\n';
    return n;
}

/* Fails the k-th realloc (and, with `rest`, every later one) for every k
 * a full format makes: the returned count is always the body's line
 * count, the body is whole lines, and a prefix of the full body (a line
 * that could not be added is never followed by later ones). */
static void check_failures(int prom, int rest) {
    tt_stats s;
    tt_stats_gauges g;
    fill(&s, &g);
    tt_buf full;
    tt_buf_init(&full);
    calls = 0;
    fail_at = -1;
    int nfull = tt_stats_format(&s, &g, prom, &full);
    int ncalls = calls;
    ASSERT(ncalls >= 3); /* the buffer grows several times: several failure points */
    ASSERT_EQ(nfull, count_lines(&full));
    ASSERT(!full.oom);
    for (int k = 0; k < ncalls; k++) {
        tt_buf b;
        tt_buf_init(&b);
        calls = 0;
        fail_at = k;
        fail_rest = rest;
        int n = tt_stats_format(&s, &g, prom, &b);
        fail_at = -1;
        fail_rest = 0;
        ASSERT(b.oom); /* the caller can tell the body is short */
        ASSERT_EQ(n, count_lines(&b));
        ASSERT(n < nfull);
        ASSERT(b.len == 0 || b.data[b.len - 1] == '\n');
        ASSERT(b.len <= full.len && (b.len == 0 || memcmp(b.data, full.data, b.len) == 0));
        tt_buf_free(&b);
    }
    tt_buf_free(&full);
}

TEST(text_count_matches_body_when_one_append_fails) { check_failures(0, 0); }
TEST(text_count_matches_body_when_memory_stays_short) { check_failures(0, 1); }
TEST(prometheus_count_matches_body_when_one_append_fails) { check_failures(1, 0); }
TEST(prometheus_count_matches_body_when_memory_stays_short) { check_failures(1, 1); }

/* The count of a normal body, both forms: one line per sample, plus
 * # HELP and # TYPE per Prometheus family. */
TEST(counts_without_failures) {
    tt_stats s;
    tt_stats_gauges g;
    fill(&s, &g);
    for (int prom = 0; prom < 2; prom++) {
        tt_buf b;
        tt_buf_init(&b);
        int n = tt_stats_format(&s, &g, prom, &b);
        ASSERT_EQ(n, count_lines(&b));
        int samples = TT_VERB_COUNT + 3 + TT_ERRC_COUNT + 14 + 5 + 1, families = 3 + 14 + 1 + 1;
        /* worker restarts; build_info and process_start_time_seconds (the
         * text form: start_time_seconds); the LOOKUP histogram: its buckets
         * and +Inf, sum and count (text: the buckets, count, sum) */
        samples += 1 + (prom ? 2 : 1) + (prom ? TT_LOOKUP_BUCKETS + 3 : TT_LOOKUP_BUCKETS + 2);
        families += 4;
        ASSERT_EQ(n, samples + (prom ? 2 * families : 0));
        ASSERT_CONTAINS(b.data, prom ? "tiletune_requests_total{verb=\"lookup\"} 1000002\n"
                                     : "requests_lookup 1000002\n");
        ASSERT_CONTAINS(b.data, prom ? "tiletune_table_info{checksum=\"0123456789abcdef\"} 1\n"
                                     : "table_info_0123456789abcdef 1\n");
        tt_buf_free(&b);
    }
}

/* The histogram is cumulative, its count the observations, its sum
 * their total; a time past the last bound lands in +Inf only. */
TEST(lookup_histogram_cumulative) {
    tt_stats s;
    tt_stats_gauges g;
    fill(&s, &g);
    tt_stats_observe_lookup(&s, 800);      /* <= 1 us */
    tt_stats_observe_lookup(&s, 1000);     /* <= 1 us: bounds are inclusive */
    tt_stats_observe_lookup(&s, 30000);    /* <= 50 us */
    tt_stats_observe_lookup(&s, 20000000); /* past 10 ms */
    tt_buf b;
    tt_buf_init(&b);
    tt_stats_format(&s, &g, 1, &b);
    ASSERT_CONTAINS(b.data, "tiletune_lookup_duration_seconds_bucket{le=\"1e-06\"} 2\n");
    ASSERT_CONTAINS(b.data, "tiletune_lookup_duration_seconds_bucket{le=\"2.5e-05\"} 2\n");
    ASSERT_CONTAINS(b.data, "tiletune_lookup_duration_seconds_bucket{le=\"5e-05\"} 3\n");
    ASSERT_CONTAINS(b.data, "tiletune_lookup_duration_seconds_bucket{le=\"0.01\"} 3\n");
    ASSERT_CONTAINS(b.data, "tiletune_lookup_duration_seconds_bucket{le=\"+Inf\"} 4\n");
    ASSERT_CONTAINS(b.data, "tiletune_lookup_duration_seconds_count 4\n");
    ASSERT_CONTAINS(b.data, "tiletune_lookup_duration_seconds_sum 0.020031800\n");
    ASSERT_CONTAINS(b.data, "# TYPE tiletune_lookup_duration_seconds histogram\n");
    ASSERT_CONTAINS(b.data, "tiletune_build_info{version=\"" TT_VERSION_STRING "\",rev=\"\"} 1\n");
    tt_buf_free(&b);
}

TT_TEST_MAIN()
