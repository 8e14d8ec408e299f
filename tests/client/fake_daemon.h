/*
 * A stand-in daemon for client tests: a real listening Unix socket in a
 * temporary directory, served by a thread that reads request lines and
 * writes whatever the test's answer function returns (canned lines, several
 * at once, or nothing at all). It checks the client's side of the wire:
 * framing, reply parsing, time-outs, back-off. The real daemon is tested
 * against the client in the integration tests.
 */
#ifndef TT_FAKE_DAEMON_H
#define TT_FAKE_DAEMON_H

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

typedef enum fake_mode {
    FAKE_SERVE,       /* accept, read lines, answer */
    FAKE_NO_ACCEPT,   /* listen only: connects succeed, nothing is read */
    FAKE_ACCEPT_MUTE, /* accept and read, never answer */
} fake_mode;

typedef struct fake_daemon fake_daemon;
/* The text to write for one request line (may hold several "\n"-ended
 * lines, or "" for no answer). */
typedef const char *(*fake_answer_fn)(fake_daemon *f, const char *line);

struct fake_daemon {
    char dir[64];
    char path[108];
    int lfd;
    fake_mode mode;
    fake_answer_fn answer;
    void *arg;
    pthread_t thread;
    _Atomic int stop;
    _Atomic int nrequests, nhello, nlookup, nconns;
    char last[4200]; /* the last request line (written by the thread) */
    pthread_mutex_t lock;
};

static inline void fake_tmpdir(char *dir, size_t len) {
    snprintf(dir, len, "/tmp/ttc-XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        exit(1);
    }
}

#define FAKE_CONNS 64
typedef struct fake_conn {
    int fd;
    size_t have;
    char buf[8192];
} fake_conn;

/* Reads what fd has and answers every complete line; 0 when it is done. */
static int fake_serve(fake_daemon *f, fake_conn *fc) {
    ssize_t r = read(fc->fd, fc->buf + fc->have, sizeof fc->buf - 1 - fc->have);
    if (r <= 0) return 0;
    fc->have += (size_t)r;
    char *nl;
    while ((nl = memchr(fc->buf, '\n', fc->have))) {
        *nl = '\0';
        atomic_fetch_add(&f->nrequests, 1);
        if (strncmp(fc->buf, "HELLO", 5) == 0) atomic_fetch_add(&f->nhello, 1);
        if (strncmp(fc->buf, "LOOKUP", 6) == 0) atomic_fetch_add(&f->nlookup, 1);
        pthread_mutex_lock(&f->lock);
        snprintf(f->last, sizeof f->last, "%.4150s", fc->buf);
        pthread_mutex_unlock(&f->lock);
        const char *a = f->mode == FAKE_SERVE && f->answer ? f->answer(f, fc->buf) : "";
        size_t alen = strlen(a), off = 0;
        while (off < alen) {
            ssize_t w = send(fc->fd, a + off, alen - off, MSG_NOSIGNAL);
            if (w <= 0) return 0;
            off += (size_t)w;
        }
        size_t used = (size_t)(nl - fc->buf) + 1;
        memmove(fc->buf, fc->buf + used, fc->have - used);
        fc->have -= used;
    }
    return fc->have < sizeof fc->buf - 1;
}

static void *fake_thread(void *arg) {
    fake_daemon *f = arg;
    static __thread fake_conn conns[FAKE_CONNS];
    int n = 0;
    while (!atomic_load(&f->stop)) {
        struct pollfd p[FAKE_CONNS + 1];
        p[0] = (struct pollfd){.fd = f->lfd, .events = POLLIN};
        for (int i = 0; i < n; i++) p[i + 1] = (struct pollfd){.fd = conns[i].fd, .events = POLLIN};
        if (poll(p, (nfds_t)n + 1, 20) <= 0) continue;
        for (int i = n - 1; i >= 0; i--) {
            if (!p[i + 1].revents) continue;
            if (!fake_serve(f, &conns[i])) {
                close(conns[i].fd);
                conns[i] = conns[--n];
            }
        }
        if ((p[0].revents & POLLIN) && n < FAKE_CONNS) {
            int fd = accept(f->lfd, NULL, NULL);
            if (fd >= 0) {
                atomic_fetch_add(&f->nconns, 1);
                conns[n].fd = fd;
                conns[n].have = 0;
                n++;
            }
        }
    }
    for (int i = 0; i < n; i++) close(conns[i].fd);
    return NULL;
}

/* Binds and listens at `path` (NULL: a fresh temporary directory). */
static inline fake_daemon *fake_start_at(const char *path, fake_mode mode, fake_answer_fn answer) {
    fake_daemon *f = calloc(1, sizeof *f);
    pthread_mutex_init(&f->lock, NULL);
    f->mode = mode;
    f->answer = answer;
    if (path) {
        snprintf(f->path, sizeof f->path, "%s", path);
    } else {
        fake_tmpdir(f->dir, sizeof f->dir);
        snprintf(f->path, sizeof f->path, "%s/d.sock", f->dir);
    }
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", f->path);
    f->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (f->lfd < 0 || bind(f->lfd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(f->lfd, 64) < 0) {
        perror("fake daemon");
        exit(1);
    }
    if (mode != FAKE_NO_ACCEPT) pthread_create(&f->thread, NULL, fake_thread, f);
    return f;
}

static inline fake_daemon *fake_start(fake_mode mode, fake_answer_fn answer) {
    return fake_start_at(NULL, mode, answer);
}

static inline void fake_stop(fake_daemon *f) {
    atomic_store(&f->stop, 1);
    if (f->mode != FAKE_NO_ACCEPT) pthread_join(f->thread, NULL);
    close(f->lfd);
    unlink(f->path);
    if (f->dir[0]) rmdir(f->dir);
    pthread_mutex_destroy(&f->lock);
    free(f);
}

static inline double ms_since(const struct timespec *t0) {
    struct timespec t1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) * 1e3 + (double)(t1.tv_nsec - t0->tv_nsec) / 1e6;
}

static inline void sleep_ms(int ms) {
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
    }
}

#endif
