/* Runs the tiletune CLI binary (TT_CLI_PATH, set by CMake) and captures its
 * exit code, stdout and stderr. */
#ifndef TT_CLI_RUN_H
#define TT_CLI_RUN_H

#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct cli_result {
    int rc; /* exit code, or 128 + signal */
    char out[16384];
    char err[4096];
} cli_result;

static void slurp(int fd, char *buf, size_t cap) {
    size_t n = 0;
    ssize_t r;
    while (n + 1 < cap && (r = read(fd, buf + n, cap - 1 - n)) > 0) n += (size_t)r;
    buf[n] = '\0';
}

/* cli(&res, "arg", "arg", ..., NULL) */
static void cli(cli_result *res, ...) {
    const char *argv[64];
    int argc = 0;
    argv[argc++] = TT_CLI_PATH;
    va_list ap;
    va_start(ap, res);
    const char *a;
    while ((a = va_arg(ap, const char *)) && argc < 63) argv[argc++] = a;
    va_end(ap);
    argv[argc] = NULL;
    char outp[] = "/tmp/ttcli-out-XXXXXX", errp[] = "/tmp/ttcli-err-XXXXXX";
    int ofd = mkstemp(outp), efd = mkstemp(errp);
    unlink(outp);
    unlink(errp);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(ofd, 1);
        dup2(efd, 2);
        execv(TT_CLI_PATH, (char *const *)argv);
        _exit(127);
    }
    int st;
    waitpid(pid, &st, 0);
    res->rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    lseek(ofd, 0, SEEK_SET);
    lseek(efd, 0, SEEK_SET);
    slurp(ofd, res->out, sizeof res->out);
    slurp(efd, res->err, sizeof res->err);
    close(ofd);
    close(efd);
}

/* Number of lines in s. */
static int nlines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

#endif
