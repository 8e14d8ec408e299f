/*
 * The listening Unix socket: taken from systemd (socket activation,
 * sd_listen_fds) when given, else bound here. A stale socket file (nobody
 * listens on it) is replaced; a live one means another daemon runs and is
 * an error; a file that is not a socket is never touched. The file we
 * created is removed when the listener closes, if it is still ours.
 */
#ifndef TT_TUNER_LISTENER_H
#define TT_TUNER_LISTENER_H

#include <stddef.h>
#include <sys/types.h>
#include <uv.h>

typedef struct tt_listener {
    uv_pipe_t pipe;
    int open;
    int owned; /* we bound the file: unlink it at close */
    int from_systemd;
    char path[108];
    dev_t dev;
    ino_t ino;
} tt_listener;

int tt_listener_open(tt_listener *l, uv_loop_t *loop, const char *path, int backlog, uv_connection_cb cb,
                     void *data, char *err, size_t errlen);
/* Stops accepting and removes the socket file if we created it. */
void tt_listener_close(tt_listener *l);

#endif
