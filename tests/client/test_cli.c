/* The tiletune CLI as a user meets it: usage errors exit 2, an unreachable
 * daemon exits 1 with one line saying why, replies are shown for people
 * and as JSON. The daemon here is a fake with canned replies; the real one
 * is in test_cli_daemon.c. */
#include <jansson.h>

#include "cli_run.h"
#include "fake_daemon.h"
#include "tt_test.h"
#include "tiletune.h"

#define CFG "family=mma,block_m=64,block_n=32,warps=4,stages=3,layout=pad,q_in_regs=1"

static const char *canned(fake_daemon *f, const char *line) {
    (void)f;
    if (strcmp(line, "PING") == 0) return "OK pong\n";
    if (strcmp(line, "STATUS") == 0)
        return "OK version=0.1.0 uptime_s=42 gpus=0 rev=ab12 gpu=none records=3 jobs_queued=1 "
               "jobs_running=0 tuning=waiting reason=no-gpu\n";
    if (strcmp(line, "STATS") == 0)
        return "OK lines=3\nrequests_lookup_total 1200\nlookups_exact_total 7\nconnections_open 2\n";
    if (strcmp(line, "STATS format=prometheus") == 0)
        return "OK lines=3\n# HELP tiletune_requests_total Requests.\n# TYPE tiletune_requests_total "
               "counter\ntiletune_requests_total{verb=\"lookup\"} 1200\n";
    if (strncmp(line, "LOOKUP ", 7) == 0) {
        if (strstr(line, "hdim=256")) return "OK match=default config=" CFG " seqlen_q=9 seqlen_k=9\n";
        return "OK match=nearest config=" CFG " seqlen_q=1024 seqlen_k=2048 tflops=301.25\n";
    }
    if (strcmp(line, "TUNE stale=1") == 0)
        return "ERR notfound no stale keys: every tuned key is for kernel revision ab12\n";
    if (strncmp(line, "TUNE ", 5) == 0) {
        if (strstr(line, "dtype=bf16") || strstr(line, "gpu=dead"))
            return "ERR permission TUNE needs root, the daemon's user or group tiletune\n";
        return "OK job=17 keys=8\n";
    }
    if (strcmp(line, "JOBS") == 0)
        return "OK lines=2\njob=3 state=running keys=8 done=2 mode=exhaustive created=1700000000\n"
               "job=17 state=queued keys=120 done=0 mode=fast created=1700000100\n";
    if (strcmp(line, "JOBS all=1") == 0) return "OK lines=0\n";
    if (strcmp(line, "CANCEL job=17") == 0) return "OK job=17 state=cancelled\n";
    if (strncmp(line, "CANCEL ", 7) == 0) return "ERR notfound no job 99\n";
    if (strncmp(line, "FORGET ", 7) == 0) return strstr(line, "causal=1") ? "OK forgot=1\n" : "OK forgot=0\n";
    return "ERR verb unknown verb\n";
}

TEST(usage_errors_exit_2) {
    cli_result r;
    const char *cases[][10] = {
        {NULL},
        {"frob", NULL},
        {"--bogus", "ping", NULL},
        {"--timeout", "abc", "ping", NULL},
        {"--timeout", NULL},
        {"ping", "extra", NULL},
        {"lookup", "--hdim", "128", "--dtype", "fp16", NULL},
        {"lookup", "--seqlen", "10", "--hdim", "48", "--dtype", "fp16", NULL},
        {"lookup", "--seqlen", "0", "--hdim", "64", "--dtype", "fp16", NULL},
        {"lookup", "--seqlen", "1x", "--hdim", "64", "--dtype", "fp16", NULL},
        {"lookup", "--seqlen", "10", "--hdim", "64", "--dtype", "fp32", NULL},
        {"lookup", "--seqlen", "10", "--seqlen", "20", "--hdim", "64", NULL},
        {"lookup", "--seqlen", NULL},
        {"stats", "--prom", "--json", NULL},
        {"tune", "--seqlen", "512,", "--hdim", "64", "--dtype", "fp16", NULL},
        {"tune", "--seqlen", "512", "--hdim", "64", "--dtype", "fp16", "--causal", "maybe"},
        {"cancel", NULL},
        {"cancel", "abc", NULL},
        {"jobs", "--causal", NULL},
        /* found by the CLI, before any daemon is asked */
        {"tune", "-s", "512", "-d", "64", "-t", "fp16", "--shard", "3/2", NULL},
        {"tune", "-s", "512", "-d", "64", "-t", "fp16", "--causal=sideways", NULL},
        {"tune", "-s", "512", "-d", "64", "-t", "fp16", "--causal", "--causal-both", NULL},
        {"lookup", "-s", "512", "-d", "64", "-t", "fp16", "--causal=3", NULL},
        {"lookup", "-s", "512", "-d", "64", "-t", "fp16", "--json=1", NULL},
        {"lookup", "-x", NULL},
        {"lookup", "--seq", "1", "-d", "64", "-t", "fp16", NULL},
        {"ping", "--timeout", NULL},
        {"--completion", "tcsh", NULL},
        {"lookup", "-s1", "-d64", "-tfp16", "--offline", "--gpu", "ab", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *const *a = cases[i];
        cli(&r, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], NULL);
        if (r.rc != 2)
            fprintf(stderr, "case %zu (%s %s): rc %d\n", i, a[0] ? a[0] : "", a[1] ? a[1] : "", r.rc);
        ASSERT_EQ(r.rc, 2);
        ASSERT_CONTAINS(r.err, "tiletune");
        ASSERT_STREQ(r.out, "");
    }
    cli(&r, "lookup", "--seqlen", "10", "--hdim", "48", "--dtype", "fp16", NULL);
    ASSERT_CONTAINS(r.err, "--hdim 48 is not supported");
    ASSERT_CONTAINS(r.err, "tiletune lookup --help");
}

/* Lists longer than a request line, with options after them: the
 * request is refused as too long, not built past the end of its buffer. */
TEST(tune_lists_too_long_with_options) {
    static char seqlens[5 * 1200 + 1];
    /* Several lengths past the buffer: where the stray write lands (and
     * whether it crashes without ASan) depends on how far past it is. */
    for (int items = 830; items <= 1200; items += 5) {
        size_t at = 0;
        for (int i = 0; i < items; i++)
            at += (size_t)snprintf(seqlens + at, sizeof seqlens - at, "%s1024", i ? "," : "");
        cli_result r;
        cli(&r, "--socket", "/nonexistent/tiletune.sock", "tune", "--seqlen", seqlens, "--hdim", "128",
            "--dtype", "fp16", "--causal", "no", "--mode", "fast", "--gpu", "abc", "--shard", "1/2", NULL);
        if (r.rc != 2) fprintf(stderr, "%d seqlens: rc %d\n", items, r.rc);
        ASSERT_EQ(r.rc, 2);
        ASSERT_CONTAINS(r.err, "too long for one request");
    }
}

/* Two tables without records: a diff of nothing, not undefined behaviour
 * (qsort of a NULL array; fatal under the sanitizer build). */
TEST(diff_of_empty_tables) {
    char path[] = "/tmp/ttcli-empty-XXXXXX";
    int fd = mkstemp(path);
    ASSERT(fd >= 0);
    const char *table = "{\"format\":\"tiletune-table\",\"version\":1,\"exported_at\":1}\n"
                        "{\"end\":\"tiletune-table\",\"records\":0}\n";
    ASSERT_EQ(write(fd, table, strlen(table)), (ssize_t)strlen(table));
    close(fd);
    cli_result r;
    cli(&r, "--socket", "/nonexistent/tiletune.sock", "diff", path, path, NULL);
    unlink(path);
    if (r.rc != 0) fprintf(stderr, "%s", r.err);
    ASSERT_EQ(r.rc, 0);
    ASSERT_CONTAINS(r.out, "0 keys: 0 same config");
}

static const char *hex_ids_like_numbers(fake_daemon *f, const char *line) {
    (void)f;
    if (strcmp(line, "STATUS") == 0)
        return "OK version=0.1.0 uptime_s=1 gpus=1 rev=0012 gpu=1234e567 records=0 jobs_queued=0 "
               "jobs_running=0 tuning=idle reason=none\n";
    return "ERR verb unknown verb\n";
}

/* --json keeps hex ids as the strings they are, even when they read as
 * numbers. */
TEST(json_keeps_hex_ids_strings) {
    fake_daemon *f = fake_start(FAKE_SERVE, hex_ids_like_numbers);
    cli_result r;
    cli(&r, "--socket", f->path, "status", "--json", NULL);
    ASSERT_EQ(r.rc, 0);
    json_error_t je;
    json_t *j = json_loads(r.out, 0, &je);
    ASSERT(j != NULL);
    ASSERT_STREQ(json_string_value(json_object_get(j, "rev")), "0012");
    ASSERT_STREQ(json_string_value(json_object_get(j, "gpu")), "1234e567");
    ASSERT_EQ(json_integer_value(json_object_get(j, "gpus")), 1);
    json_decref(j);
    fake_stop(f);
}

static const char *hostile(fake_daemon *f, const char *line) {
    (void)f;
    if (strncmp(line, "STATS", 5) == 0)
        return "OK lines=2\nrequests_ping\x1b[2J\x1b]0;owned\x07 1\nx\xc2\x9b"
               "31m 2\n";
    if (strncmp(line, "LOOKUP", 6) == 0 && strstr(line, "seqlen_q=1 "))
        return "OK match=exact config=family=mma,block_m=999999999,block_n=32,warps=4,stages=3,layout=pad,q_in_regs=1 "
               "seqlen_q=1 seqlen_k=1 tflops=1\n";
    if (strncmp(line, "LOOKUP", 6) == 0)
        return "OK match=exact config=" CFG " seqlen_q=2 seqlen_k=2 tflops=nan\n";
    if (strncmp(line, "FORGET", 6) == 0) return "ERR db disk \x1b[31mred\x1b[0m\n";
    return "ERR verb unknown verb\n";
}

/* What a daemon (or whatever listens on the socket) sends never reaches
 * the terminal as control characters, and a LOOKUP reply the library
 * would refuse is refused here too (it printed block_m=999999999 and
 * tflops=nan and exited 0). */
TEST(daemon_text_is_sanitised_and_lookups_checked) {
    fake_daemon *f = fake_start(FAKE_SERVE, hostile);
    cli_result r;
    cli(&r, "--socket", f->path, "stats", NULL);
    ASSERT_EQ(r.rc, 0);
    ASSERT(strchr(r.out, '\x1b') == NULL && strchr(r.out, '\x07') == NULL &&
           strstr(r.out, "\xc2\x9b") == NULL);
    ASSERT_CONTAINS(r.out, "requests_ping?[2J");
    cli(&r, "--socket", f->path, "forget", "--seqlen", "1", "--hdim", "128", "--dtype", "fp16", "--gpu", "0a",
        NULL);
    ASSERT_EQ(r.rc, 1);
    ASSERT(strchr(r.err, '\x1b') == NULL);
    ASSERT_CONTAINS(r.err, "?[31mred");
    cli(&r, "--socket", f->path, "lookup", "--seqlen", "1", "--hdim", "128", "--dtype", "fp16", NULL);
    ASSERT_EQ(r.rc, 1);
    ASSERT_CONTAINS(r.err, "not one the library would accept");
    cli(&r, "--socket", f->path, "lookup", "--seqlen", "2", "--hdim", "128", "--dtype", "fp16", NULL);
    ASSERT_EQ(r.rc, 1);
    fake_stop(f);
}

TEST(help_exits_0) {
    cli_result r;
    cli(&r, "--help", NULL);
    ASSERT_EQ(r.rc, 0);
    const char *cmds[] = {"ping", "status", "stats", "lookup", "tune", "jobs", "cancel", "forget"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        ASSERT_CONTAINS(r.out, cmds[i]);
        cli_result h;
        cli(&h, cmds[i], "--help", NULL);
        ASSERT_EQ(h.rc, 0);
        ASSERT_CONTAINS(h.out, "usage: tiletune");
        ASSERT_CONTAINS(h.out, cmds[i]);
        cli(&h, "help", cmds[i], NULL);
        ASSERT_EQ(h.rc, 0);
    }
    cli(&r, "lookup", "--help", NULL);
    ASSERT_CONTAINS(r.out, "--seqlen N");
    ASSERT_CONTAINS(r.out, "--json");
    cli(&r, "--version", NULL);
    ASSERT_EQ(r.rc, 0);
    ASSERT_CONTAINS(r.out, "tiletune 0.1.0");
}

TEST(unreachable_daemon_exits_1_with_reason) {
    cli_result r;
    cli(&r, "--socket", "/nonexistent/tiletune.sock", "ping", NULL);
    ASSERT_EQ(r.rc, 1);
    ASSERT_STREQ(r.err, "tiletune: cannot reach the daemon at /nonexistent/tiletune.sock: No such file or "
                        "directory (is tiletuned running?)\n");
    ASSERT_STREQ(r.out, "");
    /* $TILETUNE_SOCKET is the default */
    setenv("TILETUNE_SOCKET", "/nonexistent/env.sock", 1);
    cli(&r, "lookup", "--seqlen", "10", "--hdim", "64", "--dtype", "fp16", NULL);
    ASSERT_EQ(r.rc, 1);
    ASSERT_CONTAINS(r.err, "/nonexistent/env.sock");
    ASSERT_EQ(nlines(r.err), 1);
}

TEST(mute_daemon_times_out) {
    fake_daemon *f = fake_start(FAKE_ACCEPT_MUTE, NULL);
    cli_result r;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    cli(&r, "--socket", f->path, "--timeout", "200", "status", NULL);
    double ms = ms_since(&t0);
    ASSERT_EQ(r.rc, 1);
    ASSERT_CONTAINS(r.err, "did not answer in time (waited 200 ms");
    ASSERT_EQ(nlines(r.err), 1);
    ASSERT(ms >= 199 && ms < 1000);
    fake_stop(f);
}

TEST(ping_status_stats) {
    fake_daemon *f = fake_start(FAKE_SERVE, canned);
    cli_result r;
    cli(&r, "--socket", f->path, "ping", NULL);
    ASSERT_EQ(r.rc, 0);
    ASSERT_CONTAINS(r.out, "pong from ");
    ASSERT_CONTAINS(r.out, f->path);

    cli(&r, "--socket", f->path, "status", NULL);
    ASSERT_EQ(r.rc, 0);
    ASSERT_CONTAINS(r.out, "version       0.1.0\n"); /* keys padded to jobs_running */
    ASSERT_CONTAINS(r.out, "jobs_running  0\n");
    ASSERT_CONTAINS(r.out, "Tuning needs a GPU");

    cli(&r, "--socket", f->path, "status", "--json", NULL);
    ASSERT_EQ(r.rc, 0);
    json_error_t je;
    json_t *j = json_loads(r.out, 0, &je);
    ASSERT(j != NULL);
    ASSERT_EQ(json_integer_value(json_object_get(j, "records")), 3);
    ASSERT_STREQ(json_string_value(json_object_get(j, "reason")), "no-gpu");
    ASSERT_STREQ(json_string_value(json_object_get(j, "rev")), "ab12");
    json_decref(j);

    cli(&r, "--socket", f->path, "stats", NULL);
    ASSERT_EQ(r.rc, 0);
    ASSERT_CONTAINS(r.out, "requests_lookup_total  1200\n");
    ASSERT_CONTAINS(r.out, "connections_open          2\n");
    cli(&r, "--socket", f->path, "stats", "--json", NULL);
    j = json_loads(r.out, 0, &je);
    ASSERT(j != NULL);
    ASSERT_EQ(json_integer_value(json_object_get(j, "lookups_exact_total")), 7);
    json_decref(j);
    cli(&r, "--socket", f->path, "stats", "--prom", NULL);
    ASSERT_EQ(r.rc, 0);
    ASSERT_CONTAINS(r.out, "# TYPE tiletune_requests_total counter\n");
    ASSERT_EQ(nlines(r.out), 3);
    fake_stop(f);
}

TEST(lookup_human_and_json) {
    fake_daemon *f = fake_start(FAKE_SERVE, canned);
    cli_result r;
    cli(&r, "--socket", f->path, "lookup", "--seqlen", "1000", "--seqlen-k", "2000", "--hdim", "128",
        "--dtype", "bf16", "--causal", "--gpu", "00aa", NULL);
    ASSERT_EQ(r.rc, 0);
    pthread_mutex_lock(&f->lock);
    ASSERT_STREQ(f->last, "LOOKUP dtype=bf16 hdim=128 causal=1 seqlen_q=1000 seqlen_k=2000 gpu=00aa");
    pthread_mutex_unlock(&f->lock);
    ASSERT_CONTAINS(r.out, "match      nearest\n");
    ASSERT_CONTAINS(r.out, "tuned for  seqlen_q=1024 seqlen_k=2048\n");
    ASSERT_CONTAINS(r.out, "block_m=64 block_n=32");
    ASSERT_CONTAINS(r.out, "tflops     301.25\n");

    cli(&r, "--socket", f->path, "lookup", "--seqlen=9", "--hdim=256", "--dtype=fp16", "--json", NULL);
    ASSERT_EQ(r.rc, 0);
    json_error_t je;
    json_t *j = json_loads(r.out, 0, &je);
    ASSERT(j != NULL);
    ASSERT_STREQ(json_string_value(json_object_get(j, "match")), "default");
    ASSERT(json_is_null(json_object_get(j, "tflops")));
    json_t *cfg = json_object_get(j, "config");
    ASSERT_EQ(json_integer_value(json_object_get(cfg, "block_m")), 64);
    ASSERT_STREQ(json_string_value(json_object_get(cfg, "layout")), "pad");
    ASSERT_STREQ(json_string_value(json_object_get(j, "config_text")), CFG);
    ASSERT_EQ(json_integer_value(json_object_get(j, "seqlen_q")), 9);
    json_decref(j);
    fake_stop(f);
}

TEST(inference_keys_and_grid) {
    fake_daemon *f = fake_start(FAKE_SERVE, canned);
    cli_result r;
    /* refused (gpu=dead), so the TUNE line is the last one sent */
    cli(&r, "--socket", f->path, "tune", "--inference-grid", "--mode", "fast", "--gpu", "dead", NULL);
    ASSERT_EQ(r.rc, 1);
    pthread_mutex_lock(&f->lock);
    ASSERT_STREQ(f->last, "TUNE grid=inference mode=fast gpu=dead");
    pthread_mutex_unlock(&f->lock);
    cli(&r, "--socket", f->path, "tune", "--seqlen", "1,8", "--seqlen-k", "32768", "--hdim", "128", "--dtype",
        "fp16", "--causal=bottom-right", "--group", "1,4,8", "--gpu", "dead", NULL);
    ASSERT_EQ(r.rc, 1);
    pthread_mutex_lock(&f->lock);
    ASSERT_STREQ(f->last, "TUNE dtype=fp16 hdim=128 causal=2 seqlen=1,8 gpu=dead seqlen_k=32768 group=1,4,8");
    pthread_mutex_unlock(&f->lock);
    cli(&r, "--socket", f->path, "tune", "--seqlen", "8", "--hdim", "128", "--dtype", "fp16", "--causal=0,2",
        "--gpu", "dead", NULL);
    pthread_mutex_lock(&f->lock);
    ASSERT_STREQ(f->last, "TUNE dtype=fp16 hdim=128 causal=0,2 seqlen=8 gpu=dead");
    pthread_mutex_unlock(&f->lock);
    cli(&r, "--socket", f->path, "lookup", "--seqlen", "8", "--seqlen-k", "32768", "--hdim", "128", "--dtype",
        "bf16", "--causal=bottom-right", "--group", "8", NULL);
    ASSERT_EQ(r.rc, 0);
    pthread_mutex_lock(&f->lock);
    ASSERT_STREQ(f->last, "LOOKUP dtype=bf16 hdim=128 causal=2 seqlen_q=8 seqlen_k=32768 group=8");
    pthread_mutex_unlock(&f->lock);
    const char *bad[][12] = {
        {"tune", "--inference-grid", "--seqlen", "8", NULL},
        {"tune", "--inference-grid", "--default-grid", NULL},
        {"tune", "--seqlen", "8", "--hdim", "128", "--dtype", "fp16", "--causal=3", NULL},
        {"tune", "--seqlen", "8", "--hdim", "128", "--dtype", "fp16", "--group", "0", NULL},
        {"tune", "--seqlen", "8", "--hdim", "128", "--dtype", "fp16", "--seqlen-k", "0", NULL},
        {"lookup", "--seqlen", "8", "--hdim", "128", "--dtype", "fp16", "--group", "300", NULL},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *const *a = bad[i];
        cli(&r, "--socket", f->path, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11],
            NULL);
        if (r.rc != 2) TT_FAIL_AT("case %zu: rc %d (%s)", i, r.rc, r.err);
    }
    fake_stop(f);
}

TEST(tune_jobs_cancel_forget) {
    fake_daemon *f = fake_start(FAKE_SERVE, canned);
    cli_result r;
    cli(&r, "--socket", f->path, "tune", "--seqlen", "512,1024", "--hdim", "64,128", "--dtype", "fp16",
        "--causal", "both", "--mode", "fast", NULL);
    ASSERT_EQ(r.rc, 0);
    ASSERT_CONTAINS(r.out, "job 17 queued: 8 keys\n");
    ASSERT_CONTAINS(r.out, "tuning is waiting: no-gpu");
    cli(&r, "--socket", f->path, "tune", "--seqlen", "512", "--hdim", "64", "--dtype", "fp16", "--causal",
        "no", "--batch", "4", "--heads", "16", NULL);
    ASSERT_EQ(r.rc, 0);
    /* the STATUS that follows is the last request; check TUNE's through the
     * reply having been accepted, and the fields by a refused run below */
    cli(&r, "--socket", f->path, "tune", "--seqlen", "512", "--hdim", "64", "--dtype", "bf16", "--causal",
        "yes", NULL);
    ASSERT_EQ(r.rc, 1);
    pthread_mutex_lock(&f->lock);
    ASSERT_STREQ(f->last, "TUNE dtype=bf16 hdim=64 causal=1 seqlen=512");
    pthread_mutex_unlock(&f->lock);
    ASSERT_STREQ(r.err, "tiletune: the daemon refused: TUNE needs root, the daemon's user or group tiletune "
                        "(permission)\n");

    cli(&r, "--socket", f->path, "jobs", NULL);
    ASSERT_EQ(r.rc, 0);
    ASSERT_EQ(nlines(r.out), 3);
    ASSERT_CONTAINS(r.out, "JOB  STATE    KEYS  DONE  MODE        CREATED");
    ASSERT_CONTAINS(r.out, " 17  queued    120     0  fast");
    cli(&r, "--socket", f->path, "jobs", "--json", NULL);
    json_error_t je;
    json_t *j = json_loads(r.out, 0, &je);
    ASSERT(json_is_array(j));
    ASSERT_EQ(json_array_size(j), 2);
    ASSERT_STREQ(json_string_value(json_object_get(json_array_get(j, 0), "state")), "running");
    ASSERT_EQ(json_integer_value(json_object_get(json_array_get(j, 1), "keys")), 120);
    json_decref(j);
    cli(&r, "--socket", f->path, "jobs", "--all", NULL);
    ASSERT_EQ(r.rc, 0);
    ASSERT_STREQ(r.out, "no jobs\n");

    cli(&r, "--socket", f->path, "cancel", "17", NULL);
    ASSERT_EQ(r.rc, 0);
    ASSERT_STREQ(r.out, "job 17 cancelled\n");
    cli(&r, "--socket", f->path, "cancel", "99", NULL);
    ASSERT_EQ(r.rc, 1);
    ASSERT_CONTAINS(r.err, "no job 99 (notfound)");

    cli(&r, "--socket", f->path, "forget", "--seqlen", "64", "--hdim", "64", "--dtype", "fp16", "--causal",
        NULL);
    ASSERT_EQ(r.rc, 0);
    ASSERT_CONTAINS(r.out, "forgot the tuned config");
    cli(&r, "--socket", f->path, "forget", "--seqlen", "64", "--hdim", "64", "--dtype", "fp16", NULL);
    ASSERT_EQ(r.rc, 0);
    ASSERT_CONTAINS(r.out, "nothing to forget");
    fake_stop(f);
}

/* getopt_long conventions: global options anywhere, short options,
 * "--name=value", abbreviations, options before the command. */
TEST(options_anywhere_and_short) {
    fake_daemon *f = fake_start(FAKE_SERVE, canned);
    cli_result r;
    cli(&r, "ping", "--socket", f->path, NULL);
    ASSERT_EQ(r.rc, 0);
    ASSERT_CONTAINS(r.out, "pong from ");
    cli(&r, "--json", "--socket=", NULL);
    ASSERT_EQ(r.rc, 2);
    cli(&r, "--json", "status", "--socket", f->path, NULL);
    ASSERT_EQ(r.rc, 0);
    json_error_t je;
    json_t *j = json_loads(r.out, 0, &je);
    ASSERT(json_is_object(j));
    json_decref(j);
    cli(&r, "--seqlen", "4096", "lookup", "-d", "128", "-tfp16", "-j", "--sock", f->path, NULL);
    ASSERT_EQ(r.rc, 0);
    pthread_mutex_lock(&f->lock);
    ASSERT_CONTAINS(f->last, "seqlen_q=4096");
    ASSERT_CONTAINS(f->last, "hdim=128");
    pthread_mutex_unlock(&f->lock);
    cli(&r, "lookup", "-s", "4096", "-d", "64", "-t", "fp16", "-c", "--socket", f->path, NULL);
    ASSERT_EQ(r.rc, 0);
    pthread_mutex_lock(&f->lock);
    ASSERT_CONTAINS(f->last, "causal=1");
    pthread_mutex_unlock(&f->lock);
    cli(&r, "lookup", "-s", "4096", "-d", "64", "-t", "fp16", "--causal=bottom-right", "--socket", f->path,
        NULL);
    pthread_mutex_lock(&f->lock);
    ASSERT_CONTAINS(f->last, "causal=2");
    pthread_mutex_unlock(&f->lock);
    fake_stop(f);
}

/* --causal on tune: a flag, a list with =, --causal-both; the old
 * separate word still read. The bf16 request is refused by the fake, so
 * the TUNE line is its last. */
TEST(tune_causal_forms) {
    fake_daemon *f = fake_start(FAKE_SERVE, canned);
    const char *forms[][3] = {{"--causal", NULL, "causal=1 "},
                              {"--causal-both", NULL, "causal=0,1 "},
                              {"--causal=no,yes", NULL, "causal=0,1 "},
                              {"--causal", "both", "causal=0,1 "},
                              {"--causal=bottom-right", NULL, "causal=2 "},
                              {"-c", NULL, "causal=1 "},
                              {"--mode=fast", NULL, "causal=0 "}};
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        cli_result r;
        cli(&r, "tune", "-s", "512", "-d", "64", "-t", "bf16", "--socket", f->path, forms[i][0], forms[i][1],
            NULL);
        ASSERT_EQ(r.rc, 1);
        pthread_mutex_lock(&f->lock);
        if (!strstr(f->last, forms[i][2])) fprintf(stderr, "%s: %s\n", forms[i][0], f->last);
        ASSERT_CONTAINS(f->last, forms[i][2]);
        pthread_mutex_unlock(&f->lock);
    }
    fake_stop(f);
}

/* Nothing stale is nothing to do: exit 0, not a failure. */
TEST(tune_stale_nothing_to_do_exits_0) {
    fake_daemon *f = fake_start(FAKE_SERVE, canned);
    cli_result r;
    cli(&r, "tune", "--stale", "--socket", f->path, NULL);
    ASSERT_EQ(r.rc, 0);
    ASSERT_CONTAINS(r.out, "nothing to re-tune: no stale keys");
    fake_stop(f);
}

/* --offline: the built-in default the library would fall back to, with
 * no daemon at all. */
TEST(lookup_offline) {
    cli_result r;
    cli(&r, "--socket", "/nonexistent/tiletune.sock", "lookup", "-s", "1000", "-d", "128", "-t", "bf16",
        "--offline", "--json", NULL);
    ASSERT_EQ(r.rc, 0);
    json_error_t je;
    json_t *j = json_loads(r.out, 0, &je);
    ASSERT(j != NULL);
    ASSERT_STREQ(json_string_value(json_object_get(j, "match")), "default");
    tt_key k = {.seqlen_q = 1000, .seqlen_k = 1000, .head_dim = 128, .dtype = TT_DTYPE_BF16};
    tt_config cfg;
    char text[TT_CONFIG_TEXT_MAX];
    ASSERT_EQ(tt_config_default(&k, &cfg), 0);
    ASSERT(tt_config_format(&cfg, text, sizeof text) > 0);
    ASSERT_STREQ(json_string_value(json_object_get(j, "config_text")), text);
    json_decref(j);
}

/* The manual page and the completion come from the option tables. */
TEST(man_page_and_completion) {
    cli_result r;
    cli(&r, "--help-man", NULL);
    ASSERT_EQ(r.rc, 0);
    ASSERT_CONTAINS(r.out, ".TH TILETUNE 1");
    const char *cmds[] = {"ping", "status", "stats",  "lookup", "tune",
                          "jobs", "watch",  "cancel", "forget", "export"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char ss[64];
        snprintf(ss, sizeof ss, ".SS \"%s", cmds[i]);
        ASSERT_CONTAINS(r.out, ss);
    }
    ASSERT_CONTAINS(r.out, "\\-s, \\-\\-seqlen N");
    ASSERT_CONTAINS(r.out, "\\-\\-causal[=KIND]");
    cli(&r, "--completion", "bash", NULL);
    ASSERT_EQ(r.rc, 0);
    ASSERT_CONTAINS(r.out, "complete -F _tiletune tiletune");
    ASSERT_CONTAINS(r.out, "lookup) opts='--seqlen --seqlen-k --hdim");
    /* the script parses, and completes a command's options */
    char path[] = "/tmp/ttcli-comp-XXXXXX";
    int fd = mkstemp(path);
    ASSERT(fd >= 0);
    ASSERT_EQ(write(fd, r.out, strlen(r.out)), (ssize_t)strlen(r.out));
    close(fd);
    char cmd[512];
    snprintf(
        cmd, sizeof cmd,
        "bash -c 'source %s; COMP_WORDS=(tiletune lookup --seq); COMP_CWORD=2; _tiletune; echo \"${COMPREPLY[*]}\"'",
        path);
    FILE *p = popen(cmd, "r");
    char got[256] = "";
    ASSERT(p != NULL);
    if (!fgets(got, sizeof got, p)) got[0] = '\0';
    ASSERT_EQ(pclose(p), 0);
    unlink(path);
    ASSERT_STREQ(got, "--seqlen --seqlen-k\n");
}

TT_TEST_MAIN()
