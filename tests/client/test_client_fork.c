/* fork() at the worst moment for tt_client's atfork child handler: another
 * thread has just freed the client's connection (a failed request) and not
 * yet cleared the pointer. The handler runs in the child on the child's
 * copy of the client; it must not touch the freed struct (before the fix
 * it closed the fd it read from freed memory and wrote -1 into the freed
 * chunk, where malloc keeps its free-list link).
 *
 * Linked with -Wl,--wrap=close,--wrap=free: the client thread's close of
 * its connection's fd arms the next free in that thread, which is the
 * connection struct's (tt__conn_close: close, then free). That free fills
 * the struct with a pattern (standing for freed memory) and forks before
 * really freeing it, as another thread could at that instant; the child
 * reports whether the pattern was written over. */
#include <pthread.h>
#include <sys/wait.h>

#include "client/client_internal.h"
#include "fake_daemon.h"
#include "tiletune.h"
#include "tt_test.h"

int __real_close(int fd);
void __real_free(void *p);

static _Atomic int watch_fd = -1;
static __thread int armed;
static _Atomic int forked, child_status = -1;

#define PATTERN 0x5a
#define CHECKED 16 /* the struct's head: the fd, and malloc's link once freed */

int __wrap_close(int fd) {
    if (fd >= 0 && fd == atomic_load(&watch_fd)) {
        atomic_store(&watch_fd, -1);
        armed = 1;
    }
    return __real_close(fd);
}

void __wrap_free(void *p) {
    if (armed && p) {
        armed = 0;
        memset(p, PATTERN, CHECKED);
        pid_t pid = fork();
        if (pid == 0) {
            const unsigned char *b = p;
            for (int i = 0; i < CHECKED; i++)
                if (b[i] != PATTERN) _exit(1);
            _exit(0);
        }
        if (pid > 0) {
            int st;
            if (waitpid(pid, &st, 0) == pid && WIFEXITED(st)) atomic_store(&child_status, WEXITSTATUS(st));
            atomic_store(&forked, 1);
        }
    }
    __real_free(p);
}

static const char *answer(fake_daemon *f, const char *line) {
    static __thread char buf[256];
    if (strncmp(line, "HELLO ", 6) == 0) return "OK proto=1 server=fake/0 rev=ab gpu=none\n";
    if (f->arg) return "ERR busy too many connections\n"; /* the client drops the connection */
    const char *q = strstr(line, "seqlen_q=");
    long long s = q ? atoll(q + 9) : 0;
    snprintf(
        buf, sizeof buf,
        "OK match=exact config=family=mma,block_m=64,block_n=32,warps=4,stages=2,layout=swizzle,q_in_regs=0"
        " seqlen_q=%lld seqlen_k=%lld tflops=1\n",
        s, s);
    return buf;
}

static tt_key key_of(int64_t seqlen) {
    tt_key k;
    memset(&k, 0, sizeof k);
    k.dtype = TT_DTYPE_FP16;
    k.head_dim = 64;
    k.seqlen_q = k.seqlen_k = seqlen;
    return k;
}

TEST(child_handler_never_touches_a_connection_just_freed) {
    fake_daemon *f = fake_start(FAKE_SERVE, answer);
    tt_client *c;
    ASSERT_OK(tt_client_open(f->path, 1000, &c));
    tt_key k = key_of(128);
    tt_lookup_result r;
    ASSERT_OK(tt_lookup(c, &k, &r));
    int fd = tt__client_conn_fd(c);
    ASSERT(fd >= 0);
    f->arg = (void *)"busy";
    atomic_store(&watch_fd, fd);
    k = key_of(256);
    ASSERT_EQ(tt_lookup(c, &k, &r), TT_FALLBACK);
    ASSERT_EQ(atomic_load(&forked), 1);
    ASSERT_EQ(atomic_load(&child_status), 0); /* 1: the child wrote into the freed connection */
    ASSERT_EQ(tt__client_conn_fd(c), -1);
    tt_client_close(c);
    fake_stop(f);
}

TT_TEST_MAIN()
