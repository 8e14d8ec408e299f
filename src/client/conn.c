#include "client/conn.h"
#include "common/key.h"
#include "common/wire.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

struct tt__conn {
    int fd;
    size_t start, end; /* unread bytes are buf[start..end) */
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
    char buf[TT_REPLY_LINE_MAX + 2];
};

#define SETERR(...)                                            \
    do {                                                       \
        if (err && errlen) snprintf(err, errlen, __VA_ARGS__); \
    } while (0)

int64_t tt__now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t tt__deadline_after_ms(int ms) { return tt__now_ns() + (ms > 0 ? (int64_t)ms * 1000000 : 0); }

const char *tt__socket_path(const char *path) {
    if (path && *path) return path;
    const char *e = getenv("TILETUNE_SOCKET");
    if (e && *e) return e;
    return TT_SOCKET_DEFAULT;
}

/* Waits for `events` on fd until the deadline: 1 ready, 0 timed out, <0 errno.
 * ppoll's timespec keeps sub-millisecond deadlines exact (poll would round
 * up to a whole ms and overshoot short time-outs). */
static int wait_fd(int fd, short events, int64_t deadline) {
    for (;;) {
        int64_t left = deadline - tt__now_ns();
        if (left <= 0) return 0;
        struct pollfd p = {.fd = fd, .events = events};
        struct timespec ts = {.tv_sec = left / 1000000000, .tv_nsec = left % 1000000000};
        int n = ppoll(&p, 1, &ts, NULL);
        if (n > 0) return 1;
        if (n < 0 && errno != EINTR) return -errno;
    }
}

static void sleep_until(int64_t t) {
    int64_t left = t - tt__now_ns();
    if (left <= 0) return;
    struct timespec ts = {.tv_sec = left / 1000000000, .tv_nsec = left % 1000000000};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
    }
}

int tt__conn_open(const char *path, int64_t deadline, tt__conn **out, char *err, size_t errlen) {
    if (!path || !out) return TT_ERR_INVAL;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t plen = strlen(path);
    if (plen == 0 || plen >= sizeof sa.sun_path) {
        SETERR("socket path '%s' is empty or longer than %zu bytes", path, sizeof sa.sun_path - 1);
        return TT_ERR_INVAL;
    }
    memcpy(sa.sun_path, path, plen + 1);
    tt__conn *c = malloc(sizeof *c);
    if (!c) {
        SETERR("out of memory");
        return TT_ERR_NOMEM;
    }
    c->start = c->end = 0;
    memcpy(c->path, path, plen + 1);
    c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0) {
        SETERR("cannot create a socket: %s", strerror(errno));
        free(c);
        return TT_ERR_IO;
    }
    /* A Unix stream connect either completes at once or, with the daemon's
     * listen queue full, fails with EAGAIN (it never goes EINPROGRESS and
     * cannot be polled for): retry with short naps until the deadline. */
    int64_t nap = 500000;
    for (;;) {
        if (connect(c->fd, (struct sockaddr *)&sa, sizeof sa) == 0) break;
        int e = errno;
        if (e == EINTR) continue;
        if (e == EAGAIN && tt__now_ns() < deadline) {
            int64_t t = tt__now_ns() + nap;
            sleep_until(t < deadline ? t : deadline);
            if (nap < 16000000) nap *= 2;
            continue;
        }
        if (e == EAGAIN) {
            SETERR("the daemon at %s is not accepting connections (listen queue full)", path);
            tt__conn_close(c);
            return TT_ERR_TIMEOUT;
        }
        SETERR("cannot reach the daemon at %s: %s", path, strerror(e));
        tt__conn_close(c);
        return TT_ERR_NODAEMON;
    }
    *out = c;
    return 0;
}

void tt__conn_close(tt__conn *c) {
    if (!c) return;
    if (c->fd >= 0) close(c->fd);
    free(c);
}

int tt__conn_fd(const tt__conn *c) { return c->fd; }

void tt__conn_drop_fd(tt__conn *c) {
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
}

int tt__conn_send(tt__conn *c, const char *buf, size_t len, int64_t deadline, char *err, size_t errlen) {
    size_t done = 0;
    while (done < len) {
        ssize_t n = send(c->fd, buf + done, len - done, MSG_NOSIGNAL);
        if (n > 0) {
            done += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            int w = wait_fd(c->fd, POLLOUT, deadline);
            if (w > 0) continue;
            if (w == 0) {
                SETERR("the daemon at %s did not take the request in time", c->path);
                return TT_ERR_TIMEOUT;
            }
            errno = -w;
        }
        SETERR("cannot send to the daemon at %s: %s", c->path, strerror(errno));
        return TT_ERR_IO;
    }
    return 0;
}

int tt__conn_read_line(tt__conn *c, char **line, size_t *len, int64_t deadline, char *err, size_t errlen) {
    for (;;) {
        char *s = c->buf + c->start;
        char *nl = memchr(s, '\n', c->end - c->start);
        if (nl) {
            size_t n = (size_t)(nl - s);
            c->start += n + 1;
            if (n > 0 && s[n - 1] == '\r') n--;
            s[n] = '\0';
            *line = s;
            *len = n;
            return 0;
        }
        if (c->start > 0) { /* make room at the end for the rest of the line */
            memmove(c->buf, c->buf + c->start, c->end - c->start);
            c->end -= c->start;
            c->start = 0;
        }
        if (c->end >= TT_REPLY_LINE_MAX + 1) {
            SETERR("the daemon at %s sent a line longer than %d bytes", c->path, TT_REPLY_LINE_MAX);
            return TT_ERR_PROTO;
        }
        ssize_t n = recv(c->fd, c->buf + c->end, TT_REPLY_LINE_MAX + 1 - c->end, 0);
        if (n > 0) {
            c->end += (size_t)n;
            continue;
        }
        if (n == 0) {
            SETERR("the daemon at %s closed the connection", c->path);
            return TT_ERR_IO;
        }
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            int w = wait_fd(c->fd, POLLIN, deadline);
            if (w > 0) continue;
            if (w == 0) {
                SETERR("the daemon at %s did not answer in time", c->path);
                return TT_ERR_TIMEOUT;
            }
            errno = -w;
        }
        SETERR("cannot read from the daemon at %s: %s", c->path, strerror(errno));
        return TT_ERR_IO;
    }
}

void tt__reply_free(tt__reply *r) {
    if (!r) return;
    for (int i = 0; i < r->nbody; i++) free(r->body[i]);
    free(r->body);
    free(r->head);
    memset(r, 0, sizeof *r);
}

int tt__reply_parse(char *line, tt__reply *r) {
    memset(r, 0, sizeof *r);
    r->head = line;
    if (strncmp(line, "ERR ", 4) == 0) {
        if (tt__reply_err(line, &r->code, &r->message) < 0) return TT_ERR_PROTO;
        r->status = tt__err_from_code(r->code);
        return 0;
    }
    if (strncmp(line, "OK", 2) != 0 || (line[2] != '\0' && line[2] != ' ')) return TT_ERR_PROTO;
    /* A leading bare word ("OK pong") is not a field: keep a copy and blank
     * it out, so the shared grammar parses the rest (it skips runs of spaces). */
    char *w = line + 2;
    while (*w == ' ') w++;
    size_t wl = strcspn(w, " ");
    if (wl > 0 && !memchr(w, '=', wl)) {
        if (wl >= sizeof r->word) return TT_ERR_PROTO;
        memcpy(r->word, w, wl);
        memset(w, ' ', wl);
    }
    const char *perr;
    if (tt__proto_parse(line, strlen(line), &r->msg, &perr) < 0) return TT_ERR_PROTO;
    return 0;
}

int tt__conn_read_reply(tt__conn *c, tt__reply *r, int64_t deadline, char *err, size_t errlen) {
    memset(r, 0, sizeof *r);
    char *line;
    size_t len;
    int rc = tt__conn_read_line(c, &line, &len, deadline, err, errlen);
    if (rc < 0) return rc;
    char *head = strndup(line, len);
    if (!head) {
        SETERR("out of memory");
        return TT_ERR_NOMEM;
    }
    tt__reply tmp;
    if (tt__reply_parse(head, &tmp) < 0) {
        SETERR("the daemon at %s sent a malformed reply: %.60s", c->path, line);
        free(head);
        return TT_ERR_PROTO;
    }
    int64_t nbody = 0;
    const char *ls = tmp.status == 0 ? tt__msg_get(&tmp.msg, "lines") : NULL;
    if (ls && tt__parse_i64(ls, 0, 1 << 20, &nbody) < 0) {
        SETERR("the daemon at %s sent a bad line count '%s'", c->path, ls);
        free(head);
        return TT_ERR_PROTO;
    }
    if (nbody > 0 && !(tmp.body = calloc((size_t)nbody, sizeof *tmp.body))) {
        free(head);
        SETERR("out of memory");
        return TT_ERR_NOMEM;
    }
    for (int64_t i = 0; i < nbody; i++) {
        rc = tt__conn_read_line(c, &line, &len, deadline, err, errlen);
        if (rc == 0 && !(tmp.body[i] = strndup(line, len))) {
            SETERR("out of memory");
            rc = TT_ERR_NOMEM;
        }
        tmp.nbody = (int)i + 1;
        if (rc < 0) {
            tt__reply_free(&tmp);
            return rc;
        }
    }
    *r = tmp;
    return 0;
}

int tt__conn_request(tt__conn *c, const char *request, tt__reply *r, int64_t deadline, char *err,
                     size_t errlen) {
    size_t n = strlen(request);
    if (n > TT_LINE_MAX) {
        SETERR("request longer than %d bytes", TT_LINE_MAX);
        return TT_ERR_INVAL;
    }
    char line[TT_LINE_MAX + 1];
    memcpy(line, request, n);
    line[n] = '\n';
    int rc = tt__conn_send(c, line, n + 1, deadline, err, errlen);
    if (rc < 0) return rc;
    return tt__conn_read_reply(c, r, deadline, err, errlen);
}

/* Fills *res from a LOOKUP reply's fields; TT_ERR_PROTO if any is wrong. */
int tt__lookup_reply_parse(const tt__msg *m, tt_lookup_result *res) {
    tt_lookup_result r;
    memset(&r, 0, sizeof r);
    const char *s = tt__msg_get(m, "match");
    if (!s) return TT_ERR_PROTO;
    int mk = 0;
    while (tt__match_word(mk) && strcmp(s, tt__match_word(mk)) != 0) mk++;
    if (!tt__match_word(mk)) return TT_ERR_PROTO;
    r.match = (tt_match)mk;
    if (!(s = tt__msg_get(m, "config")) || tt_config_parse(s, &r.config) < 0) return TT_ERR_PROTO;
    if (tt__parse_i64(tt__msg_get(m, "seqlen_q"), 1, TT_SEQLEN_MAX, &r.seqlen_q) < 0 ||
        tt__parse_i64(tt__msg_get(m, "seqlen_k"), 1, TT_SEQLEN_MAX, &r.seqlen_k) < 0)
        return TT_ERR_PROTO;
    int64_t g = 1;
    if ((s = tt__msg_get(m, "group")) && tt__parse_i64(s, 1, TT_GROUP_MAX, &g) < 0) return TT_ERR_PROTO;
    r.group = (int32_t)g;
    if ((s = tt__msg_get(m, "tflops"))) {
        char *end;
        r.tflops = strtod(s, &end);
        if (*end || !(r.tflops >= 0)) return TT_ERR_PROTO;
    }
    *res = r;
    return 0;
}

void tt__sanitize_text(char *s) {
    if (!s) return;
    for (unsigned char *p = (unsigned char *)s; *p; p++) {
        if (*p < 0x20 || *p == 0x7f) *p = '?';
        else if (p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f) p[0] = p[1] = '?'; /* C1: U+0080..U+009F */
    }
}
