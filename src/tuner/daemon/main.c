/* tiletuned: options, then the daemon (daemon.c). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tuner/daemon/daemon.h"
#include "tuner/daemon/log.h"
#include "common/proto.h"

#define DEFAULT_SOCKET "/run/tiletune/tiletune.sock"
#define DEFAULT_DB "/var/lib/tiletune/tiletune.db"
#define DEFAULT_CACHE "/var/cache/tiletune"

static void usage(FILE *f) {
    fprintf(f,
            "Usage: tiletuned [OPTION]...\n"
            "Serve tuned SDPA kernel configs over a Unix socket and run tuning jobs.\n"
            "\n"
            "  --socket PATH         listening socket (default $TILETUNE_SOCKET, else %s);\n"
            "                        a socket passed by systemd takes precedence\n"
            "  --db PATH             tuning database (default $TILETUNE_DB, else %s)\n"
            "  --cache-dir PATH      compiled-kernel cache for the workers (default %s)\n"
            "  --worker PATH         measurement worker program (default: tiletune-worker\n"
            "                        next to this binary); \"\" runs without one\n"
            "  --worker-timeout SEC  kill a measuring worker silent this long (default 300)\n"
            "  --admin-group NAME    members may TUNE, CANCEL and FORGET (root and the\n"
            "                        daemon's own user always may)\n"
            "  --max-connections N   connection cap; beyond it clients get ERR busy (default 1024)\n"
            "  --max-connections-per-user N\n"
            "                        connections one user but root and the daemon's may hold\n"
            "                        (default a quarter of --max-connections)\n"
            "  --admin-connections N slots of the cap only root and the daemon's user may take\n"
            "                        (default 1/64 of --max-connections)\n"
            "  --idle-timeout SEC    close connections idle this long (default 300)\n"
            "  --log-level LEVEL     error, warn, info or debug (default info)\n"
            "  --foreground          run in the foreground (always the case; for scripts)\n"
            "  --help                show this help\n"
            "  --version             show the version\n"
            "\n"
            "Protocol: docs/protocol.md. Stop with SIGTERM or SIGINT.\n",
            DEFAULT_SOCKET, DEFAULT_DB, DEFAULT_CACHE);
}

static int int_arg(const char *opt, const char *v, int min, int max, int *out) {
    int64_t x;
    if (tt__parse_i64(v, min, max, &x) < 0) {
        fprintf(stderr, "tiletuned: %s must be a number in %d..%d\n", opt, min, max);
        return -1;
    }
    *out = (int)x;
    return 0;
}

int main(int argc, char **argv) {
    enum { O_SOCKET = 256, O_DB, O_CACHE, O_WORKER, O_WTIMEOUT, O_GROUP, O_MAXCONN, O_PERUSER, O_ADMINCONN, O_IDLE, O_LOG, O_FG, O_HELP, O_VERSION };
    static const struct option longopts[] = {
        {"socket", required_argument, NULL, O_SOCKET},
        {"db", required_argument, NULL, O_DB},
        {"cache-dir", required_argument, NULL, O_CACHE},
        {"worker", required_argument, NULL, O_WORKER},
        {"worker-timeout", required_argument, NULL, O_WTIMEOUT},
        {"admin-group", required_argument, NULL, O_GROUP},
        {"max-connections", required_argument, NULL, O_MAXCONN},
        {"max-connections-per-user", required_argument, NULL, O_PERUSER},
        {"admin-connections", required_argument, NULL, O_ADMINCONN},
        {"idle-timeout", required_argument, NULL, O_IDLE},
        {"log-level", required_argument, NULL, O_LOG},
        {"foreground", no_argument, NULL, O_FG},
        {"help", no_argument, NULL, O_HELP},
        {"version", no_argument, NULL, O_VERSION},
        {NULL, 0, NULL, 0},
    };
    tt_daemon_opts o = {
        .socket_path = getenv("TILETUNE_SOCKET"),
        .db_path = getenv("TILETUNE_DB"),
        .cache_dir = DEFAULT_CACHE,
        .max_connections = 1024,
        .admin_reserved = -1,
        .idle_timeout_s = 300,
        .worker_timeout_s = 300,
    };
    if (!o.socket_path || !*o.socket_path) o.socket_path = DEFAULT_SOCKET;
    if (!o.db_path || !*o.db_path) o.db_path = DEFAULT_DB;
    int level = TT_LOG_INFO, c;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case O_SOCKET: o.socket_path = optarg; break;
        case O_DB: o.db_path = optarg; break;
        case O_CACHE: o.cache_dir = optarg; break;
        case O_WORKER: o.worker_path = optarg; break;
        case O_GROUP: o.admin_group = optarg; break;
        case O_WTIMEOUT:
            if (int_arg("--worker-timeout", optarg, 1, 86400, &o.worker_timeout_s) < 0) return 2;
            break;
        case O_MAXCONN:
            if (int_arg("--max-connections", optarg, 1, 1 << 20, &o.max_connections) < 0) return 2;
            break;
        case O_PERUSER:
            if (int_arg("--max-connections-per-user", optarg, 1, 1 << 20, &o.max_per_user) < 0) return 2;
            break;
        case O_ADMINCONN:
            if (int_arg("--admin-connections", optarg, 0, 1 << 20, &o.admin_reserved) < 0) return 2;
            break;
        case O_IDLE:
            if (int_arg("--idle-timeout", optarg, 1, 86400 * 7, &o.idle_timeout_s) < 0) return 2;
            break;
        case O_LOG:
            if (tt_log_level_parse(optarg, &level) < 0) {
                fprintf(stderr, "tiletuned: --log-level must be error, warn, info or debug\n");
                return 2;
            }
            break;
        case O_FG: break;
        case O_HELP: usage(stdout); return 0;
        case O_VERSION: printf("tiletuned %s (protocol %d)\n", TT_VERSION_STRING, TT_PROTOCOL_VERSION); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "tiletuned: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return 2;
    }
    tt_log_init(level);
    return tt_daemon_run(&o);
}
