/*
 * tiletune-worker: the measurement process of one GPU, spawned and
 * supervised by tiletuned (docs/worker-protocol.md). Reads MEASURE/AVOID
 * lines on stdin, writes HELLO/TRY/RESULT/DONE lines on stdout, logs on
 * stderr. Exits 0 at end of input, 3 after a variant faulted or timed out
 * (its context is unusable; the daemon restarts the worker), 2 on a usage
 * or protocol error.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/key.h"
#include "common/proto.h"
#include "tuner/worker/gpu.h"

#define AVOID_MAX 4096

#ifdef TT_FAULT_INJECTION
#define INJECT_USAGE " [--inject]"
#define INJECT_HELP                                                                   \
    "  --inject               add the two fault-injection variants (test builds;\n" \
    "                         also TILETUNE_WORKER_INJECT=1)\n"
#else
#define INJECT_USAGE ""
#define INJECT_HELP ""
#endif

static void usage(FILE *f) {
    fputs("usage: tiletune-worker --gpu I [--cache-dir DIR] [--threads N]\n"
          "                       [--launch-timeout-ms MS] [--budget-ms MS]" INJECT_USAGE "\n"
          "\n"
          "The measurement worker of tiletuned: one per GPU, started by the daemon,\n"
          "speaking the pipe protocol of docs/worker-protocol.md on stdin/stdout.\n"
          "  --gpu I                CUDA device ordinal to measure on\n"
          "  --cache-dir DIR        cubin cache (default: $TILETUNE_CACHE_DIR, ~/.cache/tiletune)\n"
          "  --threads N            compile threads (default: CPUs - 1)\n"
          "  --launch-timeout-ms MS a launch still running this long past its expected\n"
          "                         time is a timeout (default 10000)\n"
          "  --budget-ms MS         GPU time to spend timing each variant (default 40)\n" INJECT_HELP
          "Environment (the daemon starts workers with its own): TILETUNE_WORKER_LAUNCH_TIMEOUT_MS,\n"
          "TILETUNE_WORKER_BUDGET_MS as the options above.\n",
          f);
}

static void emit(void *ud, const char *line) {
    (void)ud;
    if (fputs(line, stdout) == EOF || fputc('\n', stdout) == EOF || fflush(stdout) == EOF) {
        /* the daemon is gone: nothing to report to */
        exit(0);
    }
}

static int int_arg(const char *name, const char *v, int min, int max, int *out) {
    int64_t x;
    if (!v || tt__parse_i64(v, min, max, &x) < 0) {
        fprintf(stderr, "tiletune-worker: %s needs a number in %d..%d\n", name, min, max);
        return -1;
    }
    *out = (int)x;
    return 0;
}

/* Reads one line of stdin into buf without its '\n'. 1 a line, 0 EOF,
 * -1 a line over the protocol's limit. */
static int read_line(char *buf, size_t cap) {
    if (!fgets(buf, (int)cap, stdin)) return 0;
    size_t n = strlen(buf);
    if (n && buf[n - 1] == '\n') buf[--n] = '\0';
    else if (!feof(stdin)) return -1;
    return 1;
}

static int proto_error(const char *what) {
    fprintf(stderr, "tiletune-worker: the daemon broke the pipe protocol: %s\n", what);
    return 2;
}

static int measure_line(tt_worker *w, tt__msg *m, tt_config *avoid) {
    char err[256], line[TT_LINE_MAX + 2];
    tt_wtask t;
    memset(&t, 0, sizeof t);
    int64_t v, navoid = 0;
    const char *s;
    if (!(s = tt__msg_get(m, "id")) || tt__parse_i64(s, 0, INT64_MAX, &t.id) < 0)
        return proto_error("MEASURE without id");
    if (tt__key_from_msg(m, &t.key, err, sizeof err) < 0) return proto_error(err);
    if ((s = tt__msg_get(m, "avoid")) && tt__parse_i64(s, 0, AVOID_MAX, &navoid) < 0)
        return proto_error("bad avoid count");
    if ((s = tt__msg_get(m, "batch")) && tt__parse_i64(s, 0, 1 << 20, &v) == 0) t.batch = (int32_t)v;
    if ((s = tt__msg_get(m, "heads")) && tt__parse_i64(s, 0, 1 << 16, &v) == 0) t.heads = (int32_t)v;
    t.fast = (s = tt__msg_get(m, "mode")) && strcmp(s, "fast") == 0;
    for (int64_t i = 0; i < navoid; i++) {
        tt__msg a;
        const char *perr;
        if (read_line(line, sizeof line) != 1) return proto_error("missing AVOID line");
        if (tt__proto_parse(line, strlen(line), &a, &perr) < 0 || strcmp(a.verb, "AVOID") != 0 ||
            !(s = tt__msg_get(&a, "config")) || tt_config_parse(s, &avoid[t.navoid]) < 0)
            return proto_error("bad AVOID line");
        t.navoid++;
    }
    t.avoid = avoid;
    return tt_worker_measure(w, &t, emit, NULL) == TT_WORKER_EXIT ? 3 : 0;
}

int main(int argc, char **argv) {
    tt_worker_opts o;
    memset(&o, 0, sizeof o);
    o.gpu = -1;
    int budget = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--version") == 0) {
            printf("tiletune-worker %s (worker protocol 1)\n", TT_VERSION_STRING);
            return 0;
        } else if (strcmp(a, "--gpu") == 0) {
            if (int_arg(a, v, 0, 1023, &o.gpu) < 0) return 2;
            i++;
        } else if (strcmp(a, "--cache-dir") == 0) {
            if (!v) {
                fprintf(stderr, "tiletune-worker: --cache-dir needs a directory\n");
                return 2;
            }
            o.cache_dir = v;
            i++;
        } else if (strcmp(a, "--threads") == 0) {
            if (int_arg(a, v, 1, 64, &o.compile_threads) < 0) return 2;
            i++;
        } else if (strcmp(a, "--launch-timeout-ms") == 0) {
            if (int_arg(a, v, 1, 3600000, &o.launch_timeout_ms) < 0) return 2;
            i++;
        } else if (strcmp(a, "--budget-ms") == 0) {
            if (int_arg(a, v, 1, 60000, &budget) < 0) return 2;
            i++;
#ifdef TT_FAULT_INJECTION
        } else if (strcmp(a, "--inject") == 0) {
            o.inject = 1;
#endif
        } else {
            fprintf(stderr, "tiletune-worker: unknown argument '%s'\n", a);
            usage(stderr);
            return 2;
        }
    }
    if (o.gpu < 0) {
        usage(stderr);
        return 2;
    }
    o.budget_ms = budget;
    /* The daemon passes its environment, not options: tests and benchmarks
     * tune the worker through these. */
    const char *env = getenv("TILETUNE_WORKER_LAUNCH_TIMEOUT_MS");
    if (env && !o.launch_timeout_ms && int_arg("TILETUNE_WORKER_LAUNCH_TIMEOUT_MS", env, 1, 3600000, &o.launch_timeout_ms) < 0)
        return 2;
    env = getenv("TILETUNE_WORKER_BUDGET_MS");
    if (env && !budget && int_arg("TILETUNE_WORKER_BUDGET_MS", env, 1, 60000, &budget) == 0) o.budget_ms = budget;
#ifdef TT_FAULT_INJECTION
    const char *inj = getenv("TILETUNE_WORKER_INJECT");
    if (inj && strcmp(inj, "1") == 0) o.inject = 1;
#endif
    signal(SIGPIPE, SIG_IGN);

    tt_worker *w = NULL;
    tt_worker_hello h;
    char err[512], line[TT_LINE_MAX + 2];
    int rc = tt_worker_open(&o, &w, &h, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "tiletune-worker: GPU %d: %s\n", o.gpu, err);
        /* no GPU is an answer, not a failure: the daemon waits for one */
        snprintf(line, sizeof line, "HELLO proto=1 rev=%s gpu_count=%d", h.rev[0] ? h.rev : "0", h.gpu_count);
        emit(NULL, line);
        return 0;
    }
    char name[400], drv[200], cuda[100], nvrtc[100];
    tt__pct_encode(h.name, name, sizeof name);
    tt__pct_encode(h.driver, drv, sizeof drv);
    tt__pct_encode(h.cuda, cuda, sizeof cuda);
    tt__pct_encode(h.nvrtc, nvrtc, sizeof nvrtc);
    snprintf(line, sizeof line,
             "HELLO proto=1 rev=%s gpu_count=%d index=%d name=%s cc_major=%d cc_minor=%d sms=%d "
             "mem_bytes=%lld driver=%s cuda=%s nvrtc=%s",
             h.rev, h.gpu_count, o.gpu, name, h.cc_major, h.cc_minor, h.sms, (long long)h.mem_bytes, drv,
             cuda, nvrtc);
    emit(NULL, line);
    fprintf(stderr, "tiletune-worker: GPU %d: %s (sm_%d%d, %d SMs), kernel revision %s%s\n", o.gpu, h.name,
            h.cc_major, h.cc_minor, h.sms, h.rev, o.inject ? ", fault injection on" : "");

    tt_config *avoid = calloc(AVOID_MAX, sizeof *avoid);
    if (!avoid) return 1;
    rc = 0;
    for (;;) {
        int got = read_line(line, sizeof line);
        if (got == 0) break;
        if (got < 0) {
            rc = proto_error("line over the length limit");
            break;
        }
        tt__msg m;
        const char *perr;
        if (tt__proto_parse(line, strlen(line), &m, &perr) < 0) {
            rc = proto_error(perr);
            break;
        }
        if (strcmp(m.verb, "MEASURE") != 0) continue; /* verbs of later versions */
        if ((rc = measure_line(w, &m, avoid)) != 0) break;
    }
    free(avoid);
    if (rc == 3) _exit(3); /* a dead context: no teardown that could hang */
    tt_worker_close(w);
    return rc;
}
