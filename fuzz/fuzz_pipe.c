/*
 * libFuzzer target of the worker pipe protocol (common/pipe.h): the bytes
 * are what a worker (a broken or lying one) writes to the daemon, or the
 * daemon to a worker, cut into lines and read through the messages'
 * tables as both ends read them. Besides crashes and sanitizer findings it
 * checks that a line the reader accepts is a message the writer writes,
 * and that the written line reads back as the same message (reals within
 * the 6 significant digits they are written with), so what the daemon
 * believes is what it could have been told by the table.
 * Run: fuzz/run.sh SECONDS pipe; corpus: fuzz/corpus/pipe/.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/pipe.h"

static void die(const char *what, const char *line, const char *detail) {
    fprintf(stderr, "%s: %s\n  %s\n", what, detail, line);
    abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *copy = malloc(size + 1);
    if (!copy) return 0;
    memcpy(copy, data, size);
    copy[size] = '\0';
    for (char *line = copy, *next; line; line = next) {
        next = memchr(line, '\n', size - (size_t)(line - copy));
        if (next) *next++ = '\0';
        size_t len = next ? (size_t)(next - 1 - line) : size - (size_t)(line - copy);
        char keep[TT_LINE_MAX + 1], text[TT_LINE_MAX + 1], again_text[TT_LINE_MAX + 1], err[256];
        snprintf(keep, sizeof keep, "%.*s", (int)(len < TT_LINE_MAX ? len : TT_LINE_MAX), line);
        tt__pipe_msg m, again;
        if (tt__pipe_parse(line, len, &m, err, sizeof err) != 0) continue;
        if (tt__pipe_format(&m, text, sizeof text, err, sizeof err) < 0)
            die("a message the reader accepted the writer refuses", keep, err);
        if (tt__pipe_parse(strcpy(again_text, text), strlen(text), &again, err, sizeof err) != 0)
            die("a line the writer wrote the reader refuses", text, err);
        const char *d = tt__pipe_diff(&m, &again, 1e-5);
        if (d) die("a message read back differs", keep, d);
    }
    free(copy);
    return 0;
}
