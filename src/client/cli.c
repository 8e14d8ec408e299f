/* tiletune's entry point: global options, the command table, --help,
 * option parsing, and the helpers every command shares. */
#include "client/cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TIMEOUT_MS_DEFAULT 5000

const char *cli_opt_val(const cli *c, const char *name) {
    for (int i = 0; c->cmd->opts[i].name; i++)
        if (strcmp(c->cmd->opts[i].name, name) == 0) return c->val[i];
    return NULL;
}

int cli_usage(const cli *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("tiletune: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    if (c && c->cmd)
        fprintf(stderr, "\nTry 'tiletune %s --help'.\n", c->cmd->name);
    else
        fputs("\nTry 'tiletune --help'.\n", stderr);
    return CLI_USAGE;
}

int cli_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("tiletune: ", stderr);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return CLI_FAIL;
}

int cli_request(cli *c, const char *line, tt__reply *r) {
    char err[512];
    int64_t deadline = tt__deadline_after_ms(c->timeout_ms);
    int rc;
    memset(r, 0, sizeof *r);
    if (!c->conn) {
        rc = tt__conn_open(c->socket, deadline, &c->conn, err, sizeof err);
        if (rc == TT_ERR_NODAEMON) return cli_fail("%s (is tiletuned running?)", err);
        if (rc < 0) return cli_fail("%s", err);
    }
    rc = tt__conn_request(c->conn, line, r, deadline, err, sizeof err);
    /* what the daemon sent reaches a terminal: no control characters */
    tt__sanitize_text(err);
    if (rc == 0) {
        tt__sanitize_text((char *)r->message);
        for (int i = 0; i < r->nbody; i++) tt__sanitize_text(r->body[i]);
    }
    if (rc == TT_ERR_TIMEOUT) return cli_fail("%s (waited %d ms; see --timeout)", err, c->timeout_ms);
    if (rc < 0) return cli_fail("%s", err);
    if (r->status < 0) {
        cli_fail("the daemon refused: %s (%s)", *r->message ? r->message : tt_strerror(r->status),
                 r->code);
        tt__reply_free(r);
        return CLI_FAIL;
    }
    return 0;
}

int cli_int_opt(const cli *c, const char *name, int64_t min, int64_t max, int64_t *out) {
    const char *s = cli_opt_val(c, name);
    int rc = tt__parse_i64(s, min, max, out);
    if (rc == TT_ERR_RANGE)
        return cli_usage(c, "--%s %s is out of range %lld..%lld", name, s, (long long)min,
                         (long long)max);
    if (rc < 0) return cli_usage(c, "--%s needs a whole number, not '%s'", name, s ? s : "");
    return 0;
}

json_t *cli_json_value(const char *s) {
    int64_t i;
    if (tt__parse_i64(s, INT64_MIN, INT64_MAX, &i) == 0) return json_integer((json_int_t)i);
    char *end;
    errno = 0;
    double d = strtod(s, &end);
    if (*s && *end == '\0' && errno == 0 && (*s == '-' || (*s >= '0' && *s <= '9')))
        return json_real(d);
    return json_string(s);
}

json_t *cli_json_fields(const tt__msg *m) {
    json_t *o = json_object();
    for (int i = 0; o && i < m->nfields; i++) {
        /* GPU fingerprints and kernel revisions are hex: "0123" or "12e45"
         * would otherwise come out as the numbers 123 and 1.2e46. */
        const char *k = m->f[i].key;
        int id = strcmp(k, "gpu") == 0 || strcmp(k, "rev") == 0;
        json_object_set_new(o, k, id ? json_string(m->f[i].value) : cli_json_value(m->f[i].value));
    }
    return o;
}

int cli_json_print(json_t *j) {
    if (!j) return cli_fail("out of memory");
    char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(j);
    if (!s) return cli_fail("out of memory");
    puts(s);
    free(s);
    return 0;
}

void cli_table(const char *const *cells, int nrows, int ncols, unsigned right) {
    int w[32] = {0};
    if (ncols > 32) ncols = 32;
#define CELL(r, k) (cells[(size_t)(r) * (size_t)ncols + (size_t)(k)] ? cells[(size_t)(r) * (size_t)ncols + (size_t)(k)] : "")
    for (int r = 0; r < nrows; r++)
        for (int k = 0; k < ncols; k++)
            if ((int)strlen(CELL(r, k)) > w[k]) w[k] = (int)strlen(CELL(r, k));
    for (int r = 0; r < nrows; r++) {
        for (int k = 0; k < ncols; k++) {
            int last = k == ncols - 1;
            if (right & (1u << k)) printf("%*s%s", w[k], CELL(r, k), last ? "" : "  ");
            else if (last) printf("%s", CELL(r, k));
            else printf("%-*s  ", w[k], CELL(r, k));
        }
        putchar('\n');
    }
#undef CELL
}

void cli_kv(const char *const *keys, const char *const *values, int n) {
    int w = 0;
    for (int i = 0; i < n; i++)
        if ((int)strlen(keys[i]) > w) w = (int)strlen(keys[i]);
    for (int i = 0; i < n; i++) printf("%-*s  %s\n", w, keys[i], values[i]);
}

/* ---- help and parsing ----------------------------------------------------- */

static void print_usage_line(FILE *f, const cli_cmd *cmd) {
    fprintf(f, "usage: tiletune [global options] %s", cmd->name);
    for (int i = 0; cmd->opts[i].name; i++) {
        if (strcmp(cmd->opts[i].name, "help") == 0) continue;
        const cli_opt *o = &cmd->opts[i];
        fprintf(f, " %s--%s%s%s%s", o->required ? "" : "[", o->name, o->arg ? " " : "",
                o->arg ? o->arg : "", o->required ? "" : "]");
    }
    fprintf(f, "%s%s\n", *cmd->args ? " " : "", cmd->args);
}

static void command_help(const cli_cmd *cmd) {
    print_usage_line(stdout, cmd);
    printf("\n%s.\n", cmd->summary);
    if (cmd->more) printf("\n%s\n", cmd->more);
    if (cmd->opts[0].name) printf("\noptions:\n");
    for (int i = 0; cmd->opts[i].name; i++) {
        char left[64];
        snprintf(left, sizeof left, "--%s%s%s", cmd->opts[i].name, cmd->opts[i].arg ? " " : "",
                 cmd->opts[i].arg ? cmd->opts[i].arg : "");
        printf("  %-22s %s\n", left, cmd->opts[i].help);
    }
    printf("  %-22s %s\n", "-h, --help", "show this help");
}

static void global_help(FILE *f) {
    fprintf(f,
            "usage: tiletune [--socket PATH] [--timeout MS] <command> [options]\n"
            "\n"
            "Query and drive tiletuned, the daemon that tunes and serves the fastest\n"
            "SDPA attention kernel configs of this node.\n"
            "\n"
            "commands:\n");
    for (const cli_cmd *cmd = cli_commands; cmd->name; cmd++)
        fprintf(f, "  %-8s %s\n", cmd->name, cmd->summary);
    fprintf(f,
            "\n"
            "global options:\n"
            "  --socket PATH   the daemon's socket (default: $TILETUNE_SOCKET, else\n"
            "                  " TT_SOCKET_DEFAULT ")\n"
            "  --timeout MS    time-out of each request in ms (default %d)\n"
            "  --version       print the version\n"
            "  -h, --help      this help ('tiletune <command> --help' for a command)\n"
            "\n"
            "Exit status: 0 success, 1 failure (the reason on stderr), 2 usage error.\n",
            TIMEOUT_MS_DEFAULT);
}

static const cli_cmd *find_command(const char *name) {
    for (const cli_cmd *cmd = cli_commands; cmd->name; cmd++)
        if (strcmp(cmd->name, name) == 0) return cmd;
    return NULL;
}

/* Parses the command's options ("--name value", "--name=value", flags) and
 * positional arguments; "--" ends the options. */
static int parse_command(cli *c, int argc, char **argv) {
    const cli_cmd *cmd = c->cmd;
    c->pos = calloc((size_t)argc + 1, sizeof *c->pos);
    if (!c->pos) return cli_fail("out of memory");
    int only_pos = 0;
    for (int i = 0; i < argc; i++) {
        char *a = argv[i];
        if (only_pos || a[0] != '-' || a[1] == '\0' || (a[1] != '-' && a[1] != 'h')) {
            c->pos[c->npos++] = a;
            continue;
        }
        if (strcmp(a, "--") == 0) {
            only_pos = 1;
            continue;
        }
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            command_help(cmd);
            exit(CLI_OK);
        }
        if (a[1] != '-') return cli_usage(c, "unknown option '%s'", a);
        const char *name = a + 2;
        char *eq = strchr(a, '=');
        size_t nlen = eq ? (size_t)(eq - name) : strlen(name);
        int k = -1;
        for (int j = 0; cmd->opts[j].name; j++)
            if (strlen(cmd->opts[j].name) == nlen && strncmp(cmd->opts[j].name, name, nlen) == 0) k = j;
        if (k < 0) return cli_usage(c, "%s: unknown option '%.*s'", cmd->name, (int)nlen + 2, a);
        if (c->val[k]) return cli_usage(c, "--%s given twice", cmd->opts[k].name);
        if (!cmd->opts[k].arg) {
            if (eq) return cli_usage(c, "--%s takes no value", cmd->opts[k].name);
            c->val[k] = "1";
        } else if (eq) {
            c->val[k] = eq + 1;
        } else if (i + 1 < argc) {
            c->val[k] = argv[++i];
        } else {
            return cli_usage(c, "--%s needs a value (%s)", cmd->opts[k].name, cmd->opts[k].arg);
        }
        if (cmd->opts[k].arg && !*c->val[k]) return cli_usage(c, "--%s needs a value", cmd->opts[k].name);
    }
    for (int k = 0; cmd->opts[k].name; k++)
        if (cmd->opts[k].required && !c->val[k]) return cli_usage(c, "%s needs --%s", cmd->name, cmd->opts[k].name);
    if (c->npos < cmd->npos_min) return cli_usage(c, "%s needs %s", cmd->name, cmd->args);
    if (c->npos > cmd->npos_max) return cli_usage(c, "%s: unexpected argument '%s'", cmd->name, c->pos[cmd->npos_max]);
    return 0;
}

int main(int argc, char **argv) {
    cli c;
    memset(&c, 0, sizeof c);
    const char *socket = NULL, *timeout = NULL;
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        const char *a = argv[i];
        const char **dst = NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            global_help(stdout);
            return CLI_OK;
        }
        if (strcmp(a, "--version") == 0) {
            printf("tiletune %s (protocol %d)\n", TT_VERSION_STRING, TT_PROTOCOL_VERSION);
            return CLI_OK;
        }
        size_t n = strcspn(a, "=");
        if (strncmp(a, "--socket", n) == 0 && n == 8) dst = &socket;
        else if (strncmp(a, "--timeout", n) == 0 && n == 9) dst = &timeout;
        else return cli_usage(NULL, "unknown option '%s'", a);
        if (a[n] == '=') *dst = a + n + 1;
        else if (i + 1 < argc) *dst = argv[++i];
        else return cli_usage(NULL, "%s needs a value", a);
    }
    if (i >= argc) {
        global_help(stderr);
        return CLI_USAGE;
    }
    if (strcmp(argv[i], "help") == 0) {
        const cli_cmd *cmd = i + 1 < argc ? find_command(argv[i + 1]) : NULL;
        if (i + 1 < argc && !cmd) return cli_usage(NULL, "unknown command '%s'", argv[i + 1]);
        if (cmd) command_help(cmd);
        else global_help(stdout);
        return CLI_OK;
    }
    c.cmd = find_command(argv[i]);
    if (!c.cmd) return cli_usage(NULL, "unknown command '%s'", argv[i]);
    c.timeout_ms = TIMEOUT_MS_DEFAULT;
    if (timeout) {
        int64_t t;
        if (tt__parse_i64(timeout, 1, 3600 * 1000, &t) < 0)
            return cli_usage(NULL, "--timeout needs milliseconds in 1..3600000, not '%s'", timeout);
        c.timeout_ms = (int)t;
    }
    if (socket && !*socket) return cli_usage(NULL, "--socket needs a path");
    c.socket = tt__socket_path(socket);
    int rc = parse_command(&c, argc - i - 1, argv + i + 1);
    if (rc == 0) rc = c.cmd->run(&c);
    tt__conn_close(c.conn);
    free(c.pos);
    if (fflush(stdout) != 0 && rc == 0) rc = cli_fail("cannot write the output: %s", strerror(errno));
    return rc;
}
