/* tiletune's entry point: global options, the command table, --help,
 * option parsing, and the helpers every command shares. */
#include "client/cli.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <sys/stat.h>
#include <unistd.h>
#include <getopt.h>
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
    if (c && c->cmd) fprintf(stderr, "\nTry 'tiletune %s --help'.\n", c->cmd->name);
    else fputs("\nTry 'tiletune --help'.\n", stderr);
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

void cli_reply_clean(char *err, tt__reply *r) {
    /* what the daemon sent reaches a terminal: no control characters */
    tt__sanitize_text(err);
    if (!r) return;
    tt__sanitize_text((char *)r->message);
    for (int i = 0; i < r->nbody; i++) tt__sanitize_text(r->body[i]);
}

int cli_request_raw(cli *c, const char *line, tt__reply *r) {
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
    cli_reply_clean(err, rc == 0 ? r : NULL);
    if (rc == TT_ERR_TIMEOUT) return cli_fail("%s (waited %d ms; see --timeout)", err, c->timeout_ms);
    if (rc < 0) return cli_fail("%s", err);
    return 0;
}

int cli_request(cli *c, const char *line, tt__reply *r) {
    if (cli_request_raw(c, line, r)) return CLI_FAIL;
    if (r->status < 0) {
        cli_fail("the daemon refused: %s (%s)", *r->message ? r->message : tt_strerror(r->status), r->code);
        tt__reply_free(r);
        return CLI_FAIL;
    }
    return 0;
}

int cli_int_opt(const cli *c, const char *name, int64_t min, int64_t max, int64_t *out) {
    const char *s = cli_opt_val(c, name);
    int rc = tt__parse_i64(s, min, max, out);
    if (rc == TT_ERR_RANGE)
        return cli_usage(c, "--%s %s is out of range %lld..%lld", name, s, (long long)min, (long long)max);
    if (rc < 0) return cli_usage(c, "--%s needs a whole number, not '%s'", name, s ? s : "");
    return 0;
}

json_t *cli_json_value(const char *s) {
    int64_t i;
    if (tt__parse_i64(s, INT64_MIN, INT64_MAX, &i) == 0) return json_integer((json_int_t)i);
    char *end;
    errno = 0;
    double d = strtod(s, &end);
    if (*s && *end == '\0' && errno == 0 && (*s == '-' || (*s >= '0' && *s <= '9'))) return json_real(d);
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
#define CELL(r, k) \
    (cells[(size_t)(r) * (size_t)ncols + (size_t)(k)] ? cells[(size_t)(r) * (size_t)ncols + (size_t)(k)] : "")
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

/* Writes `data` to `path` atomically: a temporary file in the same
 * directory, fsync, rename over `path`, fsync of the directory. Readers
 * (and a crash) see the old file or the whole new one, never a torn one. */
int cli_write_atomic(const char *path, const char *data, size_t len) {
    char tmp[4200], dirbuf[4200];
    if (snprintf(tmp, sizeof tmp, "%s.tmp-XXXXXX", path) >= (int)sizeof tmp)
        return cli_fail("%s: path too long", path);
    int fd = mkstemp(tmp);
    if (fd < 0) return cli_fail("cannot create a file next to %s: %s", path, strerror(errno));
    mode_t um = umask(0);
    umask(um);
    int rc = fchmod(fd, 0666 & ~um);
    for (size_t done = 0; rc == 0 && done < len;) {
        ssize_t n = write(fd, data + done, len - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) rc = -1;
        else done += (size_t)n;
    }
    if (rc == 0) rc = fsync(fd);
    int e = errno;
    if (close(fd) < 0 && rc == 0) rc = -1, e = errno;
    if (rc == 0 && rename(tmp, path) < 0) rc = -1, e = errno;
    if (rc < 0) {
        unlink(tmp);
        return cli_fail("cannot write %s: %s", path, strerror(e));
    }
    snprintf(dirbuf, sizeof dirbuf, "%s", path);
    int dfd = open(dirname(dirbuf), O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) {
        fsync(dfd); /* the rename itself survives a crash */
        close(dfd);
    }
    return 0;
}

void cli_kv(const char *const *keys, const char *const *values, int n) {
    int w = 0;
    for (int i = 0; i < n; i++)
        if ((int)strlen(keys[i]) > w) w = (int)strlen(keys[i]);
    for (int i = 0; i < n; i++) printf("%-*s  %s\n", w, keys[i], values[i]);
}

/* ---- help and parsing ----------------------------------------------------- */

static const cli_opt global_opts[] = {
    {"socket", "PATH", "the daemon's socket (default: $TILETUNE_SOCKET, else " TT_SOCKET_DEFAULT ")", 0},
    {"timeout", "MS", "time-out of each request in milliseconds (default 5000)", 0},
    {"version", NULL, "print the version", 0},
    {"help", NULL, "this help ('tiletune COMMAND --help' for a command's)", 0},
    {"help-man", NULL, "print the manual page (roff), made from the same tables as --help", 0},
    {"completion", "SHELL", "print the completion script of SHELL (bash)", 0},
    {NULL},
};

/* The short options: the same letter for the same long option in every
 * command that has it. */
static const struct {
    char c;
    const char *name;
} short_opts[] = {{'h', "help"},   {'s', "seqlen"},  {'d', "hdim"}, {'t', "dtype"}, {'c', "causal"},
                  {'j', "json"},   {'o', "output"},  {'a', "all"},  {'w', "wait"},  {'p', "prom"},
                  {'f', "format"}, {'n', "dry-run"}, {0, NULL}};

static char short_of(const cli_opt *o) {
    for (int i = 0; short_opts[i].c; i++)
        if (strcmp(short_opts[i].name, o->name) == 0) return short_opts[i].c;
    return 0;
}
_Static_assert(TIMEOUT_MS_DEFAULT == 5000, "the --timeout help names the default");

enum { G_SOCKET, G_TIMEOUT, G_VERSION, G_HELP, G_HELP_MAN, G_COMPLETION, G_COUNT };

static int optional_value(const cli_opt *o) { return o->arg && o->arg[0] == '['; }

static void opt_left(const cli_opt *o, char *buf, size_t len) {
    char sh[8] = "";
    if (short_of(o)) snprintf(sh, sizeof sh, "-%c, ", short_of(o));
    snprintf(buf, len, "%s--%s%s%s", sh, o->name, o->arg && !optional_value(o) ? " " : "",
             o->arg ? o->arg : "");
}

static void print_usage_line(FILE *f, const cli_cmd *cmd) {
    fprintf(f, "usage: tiletune %s", cmd->name);
    for (int i = 0; cmd->opts[i].name; i++) {
        const cli_opt *o = &cmd->opts[i];
        char left[64];
        if (short_of(o) && !optional_value(o))
            snprintf(left, sizeof left, "-%c%s%s", short_of(o), o->arg ? " " : "", o->arg ? o->arg : "");
        else
            snprintf(left, sizeof left, "--%s%s%s", o->name, o->arg && !optional_value(o) ? " " : "",
                     o->arg ? o->arg : "");
        fprintf(f, " %s%s%s", o->required ? "" : "[", left, o->required ? "" : "]");
    }
    fprintf(f, "%s%s\n", *cmd->args ? " " : "", cmd->args);
}

static void print_opts(FILE *f, const cli_opt *opts) {
    for (int i = 0; opts[i].name; i++) {
        char left[64];
        opt_left(&opts[i], left, sizeof left);
        if (strlen(left) > 24) fprintf(f, "  %s\n  %-24s %s\n", left, "", opts[i].help);
        else fprintf(f, "  %-24s %s\n", left, opts[i].help);
    }
}

static void command_help(const cli_cmd *cmd) {
    print_usage_line(stdout, cmd);
    printf("\n%s.\n", cmd->summary);
    if (cmd->more) printf("\n%s\n", cmd->more);
    printf("\noptions:\n");
    print_opts(stdout, cmd->opts);
    printf("  %-24s %s\n", "-h, --help", "show this help");
    printf("\nGlobal options (--socket, --timeout) go anywhere on the line.\n");
}

static void global_help(FILE *f) {
    fprintf(f, "usage: tiletune [global options] <command> [options]\n"
               "\n"
               "Query and drive tiletuned, the daemon that tunes and serves the fastest\n"
               "SDPA attention kernel configs of this node.\n"
               "\n"
               "commands:\n");
    for (const cli_cmd *cmd = cli_commands; cmd->name; cmd++)
        fprintf(f, "  %-8s %s\n", cmd->name, cmd->summary);
    fprintf(f, "\nglobal options (anywhere on the line):\n");
    print_opts(f, global_opts);
    fprintf(f, "\nExit status: 0 success or nothing to do, 1 failure (the reason on stderr),\n"
               "2 usage error.\n");
}

/* roff: a backslash, a hyphen (else a typographic one) and a leading dot or
 * quote (else a request) escaped. */
static void roff(const char *s) {
    if (*s == '.' || *s == '\'') fputs("\\&", stdout);
    for (; *s; s++) {
        if (*s == '\\') fputs("\\e", stdout);
        else if (*s == '-') fputs("\\-", stdout);
        else if (*s == '\n') {
            putchar('\n');
            if (s[1] == '.' || s[1] == '\'') fputs("\\&", stdout);
        } else putchar(*s);
    }
}

static void man_opts(const cli_opt *opts) {
    for (int i = 0; opts[i].name; i++) {
        char left[64];
        opt_left(&opts[i], left, sizeof left);
        fputs(".TP\n.B ", stdout);
        roff(left);
        putchar('\n');
        roff(opts[i].help);
        fputs(opts[i].required ? " (required)\n" : "\n", stdout);
    }
}

static void man_page(void) {
    printf(".TH TILETUNE 1 \"\" \"tiletune %s\" \"User Commands\"\n", TT_VERSION_STRING);
    puts(".SH NAME\ntiletune \\- query and drive tiletuned, the SDPA kernel autotuner of a node");
    puts(
        ".SH SYNOPSIS\n.B tiletune\n[\\fIglobal options\\fR] \\fIcommand\\fR [\\fIoptions\\fR] [\\fIarguments\\fR]");
    puts(".SH DESCRIPTION\n"
         "tiletune talks to tiletuned over its Unix socket: it looks up the tuned\n"
         "attention kernel config of a key, queues and follows tuning jobs, moves\n"
         "tuning tables between nodes and renders them as a report. Options and\n"
         "arguments may come in any order; global options go anywhere on the line.");
    puts(".SH GLOBAL OPTIONS");
    man_opts(global_opts);
    puts(".SH COMMANDS");
    for (const cli_cmd *cmd = cli_commands; cmd->name; cmd++) {
        printf(".SS \"%s", cmd->name);
        if (*cmd->args) {
            putchar(' ');
            roff(cmd->args);
        }
        puts("\"");
        roff(cmd->summary);
        puts(".");
        if (cmd->more) {
            puts(".PP");
            roff(cmd->more);
            putchar('\n');
        }
        man_opts(cmd->opts);
    }
    puts(".SH EXIT STATUS\n0 success, or nothing to do; 1 failure, with one line on standard error\n"
         "saying why; 2 usage error. \\fBdiff\\fR and \\fBwatch\\fR say in their\n"
         "sections what else their status means.");
    puts(".SH ENVIRONMENT\n.TP\n.B TILETUNE_SOCKET\nthe daemon's socket when \\-\\-socket is not given.");
    puts(".SH FILES\n.TP\n.B " TT_SOCKET_DEFAULT "\nthe daemon's socket.");
    puts(".SH SEE ALSO\n.BR tiletuned (8)");
}

/* The bash completion: commands, each command's options, and file names
 * for options and arguments that take paths. */
static int is_path_arg(const char *arg) {
    return arg && (strcmp(arg, "FILE") == 0 || strcmp(arg, "PATH") == 0 || strcmp(arg, "DIR") == 0);
}

static void completion_bash(void) {
    puts("# bash completion of tiletune; printed by 'tiletune --completion bash'\n"
         "_tiletune() {\n"
         "    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} cmd='' i");
    fputs("    local commands='", stdout);
    for (const cli_cmd *cmd = cli_commands; cmd->name; cmd++)
        printf("%s%s", cmd == cli_commands ? "" : " ", cmd->name);
    puts(" help'");
    fputs("    local globals='", stdout);
    for (int i = 0; global_opts[i].name; i++) printf("%s--%s", i ? " " : "", global_opts[i].name);
    puts("'");
    puts("    for ((i = 1; i < COMP_CWORD; i++)); do\n"
         "        case \" $commands \" in *\" ${COMP_WORDS[i]} \"*) cmd=${COMP_WORDS[i]}; break ;; esac\n"
         "    done");
    fputs("    case $prev in\n        --socket", stdout);
    for (const cli_cmd *cmd = cli_commands; cmd->name; cmd++)
        for (int i = 0; cmd->opts[i].name; i++)
            if (is_path_arg(cmd->opts[i].arg)) {
                printf("|--%s", cmd->opts[i].name);
                if (short_of(&cmd->opts[i])) printf("|-%c", short_of(&cmd->opts[i]));
            }
    puts(") COMPREPLY=($(compgen -f -- \"$cur\")); return ;;\n    esac");
    puts("    local opts='' files=0\n    case $cmd in");
    for (const cli_cmd *cmd = cli_commands; cmd->name; cmd++) {
        printf("        %s) opts='", cmd->name);
        for (int i = 0; cmd->opts[i].name; i++) printf("%s--%s", i ? " " : "", cmd->opts[i].name);
        /* positional arguments named FILE, A B or TABLE are files */
        int files = strstr(cmd->args, "FILE") || strstr(cmd->args, "TABLE") || strcmp(cmd->args, "A B") == 0;
        printf("'%s ;;\n", files ? "; files=1" : "");
    }
    puts("        '') COMPREPLY=($(compgen -W \"$commands $globals\" -- \"$cur\")); return ;;\n"
         "    esac\n"
         "    if [[ $cur == -* ]]; then\n"
         "        COMPREPLY=($(compgen -W \"$opts $globals --help\" -- \"$cur\"))\n"
         "    elif ((files)); then\n"
         "        COMPREPLY=($(compgen -f -- \"$cur\"))\n"
         "    fi\n"
         "}\n"
         "complete -F _tiletune tiletune");
}

static const cli_cmd *find_command(const char *name) {
    for (const cli_cmd *cmd = cli_commands; cmd->name; cmd++)
        if (strcmp(cmd->name, name) == 0) return cmd;
    return NULL;
}

/* The older spelling "--causal no|yes|both" (a separate word): taken as
 * the option's value, since a bare --causal never precedes a positional
 * argument that reads like these. */
static int causal_word(const char *s) {
    static const char *const words[] = {"no",  "yes",      "both",         "0", "1", "2",
                                        "0,1", "top-left", "bottom-right", NULL};
    for (int i = 0; words[i]; i++)
        if (strcmp(s, words[i]) == 0) return 1;
    return 0;
}

/* Where the command word is: the first argument, not an option nor the
 * value of a global option, that names a command ("help" included). A
 * value of a command option before the command ("--seqlen 4096 lookup")
 * names no command and is passed over. -1 if there is none; *unknown is
 * the first word that named nothing. */
static int find_command_word(int argc, char **argv, const char **unknown) {
    *unknown = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) break;
        if (a[0] == '-' && a[1]) {
            if (strcmp(a, "--socket") == 0 || strcmp(a, "--timeout") == 0 || strcmp(a, "--completion") == 0)
                i++;
            continue;
        }
        if (find_command(a) || strcmp(a, "help") == 0) return i;
        if (!*unknown) *unknown = a;
    }
    return -1;
}

typedef struct parsed {
    const char *global[G_COUNT];
} parsed;

/* getopt_long over the whole line against the command's options (when
 * there is a command) and the global ones; positional arguments in order,
 * the command word left out. */
static int parse_line(cli *c, int argc, char **argv, int cmd_at, parsed *p) {
    const cli_cmd *cmd = c->cmd;
    static const cli_opt none[] = {{NULL}};
    const cli_opt *copts = cmd ? cmd->opts : none;
    int nc = 0;
    while (copts[nc].name) nc++;
    if (nc > CLI_OPTS_MAX) return cli_fail("internal: %s has more than %d options", cmd->name, CLI_OPTS_MAX);
    struct option lo[CLI_OPTS_MAX + G_COUNT + 1];
    char shorts[2 * (CLI_OPTS_MAX + G_COUNT) + 4] = "-:";
    size_t ns = 2;
    int n = 0;
    const cli_opt *all[CLI_OPTS_MAX + G_COUNT];
    for (int i = 0; i < nc + G_COUNT; i++) {
        const cli_opt *o = i < nc ? &copts[i] : &global_opts[i - nc];
        all[i] = o;
        lo[n++] = (struct option){o->name,
                                  !o->arg             ? no_argument
                                  : optional_value(o) ? optional_argument
                                                      : required_argument,
                                  NULL, 1000 + i};
        if (short_of(o)) {
            shorts[ns++] = short_of(o);
            if (o->arg && !optional_value(o)) shorts[ns++] = ':';
        }
    }
    lo[n] = (struct option){NULL, 0, NULL, 0};
    shorts[ns] = '\0';
    c->pos = calloc((size_t)argc + 1, sizeof *c->pos);
    if (!c->pos) return cli_fail("out of memory");
    opterr = 0;
    optind = 0; /* a fresh scan (GNU) */
    int ch;
    while ((ch = getopt_long(argc, argv, shorts, lo, NULL)) != -1) {
        int k = -1;
        if (ch == 1) {
            if (cmd_at < 0 || optarg != argv[cmd_at]) c->pos[c->npos++] = optarg;
            continue;
        }
        const char *bad = argv[optind - 1];
        if (ch == '?') {
            if (optopt && optopt < 1000) return cli_usage(c, "unknown option '-%c'", optopt);
            if (optopt >= 1000) return cli_usage(c, "--%s takes no value", all[optopt - 1000]->name);
            if (strncmp(bad, "--", 2) == 0) {
                size_t len = strcspn(bad + 2, "=");
                int hits = 0;
                for (int i = 0; i < n; i++) hits += strncmp(lo[i].name, bad + 2, len) == 0;
                if (hits > 1) return cli_usage(c, "option '%.*s' is ambiguous", (int)len + 2, bad);
                return cli_usage(c, "%s%sunknown option '%.*s'", cmd ? cmd->name : "", cmd ? ": " : "",
                                 (int)len + 2, bad);
            }
            return cli_usage(c, "unknown option '%s'", bad);
        }
        if (ch == ':') {
            k = optopt >= 1000 ? optopt - 1000 : -1;
            for (int i = 0; k < 0 && i < nc + G_COUNT; i++)
                if (short_of(all[i]) == optopt) k = i;
            if (k < 0) return cli_usage(c, "'%s' needs a value", bad);
            return cli_usage(c, "--%s needs a value (%s)", all[k]->name, all[k]->arg);
        }
        if (ch >= 1000) k = ch - 1000;
        for (int i = 0; k < 0 && i < nc + G_COUNT; i++)
            if (short_of(all[i]) == ch) k = i;
        if (k < 0) return cli_usage(c, "unknown option '%s'", bad);
        const cli_opt *o = all[k];
        const char *v = !o->arg ? "1" : optarg ? optarg : CLI_BARE;
        if (optional_value(o) && !optarg && strcmp(o->name, "causal") == 0 && optind < argc &&
            causal_word(argv[optind]))
            v = argv[optind++];
        if (k == nc + G_HELP) {
            if (cmd) command_help(cmd);
            else global_help(stdout);
            exit(CLI_OK);
        }
        const char **dst = k < nc ? &c->val[k] : &p->global[k - nc];
        if (*dst) return cli_usage(c, "--%s given twice", o->name);
        if (o->arg && !optional_value(o) && !*v) return cli_usage(c, "--%s needs a value", o->name);
        *dst = v;
    }
    for (; optind < argc; optind++)
        if (optind != cmd_at) c->pos[c->npos++] = argv[optind];
    return 0;
}

/* After parsing: required options and the count of positional arguments. */
static int check_command(cli *c) {
    const cli_cmd *cmd = c->cmd;
    for (int k = 0; cmd->opts[k].name; k++)
        if (cmd->opts[k].required && !c->val[k])
            return cli_usage(c, "%s needs --%s", cmd->name, cmd->opts[k].name);
    if (c->npos < cmd->npos_min) return cli_usage(c, "%s needs %s", cmd->name, cmd->args);
    if (c->npos > cmd->npos_max) {
        const char *a = c->pos[cmd->npos_max];
        for (int k = 0; cmd->opts[k].name; k++)
            if (c->val[k] && optional_value(&cmd->opts[k]))
                return cli_usage(c, "%s: unexpected argument '%s' (a value of --%s is written --%s=%s)",
                                 cmd->name, a, cmd->opts[k].name, cmd->opts[k].name, a);
        return cli_usage(c, "%s: unexpected argument '%s'", cmd->name, a);
    }
    return 0;
}

int main(int argc, char **argv) {
    cli c;
    parsed p;
    memset(&c, 0, sizeof c);
    memset(&p, 0, sizeof p);
    const char *unknown;
    int at = find_command_word(argc, argv, &unknown);
    int help_word = at > 0 && strcmp(argv[at], "help") == 0;
    if (at > 0 && !help_word) c.cmd = find_command(argv[at]);
    int rc = parse_line(&c, argc, argv, at, &p);
    if (rc) goto out;
    if (p.global[G_VERSION]) {
        printf("tiletune %s (protocol %d)\n", TT_VERSION_STRING, TT_PROTOCOL_VERSION);
        goto out;
    }
    if (p.global[G_HELP_MAN]) {
        man_page();
        goto out;
    }
    if (p.global[G_COMPLETION]) {
        if (strcmp(p.global[G_COMPLETION], "bash") != 0)
            rc = cli_usage(NULL, "--completion: only bash is known, not '%s'", p.global[G_COMPLETION]);
        else completion_bash();
        goto out;
    }
    if (help_word) {
        const cli_cmd *cmd = c.npos > 0 ? find_command(c.pos[0]) : NULL;
        if (c.npos > 0 && !cmd) rc = cli_usage(NULL, "unknown command '%s'", c.pos[0]);
        else if (cmd) command_help(cmd);
        else global_help(stdout);
        goto out;
    }
    if (!c.cmd) {
        if (unknown) rc = cli_usage(NULL, "unknown command '%s'", unknown);
        else global_help(stderr), rc = CLI_USAGE;
        goto out;
    }
    c.timeout_ms = TIMEOUT_MS_DEFAULT;
    if (p.global[G_TIMEOUT]) {
        int64_t t;
        if (tt__parse_i64(p.global[G_TIMEOUT], 1, 3600 * 1000, &t) < 0) {
            rc = cli_usage(&c, "--timeout needs milliseconds in 1..3600000, not '%s'", p.global[G_TIMEOUT]);
            goto out;
        }
        c.timeout_ms = (int)t;
    }
    c.socket = tt__socket_path(p.global[G_SOCKET]);
    if ((rc = check_command(&c)) == 0) rc = c.cmd->run(&c);
out:
    tt__conn_close(c.conn);
    free(c.pos);
    if (fflush(stdout) != 0 && rc == 0) rc = cli_fail("cannot write the output: %s", strerror(errno));
    return rc;
}
