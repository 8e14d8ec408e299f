/*
 * The daemon's log: one line per event on stderr, with a level. Under
 * systemd (JOURNAL_STREAM set) each line carries the <N> priority prefix
 * that journald understands; by hand it reads "tiletuned: warn: ...".
 * Events of jobs, keys and workers (tt_log_event) go to the journal
 * natively when it is there, with the fields JOB=, KEY= and GPU= to filter
 * on (journalctl -u tiletuned JOB=12).
 * Only the daemon logs; library code (store, common) never prints.
 */
#ifndef TT_TUNER_LOG_H
#define TT_TUNER_LOG_H

#include <stdint.h>

enum { TT_LOG_ERR = 0, TT_LOG_WARN = 1, TT_LOG_INFO = 2, TT_LOG_DEBUG = 3 };

extern int tt__log_level;

/* "error", "warn", "info", "debug" (or 0..3). 0 or TT_ERR_INVAL. */
int tt_log_level_parse(const char *s, int *out);
const char *tt_log_level_name(int level);
void tt_log_init(int level);
void tt_log_write(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* An event with journal fields: job < 0, gpu < 0 and key NULL are left
 * out. Without a journal, the line as tt_log_write's. */
void tt_log_event(int level, int64_t job, int gpu, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* The level test comes first so a disabled line costs one compare: the
 * lookup path logs only at debug level. */
#define tt_log(level, ...)                                              \
    do {                                                                \
        if ((level) <= tt__log_level) tt_log_write(level, __VA_ARGS__); \
    } while (0)
#define tt_log_ev(level, job, gpu, key, ...)                                           \
    do {                                                                               \
        if ((level) <= tt__log_level) tt_log_event(level, job, gpu, key, __VA_ARGS__); \
    } while (0)
#define tt_err(...) tt_log(TT_LOG_ERR, __VA_ARGS__)
#define tt_warn(...) tt_log(TT_LOG_WARN, __VA_ARGS__)
#define tt_info(...) tt_log(TT_LOG_INFO, __VA_ARGS__)
#define tt_debug(...) tt_log(TT_LOG_DEBUG, __VA_ARGS__)

#endif
