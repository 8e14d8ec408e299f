/*
 * The test harness: TEST(name) { ... } bodies with ASSERT_* checks, run by
 * TT_TEST_MAIN() each in a child process with a time-out, so one crash or
 * hang fails one test and the others still run. Exit code 77 from a test
 * (TT_SKIP) marks it skipped; ctest maps 77 via SKIP_RETURN_CODE.
 * Run one test: ./test_x name.
 */
#ifndef TT_TEST_H
#define TT_TEST_H

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef void (*tt_test_fn)(void);
struct tt_test_entry {
    const char *name;
    tt_test_fn fn;
};
#define TT_TESTS_MAX 256
static struct tt_test_entry tt_tests[TT_TESTS_MAX];
static int tt_ntests;

#define TEST(name)                                                                                        \
    static void test_##name(void);                                                                        \
    __attribute__((constructor)) static void register_##name(void) {                                      \
        if (tt_ntests < TT_TESTS_MAX) tt_tests[tt_ntests++] = (struct tt_test_entry){#name, test_##name}; \
    }                                                                                                     \
    static void test_##name(void)

#define TT_FAIL_AT(...)                                 \
    do {                                                \
        fprintf(stderr, "%s:%d: ", __FILE__, __LINE__); \
        fprintf(stderr, __VA_ARGS__);                   \
        fprintf(stderr, "\n");                          \
        exit(1);                                        \
    } while (0)

#define ASSERT(cond)                                            \
    do {                                                        \
        if (!(cond)) TT_FAIL_AT("assertion failed: %s", #cond); \
    } while (0)
#define ASSERT_EQ(a, b)                                                             \
    do {                                                                            \
        long long tt_a = (long long)(a), tt_b = (long long)(b);                     \
        if (tt_a != tt_b) TT_FAIL_AT("%s == %s: %lld != %lld", #a, #b, tt_a, tt_b); \
    } while (0)
#define ASSERT_OK(expr) ASSERT_EQ((expr), 0)
#define ASSERT_STREQ(a, b)                                                           \
    do {                                                                             \
        const char *tt_a = (a), *tt_b = (b);                                         \
        if (!tt_a || !tt_b || strcmp(tt_a, tt_b) != 0)                               \
            TT_FAIL_AT("%s == %s: \"%s\" != \"%s\"", #a, #b, tt_a ? tt_a : "(null)", \
                       tt_b ? tt_b : "(null)");                                      \
    } while (0)
#define ASSERT_CONTAINS(hay, needle)                                                    \
    do {                                                                                \
        const char *tt_h = (hay), *tt_n = (needle);                                     \
        if (!tt_h || !strstr(tt_h, tt_n))                                               \
            TT_FAIL_AT("\"%s\" does not contain \"%s\"", tt_h ? tt_h : "(null)", tt_n); \
    } while (0)
#define TT_SKIP(...)                  \
    do {                              \
        fprintf(stderr, "SKIP: ");    \
        fprintf(stderr, __VA_ARGS__); \
        fprintf(stderr, "\n");        \
        exit(77);                     \
    } while (0)

static int tt_test_timeout_s = 60;

static int tt_run_one(const struct tt_test_entry *t) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) {
        alarm((unsigned)tt_test_timeout_s);
        t->fn();
        exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    if (WIFEXITED(st) && WEXITSTATUS(st) == 77) {
        printf("skip %s\n", t->name);
        return 77;
    }
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
        printf("ok   %s\n", t->name);
        return 0;
    }
    if (WIFSIGNALED(st))
        printf("FAIL %s (signal %d%s)\n", t->name, WTERMSIG(st),
               WTERMSIG(st) == SIGALRM ? ": timed out" : "");
    else printf("FAIL %s (exit %d)\n", t->name, WEXITSTATUS(st));
    return 1;
}

#define TT_TEST_MAIN()                                                                         \
    int main(int argc, char **argv) {                                                          \
        const char *e = getenv("TT_TEST_TIMEOUT");                                             \
        if (e) tt_test_timeout_s = atoi(e);                                                    \
        int failed = 0, ran = 0, skipped = 0;                                                  \
        for (int i = 0; i < tt_ntests; i++) {                                                  \
            if (argc > 1 && strcmp(argv[1], tt_tests[i].name) != 0) continue;                  \
            int r = tt_run_one(&tt_tests[i]);                                                  \
            ran++;                                                                             \
            if (r == 77) skipped++;                                                            \
            else if (r) failed++;                                                              \
        }                                                                                      \
        printf("%d passed, %d failed, %d skipped\n", ran - failed - skipped, failed, skipped); \
        if (ran == 0) return 1;                                                                \
        if (failed) return 1;                                                                  \
        return skipped == ran ? 77 : 0;                                                        \
    }

#endif
