/* The connection module: framing, deadlines, reply parsing, pipelining. */
#include <sys/stat.h>

#include "client/conn.h"
#include "fake_daemon.h"
#include "tt_test.h"

static const char *canned(fake_daemon *f, const char *line) {
    (void)f;
    if (strcmp(line, "PING") == 0) return "OK pong\n";
    if (strcmp(line, "SPLIT") == 0) return "OK a=1 b=two\r\n";
    /* three replies at once: a body, an error and a plain OK */
    if (strcmp(line, "PIPE") == 0) return "OK lines=2\nx 1\ny 2\nERR notfound no such job 7\nOK c=3\n";
    if (strcmp(line, "LONG") == 0) {
        static char big[TT_REPLY_LINE_MAX + 100];
        memset(big, 'a', sizeof big - 2);
        memcpy(big, "OK x=", 5);
        big[sizeof big - 2] = '\n';
        big[sizeof big - 1] = '\0';
        return big;
    }
    if (strcmp(line, "BYE") == 0) return "OK lines=3\nonly one\n";
    if (strcmp(line, "JUNK") == 0) return "HELLO THERE\n";
    return "ERR verb unknown verb\n";
}

TEST(reply_parse) {
    tt__reply r;
    ASSERT_OK(tt__reply_parse(strdup("OK pong"), &r));
    ASSERT_EQ(r.status, 0);
    ASSERT_STREQ(r.word, "pong");
    ASSERT_EQ(r.msg.nfields, 0);
    tt__reply_free(&r);

    ASSERT_OK(tt__reply_parse(strdup("OK job=12 keys=4"), &r));
    ASSERT_STREQ(r.word, "");
    ASSERT_STREQ(tt__msg_get(&r.msg, "job"), "12");
    ASSERT_STREQ(tt__msg_get(&r.msg, "keys"), "4");
    tt__reply_free(&r);

    ASSERT_OK(tt__reply_parse(strdup("OK"), &r));
    tt__reply_free(&r);

    ASSERT_OK(tt__reply_parse(strdup("ERR permission TUNE needs an admin"), &r));
    ASSERT_EQ(r.status, TT_ERR_PERM);
    ASSERT_STREQ(r.code, "permission");
    ASSERT_STREQ(r.message, "TUNE needs an admin");
    tt__reply_free(&r);

    ASSERT_OK(tt__reply_parse(strdup("ERR busy"), &r));
    ASSERT_EQ(r.status, TT_ERR_BUSY);
    tt__reply_free(&r);
    ASSERT_OK(tt__reply_parse(strdup("ERR somethingnew from a newer daemon"), &r));
    ASSERT_EQ(r.status, TT_ERR_REMOTE);
    tt__reply_free(&r);

    const char *bad[] = {"OKAY", "ERR", "ERR ", "ok pong", "OK a=1 a=2", "OK a=", "", "NOPE x=1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ASSERT_EQ(tt__reply_parse(strdup(bad[i]), &r), TT_ERR_PROTO);
        tt__reply_free(&r);
    }
}

TEST(socket_path_defaults) {
    unsetenv("TILETUNE_SOCKET");
    ASSERT_STREQ(tt__socket_path(NULL), TT_SOCKET_DEFAULT);
    ASSERT_STREQ(tt__socket_path(""), TT_SOCKET_DEFAULT);
    setenv("TILETUNE_SOCKET", "/tmp/x.sock", 1);
    ASSERT_STREQ(tt__socket_path(NULL), "/tmp/x.sock");
    ASSERT_STREQ(tt__socket_path("/a/b"), "/a/b");
}

TEST(connect_nothing_there) {
    tt__conn *c = NULL;
    char err[256] = "";
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ASSERT_EQ(tt__conn_open("/nonexistent/tiletune.sock", tt__deadline_after_ms(1000), &c, err, sizeof err),
              TT_ERR_NODAEMON);
    ASSERT(ms_since(&t0) < 100);
    ASSERT(c == NULL);
    ASSERT_CONTAINS(err, "/nonexistent/tiletune.sock");
    ASSERT_CONTAINS(err, "No such file or directory");

    /* a socket file nobody listens on any more (no serving thread: one in
     * poll() would keep the closed listener alive for a moment) */
    fake_daemon *f = fake_start(FAKE_NO_ACCEPT, NULL);
    char path[108];
    snprintf(path, sizeof path, "%s", f->path);
    close(f->lfd);
    f->lfd = socket(AF_UNIX, SOCK_STREAM, 0);
    ASSERT_EQ(tt__conn_open(path, tt__deadline_after_ms(1000), &c, err, sizeof err), TT_ERR_NODAEMON);
    ASSERT_CONTAINS(err, "Connection refused");
    fake_stop(f);

    char longpath[200];
    memset(longpath, 'x', sizeof longpath - 1);
    longpath[sizeof longpath - 1] = '\0';
    ASSERT_EQ(tt__conn_open(longpath, tt__deadline_after_ms(10), &c, err, sizeof err), TT_ERR_INVAL);
}

TEST(request_and_word_reply) {
    fake_daemon *f = fake_start(FAKE_SERVE, canned);
    tt__conn *c;
    char err[256];
    ASSERT_OK(tt__conn_open(f->path, tt__deadline_after_ms(1000), &c, err, sizeof err));
    tt__reply r;
    ASSERT_OK(tt__conn_request(c, "PING", &r, tt__deadline_after_ms(1000), err, sizeof err));
    ASSERT_EQ(r.status, 0);
    ASSERT_STREQ(r.word, "pong");
    tt__reply_free(&r);
    ASSERT_OK(tt__conn_request(c, "SPLIT", &r, tt__deadline_after_ms(1000), err, sizeof err));
    ASSERT_STREQ(tt__msg_get(&r.msg, "b"), "two"); /* the \r is dropped */
    tt__reply_free(&r);
    ASSERT_OK(tt__conn_request(c, "WHAT", &r, tt__deadline_after_ms(1000), err, sizeof err));
    ASSERT_EQ(r.status, TT_ERR_PROTO);
    ASSERT_STREQ(r.code, "verb");
    tt__reply_free(&r);
    tt__conn_close(c);
    fake_stop(f);
}

TEST(pipelined_replies_with_bodies) {
    fake_daemon *f = fake_start(FAKE_SERVE, canned);
    tt__conn *c;
    char err[256];
    ASSERT_OK(tt__conn_open(f->path, tt__deadline_after_ms(1000), &c, err, sizeof err));
    /* PIPE answers three replies; PING's answer follows them in the stream */
    ASSERT_OK(tt__conn_send(c, "PIPE\nPING\n", 10, tt__deadline_after_ms(1000), err, sizeof err));
    int64_t dl = tt__deadline_after_ms(1000);
    tt__reply r;
    ASSERT_OK(tt__conn_read_reply(c, &r, dl, err, sizeof err));
    ASSERT_EQ(r.status, 0);
    ASSERT_EQ(r.nbody, 2);
    ASSERT_STREQ(r.body[0], "x 1");
    ASSERT_STREQ(r.body[1], "y 2");
    tt__reply_free(&r);
    ASSERT_OK(tt__conn_read_reply(c, &r, dl, err, sizeof err));
    ASSERT_EQ(r.status, TT_ERR_NOTFOUND);
    ASSERT_STREQ(r.message, "no such job 7");
    ASSERT_EQ(r.nbody, 0);
    tt__reply_free(&r);
    ASSERT_OK(tt__conn_read_reply(c, &r, dl, err, sizeof err));
    ASSERT_STREQ(tt__msg_get(&r.msg, "c"), "3");
    tt__reply_free(&r);
    ASSERT_OK(tt__conn_read_reply(c, &r, dl, err, sizeof err));
    ASSERT_STREQ(r.word, "pong");
    tt__reply_free(&r);
    tt__conn_close(c);
    fake_stop(f);
}

TEST(bad_replies) {
    fake_daemon *f = fake_start(FAKE_SERVE, canned);
    tt__conn *c;
    char err[256];
    tt__reply r;
    ASSERT_OK(tt__conn_open(f->path, tt__deadline_after_ms(1000), &c, err, sizeof err));
    ASSERT_EQ(tt__conn_request(c, "LONG", &r, tt__deadline_after_ms(1000), err, sizeof err), TT_ERR_PROTO);
    ASSERT_CONTAINS(err, "longer than");
    tt__conn_close(c);

    ASSERT_OK(tt__conn_open(f->path, tt__deadline_after_ms(1000), &c, err, sizeof err));
    ASSERT_EQ(tt__conn_request(c, "JUNK", &r, tt__deadline_after_ms(1000), err, sizeof err), TT_ERR_PROTO);
    ASSERT_CONTAINS(err, "malformed reply");
    tt__conn_close(c);

    /* a body cut short (2 of 3 lines never come): the reply fails as a whole */
    ASSERT_OK(tt__conn_open(f->path, tt__deadline_after_ms(1000), &c, err, sizeof err));
    ASSERT_OK(tt__conn_send(c, "BYE\n", 4, tt__deadline_after_ms(1000), err, sizeof err));
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ASSERT_EQ(tt__conn_read_reply(c, &r, tt__deadline_after_ms(150), err, sizeof err), TT_ERR_TIMEOUT);
    ASSERT(ms_since(&t0) < 250);
    ASSERT_EQ(r.nbody, 0);
    ASSERT(r.head == NULL);
    tt__conn_close(c);
    fake_stop(f);
}

TEST(read_deadline_is_kept) {
    fake_daemon *f = fake_start(FAKE_ACCEPT_MUTE, NULL);
    tt__conn *c;
    char err[256];
    ASSERT_OK(tt__conn_open(f->path, tt__deadline_after_ms(1000), &c, err, sizeof err));
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    tt__reply r;
    ASSERT_EQ(tt__conn_request(c, "PING", &r, tt__deadline_after_ms(80), err, sizeof err), TT_ERR_TIMEOUT);
    double ms = ms_since(&t0);
    ASSERT(ms >= 79 && ms < 130);
    ASSERT_CONTAINS(err, "did not answer in time");
    tt__conn_close(c);
    fake_stop(f);
}

TEST(peer_closed_and_no_sigpipe) {
    fake_daemon *f = fake_start(FAKE_NO_ACCEPT, NULL);
    tt__conn *c;
    char err[256];
    ASSERT_OK(tt__conn_open(f->path, tt__deadline_after_ms(1000), &c, err, sizeof err));
    fake_stop(f); /* closes the listener: the queued connection is reset */
    tt__reply r;
    /* SIGPIPE left at its default would kill this test */
    signal(SIGPIPE, SIG_DFL);
    int rc = tt__conn_request(c, "PING", &r, tt__deadline_after_ms(200), err, sizeof err);
    ASSERT(rc == TT_ERR_IO);
    rc = tt__conn_send(c, "PING\n", 5, tt__deadline_after_ms(200), err, sizeof err);
    ASSERT(rc == TT_ERR_IO);
    tt__conn_close(c);
}

TEST(request_too_long) {
    fake_daemon *f = fake_start(FAKE_SERVE, canned);
    tt__conn *c;
    char err[256];
    ASSERT_OK(tt__conn_open(f->path, tt__deadline_after_ms(1000), &c, err, sizeof err));
    char *req = malloc(TT_LINE_MAX + 2);
    memset(req, 'A', TT_LINE_MAX + 1);
    req[TT_LINE_MAX + 1] = '\0';
    tt__reply r;
    ASSERT_EQ(tt__conn_request(c, req, &r, tt__deadline_after_ms(100), err, sizeof err), TT_ERR_INVAL);
    free(req);
    tt__conn_close(c);
    fake_stop(f);
}

TT_TEST_MAIN()
