#include "tuner/daemon/listener.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include "tiletune.h"

/* 1 if something accepts connections at path, 0 if not (stale), <0 on a
 * path that must not be replaced. */
static int someone_listens(const char *path, char *err, size_t errlen) {
    struct stat st;
    if (lstat(path, &st) < 0) return errno == ENOENT ? 0 : TT_ERR_IO;
    if (!S_ISSOCK(st.st_mode)) {
        snprintf(err, errlen, "%s exists and is not a socket: not replacing it", path);
        return TT_ERR_INVAL;
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return TT_ERR_IO;
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof sa);
    sa.sun_family = AF_UNIX;
    memcpy(sa.sun_path, path, strlen(path));
    int rc = connect(fd, (struct sockaddr *)&sa, sizeof sa);
    int e = errno;
    close(fd);
    if (rc == 0) return 1;
    /* ECONNREFUSED: a socket file nobody listens on. EAGAIN would be a
     * live listener with a full backlog. */
    return e == ECONNREFUSED ? 0 : 1;
}

int tt_listener_open(tt_listener *l, uv_loop_t *loop, const char *path, int backlog, uv_connection_cb cb,
                     void *data, char *err, size_t errlen) {
    memset(l, 0, sizeof *l);
    int rc, n = sd_listen_fds(1);
    if (n < 0) {
        snprintf(err, errlen, "sd_listen_fds: %s", strerror(-n));
        return TT_ERR_IO;
    }
    uv_pipe_init(loop, &l->pipe, 0);
    l->pipe.data = data;
    l->open = 1;
    if (n > 1) {
        snprintf(err, errlen, "systemd passed %d sockets; expected one", n);
        return TT_ERR_INVAL;
    }
    if (n == 1) {
        int fd = SD_LISTEN_FDS_START;
        if (sd_is_socket_unix(fd, SOCK_STREAM, 1, NULL, 0) <= 0) {
            snprintf(err, errlen, "the socket from systemd is not a listening SOCK_STREAM Unix socket");
            return TT_ERR_INVAL;
        }
        if ((rc = uv_pipe_open(&l->pipe, fd)) < 0) {
            snprintf(err, errlen, "socket from systemd: %s", uv_strerror(rc));
            return TT_ERR_IO;
        }
        l->from_systemd = 1;
    } else {
        if (strlen(path) >= sizeof l->path) {
            snprintf(err, errlen, "socket path too long (%zu bytes, at most %zu)", strlen(path),
                     sizeof l->path - 1);
            return TT_ERR_RANGE;
        }
        rc = someone_listens(path, err, errlen);
        if (rc < 0) {
            if (rc == TT_ERR_IO) snprintf(err, errlen, "%s: %s", path, strerror(errno));
            return rc;
        }
        if (rc == 1) {
            snprintf(err, errlen, "another daemon is listening on %s", path);
            return TT_ERR_BUSY;
        }
        if (unlink(path) < 0 && errno != ENOENT) {
            snprintf(err, errlen, "cannot remove the stale socket %s: %s", path, strerror(errno));
            return TT_ERR_IO;
        }
        if ((rc = uv_pipe_bind(&l->pipe, path)) < 0) {
            snprintf(err, errlen, "cannot bind %s: %s", path, uv_strerror(rc));
            return TT_ERR_IO;
        }
        struct stat st;
        if (stat(path, &st) == 0) {
            l->dev = st.st_dev;
            l->ino = st.st_ino;
        }
        snprintf(l->path, sizeof l->path, "%s", path);
        l->owned = 1;
    }
    if ((rc = uv_listen((uv_stream_t *)&l->pipe, backlog, cb)) < 0) {
        snprintf(err, errlen, "listen: %s", uv_strerror(rc));
        return TT_ERR_IO;
    }
    return 0;
}

void tt_listener_close(tt_listener *l) {
    if (!l->open) return;
    l->open = 0;
    if (!uv_is_closing((uv_handle_t *)&l->pipe)) uv_close((uv_handle_t *)&l->pipe, NULL);
    if (l->owned) {
        /* Only if the file is still the one we bound: a second daemon may
         * have replaced it (stale check) after we stopped listening. */
        struct stat st;
        if (stat(l->path, &st) == 0 && st.st_dev == l->dev && st.st_ino == l->ino) unlink(l->path);
        l->owned = 0;
    }
}
