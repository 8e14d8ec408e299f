/*
 * Integration-test helpers: start the real tiletuned (TILETUNED, set by
 * CMake) on a temporary socket and database, talk to it with raw protocol
 * lines, stop it. Every helper fails the test (exit 1) on a broken
 * expectation, so tests read as scripts.
 */
#ifndef TT_DAEMON_HARNESS_H
#define TT_DAEMON_HARNESS_H

#include <stddef.h>
#include <sys/types.h>

#include "tiletune.h"

typedef struct td {
    pid_t pid;
    char dir[256]; /* mkdtemp: socket, database, log live here */
    char sock[300];
    char db[300];
    char log[300];
} td;

/* A fresh temporary directory with paths for the socket, db and log. */
void td_init(td *t);
/* Starts the daemon with --socket/--db/--worker ""(unless given in extra)
 * and the extra arguments (NULL-terminated; may be NULL); waits until the
 * socket answers PING. */
void td_start(td *t, const char *const *extra);
/* Same, with the whole command line prefix given (e.g. a wrapper such as
 * systemd-socket-activate): argv[0..] then the daemon's own arguments. */
void td_start_wrapped(td *t, const char *const *prefix, const char *const *extra);
/* Sends sig and waits; returns the exit status (WEXITSTATUS), or 128+signal. */
int td_stop(td *t, int sig);
/* Prints the daemon's log to stderr (for a failing test). */
void td_dump_log(const td *t);

/* A connected client socket; -1 if connect fails (errno set). */
int td_connect(const char *sock);
int td_connect_ok(const td *t);
void td_send(int fd, const char *data, size_t len);
void td_sendstr(int fd, const char *s);
/* One reply line (without '\n') within timeout_ms: returns its length, -1 at
 * EOF or a reset, -2 on time-out. */
int td_read_line(int fd, char *buf, size_t cap, int timeout_ms);
/* Sends one line (a '\n' is added) and returns the reply line (static
 * buffer, valid until the next call); fails the test on EOF/time-out. */
const char *td_req(int fd, const char *line);
/* 1 if the peer closed the connection within timeout_ms (after any
 * unread lines, which are skipped). */
int td_wait_eof(int fd, int timeout_ms);

/* Asks STATS (text form) and returns the value of counter `name`
 * ("connections_open", ...), reading the whole body; -1 if absent. */
long long td_stat(int fd, const char *name);

/* The value of field `key` in a reply line, copied into out ("" if none). */
const char *td_field(const char *line, const char *key, char *out, size_t cap);

/* Writes a winner into the database file through the store API, as a
 * measurement of `key` (gpu/rev set) with `tflops`; registers the GPU and
 * revision first. */
void td_seed(const char *db, const tt_key_v2 *key, const tt_config *cfg, double tflops);
/* n winners (and their measurements) of one GPU and revision in one
 * transaction: fp16, hdim 128, causal alternating, seqlen 1..n/2. */
void td_seed_many(const char *db, const char *gpu, const char *rev, int n);
/* How the store recorded config `cfg` (canonical text) as failed for `key`
 * (tt_store_failed_configs): wrong, fault or timeout; TT_MEAS_OK if not. */
int td_failed_status(const char *db, const tt_key_v2 *key, const char *cfg);
/* A GPU fingerprint made by the store's rule for a fake GPU. */
void td_fake_gpu(char out[TT_ID_MAX]);

/* Milliseconds of a monotonic clock. */
long long td_now_ms(void);

/* Polls `req` until its reply (or a line of its body, for a listing)
 * contains `want`; fails the test after timeout_ms. */
void td_wait_for(int fd, const char *req, const char *want, int timeout_ms);

#endif
