/* The CLI and libtiletune against the real tiletuned on a temporary socket
 * and database (label `integration`): ping, lookup (human, JSON, through
 * the library), tuning refused to an unprivileged user. */
#include <jansson.h>
#include <signal.h>
#include <sys/stat.h>

#include "cli_run.h"
#include "client/conn.h"
#include "fake_daemon.h"
#include "tuner/store/store.h"
#include "tiletune.h"
#include "tt_test.h"

#define GPU "00c0ffee"
#define REV "0000beef"

typedef struct daemon_run {
    char dir[64], sock[128], db[128];
    pid_t pid;
} daemon_run;

/* A winner for (fp16, 128, non-causal, 2048) of a GPU/revision named in
 * the key, so lookups that name them see exact and nearest answers. */
static void seed(const char *db) {
    tt_store *s;
    char err[256];
    if (tt_store_open(db, &s, err, sizeof err) < 0) TT_FAIL_AT("store: %s", err);
    tt_gpu_info g;
    memset(&g, 0, sizeof g);
    strcpy(g.fingerprint, GPU);
    strcpy(g.name, "test GPU");
    g.cc_major = 9;
    ASSERT_OK(tt_store_put_gpu(s, &g));
    ASSERT_OK(tt_store_put_rev(s, REV, NULL));
    tt_record r;
    tt_record_init(&r);
    r.key.dtype = TT_DTYPE_FP16;
    r.key.head_dim = 128;
    r.key.seqlen_q = r.key.seqlen_k = 2048;
    strcpy(r.key.gpu, GPU);
    strcpy(r.key.rev, REV);
    ASSERT_OK(tt_config_parse("family=mma,block_m=64,block_n=128,warps=8,stages=3,layout=pad,q_in_regs=1",
                              &r.config));
    r.batch = 8;
    r.heads = 16;
    r.time_ms = 0.5;
    r.reps = 20;
    r.tflops = 412.5;
    r.status = TT_MEAS_OK;
    r.measured_at = 1700000000;
    strcpy(r.node, "test");
    ASSERT_OK(tt_store_put_best(s, &r));
    tt_store_close(s);
}

static void start_daemon(daemon_run *d) {
    fake_tmpdir(d->dir, sizeof d->dir);
    chmod(d->dir, 0755); /* the unprivileged test user must reach the socket */
    snprintf(d->sock, sizeof d->sock, "%s/tt.sock", d->dir);
    snprintf(d->db, sizeof d->db, "%s/tt.db", d->dir);
    seed(d->db);
    fflush(NULL);
    d->pid = fork();
    if (d->pid == 0) {
        umask(0); /* socket file 0777: access is the daemon's SO_PEERCRED check */
        int null = open("/dev/null", O_WRONLY);
        dup2(null, 2);
        execl(TT_DAEMON_PATH, "tiletuned", "--socket", d->sock, "--db", d->db, "--log-level", "error",
              (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 500; i++) { /* up to 5 s for the socket to answer */
        tt__conn *c;
        if (tt__conn_open(d->sock, tt__deadline_after_ms(100), &c, NULL, 0) == 0) {
            tt__conn_close(c);
            return;
        }
        int st;
        if (waitpid(d->pid, &st, WNOHANG) == d->pid) TT_FAIL_AT("tiletuned exited at start (status %d)", st);
        sleep_ms(10);
    }
    TT_FAIL_AT("tiletuned did not listen at %s", d->sock);
}

static void stop_daemon(daemon_run *d) {
    kill(d->pid, SIGTERM);
    int st;
    waitpid(d->pid, &st, 0);
    char path[200];
    const char *files[] = {"tt.db", "tt.db-wal", "tt.db-shm", "tt.sock"};
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        snprintf(path, sizeof path, "%s/%s", d->dir, files[i]);
        unlink(path);
    }
    rmdir(d->dir);
}

TEST(cli_ping_and_lookup) {
    daemon_run d;
    start_daemon(&d);
    cli_result r;
    cli(&r, "--socket", d.sock, "ping", NULL);
    ASSERT_EQ(r.rc, 0);
    ASSERT_CONTAINS(r.out, "pong from");

    cli(&r, "--socket", d.sock, "lookup", "--seqlen", "2048", "--hdim", "128", "--dtype", "fp16", "--gpu",
        GPU, "--rev", REV, "--json", NULL);
    ASSERT_EQ(r.rc, 0);
    json_error_t je;
    json_t *j = json_loads(r.out, 0, &je);
    ASSERT(j != NULL);
    ASSERT_STREQ(json_string_value(json_object_get(j, "match")), "exact");
    ASSERT(json_number_value(json_object_get(j, "tflops")) == 412.5);
    ASSERT_EQ(json_integer_value(json_object_get(json_object_get(j, "config"), "block_n")), 128);
    json_decref(j);

    cli(&r, "--socket", d.sock, "lookup", "--seqlen", "3000", "--hdim", "128", "--dtype", "fp16", "--gpu",
        GPU, "--rev", REV, NULL);
    ASSERT_EQ(r.rc, 0);
    ASSERT_CONTAINS(r.out, "match      nearest\n");
    ASSERT_CONTAINS(r.out, "tuned for  seqlen_q=2048 seqlen_k=2048\n");

    /* nothing tuned for the daemon's own GPU: the default */
    cli(&r, "--socket", d.sock, "lookup", "--seqlen", "100", "--hdim", "64", "--dtype", "bf16", "--json",
        NULL);
    ASSERT_EQ(r.rc, 0);
    j = json_loads(r.out, 0, &je);
    ASSERT_STREQ(json_string_value(json_object_get(j, "match")), "default");
    json_decref(j);

    /* the daemon's own checks, seen through the CLI: exit 1, one line */
    cli(&r, "--socket", d.sock, "cancel", "12345", NULL);
    ASSERT_EQ(r.rc, 1);
    ASSERT_CONTAINS(r.err, "(notfound)");
    ASSERT_EQ(nlines(r.err), 1);

    cli(&r, "--socket", d.sock, "status", "--json", NULL);
    ASSERT_EQ(r.rc, 0);
    j = json_loads(r.out, 0, &je);
    ASSERT(j != NULL);
    ASSERT_STREQ(json_string_value(json_object_get(j, "version")), TT_VERSION_STRING);
    json_decref(j);
    stop_daemon(&d);
}

TEST(library_lookups) {
    daemon_run d;
    start_daemon(&d);
    tt_client *c;
    ASSERT_OK(tt_client_open(d.sock, 1000, &c));
    tt_key k;
    memset(&k, 0, sizeof k);
    k.dtype = TT_DTYPE_FP16;
    k.head_dim = 128;
    k.seqlen_q = k.seqlen_k = 2048;
    strcpy(k.gpu, GPU);
    strcpy(k.rev, REV);
    tt_lookup_result res;
    ASSERT_OK(tt_lookup(c, &k, &res));
    ASSERT_EQ(res.match, TT_MATCH_EXACT);
    ASSERT_EQ(res.config.block_n, 128);
    ASSERT(res.tflops == 412.5);
    k.seqlen_q = k.seqlen_k = 1500;
    ASSERT_OK(tt_lookup(c, &k, &res));
    ASSERT_EQ(res.match, TT_MATCH_NEAREST);
    ASSERT_EQ(res.seqlen_q, 2048);
    k.head_dim = 64;
    ASSERT_OK(tt_lookup(c, &k, &res));
    ASSERT_EQ(res.match, TT_MATCH_DEFAULT);

    /* the daemon goes away: cached answers stay, new keys fall back */
    stop_daemon(&d);
    k.head_dim = 128;
    k.seqlen_q = k.seqlen_k = 2048;
    ASSERT_OK(tt_lookup(c, &k, &res));
    ASSERT_EQ(res.match, TT_MATCH_EXACT);
    k.seqlen_q = k.seqlen_k = 999;
    ASSERT_EQ(tt_lookup(c, &k, &res), TT_FALLBACK);
    ASSERT_EQ(res.match, TT_MATCH_DEFAULT);
    tt_client_close(c);
}

TEST(tune_refused_to_unprivileged_user) {
    if (geteuid() != 0) TT_SKIP("needs root to run the CLI as another uid (setpriv)");
    if (access("/usr/bin/setpriv", X_OK) != 0) TT_SKIP("setpriv is not installed");
    daemon_run d;
    start_daemon(&d);
    cli_result r;
    /* nobody may look up ... */
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "/usr/bin/setpriv --reuid=65534 --regid=65534 --clear-groups %s --socket %s lookup --seqlen 64 "
             "--hdim 64 --dtype fp16 >/dev/null",
             TT_CLI_PATH, d.sock);
    ASSERT_EQ(system(cmd), 0);
    /* ... but not tune: exit 1 and the daemon's reason */
    snprintf(cmd, sizeof cmd,
             "/usr/bin/setpriv --reuid=65534 --regid=65534 --clear-groups %s --socket %s tune --seqlen 64 "
             "--hdim 64 --dtype fp16 --causal no 2>%s/err",
             TT_CLI_PATH, d.sock, d.dir);
    int st = system(cmd);
    ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 1);
    char path[200], err[512] = "";
    snprintf(path, sizeof path, "%s/err", d.dir);
    FILE *f = fopen(path, "r");
    ASSERT(f != NULL);
    size_t n = fread(err, 1, sizeof err - 1, f);
    err[n] = '\0';
    fclose(f);
    unlink(path);
    ASSERT_CONTAINS(err, "(permission)");
    ASSERT_EQ(nlines(err), 1);
    /* root may */
    cli(&r, "--socket", d.sock, "tune", "--seqlen", "64", "--hdim", "64", "--dtype", "fp16", "--causal", "no",
        NULL);
    ASSERT_EQ(r.rc, 0);
    ASSERT_CONTAINS(r.out, "queued");
    stop_daemon(&d);
}

/* The seeded GPU's fingerprint does not match its description, so its
 * record fails the table checks: export fails whole, or with --skip-bad
 * leaves it out and says so; the report leaves it out too. */
TEST(export_skip_bad_and_report) {
    daemon_run d;
    start_daemon(&d);
    char out[200], page[200];
    snprintf(out, sizeof out, "%s/table.jsonl", d.dir);
    snprintf(page, sizeof page, "%s/report.html", d.dir);
    cli_result r;
    cli(&r, "--socket", d.sock, "export", "--output", out, NULL);
    ASSERT_EQ(r.rc, 1);
    ASSERT_CONTAINS(r.err, "the daemon exported a bad record 1");
    ASSERT_CONTAINS(r.err, "--skip-bad");
    ASSERT(access(out, F_OK) < 0);
    cli(&r, "export", "--skip-bad", "--output", out, "--socket", d.sock, NULL);
    ASSERT_EQ(r.rc, 0);
    ASSERT_CONTAINS(r.err, "skipped the daemon's bad record 1");
    ASSERT_CONTAINS(r.err, "1 bad records skipped");
    ASSERT_CONTAINS(r.err, "exported 0 records to");
    cli(&r, "--socket", d.sock, "report", "-o", page, NULL);
    ASSERT_EQ(r.rc, 0);
    ASSERT_CONTAINS(r.err, "left out of the report");
    ASSERT(access(page, R_OK) == 0);
    unlink(out);
    unlink(page);
    stop_daemon(&d);
}

TT_TEST_MAIN()
