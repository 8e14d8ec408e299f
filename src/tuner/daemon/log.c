#include "tuner/daemon/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#define SD_JOURNAL_SUPPRESS_LOCATION
#include <systemd/sd-journal.h>

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

const char *tt_log_level_name(int level) { return level >= 0 && level < 4 ? names[level] : "?"; }

void tt_log_init(int level) {
    tt__log_level = level;
    journal = getenv("JOURNAL_STREAM") != NULL;
}

static void write_line(int level, const char *line) {
    /* One fprintf per line: stderr is unbuffered, so a line is one write
     * and lines from the worker (same stderr) do not interleave inside it. */
    if (journal) fprintf(stderr, "<%d>%s\n", prio[level], line);
    else fprintf(stderr, "tiletuned: %s: %s\n", names[level], line);
}

void tt_log_write(int level, const char *fmt, ...) {
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    write_line(level, line);
}

void tt_log_event(int level, int64_t job, int gpu, const char *key, const char *fmt, ...) {
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (!journal) {
        write_line(level, line);
        return;
    }
    char msg[1040], pr[16], fj[40], fg[24], fk[320];
    struct iovec iov[6];
    int n = 0;
#define ADD(buf, ...) \
    (snprintf(buf, sizeof buf, __VA_ARGS__), iov[n].iov_base = buf, iov[n].iov_len = strlen(buf), n++)
    ADD(msg, "MESSAGE=%s", line);
    ADD(pr, "PRIORITY=%d", prio[level]);
    if (job >= 0) ADD(fj, "JOB=%lld", (long long)job);
    if (gpu >= 0) ADD(fg, "GPU=%d", gpu);
    if (key) ADD(fk, "KEY=%s", key);
#undef ADD
    iov[n].iov_base = "SYSLOG_IDENTIFIER=tiletuned";
    iov[n].iov_len = strlen(iov[n].iov_base);
    n++;
    /* No journal socket after all (a stream that only looks like one):
     * the plain line still gets out. */
    if (sd_journal_sendv(iov, n) < 0) write_line(level, line);
}
