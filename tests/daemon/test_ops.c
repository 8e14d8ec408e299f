/*
 * tiletuned as an operator runs it: one daemon per database (a second
 * one exits naming the first and writes nothing), the configuration file
 * and its reload on SIGHUP, the metrics an operator scrapes.
 */
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "tiletune.h"

#include "harness.h"
#include "tt_test.h"

/* Runs tiletuned with argv (NULL-terminated, after the program name) to
 * its exit; its stderr into err. Returns the exit status. */
static int run_daemon(const char *const *args, char *err, size_t cap) {
    char path[] = "/tmp/ttops-err-XXXXXX";
    int efd = mkstemp(path);
    ASSERT(efd >= 0);
    unlink(path);
    const char *argv[32] = {TILETUNED};
    int n = 1;
    while (*args && n < 31) argv[n++] = *args++;
    argv[n] = NULL;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(efd, 2);
        execv(TILETUNED, (char *const *)argv);
        _exit(127);
    }
    int st;
    /* bounded: a second daemon that serves instead of exiting fails here */
    for (int i = 0; i < 500 && waitpid(pid, &st, WNOHANG) != pid; i++) {
        usleep(10000);
        if (i == 499) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            TT_FAIL_AT("the second daemon did not exit");
        }
    }
    ssize_t r = pread(efd, err, cap - 1, 0);
    err[r > 0 ? r : 0] = '\0';
    close(efd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int file_has(const char *path, const char *needle) {
    static char buf[1 << 16];
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return strstr(buf, needle) != NULL;
}

/* Waits up to 5 s for the log to say `needle`. */
static void wait_log(const td *t, const char *needle) {
    for (int i = 0; i < 500; i++) {
        if (file_has(t->log, needle)) return;
        usleep(10000);
    }
    td_dump_log(t);
    TT_FAIL_AT("the log never said '%s'", needle);
}

TEST(second_daemon_on_the_same_db_refused) {
    td t;
    td_init(&t);
    td_start(&t, NULL);
    int fd = td_connect_ok(&t);
    ASSERT_STREQ(td_req(fd, "PING"), "OK pong");
    struct stat before, after;
    ASSERT(stat(t.db, &before) == 0);
    char sock2[400], err[4096], pid[32];
    snprintf(sock2, sizeof sock2, "%s/second.sock", t.dir);
    const char *args[] = {"--socket", sock2, "--db", t.db, "--worker", "", NULL};
    ASSERT_EQ(run_daemon(args, err, sizeof err), 1);
    snprintf(pid, sizeof pid, "pid %d", (int)t.pid);
    ASSERT_CONTAINS(err, "in use by another tiletuned");
    ASSERT_CONTAINS(err, pid);
    /* nothing written: no socket, the database as it was */
    ASSERT(access(sock2, F_OK) < 0);
    ASSERT(stat(t.db, &after) == 0);
    ASSERT_EQ((long long)after.st_size, (long long)before.st_size);
    ASSERT(after.st_mtim.tv_sec == before.st_mtim.tv_sec && after.st_mtim.tv_nsec == before.st_mtim.tv_nsec);
    ASSERT_STREQ(td_req(fd, "PING"), "OK pong");
    close(fd);
    ASSERT_EQ(td_stop(&t, SIGTERM), 0);
    /* the lock goes with the process: a new daemon takes the database */
    td_start(&t, NULL);
    ASSERT_EQ(td_stop(&t, SIGTERM), 0);
}

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    ASSERT(f != NULL);
    fputs(text, f);
    fclose(f);
}

/* Connections until the cap refuses one: how many were served. */
static int cap_now(const td *t, int *fds, int max) {
    int n = 0;
    char line[256];
    for (; n < max; n++) {
        fds[n] = td_connect_ok(t);
        td_sendstr(fds[n], "PING\n");
        if (td_read_line(fds[n], line, sizeof line, 2000) <= 0 || strcmp(line, "OK pong") != 0) {
            close(fds[n]);
            break;
        }
    }
    for (int i = 0; i < n; i++) close(fds[i]);
    usleep(100000); /* the daemon sees the closes */
    return n;
}

TEST(config_file_and_reload_on_sighup) {
    td t;
    td_init(&t);
    char conf[400];
    snprintf(conf, sizeof conf, "%s/tiletuned.conf", t.dir);
    write_file(conf, "# a comment\nmax-connections = 3\n  log-level=info  # trailing comment\n");
    const char *args[] = {"--config", conf, NULL};
    td_start(&t, args);
    int fds[16];
    ASSERT_EQ(cap_now(&t, fds, 10), 3);
    /* reloadable: the new cap holds after SIGHUP */
    write_file(conf, "max-connections = 5\nlog-level = debug\n");
    kill(t.pid, SIGHUP);
    wait_log(&t, "reloaded: admin group none, max connections 5, idle timeout 300 s, log level debug");
    ASSERT_EQ(cap_now(&t, fds, 10), 5);
    /* a file that does not parse changes nothing */
    write_file(conf, "max-connections = many\n");
    kill(t.pid, SIGHUP);
    wait_log(&t, "reload refused, the settings stay: max-connections must be a number");
    ASSERT_EQ(cap_now(&t, fds, 10), 5);
    write_file(conf, "max-connections = 4\nadmin-group = no-such-group-here\n");
    kill(t.pid, SIGHUP);
    wait_log(&t, "no-such-group-here");
    ASSERT_EQ(cap_now(&t, fds, 10), 5);
    /* not reloadable: reported, not applied */
    write_file(conf, "max-connections = 5\ncache-dir = /nonexistent\n");
    kill(t.pid, SIGHUP);
    wait_log(&t, "cache-dir changed");
    ASSERT_EQ(td_stop(&t, SIGTERM), 0);
}

TEST(config_errors_exit_2) {
    td t;
    td_init(&t);
    char conf[400], err[4096];
    snprintf(conf, sizeof conf, "%s/bad.conf", t.dir);
    write_file(conf, "frobnicate = 1\n");
    const char *args[] = {"--config", conf, "--db", t.db, "--socket", t.sock, NULL};
    ASSERT_EQ(run_daemon(args, err, sizeof err), 2);
    ASSERT_CONTAINS(err, "bad.conf:1: unknown key 'frobnicate'");
    const char *missing[] = {"--config", "/nonexistent/tiletuned.conf", "--db", t.db, NULL};
    ASSERT_EQ(run_daemon(missing, err, sizeof err), 2);
    ASSERT_CONTAINS(err, "cannot read the configuration file");
    ASSERT(access(t.db, F_OK) < 0);
}

/* The STATS body in the Prometheus form, whole. */
static char *prom_body(int fd) {
    static char body[1 << 16];
    char v[32], line[1024];
    const char *r = td_req(fd, "STATS format=prometheus");
    int n = atoi(td_field(r, "lines", v, sizeof v));
    size_t at = 0;
    body[0] = '\0';
    for (int i = 0; i < n; i++) {
        ASSERT(td_read_line(fd, line, sizeof line, 2000) > 0);
        at += (size_t)snprintf(body + at, sizeof body - at, "%s\n", line);
    }
    return body;
}

/* Records by GPU, revision and staleness from the database; the build,
 * the start time, the LOOKUP histogram. */
TEST(metrics_an_operator_scrapes) {
    td t;
    td_init(&t);
    char gpu[TT_ID_MAX], want[256];
    td_fake_gpu(gpu);
    tt_config cfg;
    tt_key_v2 k = {.seqlen_q = 512, .seqlen_k = 512, .head_dim = 128, .dtype = TT_DTYPE_FP16};
    snprintf(k.gpu, sizeof k.gpu, "%s", gpu);
    tt_config_default_v2(&k, &cfg);
    snprintf(k.rev, sizeof k.rev, "00c0ffee");
    td_seed(t.db, &k, &cfg, 100.0);
    k.seqlen_q = k.seqlen_k = 1024;
    td_seed(t.db, &k, &cfg, 110.0);
    long long t0 = (long long)time(NULL);
    td_start(&t, NULL);
    int fd = td_connect_ok(&t);
    for (int i = 0; i < 3; i++) td_req(fd, "LOOKUP dtype=fp16 hdim=64 seqlen_q=128");
    char *b = prom_body(fd);
    snprintf(want, sizeof want, "tiletune_table_records{gpu=\"%s\",rev=\"00c0ffee\",stale=\"1\"} 2\n", gpu);
    ASSERT_CONTAINS(b, want);
    ASSERT_CONTAINS(b, "tiletune_lookup_duration_seconds_count 3\n");
    ASSERT_CONTAINS(b, "tiletune_lookup_duration_seconds_bucket{le=\"+Inf\"} 3\n");
    ASSERT_CONTAINS(b, "tiletune_build_info{version=\"" TT_VERSION_STRING "\",rev=\"");
    ASSERT_CONTAINS(b, "tiletune_worker_restarts_total 0\n");
    ASSERT_CONTAINS(b, "tiletune_queue_jobs{state=\"queued\"} 0\n");
    char *st = strstr(b, "\nprocess_start_time_seconds ");
    ASSERT(st != NULL);
    long long start = atoll(st + 28);
    ASSERT(start >= t0 - 1 && start <= (long long)time(NULL));
    /* every sample's family was announced by # TYPE before it */
    char *save = NULL, *copy = strdup(b);
    char fam[128] = "";
    for (char *ln = strtok_r(copy, "\n", &save); ln; ln = strtok_r(NULL, "\n", &save)) {
        if (strncmp(ln, "# TYPE ", 7) == 0) {
            snprintf(fam, sizeof fam, "%.*s", (int)strcspn(ln + 7, " "), ln + 7);
        } else if (ln[0] != '#') {
            if (strncmp(ln, fam, strlen(fam)) != 0)
                TT_FAIL_AT("sample '%s' outside its family '%s'", ln, fam);
        }
    }
    free(copy);
    close(fd);
    ASSERT_EQ(td_stop(&t, SIGTERM), 0);
}

/* A worker that dies at once is started again: each start after a GPU's
 * first counts as a restart. */
TEST(worker_restarts_counted) {
    td t;
    td_init(&t);
    setenv("TT_FAKE_WORKER_MODE", "exit", 1);
    const char *args[] = {"--worker", TT_DAEMON_TEST_DIR "/fake_worker.sh", NULL};
    td_start(&t, args);
    unsetenv("TT_FAKE_WORKER_MODE");
    int fd = td_connect_ok(&t);
    long long restarts = 0;
    for (int i = 0; i < 100 && restarts < 1; i++) {
        usleep(50000);
        restarts = td_stat(fd, "worker_restarts");
    }
    ASSERT(restarts >= 1);
    ASSERT(td_stat(fd, "worker_starts") == restarts + 1 || td_stat(fd, "worker_starts") == restarts + 2);
    close(fd);
    ASSERT_EQ(td_stop(&t, SIGTERM), 0);
}

TT_TEST_MAIN()
