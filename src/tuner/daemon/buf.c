#include "tuner/daemon/buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void tt_buf_init(tt_buf *b) { memset(b, 0, sizeof *b); }

void tt_buf_free(tt_buf *b) {
    free(b->data);
    tt_buf_init(b);
}

void tt_buf_reset(tt_buf *b) {
    b->len = 0;
    b->oom = 0;
}

static int reserve(tt_buf *b, size_t extra) {
    if (b->len + extra + 1 <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1) cap *= 2;
    char *p = realloc(b->data, cap);
    if (!p) {
        b->oom = 1;
        return -1;
    }
    b->data = p;
    b->cap = cap;
    return 0;
}

void tt_buf_append(tt_buf *b, const char *data, size_t len) {
    if (len == 0) return; /* data may be NULL (an empty body) */
    if (reserve(b, len) < 0) return;
    memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = '\0';
}

void tt_buf_printf(tt_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || reserve(b, (size_t)n) < 0) return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

char *tt_buf_steal(tt_buf *b, size_t *len) {
    char *p = b->data;
    *len = b->len;
    tt_buf_init(b);
    return p;
}
