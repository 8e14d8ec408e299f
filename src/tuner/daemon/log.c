#include "tuner/daemon/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tiletune.h"

int tt__log_level = TT_LOG_INFO;
static int journal;

static const char *const names[] = {"error", "warn", "info", "debug"};
/* syslog priorities of the levels: err, warning, info, debug. */
static const int prio[] = {3, 4, 6, 7};

int tt_log_level_parse(const char *s, int *out) {
    for (int i = 0; i < 4; i++)
        if (strcmp(s, names[i]) == 0 || (s[0] == '0' + i && !s[1])) {
            *out = i;
            return 0;
        }
    return TT_ERR_INVAL;
}

void tt_log_init(int level) {
    tt__log_level = level;
    journal = getenv("JOURNAL_STREAM") != NULL;
}

void tt_log_write(int level, const char *fmt, ...) {
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    /* One fprintf per line: stderr is unbuffered, so a line is one write
     * and lines from the worker (same stderr) do not interleave inside it. */
    if (journal) fprintf(stderr, "<%d>%s\n", prio[level], line);
    else fprintf(stderr, "tiletuned: %s: %s\n", names[level], line);
}
