/* tiletuned: settings (defaults, the configuration file, the environment,
 * the command line), the one-daemon-per-database lock, then the daemon
 * (daemon.c). One table of options makes --help, the manual page
 * (--help-man), getopt_long's list and the configuration file's keys. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>
#include <uv.h>

#include "tuner/daemon/daemon.h"
#include "tuner/daemon/log.h"
#include "common/proto.h"

#define DEFAULT_SOCKET "/run/tiletune/tiletune.sock"
#define DEFAULT_DB "/var/lib/tiletune/tiletune.db"
#define DEFAULT_CACHE "/var/cache/tiletune"
#ifndef TT_CONFIG_DEFAULT
#define TT_CONFIG_DEFAULT "/etc/tiletune/tiletuned.conf"
#endif
/* Where an installed tree keeps the worker, relative to the daemon's
 * directory (sbin/ -> libexec/tiletune/). */
#ifndef TT_WORKER_RELATIVE
#define TT_WORKER_RELATIVE "../libexec/tiletune/tiletune-worker"
#endif

enum {
    O_SOCKET,
    O_DB,
    O_CACHE,
    O_WORKER,
    O_WTIMEOUT,
    O_GROUP,
    O_MAXCONN,
    O_PERUSER,
    O_ADMINCONN,
    O_IDLE,
    O_LOG,
    O_CONFIG,
    O_FG,
    O_HELP,
    O_HELP_MAN,
    O_VERSION,
    O_COUNT
};

typedef struct opt {
    const char *name, *arg, *help;
    int in_file; /* 1: a key of the configuration file too; 2: and re-read on SIGHUP */
} opt;

static const opt opts[O_COUNT] = {
    [O_SOCKET] = {"socket", "PATH",
                  "listening socket (default $TILETUNE_SOCKET, else " DEFAULT_SOCKET "); a socket "
                  "passed by systemd takes precedence",
                  1},
    [O_DB] = {"db", "PATH",
              "tuning database (default $TILETUNE_DB, else " DEFAULT_DB "); one daemon per database: "
              "a second one exits naming the first",
              1},
    [O_CACHE] = {"cache-dir", "PATH", "compiled-kernel cache for the workers (default " DEFAULT_CACHE ")", 1},
    [O_WORKER] = {"worker", "PATH",
                  "measurement worker program (default: tiletune-worker next to this binary, else "
                  "in " TT_WORKER_RELATIVE " from it); \"\" runs without one",
                  1},
    [O_WTIMEOUT] = {"worker-timeout", "SEC", "kill a measuring worker silent this long (default 300)", 1},
    [O_GROUP] = {"admin-group", "NAME",
                 "members may TUNE, CANCEL, FORGET and IMPORT (root and the daemon's own user "
                 "always may); none by default",
                 2},
    [O_MAXCONN] = {"max-connections", "N", "connection cap; beyond it clients get ERR busy (default 1024)",
                   2},
    [O_PERUSER] = {"max-connections-per-user", "N",
                   "connections one user but root and the daemon's may hold "
                   "(default a quarter of max-connections)",
                   1},
    [O_ADMINCONN] = {"admin-connections", "N",
                     "slots of the cap only root and the daemon's user may take "
                     "(default 1/64 of max-connections)",
                     1},
    [O_IDLE] = {"idle-timeout", "SEC", "close connections idle this long (default 300)", 2},
    [O_LOG] = {"log-level", "LEVEL", "error, warn, info or debug (default info)", 2},
    [O_CONFIG] = {"config", "FILE",
                  "configuration file (default $TILETUNED_CONFIG, else " TT_CONFIG_DEFAULT
                  ", which may be absent)",
                  0},
    [O_FG] = {"foreground", NULL, "run in the foreground (always the case; for scripts)", 0},
    [O_HELP] = {"help", NULL, "show this help", 0},
    [O_HELP_MAN] = {"help-man", NULL, "print the manual page (roff)", 0},
    [O_VERSION] = {"version", NULL, "show the version", 0},
};

static void usage(FILE *f) {
    fprintf(f, "Usage: tiletuned [OPTION]...\n"
               "Serve tuned SDPA kernel configs over a Unix socket and run tuning jobs.\n\n");
    for (int i = 0; i < O_COUNT; i++) {
        char left[64];
        snprintf(left, sizeof left, "--%s%s%s", opts[i].name, opts[i].arg ? " " : "",
                 opts[i].arg ? opts[i].arg : "");
        fprintf(f, "  %-22s %s\n", left, opts[i].help);
    }
    fprintf(f, "\nThe configuration file holds \"key = value\" lines, the keys being the\n"
               "long options above; the command line overrides it. SIGHUP (systemctl\n"
               "reload) re-reads admin-group, max-connections, idle-timeout and log-level.\n"
               "Protocol: docs/protocol.md. Stop with SIGTERM or SIGINT.\n");
}

static void roff(const char *s) {
    for (; *s; s++) {
        if (*s == '-') fputs("\\-", stdout);
        else if (*s == '\\') fputs("\\e", stdout);
        else putchar(*s);
    }
}

static void man_page(void) {
    printf(".TH TILETUNED 8 \"\" \"tiletune %s\" \"System Administration\"\n", TT_VERSION_STRING);
    puts(".SH NAME\ntiletuned \\- tunes SDPA attention kernels and serves the fastest configs of a node");
    puts(".SH SYNOPSIS\n.B tiletuned\n[\\fIOPTION\\fR]...");
    puts(".SH DESCRIPTION\ntiletuned answers lookups of tuned kernel configs over a Unix socket,\n"
         "runs tuning jobs on the node's GPUs through one measurement worker per GPU,\n"
         "and keeps what it measured in a SQLite database. It is meant to run under\n"
         "systemd (tiletuned.socket, tiletuned.service); see tiletune(1) for the client.");
    puts(".SH OPTIONS");
    for (int i = 0; i < O_COUNT; i++) {
        printf(".TP\n.B \\-\\-%s", opts[i].name);
        if (opts[i].arg) printf(" \\fI%s\\fR", opts[i].arg);
        putchar('\n');
        roff(opts[i].help);
        putchar('\n');
    }
    puts(".SH CONFIGURATION\nThe configuration file holds \\fIkey\\fR = \\fIvalue\\fR lines (# starts a\n"
         "comment); the keys are the long options that take a value, but config.\n"
         "Values given on the command line win over the file. On SIGHUP\n"
         "(\\fBsystemctl reload tiletuned\\fR) the file is read again and admin\\-group,\n"
         "max\\-connections, idle\\-timeout and log\\-level take effect; the others need a\n"
         "restart. A file that does not parse is refused whole and the settings stay.");
    puts(
        ".SH SIGNALS\n.TP\n.B SIGTERM, SIGINT\nstop: answer what is in flight, stop the workers, close the database.\n"
        ".TP\n.B SIGHUP\nre-read the configuration file.");
    puts(".SH ENVIRONMENT\n.TP\n.B TILETUNE_SOCKET, TILETUNE_DB\ndefaults of \\-\\-socket and \\-\\-db.\n"
         ".TP\n.B TILETUNED_CONFIG\ndefault of \\-\\-config.");
    puts(".SH FILES\n.TP\n.B " TT_CONFIG_DEFAULT "\nthe configuration file.\n.TP\n.B " DEFAULT_DB
         "\nthe tuning database; \\fIDB\\fR.lock beside it holds the daemon's pid and lock.");
    puts(".SH EXIT STATUS\n0 after a clean stop; 1 when the daemon could not start (the reason is logged),\n"
         "another daemon holds the database included; 2 for a usage or configuration error.");
    puts(".SH SEE ALSO\n.BR tiletune (1),\n.BR systemd.service (5)");
}

/* ---- settings ----------------------------------------------------------------- */

typedef struct settings {
    char *val[O_COUNT]; /* owned; NULL: not set */
    int from_cmdline[O_COUNT];
} settings;

static void set_val(settings *s, int k, const char *v) {
    free(s->val[k]);
    s->val[k] = v ? strdup(v) : NULL;
}

static void settings_free(settings *s) {
    for (int i = 0; i < O_COUNT; i++) free(s->val[i]);
}

static int find_key(const char *name) {
    for (int i = 0; i < O_COUNT; i++)
        if (opts[i].in_file && strcmp(opts[i].name, name) == 0) return i;
    return -1;
}

static char *trim(char *s) {
    while (*s == ' ' || *s == '\t') s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t' || s[n - 1] == '\n' || s[n - 1] == '\r')) s[--n] = '\0';
    return s;
}

/* Reads the configuration file into `s` (keys given on the command line
 * left as they are). A missing file is fine when `must_exist` is 0. Any
 * error leaves `s` untouched and says why in err. */
static int read_config(const char *path, int must_exist, settings *s, char *err, size_t errlen) {
    FILE *f = fopen(path, "r");
    if (!f) {
        if (errno == ENOENT && !must_exist) return 0;
        snprintf(err, errlen, "cannot read the configuration file %s: %s", path, strerror(errno));
        return -1;
    }
    settings next;
    memset(&next, 0, sizeof next);
    char line[4096];
    int no = 0, rc = 0;
    while (!rc && fgets(line, sizeof line, f)) {
        no++;
        if (!strchr(line, '\n') && !feof(f)) {
            snprintf(err, errlen, "%s:%d: line too long", path, no);
            rc = -1;
            break;
        }
        char *hash = strchr(line, '#');
        if (hash) *hash = '\0';
        char *t = trim(line);
        if (!*t) continue;
        char *eq = strchr(t, '=');
        if (!eq) {
            snprintf(err, errlen, "%s:%d: expected key = value", path, no);
            rc = -1;
            break;
        }
        *eq = '\0';
        char *key = trim(t), *val = trim(eq + 1);
        size_t vn = strlen(val);
        if (vn >= 2 && val[0] == '"' && val[vn - 1] == '"') val[vn - 1] = '\0', val++;
        int k = find_key(key);
        if (k < 0) {
            snprintf(err, errlen, "%s:%d: unknown key '%s'", path, no, key);
            rc = -1;
        } else {
            set_val(&next, k, val);
        }
    }
    fclose(f);
    for (int i = 0; i < O_COUNT; i++) {
        if (!rc && next.val[i] && !s->from_cmdline[i]) set_val(s, i, next.val[i]);
    }
    settings_free(&next);
    return rc;
}

static int int_val(const char *opt, const char *v, int min, int max, int *out, char *err, size_t errlen) {
    int64_t x;
    if (tt__parse_i64(v, min, max, &x) < 0) {
        snprintf(err, errlen, "%s must be a number in %d..%d, not '%s'", opt, min, max, v);
        return -1;
    }
    *out = (int)x;
    return 0;
}

/* The settings as daemon options; the strings stay owned by `s`. */
static int to_opts(const settings *s, tt_daemon_opts *o, int *level, char *err, size_t errlen) {
    const char *v;
    o->socket_path = s->val[O_SOCKET] && *s->val[O_SOCKET] ? s->val[O_SOCKET] : DEFAULT_SOCKET;
    o->db_path = s->val[O_DB] && *s->val[O_DB] ? s->val[O_DB] : DEFAULT_DB;
    o->cache_dir = s->val[O_CACHE] ? s->val[O_CACHE] : DEFAULT_CACHE;
    o->worker_path = s->val[O_WORKER];
    o->admin_group = s->val[O_GROUP] && *s->val[O_GROUP] ? s->val[O_GROUP] : NULL;
    o->max_connections = 1024;
    o->idle_timeout_s = 300;
    o->worker_timeout_s = 300;
    o->max_per_user = 0;
    o->admin_reserved = -1;
    *level = TT_LOG_INFO;
    if ((v = s->val[O_WTIMEOUT]) &&
        int_val("worker-timeout", v, 1, 86400, &o->worker_timeout_s, err, errlen) < 0)
        return -1;
    if ((v = s->val[O_MAXCONN]) &&
        int_val("max-connections", v, 1, 1 << 20, &o->max_connections, err, errlen) < 0)
        return -1;
    if ((v = s->val[O_PERUSER]) &&
        int_val("max-connections-per-user", v, 1, 1 << 20, &o->max_per_user, err, errlen) < 0)
        return -1;
    if ((v = s->val[O_ADMINCONN]) &&
        int_val("admin-connections", v, 0, 1 << 20, &o->admin_reserved, err, errlen) < 0)
        return -1;
    if ((v = s->val[O_IDLE]) && int_val("idle-timeout", v, 1, 86400 * 7, &o->idle_timeout_s, err, errlen) < 0)
        return -1;
    if ((v = s->val[O_LOG]) && tt_log_level_parse(v, level) < 0) {
        snprintf(err, errlen, "log-level must be error, warn, info or debug, not '%s'", v);
        return -1;
    }
    return 0;
}

/* ---- SIGHUP ------------------------------------------------------------------- */

static settings live; /* what the daemon runs with */
static const char *config_path;
static int config_must_exist;

/* Re-reads the file onto a copy of the live settings; on success the
 * reloadable options take effect and the others, when changed, are
 * reported as needing a restart. */
static int reload(void *ud, tt_daemon_opts *o, char *err, size_t errlen) {
    (void)ud;
    settings next;
    memset(&next, 0, sizeof next);
    for (int i = 0; i < O_COUNT; i++) {
        next.from_cmdline[i] = live.from_cmdline[i];
        if (live.from_cmdline[i]) set_val(&next, i, live.val[i]);
    }
    tt_daemon_opts no = *o;
    tt_auth check;
    int level;
    if (read_config(config_path, config_must_exist, &next, err, errlen) < 0 ||
        to_opts(&next, &no, &level, err, errlen) < 0 ||
        tt_auth_init(&check, no.admin_group, err, errlen) < 0) {
        settings_free(&next);
        return -1;
    }
    for (int i = 0; i < O_COUNT; i++) {
        const char *a = live.val[i] ? live.val[i] : "", *b = next.val[i] ? next.val[i] : "";
        if (opts[i].in_file == 1 && strcmp(a, b) != 0)
            tt_warn("reload: %s changed in %s; it takes effect at the next restart", opts[i].name,
                    config_path);
    }
    /* Only the reloadable values move to the live set: the others keep
     * describing what runs. */
    for (int i = 0; i < O_COUNT; i++)
        if (opts[i].in_file == 2) {
            char *t = live.val[i];
            live.val[i] = next.val[i];
            next.val[i] = t;
        }
    settings_free(&next);
    tt_daemon_opts fresh = *o;
    int lv;
    if (to_opts(&live, &fresh, &lv, err, errlen) < 0) return -1; /* checked above */
    o->admin_group = fresh.admin_group;
    o->max_connections = fresh.max_connections;
    o->idle_timeout_s = fresh.idle_timeout_s;
    tt__log_level = lv;
    return 0;
}

/* ---- the lock ------------------------------------------------------------------ */

/* One daemon per database: an exclusive flock on DB.lock, held for the
 * process's life (the descriptor is never closed; close-on-exec keeps it
 * from the workers). The file names the holder's pid. Taken before the
 * database or the socket is touched, so a second daemon changes nothing. */
static int lock_db(const char *db) {
    char path[4200];
    if (snprintf(path, sizeof path, "%s.lock", db) >= (int)sizeof path) {
        fprintf(stderr, "tiletuned: database path too long\n");
        return -1;
    }
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (fd < 0) {
        fprintf(stderr, "tiletuned: cannot open the lock file %s: %s\n", path, strerror(errno));
        return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        int e = errno;
        char pid[32] = "";
        ssize_t n = e == EWOULDBLOCK ? pread(fd, pid, sizeof pid - 1, 0) : -1;
        pid[n > 0 ? n : 0] = '\0';
        pid[strcspn(pid, "\n")] = '\0';
        if (e == EWOULDBLOCK)
            fprintf(stderr,
                    "tiletuned: the database %s is in use by another tiletuned (pid %s, lock %s); one daemon "
                    "serves a database\n",
                    db, *pid ? pid : "unknown", path);
        else fprintf(stderr, "tiletuned: cannot lock %s: %s\n", path, strerror(e));
        close(fd);
        return -1;
    }
    char buf[32];
    int len = snprintf(buf, sizeof buf, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) < 0 || pwrite(fd, buf, (size_t)len, 0) != len)
        fprintf(stderr, "tiletuned: cannot write the pid to %s: %s\n", path, strerror(errno));
    return fd;
}

/* The worker when --worker is not given: beside the daemon (a build tree),
 * else in the libexec directory of an installed tree. */
static void default_worker(char *buf, size_t len) {
    char exe[4096];
    size_t n = sizeof exe;
    buf[0] = '\0';
    if (uv_exepath(exe, &n) < 0) return;
    char *slash = strrchr(exe, '/');
    if (!slash) return;
    *slash = '\0';
    /* a path that does not fit is no worker: the daemon then says so */
    int m = snprintf(buf, len, "%s/tiletune-worker", exe);
    if (m > 0 && (size_t)m < len && access(buf, X_OK) == 0) return;
    m = snprintf(buf, len, "%s/" TT_WORKER_RELATIVE, exe);
    if (m < 0 || (size_t)m >= len || access(buf, X_OK) != 0) {
        m = snprintf(buf, len, "%s/tiletune-worker", exe); /* named in the error */
        if (m < 0 || (size_t)m >= len) buf[0] = '\0';
    }
}

int main(int argc, char **argv) {
    struct option longopts[O_COUNT + 1];
    for (int i = 0; i < O_COUNT; i++)
        longopts[i] =
            (struct option){opts[i].name, opts[i].arg ? required_argument : no_argument, NULL, 256 + i};
    longopts[O_COUNT] = (struct option){NULL, 0, NULL, 0};
    int c;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        int k = c - 256;
        if (k < 0 || k >= O_COUNT) {
            usage(stderr);
            settings_free(&live);
            return 2;
        }
        if (k == O_HELP) return usage(stdout), 0;
        if (k == O_HELP_MAN) return man_page(), 0;
        if (k == O_VERSION) {
            printf("tiletuned %s (protocol %d)\n", TT_VERSION_STRING, TT_PROTOCOL_VERSION);
            return 0;
        }
        if (k == O_FG) continue;
        set_val(&live, k, optarg);
        live.from_cmdline[k] = 1;
    }
    if (optind < argc) {
        fprintf(stderr, "tiletuned: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        settings_free(&live);
        return 2;
    }
    /* defaults < configuration file < environment < command line */
    const char *env_sock = getenv("TILETUNE_SOCKET"), *env_db = getenv("TILETUNE_DB");
    if (!live.val[O_SOCKET] && env_sock && *env_sock)
        set_val(&live, O_SOCKET, env_sock), live.from_cmdline[O_SOCKET] = 1;
    if (!live.val[O_DB] && env_db && *env_db) set_val(&live, O_DB, env_db), live.from_cmdline[O_DB] = 1;
    config_path = live.val[O_CONFIG];
    config_must_exist = config_path != NULL;
    if (!config_path) {
        const char *e = getenv("TILETUNED_CONFIG");
        config_path = e && *e ? e : TT_CONFIG_DEFAULT;
        config_must_exist = e && *e;
    }
    char err[512];
    tt_daemon_opts o;
    memset(&o, 0, sizeof o);
    int level, rc = 2;
    if (read_config(config_path, config_must_exist, &live, err, sizeof err) < 0 ||
        to_opts(&live, &o, &level, err, sizeof err) < 0) {
        fprintf(stderr, "tiletuned: %s\n", err);
        goto out;
    }
    char worker[4096];
    if (!o.worker_path) {
        default_worker(worker, sizeof worker);
        o.worker_path = worker;
    }
    o.reload = reload;
    tt_log_init(level);
    rc = 1;
    if (lock_db(o.db_path) < 0) goto out;
    rc = tt_daemon_run(&o);
out:
    settings_free(&live);
    return rc;
}
