/*
 * libFuzzer target of the daemon's line protocol: the bytes are what a
 * client sends, cut into lines and answered by the real request path
 * (tt_handle_line: the grammar, the verbs' field tables, the handlers)
 * over a real store and index, as root or as an unprivileged peer (the
 * first byte chooses). Besides crashes and sanitizer findings it checks
 * that every request gets exactly one reply starting OK or ERR, that a
 * reply's lines=N frames exactly N body lines, and that no reply line
 * carries a control character.
 * Run: fuzz/run.sh SECONDS proto; corpus: fuzz/corpus/proto/.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tuner/daemon/handlers.h"
#include "tuner/daemon/log.h"

static tt_hctx x;
static tt_stats stats;
static tt_auth auth;

static void die(const char *what, const char *text, size_t n) {
    fprintf(stderr, "%s:\n%.*s\n", what, (int)n, text);
    abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    static char dir[] = "/tmp/tt-fuzz-proto-XXXXXX", db[64];
    char err[256];
    if (!mkdtemp(dir)) abort();
    snprintf(db, sizeof db, "%s/tt.db", dir);
    tt_log_init(TT_LOG_ERR);
    tt_store *store;
    tt_index *index;
    if (tt_store_open(db, &store, err, sizeof err) < 0 || tt_index_new(&index) < 0 ||
        tt_auth_init(&auth, NULL, err, sizeof err) < 0)
        abort();
    x = (tt_hctx){.index = index, .store = store, .stats = &stats, .auth = &auth, .db_path = db};
    snprintf(x.builtin_rev, sizeof x.builtin_rev, "1");
    tt_hctx_identity(&x, "ab", "0a0b");
    return 0;
}

/* Every reply in `out` from `from` on: one head line, and its body. */
static size_t check_replies(const tt_buf *out, size_t from) {
    size_t pos = from, replies = 0;
    while (pos < out->len) {
        const char *line = out->data + pos, *nl = memchr(line, '\n', out->len - pos);
        if (!nl) die("a reply without its newline", line, out->len - pos);
        size_t n = (size_t)(nl - line);
        if (!(n >= 3 && (memcmp(line, "OK", 2) == 0 || memcmp(line, "ERR ", 4) == 0)))
            die("a reply neither OK nor ERR", line, n);
        long body = 0;
        const char *ls = NULL;
        for (const char *p = line; p + 7 <= nl; p++)
            if (memcmp(p, " lines=", 7) == 0) ls = p + 7;
        if (ls && line[0] == 'O') body = strtol(ls, NULL, 10);
        pos += n + 1;
        for (long i = 0; i < body; i++) {
            const char *b = out->data + pos, *bn = memchr(b, '\n', out->len - pos);
            if (!bn) die("a body shorter than its lines=N", line, n);
            for (const char *c = b; c < bn; c++)
                if ((unsigned char)*c < 0x20 || *c == 0x7f)
                    die("a control character in a body line", b, (size_t)(bn - b));
            pos += (size_t)(bn - b) + 1;
        }
        replies++;
    }
    return replies;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    tt_peer peer = {.uid = data[0] & 1 ? 1000 : 0, .gid = 0, .pid = 1, .known = 1};
    tt_session s;
    tt_session_init(&s, &peer);
    tt_buf out;
    tt_buf_init(&out);
    char *copy = malloc(size);
    if (!copy) return 0;
    memcpy(copy, data + 1, size - 1);
    size_t at = 0, n = size - 1;
    while (at < n) {
        char *line = copy + at, *nl = memchr(line, '\n', n - at);
        size_t len = nl ? (size_t)(nl - line) : n - at;
        at += len + 1;
        size_t before = out.len;
        int in_body = s.fleet_body != NULL;
        int rc = tt_handle_line(&x, &s, line, len, &out);
        size_t replies = check_replies(&out, before);
        /* a request gets one reply; an IMPORT body line none until its last */
        if (!in_body && !s.fleet_body && replies != 1 && !(replies == 0 && s.export))
            die("a request without exactly one reply", copy + at - len - 1, len);
        if (in_body && replies > 1) die("an IMPORT body line with several replies", line, len);
        tt_buf_reset(&out);
        if (rc == TT_HANDLE_CLOSE) break;
    }
    tt_session_free(&s);
    tt_buf_free(&out);
    free(copy);
    return 0;
}
