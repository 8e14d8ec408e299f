/* Two real daemons (two sockets, two databases) and the real CLI: export,
 * import, diff, dry runs, strict imports, bad files, SQLite snapshots and
 * sharded tune jobs, with the databases compared by content. */
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>

#include "../client/cli_run.h"
#include "../client/fake_daemon.h"
#include "fleet_util.h"
#include "harness.h"
#include "common/proto.h"

#define NKEYS 6

/* Seeds winners of GPU model 0 and 1 into a database before its daemon
 * starts, through the store API. */
static void seed(const char *db, tt_fleet_rec *out) {
    tt_store *s;
    char err[256];
    ASSERT_OK(tt_store_open(db, &s, err, sizeof err));
    for (int i = 0; i < NKEYS; i++) {
        tt_fleet_rec f = fu_rec(i % 2, 512 << i, i % 3 ? 64 : 32, fu_ms(512 << i, 300.0 - 20 * i), "node-a");
        ASSERT_OK(tt_store_put_gpu(s, &f.gpu));
        ASSERT_OK(tt_store_put_rev(s, f.rec.key.rev, "fleet test"));
        ASSERT_OK(tt_store_put_best(s, &f.rec));
        if (out) out[i] = f;
    }
    tt_store_close(s);
}

/* "LOOKUP gpu=.. rev=.. ..." for a record's key. */
static void lookup_line(const tt_fleet_rec *f, char *buf, size_t len) {
    char key[256];
    ASSERT(tt__key_format(&f->rec.key, key, sizeof key) > 0);
    snprintf(buf, len, "LOOKUP %s", key);
}

/* The record lines of a table file (header and end line dropped), sorted. */
static char *record_lines(const char *path) {
    FILE *f = fopen(path, "r");
    ASSERT(f);
    char *lines[256], buf[TT_FLEET_LINE_MAX + 2];
    int n = 0;
    while (fgets(buf, sizeof buf, f) && n < 256)
        if (strncmp(buf, "{\"kind\"", 7) == 0) lines[n++] = strdup(buf);
    fclose(f);
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (strcmp(lines[i], lines[j]) > 0) {
                char *t = lines[i];
                lines[i] = lines[j];
                lines[j] = t;
            }
    char *all = calloc(1, (size_t)n * sizeof buf + 1);
    for (int i = 0; i < n; i++) {
        strcat(all, lines[i]);
        free(lines[i]);
    }
    return all;
}

static void start(td *t) {
    td_init(t);
    td_start(t, NULL);
}

TEST(export_from_one_daemon_import_into_another_lookups_agree) {
    td a, b;
    td_init(&a);
    td_init(&b);
    tt_fleet_rec recs[NKEYS];
    seed(a.db, recs);
    td_start(&a, NULL);
    td_start(&b, NULL);
    char f1[400], f2[400];
    snprintf(f1, sizeof f1, "%s/a.json", a.dir);
    snprintf(f2, sizeof f2, "%s/b.json", b.dir);
    cli_result r;
    cli(&r, "--socket", a.sock, "export", "-o", f1, NULL);
    if (r.rc) TT_FAIL_AT("export: %s", r.err);
    cli(&r, "--socket", b.sock, "import", f1, NULL);
    if (r.rc) TT_FAIL_AT("import: %s %s", r.out, r.err);
    ASSERT_CONTAINS(r.out, "added 6, replaced 0, kept 0, rejected 0");
    /* both GPU models are foreign to a daemon without a GPU: nothing counts
     * as local, and every record is of another revision than the built-in */
    int fa = td_connect_ok(&a), fb = td_connect_ok(&b);
    for (int i = 0; i < NKEYS; i++) {
        char q[512], ra[512];
        lookup_line(&recs[i], q, sizeof q);
        snprintf(ra, sizeof ra, "%s", td_req(fa, q));
        ASSERT_CONTAINS(ra, "OK match=exact");
        ASSERT_STREQ(td_req(fb, q), ra);
    }
    /* a key of the same group but an untuned seqlen: both answer nearest */
    char q[512], ra[512];
    tt_fleet_rec other = recs[0];
    other.rec.key.seqlen_q = other.rec.key.seqlen_k = 3000;
    lookup_line(&other, q, sizeof q);
    snprintf(ra, sizeof ra, "%s", td_req(fa, q));
    ASSERT_CONTAINS(ra, "OK match=nearest");
    ASSERT_STREQ(td_req(fb, q), ra);
    /* round trip: B's export holds the very records A's did */
    cli(&r, "--socket", b.sock, "export", "-o", f2, NULL);
    ASSERT_EQ(r.rc, 0);
    char *x = record_lines(f1), *y = record_lines(f2);
    ASSERT(strlen(x) > 100);
    ASSERT_STREQ(x, y);
    free(x);
    free(y);
    /* diff: the two daemons' tables match key for key */
    cli(&r, "--socket", b.sock, "diff", f1, "@live", NULL);
    ASSERT_EQ(r.rc, 0);
    ASSERT_CONTAINS(r.out, "6 keys: 6 same config, 0 differ, 0 only in A, 0 only in B");
    close(fa);
    close(fb);
    ASSERT_EQ(td_stop(&a, SIGTERM), 0);
    ASSERT_EQ(td_stop(&b, SIGTERM), 0);
}

TEST(import_twice_dry_run_and_diff_of_a_changed_table) {
    td a;
    td_init(&a);
    seed(a.db, NULL);
    td_start(&a, NULL);
    char f[400], g[400];
    snprintf(f, sizeof f, "%s/t.json", a.dir);
    snprintf(g, sizeof g, "%s/better.json", a.dir);
    cli_result r;
    cli(&r, "--socket", a.sock, "export", "-o", f, NULL);
    ASSERT_EQ(r.rc, 0);
    char *before = fu_db_content(a.db, 0);
    cli(&r, "--socket", a.sock, "import", f, NULL);
    ASSERT_EQ(r.rc, 0);
    ASSERT_CONTAINS(r.out, "added 0, replaced 0, kept 6, rejected 0");
    cli(&r, "--socket", a.sock, "import", f, NULL);
    ASSERT_EQ(r.rc, 0);
    char *after = fu_db_content(a.db, 0);
    ASSERT_STREQ(before, after);
    free(after);

    /* a table with one key 3x faster on another config */
    tt_fleet_rec better[2] = {fu_rec(0, 512, 128, fu_ms(512, 900.0), "node-b"),
                              fu_rec(0, 777, 64, 1.0, "node-b")};
    better[0].rec.config.block_m = 64;
    fu_write_table(g, better, 2, NULL);
    cli(&r, "--socket", a.sock, "import", "--dry-run", "--json", g, NULL);
    if (r.rc) TT_FAIL_AT("%s", r.err);
    ASSERT_CONTAINS(r.out, "\"added\": 1");
    ASSERT_CONTAINS(r.out, "\"replaced\": 1");
    ASSERT_CONTAINS(r.out, "\"committed\": false");
    after = fu_db_content(a.db, 0);
    ASSERT_STREQ(before, after);
    free(after);
    cli(&r, "--socket", a.sock, "diff", f, g, NULL);
    ASSERT_EQ(r.rc, 1); /* they differ, as diff(1) says */
    ASSERT_CONTAINS(r.out, "differs");
    ASSERT_CONTAINS(r.out, "mma,128,32,4,1,swizzle,0 -> mma,64,128,4,1,swizzle,0"); /* both configs */
    ASSERT_CONTAINS(r.out, "+200.0%");
    ASSERT_CONTAINS(r.out, "7 keys: 0 same config, 1 differ, 5 only in A, 1 only in B");
    cli(&r, "--socket", a.sock, "import", "--policy", "fill", g, NULL);
    ASSERT_CONTAINS(r.out, "added 1, replaced 0, kept 1");
    cli(&r, "--socket", a.sock, "import", g, NULL);
    ASSERT_CONTAINS(r.out, "added 0, replaced 1, kept 1");
    /* the daemon serves the imported winner at once */
    int fd = td_connect_ok(&a);
    char q[512];
    lookup_line(&better[0], q, sizeof q);
    ASSERT_CONTAINS(td_req(fd, q), "block_m=64,block_n=128");
    close(fd);
    free(before);
    ASSERT_EQ(td_stop(&a, SIGTERM), 0);
}

/* Writes `text` (len bytes) to dir/name and returns the path (static). */
static const char *put_file(const char *dir, const char *name, const char *text, size_t len) {
    static char path[400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    ASSERT(f);
    ASSERT_EQ(fwrite(text, 1, len, f), len);
    fclose(f);
    return path;
}

/* A valid one-record table with `from` replaced by `to` in the record,
 * the checksum left out (as a hand-made table would). */
static const char *edited_table(const char *dir, const char *name, const char *from, const char *to) {
    tt_fleet_rec r = fu_rec(0, 333, 64, 0.5, "n");
    char line[TT_FLEET_LINE_MAX + 1], text[3 * TT_FLEET_LINE_MAX];
    ASSERT(tt_fleet_rec_format(&r, line, sizeof line) > 0);
    char *at = strstr(line, from);
    if (!at) TT_FAIL_AT("'%s' not in %s", from, line);
    int n = snprintf(text, sizeof text,
                     "{\"format\":\"tiletune-table\",\"version\":1,\"exported_at\":1}\n%.*s%s%s\n"
                     "{\"end\":\"tiletune-table\",\"records\":1}\n",
                     (int)(at - line), line, to, at + strlen(from));
    return put_file(dir, name, text, (size_t)n);
}

TEST(bad_files_are_refused_with_their_reason_and_change_nothing) {
    td a;
    td_init(&a);
    seed(a.db, NULL);
    td_start(&a, NULL);
    char good[400];
    snprintf(good, sizeof good, "%s/good.json", a.dir);
    cli_result r;
    tt_fleet_rec two[2] = {fu_rec(0, 4444, 64, fu_ms(4444, 400), "n"),
                           fu_rec(1, 5555, 64, fu_ms(5555, 400), "n")};
    fu_write_table(good, two, 2, NULL);
    FILE *gf = fopen(good, "r");
    static char whole[16384];
    size_t wlen = fread(whole, 1, sizeof whole, gf);
    fclose(gf);
    char *before = fu_db_content(a.db, 0);

    struct {
        const char *name, *path, *reason;
    } cases[24];
    int n = 0;
#define CASE(nm, p, why) (cases[n].name = nm, cases[n].path = strdup(p), cases[n].reason = why, n++)
    CASE("empty", put_file(a.dir, "empty", "", 0), "empty file");
    CASE("not json", put_file(a.dir, "text", "hello\nworld\n", 12), "not a tiletune table");
    CASE("truncated", put_file(a.dir, "trunc", whole, wlen - 60), "truncated");
    char *corrupt = malloc(wlen);
    memcpy(corrupt, whole, wlen);
    char *brace = strstr(strchr(corrupt, '\n') + 1, "\"key\":{");
    brace[6] = '[';
    CASE("corrupt json", put_file(a.dir, "corrupt", corrupt, wlen), "checksum");
    memcpy(corrupt, whole, wlen);
    memcpy(strstr(corrupt, "\"version\":1"), "\"version\":9", 11);
    CASE("future version", put_file(a.dir, "future", corrupt, wlen), "format version 9 is newer");
    free(corrupt);
    CASE("wrong type", edited_table(a.dir, "type", "\"reps\":50", "\"reps\":\"50\""),
         "'reps' must be a whole number");
    CASE("unknown field", edited_table(a.dir, "field", "\"reps\":50", "\"reps\":50,\"speedup\":2"),
         "unknown field 'speedup'");
    CASE("seqlen", edited_table(a.dir, "seqlen", "\"seqlen_q\":333", "\"seqlen_q\":0"),
         "'key.seqlen_q' 0 is out of range");
    CASE("hdim", edited_table(a.dir, "hdim", "\"hdim\":128", "\"hdim\":48"), "unsupported head_dim 48");
    CASE("dtype", edited_table(a.dir, "dtype", "\"fp16\"", "\"fp8\""), "unsupported dtype 'fp8'");
    /* valid knobs, but not a shape the kernel takes at this head_dim:
     * only the daemon knows the kernel's rule */
    CASE("config for hdim", edited_table(a.dir, "cfg", "warps=4", "warps=1"),
         "not valid at head_dim 128 on Fleet GPU 0");
    CASE("gpu model", edited_table(a.dir, "gpu", "\"sm_count\":132", "\"sm_count\":99"),
         "not the fingerprint of the GPU described");
    CASE("kernel revision", edited_table(a.dir, "rev", "\"rev\":\"abc123\"", "\"rev\":\"\""),
         "'key.rev' must be");
    /* 100 MB of junk: refused at its first line, never sent */
    char junkp[400];
    snprintf(junkp, sizeof junkp, "%s/junk", a.dir);
    int jfd = open(junkp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    char block[1 << 16];
    for (size_t i = 0; i < sizeof block; i++) block[i] = (char)(' ' + (i * 7919) % 90);
    for (int i = 0; i < 1600; i++) ASSERT_EQ(write(jfd, block, sizeof block), (ssize_t)sizeof block);
    close(jfd);
    CASE("100 MB of junk", junkp, "longer than 4096 bytes");

    for (int i = 0; i < n; i++) {
        long long t0 = td_now_ms();
        cli(&r, "--socket", a.sock, "import", cases[i].path, NULL);
        if (r.rc != 1 || !strstr(r.err, cases[i].reason))
            TT_FAIL_AT("%s: rc %d, stdout '%s', stderr '%s' (want '%s')", cases[i].name, r.rc, r.out, r.err,
                       cases[i].reason);
        ASSERT(td_now_ms() - t0 < 5000);
        char *after = fu_db_content(a.db, 0);
        if (strcmp(before, after) != 0) TT_FAIL_AT("%s changed the database", cases[i].name);
        free(after);
        free((char *)cases[i].path);
    }
    /* strict: one bad record among good ones and nothing is imported */
    char mixed[2 * TT_FLEET_LINE_MAX + 64];
    snprintf(mixed, sizeof mixed, "%.*s", (int)wlen, whole);
    memcpy(strstr(mixed, "\"hdim\":128"), "\"hdim\":100", 10);
    *strstr(mixed, ",\"fnv1a64\"") = '}';
    *(strstr(mixed, "}\"") ? strstr(mixed, "}\"") : mixed) = mixed[0];
    char *endl = strstr(mixed, "{\"end\"");
    snprintf(endl, 64, "{\"end\":\"tiletune-table\",\"records\":2}\n");
    const char *mp = put_file(a.dir, "mixed", mixed, strlen(mixed));
    cli(&r, "--socket", a.sock, "import", "--strict", mp, NULL);
    ASSERT_EQ(r.rc, 1);
    ASSERT_CONTAINS(r.err, "record 1: unsupported head_dim 100");
    ASSERT_CONTAINS(r.err, "nothing imported");
    char *after = fu_db_content(a.db, 0);
    ASSERT_STREQ(before, after);
    free(after);
    /* without --strict the good record goes in and the bad one is named */
    cli(&r, "--socket", a.sock, "import", mp, NULL);
    ASSERT_EQ(r.rc, 1);
    ASSERT_CONTAINS(r.out, "added 1, replaced 0, kept 0, rejected 1");
    ASSERT_CONTAINS(r.err, "1 records rejected; the others were imported");
    free(before);
    ASSERT_EQ(td_stop(&a, SIGTERM), 0);
}

TEST(wire_import_needs_admin_framing_and_valid_fields) {
    td a;
    start(&a);
    int fd = td_connect_ok(&a);
    /* no lines=: the body cannot be framed, the connection closes */
    ASSERT_CONTAINS(td_req(fd, "IMPORT policy=faster"), "ERR range");
    ASSERT(td_wait_eof(fd, 2000));
    close(fd);
    fd = td_connect_ok(&a);
    /* a bad field still swallows its body: the next request is answered */
    td_sendstr(fd, "IMPORT policy=slowest lines=2\n{}\n{}\nPING\n");
    char line[512];
    ASSERT(td_read_line(fd, line, sizeof line, 2000) > 0);
    ASSERT_CONTAINS(line, "ERR unsupported policy");
    ASSERT(td_read_line(fd, line, sizeof line, 2000) > 0);
    ASSERT_STREQ(line, "OK pong");
    /* a body of bad lines: each refused with its number, nothing merged */
    td_sendstr(fd, "IMPORT lines=2\nnot json\n{\"kind\":\"best\"}\n");
    ASSERT(td_read_line(fd, line, sizeof line, 2000) > 0);
    ASSERT_CONTAINS(line, "rejected=2");
    ASSERT_CONTAINS(line, "lines=2");
    ASSERT(td_read_line(fd, line, sizeof line, 2000) > 0);
    ASSERT_CONTAINS(line, "record=1 not valid JSON");
    ASSERT(td_read_line(fd, line, sizeof line, 2000) > 0);
    ASSERT_CONTAINS(line, "record=2 missing field 'key'");
    ASSERT_CONTAINS(td_req(fd, "EXPORT format=yaml"), "ERR unsupported");
    ASSERT_CONTAINS(td_req(fd, "EXPORT"), "OK format=json records=0 lines=0");
    close(fd);
    ASSERT_EQ(td_stop(&a, SIGTERM), 0);
}

/* IMPORT changes the table: an unprivileged local user is refused (exit 1,
 * the daemon's reason) and nothing is merged; root may. */
TEST(import_is_refused_to_an_unprivileged_user) {
    if (geteuid() != 0) TT_SKIP("needs root to run the CLI as another uid (setpriv)");
    if (access("/usr/bin/setpriv", X_OK) != 0) TT_SKIP("setpriv is not installed");
    td a, b;
    td_init(&a);
    td_init(&b);
    seed(a.db, NULL);
    td_start(&a, NULL);
    ASSERT_OK(chmod(b.dir, 0755)); /* nobody must reach the socket to be refused by the daemon */
    td_start(&b, NULL);
    ASSERT_OK(chmod(b.sock, 0666)); /* the socket unit's SocketMode does this in production */
    char table[400], cmd[1200];
    snprintf(table, sizeof table, "%s/a.json", b.dir);
    cli_result r;
    cli(&r, "--socket", a.sock, "export", "-o", table, NULL);
    ASSERT_EQ(r.rc, 0);
    ASSERT_OK(chmod(table, 0644));
    snprintf(cmd, sizeof cmd,
             "/usr/bin/setpriv --reuid=65534 --regid=65534 --clear-groups %s --socket %s import %s "
             ">/dev/null 2>%s/err",
             TT_CLI_PATH, b.sock, table, a.dir);
    int st = system(cmd);
    ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 1);
    char path[500], err[512] = "";
    snprintf(path, sizeof path, "%s/err", a.dir);
    FILE *f = fopen(path, "r");
    ASSERT(f != NULL);
    size_t n = fread(err, 1, sizeof err - 1, f);
    err[n] = '\0';
    fclose(f);
    ASSERT_CONTAINS(err, "permission");
    int fd = td_connect_ok(&b);
    ASSERT_CONTAINS(td_req(fd, "EXPORT"), "records=0");
    close(fd);
    cli(&r, "--socket", b.sock, "import", table, NULL);
    ASSERT_EQ(r.rc, 0);
    ASSERT_CONTAINS(r.out, "added 6");
    ASSERT_EQ(td_stop(&a, SIGTERM), 0);
    ASSERT_EQ(td_stop(&b, SIGTERM), 0);
}

TEST(sqlite_snapshot_and_csv_exports) {
    td a;
    td_init(&a);
    seed(a.db, NULL);
    td_start(&a, NULL);
    char snap[400], csv[400];
    snprintf(snap, sizeof snap, "%s/snap.db", a.dir);
    snprintf(csv, sizeof csv, "%s/t.csv", a.dir);
    cli_result r;
    cli(&r, "--socket", a.sock, "export", "--format", "sqlite", "-o", snap, NULL);
    if (r.rc) TT_FAIL_AT("%s", r.err);
    char *x = fu_db_content(a.db, 1), *y = fu_db_content(snap, 1);
    ASSERT_STREQ(x, y);
    free(x);
    free(y);
    /* a shard label alone would pass the node's whole table off as the shard */
    cli(&r, "--socket", a.sock, "export", "--format", "csv", "--shard", "2/4", "-o", csv, NULL);
    ASSERT_EQ(r.rc, 2);
    ASSERT_CONTAINS(r.err, "--shard needs --job N");
    cli(&r, "--socket", a.sock, "export", "--format", "csv", "-o", csv, NULL);
    ASSERT_EQ(r.rc, 0);
    cli(&r, "--socket", a.sock, "export", "--format", "csv", NULL);
    ASSERT_EQ(nlines(r.out), NKEYS + 1); /* to stdout: the same rows */
    FILE *f = fopen(csv, "r");
    char line[4096];
    int rows = 0;
    ASSERT(fgets(line, sizeof line, f));
    ASSERT(strncmp(line, "kind,gpu,rev,dtype,hdim", 23) == 0);
    while (fgets(line, sizeof line, f)) {
        ASSERT_CONTAINS(line, ",\"Fleet GPU ");
        ASSERT_CONTAINS(line, ",mma,"); /* knob names, as the config text has them */
        rows++;
    }
    fclose(f);
    ASSERT_EQ(rows, NKEYS);
    ASSERT_EQ(td_stop(&a, SIGTERM), 0);
}

TEST(tune_shards_split_the_grid) {
    td a;
    start(&a);
    cli_result r;
    int total = 0;
    for (int i = 1; i <= 5; i++) {
        char shard[16];
        snprintf(shard, sizeof shard, "%d/5", i);
        cli(&r, "--socket", a.sock, "tune", "--seqlen", "512,1024,2048,4096", "--hdim", "64,128", "--dtype",
            "fp16,bf16", "--causal", "both", "--shard", shard, NULL);
        if (r.rc) TT_FAIL_AT("%s", r.err);
        int keys = atoi(strstr(r.out, "queued: ") + 8);
        ASSERT(keys == 6 || keys == 7); /* 32 keys over 5 shards */
        total += keys;
    }
    ASSERT_EQ(total, 32);
    cli(&r, "--socket", a.sock, "tune", "--seqlen", "512", "--hdim", "64", "--dtype", "fp16", "--causal",
        "no", "--shard", "2/3", NULL);
    ASSERT_EQ(r.rc, 1);
    ASSERT_CONTAINS(r.err, "empty");
    ASSERT_EQ(td_stop(&a, SIGTERM), 0);
}

/* ---- shards, strict imports over files, the table's identity ------------------- */

/* Starts a daemon whose worker is the stand-in with a fake GPU, reporting
 * TFLOP/s its times give. */
static void start_with_fake_gpu(td *t) {
    setenv("TT_FAKE_WORKER_MODE", "gpu", 1);
    setenv("TT_FAKE_PLAUSIBLE", "1", 1);
    const char *args[] = {"--worker", TT_DAEMON_TEST_DIR "/fake_worker.sh", NULL};
    td_start(t, args);
}

/* The job number of a "job N queued: K keys" line and K. */
static int64_t queued_job(const cli_result *r, int *keys) {
    const char *j = strstr(r->out, "job ");
    if (!j) TT_FAIL_AT("no job in '%s' ('%s')", r->out, r->err);
    if (keys) *keys = atoi(strstr(r->out, "queued: ") + 8);
    return atoll(j + 4);
}

static void wait_job_done(const td *t, int64_t job) {
    char q[64];
    snprintf(q, sizeof q, "JOB job=%lld", (long long)job);
    long long until = td_now_ms() + 20000;
    while (td_now_ms() < until) {
        int fd = td_connect_ok(t);
        int done = strstr(td_req(fd, q), "state=done") != NULL;
        close(fd);
        if (done) return;
        usleep(50000);
    }
    TT_FAIL_AT("job %lld not done in 20 s", (long long)job);
}

static int count_in(const char *text, const char *what) {
    int n = 0;
    for (const char *p = text; (p = strstr(p, what)); p++) n++;
    return n;
}

static char *slurp_file(const char *path) {
    FILE *f = fopen(path, "r");
    ASSERT(f);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

TEST(a_shard_export_holds_the_shards_keys_and_nothing_else) {
    td a, b;
    td_init(&a);
    td_init(&b);
    seed(a.db, NULL); /* the node's old winners: not part of any shard */
    start_with_fake_gpu(&a);
    td_start(&b, NULL);
    cli_result r;
    cli(&r, "--socket", a.sock, "tune", "--seqlen", "256,512,1024", "--hdim", "64,128", "--dtype", "fp16",
        "--causal", "both", "--shard", "2/3", NULL);
    int keys = 0;
    int64_t job = queued_job(&r, &keys);
    ASSERT_EQ(keys, 4); /* 12 keys over 3 shards */
    wait_job_done(&a, job);
    char f[400], jobtext[32];
    snprintf(f, sizeof f, "%s/shard.json", a.dir);
    snprintf(jobtext, sizeof jobtext, "%lld", (long long)job);
    cli(&r, "--socket", a.sock, "export", "--shard", "2/3", "--job", jobtext, "-o", f, NULL);
    if (r.rc) TT_FAIL_AT("export: %s", r.err);
    char *text = slurp_file(f);
    ASSERT_EQ(count_in(text, "{\"kind\":\"best\""), keys);
    ASSERT_EQ(count_in(text, "\"shard\":\"2/3\""), keys + 1); /* each record and the header */
    ASSERT(!strstr(text, "Fleet GPU"));
    /* the stand-in's records are plausible: another node takes them all */
    cli(&r, "--socket", b.sock, "import", "--strict", f, NULL);
    if (r.rc) TT_FAIL_AT("import: %s", r.err);
    ASSERT_CONTAINS(r.out, "added 4, replaced 0, kept 0, rejected 0");
    ASSERT_EQ(td_stop(&a, SIGTERM), 0);
    ASSERT_EQ(td_stop(&b, SIGTERM), 0);
}

TEST(strict_over_several_files_imports_none_when_the_daemon_refuses_one) {
    td a;
    td_init(&a);
    td_start(&a, NULL);
    char f1[400], f2[400];
    snprintf(f1, sizeof f1, "%s/1.json", a.dir);
    snprintf(f2, sizeof f2, "%s/2.json", a.dir);
    tt_fleet_rec one[2] = {fu_rec(0, 1024, 64, fu_ms(1024, 300), "n"),
                           fu_rec(0, 2048, 64, fu_ms(2048, 300), "n")};
    /* a ws record on an sm_80 model: well-formed, plausible, and only
     * the daemon's arch check refuses it */
    tt_fleet_rec two[2] = {fu_rec(0, 4096, 64, fu_ms(4096, 300), "n"),
                           fu_rec(0, 8192, 64, fu_ms(8192, 200), "n")};
    ASSERT_OK(tt__config_default_sm90(&two[1].rec.key, &two[1].rec.config));
    two[1].gpu.cc_major = 8;
    tt_gpu_fingerprint(two[1].gpu.name, 8, 0, two[1].gpu.sm_count, two[1].gpu.mem_bytes,
                       two[1].gpu.fingerprint);
    snprintf(two[1].rec.key.gpu, sizeof two[1].rec.key.gpu, "%s", two[1].gpu.fingerprint);
    fu_write_table(f1, one, 2, "1/2");
    fu_write_table(f2, two, 2, "2/2");
    char *before = fu_db_content(a.db, 0);
    cli_result r;
    cli(&r, "--socket", a.sock, "import", "--strict", f1, f2, NULL);
    ASSERT_EQ(r.rc, 1);
    ASSERT_CONTAINS(r.err, "record 2: config family=ws");
    ASSERT_CONTAINS(r.err, "(sm_80)");
    ASSERT_CONTAINS(r.err, "nothing imported");
    char *after = fu_db_content(a.db, 0);
    ASSERT_STREQ(before, after); /* not even the good first file */
    free(after);
    /* without --strict: each file on its own, the bad record named */
    cli(&r, "--socket", a.sock, "import", f1, f2, NULL);
    ASSERT_EQ(r.rc, 1);
    ASSERT_CONTAINS(r.out, "imported");
    ASSERT_CONTAINS(r.out, "1.json (faster): added 2, replaced 0, kept 0, rejected 0");
    ASSERT_CONTAINS(r.out, "2.json (faster): added 1, replaced 0, kept 0, rejected 1");
    free(before);
    ASSERT_EQ(td_stop(&a, SIGTERM), 0);
}

TEST(status_and_metrics_name_the_table_and_its_stale_keys) {
    td a;
    td_init(&a);
    /* winners of the stand-in's GPU under an older kernel revision */
    char fake[TT_ID_MAX];
    td_fake_gpu(fake);
    tt_store *s;
    char err[256];
    ASSERT_OK(tt_store_open(a.db, &s, err, sizeof err));
    tt_fleet_rec old[2] = {fu_rec(0, 1024, 64, fu_ms(1024, 100), "a"),
                           fu_rec(0, 2048, 64, fu_ms(2048, 100), "a")};
    for (int i = 0; i < 2; i++) {
        tt_fleet_rec *f = &old[i];
        snprintf(f->gpu.name, sizeof f->gpu.name, "Fake GPU");
        f->gpu.sm_count = 132;
        f->gpu.mem_bytes = 1000000000LL;
        snprintf(f->gpu.fingerprint, sizeof f->gpu.fingerprint, "%s", fake);
        snprintf(f->rec.key.gpu, sizeof f->rec.key.gpu, "%s", fake);
        ASSERT_OK(tt_store_put_gpu(s, &f->gpu));
        ASSERT_OK(tt_store_put_rev(s, f->rec.key.rev, "old"));
        ASSERT_OK(tt_store_put_best(s, &f->rec));
    }
    tt_store_close(s);
    setenv("TT_FAKE_WORKER_MODE", "nogpu", 1); /* no GPU to tune with: the revision alone */
    start_with_fake_gpu(&a);
    setenv("TT_FAKE_WORKER_MODE", "gpu", 1);
    int fd = td_connect_ok(&a);
    /* nogpu still reports a revision, not a GPU: ask for the stand-in's */
    char q[512], v[64];
    snprintf(q, sizeof q, "LOOKUP gpu=%s dtype=fp16 hdim=128 seqlen_q=1024", fake);
    long long until = td_now_ms() + 5000;
    while (td_now_ms() < until && !strstr(td_req(fd, "STATUS"), "rev=00c0ffee")) usleep(20000);
    const char *st = td_req(fd, "STATUS");
    ASSERT_CONTAINS(st, "rev=00c0ffee");
    ASSERT_CONTAINS(st, "last_import=0");
    char table0[32];
    td_field(st, "table", table0, sizeof table0);
    ASSERT_EQ(strlen(table0), 16);
    /* a lookup that finds only the stale winner says so */
    ASSERT_CONTAINS(td_req(fd, q), "match=default");
    ASSERT_CONTAINS(td_req(fd, q), " stale=1");
    snprintf(q, sizeof q, "LOOKUP gpu=%s dtype=fp16 hdim=128 seqlen_q=4096", fake);
    ASSERT(!strstr(td_req(fd, q), "stale="));
    cli_result r;
    cli(&r, "--socket", a.sock, "lookup", "--gpu", fake, "--dtype", "fp16", "--hdim", "128", "--seqlen",
        "1024", NULL);
    ASSERT_CONTAINS(r.out, "tuned for another kernel revision only");
    /* the export reports the checksum STATUS shows */
    char f[400];
    snprintf(f, sizeof f, "%s/t.json", a.dir);
    cli(&r, "--socket", a.sock, "export", "--format", "jsonl", "-o", f, NULL);
    if (r.rc) TT_FAIL_AT("export: %s", r.err);
    char want[64];
    snprintf(want, sizeof want, "(table %s)", table0);
    ASSERT_CONTAINS(r.err, want);
    /* an import changes the checksum and stamps the time */
    char g[400];
    snprintf(g, sizeof g, "%s/new.json", a.dir);
    tt_fleet_rec more = fu_rec(1, 4096, 64, fu_ms(4096, 300), "b");
    fu_write_table(g, &more, 1, NULL);
    cli(&r, "--socket", a.sock, "import", g, NULL);
    ASSERT_EQ(r.rc, 0);
    st = td_req(fd, "STATUS");
    ASSERT(strcmp(td_field(st, "table", v, sizeof v), table0) != 0);
    ASSERT(atoll(td_field(st, "last_import", v, sizeof v)) > 1700000000LL);
    close(fd);
    ASSERT_EQ(td_stop(&a, SIGTERM), 0);
}

TEST(diff_matches_keys_across_revisions_and_exits_1_on_differences) {
    char dir[64], fa[300], fb[300];
    fu_tmpdir(dir, sizeof dir);
    snprintf(fa, sizeof fa, "%s/a.json", dir);
    snprintf(fb, sizeof fb, "%s/b.json", dir);
    tt_fleet_rec a[2] = {fu_rec(0, 1024, 64, fu_ms(1024, 300), "n"),
                         fu_rec(0, 2048, 64, fu_ms(2048, 300), "n")};
    tt_fleet_rec b[2] = {a[0], a[1]};
    for (int i = 0; i < 2; i++)
        snprintf(b[i].rec.key.rev, sizeof b[i].rec.key.rev, "def456"); /* an upgrade */
    fu_write_table(fa, a, 2, NULL);
    fu_write_table(fb, b, 2, NULL);
    cli_result r;
    cli(&r, "diff", fa, fb, NULL);
    ASSERT_EQ(r.rc, 0);
    ASSERT_CONTAINS(r.out, "2 keys: 2 same config, 0 differ, 0 only in A, 0 only in B");
    ASSERT_CONTAINS(r.out, "abc123>def456");
    cli(&r, "diff", "--by-rev", fa, fb, NULL);
    ASSERT_EQ(r.rc, 1);
    ASSERT_CONTAINS(r.out, "4 keys: 0 same config, 0 differ, 2 only in A, 2 only in B");
    b[1].rec.config.block_n = 32;
    fu_write_table(fb, b, 2, NULL);
    cli(&r, "diff", fa, fb, NULL);
    ASSERT_EQ(r.rc, 1);
    ASSERT_CONTAINS(r.out, "mma,128,64,4,1,swizzle,0 -> mma,128,32,4,1,swizzle,0");
}

TEST(a_valid_header_over_junk_prints_a_few_reasons_then_a_count) {
    char dir[64], f[300];
    fu_tmpdir(dir, sizeof dir);
    snprintf(f, sizeof f, "%s/junk.json", dir);
    FILE *o = fopen(f, "w");
    ASSERT(o);
    fprintf(o, "{\"format\":\"tiletune-table\",\"version\":1,\"exported_at\":1}\n");
    for (int i = 0; i < 5000; i++) fprintf(o, "junk %d\n", i);
    fprintf(o, "{\"end\":\"tiletune-table\",\"records\":5000}\n");
    fclose(o);
    cli_result r;
    cli(&r, "--socket", "/nonexistent", "import", f, NULL);
    ASSERT_EQ(r.rc, 1);
    ASSERT(count_in(r.err, "not valid JSON") <= 20);
    ASSERT_CONTAINS(r.err, "... and 4980 more bad records");
}

TEST(tiletuned_help_names_import_among_the_admin_verbs) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "%s --help", TILETUNED);
    FILE *p = popen(cmd, "r");
    ASSERT(p);
    static char text[8192];
    size_t n = fread(text, 1, sizeof text - 1, p);
    text[n] = '\0';
    pclose(p);
    ASSERT_CONTAINS(text, "TUNE, CANCEL, FORGET and IMPORT");
}

TEST(tune_stale_twice_queues_each_key_once) {
    td a;
    td_init(&a);
    seed(a.db, NULL); /* winners of revision abc123: stale for the built-in one */
    td_start(&a, NULL);
    cli_result r;
    cli(&r, "--socket", a.sock, "tune", "--stale", NULL);
    if (r.rc) TT_FAIL_AT("%s", r.err);
    int keys = 0;
    queued_job(&r, &keys);
    ASSERT_EQ(keys, NKEYS);
    cli(&r, "--socket", a.sock, "tune", "--stale", NULL);
    ASSERT_EQ(r.rc, 0); /* nothing to do is not a failure */
    ASSERT_CONTAINS(r.out, "nothing to re-tune");
    ASSERT_EQ(td_stop(&a, SIGTERM), 0);
}

static int hostile_refuses;

/* A listener that answers an IMPORT with escape sequences: refused, or
 * accepted with a reason for one record. */
static const char *hostile_import(fake_daemon *f, const char *line) {
    (void)f;
    if (strncmp(line, "IMPORT ", 7) != 0) return "";
    if (hostile_refuses) return "ERR permission \x1b[31mred\x1b[0m\n";
    return "OK added=0 replaced=0 kept=0 rejected=1 stale=0 foreign=0 history=0 committed=1 lines=1\n"
           "record=1 \x1b]0;owned\x07"
           "bad\n";
}

/* What the daemon says about an import reaches the terminal without
 * control characters, as every other reply the CLI prints. */
TEST(import_replies_are_sanitised) {
    td a;
    td_init(&a);
    seed(a.db, NULL);
    td_start(&a, NULL);
    char path[400];
    snprintf(path, sizeof path, "%s/a.json", a.dir);
    cli_result r;
    cli(&r, "--socket", a.sock, "export", "-o", path, NULL);
    if (r.rc) TT_FAIL_AT("export: %s", r.err);
    ASSERT_EQ(td_stop(&a, SIGTERM), 0);
    fake_daemon *f = fake_start(FAKE_SERVE, hostile_import);
    hostile_refuses = 1;
    cli(&r, "--socket", f->path, "import", path, NULL);
    ASSERT_EQ(r.rc, 1);
    ASSERT(strchr(r.err, '\x1b') == NULL);
    ASSERT_CONTAINS(r.err, "?[31mred");
    hostile_refuses = 0;
    cli(&r, "--socket", f->path, "import", path, NULL);
    ASSERT(strchr(r.out, '\x1b') == NULL && strchr(r.err, '\x1b') == NULL);
    ASSERT(strchr(r.out, '\x07') == NULL && strchr(r.err, '\x07') == NULL);
    ASSERT(strstr(r.out, "?]0;owned?bad") || strstr(r.err, "?]0;owned?bad"));
    fake_stop(f);
}

TT_TEST_MAIN()
