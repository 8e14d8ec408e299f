/* A growable byte buffer for replies and metrics text. */
#ifndef TT_TUNER_BUF_H
#define TT_TUNER_BUF_H

#include <stddef.h>

typedef struct tt_buf {
    char *data;
    size_t len, cap;
    int oom; /* an append failed: the content is truncated */
} tt_buf;

void tt_buf_init(tt_buf *b);
void tt_buf_free(tt_buf *b);
void tt_buf_reset(tt_buf *b);
void tt_buf_append(tt_buf *b, const char *data, size_t len);
void tt_buf_printf(tt_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Hands the bytes to the caller (free()) and empties the buffer. */
char *tt_buf_steal(tt_buf *b, size_t *len);

#endif
