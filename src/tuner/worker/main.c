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

#include "common/pipe.h"
#include "tuner/worker/run.h"

#ifdef TT_FAULT_INJECTION
#define INJECT_USAGE " [--inject]"
#define INJECT_HELP                                                                 \
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

/* One MEASURE and the AVOID lines after it. */
static int measure_line(tt_worker *w, const tt__pipe_msg *m, tt_config *avoid) {
    char err[256], line[TT_LINE_MAX + 2];
    const tt__pipe_measure *q = &m->u.measure;
    tt_wtask t;
    memset(&t, 0, sizeof t);
    t.id = q->id;
    if (tt__pipe_measure_key(m, &t.key, err, sizeof err) < 0) return proto_error(err);
    t.batch = (int32_t)q->batch;
    t.heads = (int32_t)q->heads;
    t.fast = q->mode == TT__N_MODE_FAST;
    for (int64_t i = 0; i < q->avoid; i++) {
        tt__pipe_msg a;
        if (read_line(line, sizeof line) != 1) return proto_error("missing AVOID line");
        if (tt__pipe_parse(line, strlen(line), &a, err, sizeof err) < 0) return proto_error(err);
        if (a.kind != TT_PIPE_AVOID) return proto_error("a line other than AVOID after MEASURE");
        avoid[t.navoid++] = a.u.avoid.config;
    }
    t.avoid = avoid;
    return tt_worker_measure(w, &t, emit, NULL) == TT_WORKER_EXIT ? 3 : 0;
}

/* HELLO: the protocol, the kernel revision, the GPUs; this worker's GPU
 * if it has one. */
static void say_hello(const tt_worker_hello *h, int gpu) {
    tt__pipe_msg m;
    tt__pipe_init(&m, TT_PIPE_HELLO);
    TT_PIPE_SET(&m, hello, proto, TT_PIPE_PROTO);
    TT_PIPE_SET_TEXT(&m, hello, rev, h->rev[0] ? h->rev : "0");
    TT_PIPE_SET(&m, hello, gpu_count, h->gpu_count);
    if (h->has_gpu) {
        TT_PIPE_SET(&m, hello, index, gpu);
        TT_PIPE_SET_TEXT(&m, hello, name, h->name);
        TT_PIPE_SET(&m, hello, cc_major, h->cc_major);
        TT_PIPE_SET(&m, hello, cc_minor, h->cc_minor);
        TT_PIPE_SET(&m, hello, sms, h->sms);
        TT_PIPE_SET(&m, hello, mem_bytes, h->mem_bytes);
        TT_PIPE_SET_TEXT(&m, hello, driver, h->driver);
        TT_PIPE_SET_TEXT(&m, hello, cuda, h->cuda);
        TT_PIPE_SET_TEXT(&m, hello, nvrtc, h->nvrtc);
    }
    if (tt__wk_send(emit, NULL, &m) < 0) exit(2); /* the daemon kills a worker without HELLO */
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
            printf("tiletune-worker %s (worker protocol %d)\n", TT_VERSION_STRING, TT_PIPE_PROTO);
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
    if (env && !o.launch_timeout_ms &&
        int_arg("TILETUNE_WORKER_LAUNCH_TIMEOUT_MS", env, 1, 3600000, &o.launch_timeout_ms) < 0)
        return 2;
    env = getenv("TILETUNE_WORKER_BUDGET_MS");
    if (env && !budget && int_arg("TILETUNE_WORKER_BUDGET_MS", env, 1, 60000, &budget) == 0)
        o.budget_ms = budget;
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
        h.has_gpu = 0;
        say_hello(&h, o.gpu);
        return 0;
    }
    say_hello(&h, o.gpu);
    fprintf(stderr, "tiletune-worker: GPU %d: %s (sm_%d%d, %d SMs), kernel revision %s%s\n", o.gpu, h.name,
            h.cc_major, h.cc_minor, h.sms, h.rev, o.inject ? ", fault injection on" : "");

    tt_config *avoid = calloc(TT_PIPE_AVOID_MAX, sizeof *avoid);
    if (!avoid) return 1;
    rc = 0;
    for (;;) {
        int got = read_line(line, sizeof line);
        if (got == 0) break;
        if (got < 0) {
            rc = proto_error("line over the length limit");
            break;
        }
        tt__pipe_msg m;
        int prc = tt__pipe_parse(line, strlen(line), &m, err, sizeof err);
        if (prc == TT_ERR_NOTFOUND) continue; /* verbs of later versions */
        if (prc < 0) {
            rc = proto_error(err);
            break;
        }
        if (m.kind != TT_PIPE_MEASURE) continue;
        if ((rc = measure_line(w, &m, avoid)) != 0) break;
    }
    free(avoid);
    if (rc == 3) _exit(3); /* a dead context: no teardown that could hang */
    tt_worker_close(w);
    return rc;
}
