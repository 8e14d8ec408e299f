/*
 * The `tiletune` command line: a table of commands (cli_cmds.c), each with
 * declared options from which both parsing and `--help` are made, and the
 * helpers they share (cli.c): talking to the daemon, printing tables and
 * JSON. A new command is a run function and a row in the table.
 *
 * Parsing is getopt_long's (options and arguments in any order, global
 * options anywhere on the line, "--name=value", clustered short flags,
 * unambiguous prefixes of long names); the man page and the bash
 * completion are printed from the same tables (--help-man, --completion).
 *
 * Exit codes: 0 success (and "nothing to do"), 1 failure (one line on
 * stderr saying why), 2 usage error.
 */
#ifndef TT_CLIENT_CLI_H
#define TT_CLIENT_CLI_H

#include <jansson.h>

#include "client/conn.h"

enum { CLI_OK = 0, CLI_FAIL = 1, CLI_USAGE = 2 };

#define CLI_OPTS_MAX 24

typedef struct cli_opt {
    const char *name; /* long name, without "--" */
    /* metavariable (e.g. "N"); NULL for a flag; "[=WHICH]" for a flag
     * that may take a value written --name=value (the value is "" when
     * bare) */
    const char *arg;
    const char *help;
    int required; /* usage error if missing */
} cli_opt;

/* Short options are not declared per command: one letter means the same
 * long option in every command that has it (cli.c's table: -s --seqlen,
 * -d --hdim, -t --dtype, -c --causal, -j --json, -o --output, ...). */

/* The value of a bare optional-value flag ("--causal"). */
#define CLI_BARE ""

typedef struct cli_cmd cli_cmd;

typedef struct cli {
    const char *socket; /* resolved path */
    int timeout_ms;
    tt__conn *conn; /* opened on first request */
    const cli_cmd *cmd;
    /* parsed options: val[i] for cmd->opts[i] (NULL: not given; "1" for a
     * given flag) and the positional arguments */
    const char *val[CLI_OPTS_MAX];
    int npos;
    char **pos;
} cli;

struct cli_cmd {
    const char *name;
    const char *args; /* positional part of the usage line, or "" */
    const char *summary;
    const char *more;    /* extra paragraph for --help, or NULL */
    const cli_opt *opts; /* ends with {NULL} */
    int npos_min, npos_max;
    int (*run)(cli *c);
};

/* The table (cli_cmds.c), ended by {NULL}. */
extern const cli_cmd cli_commands[];

/* The value of option `name` of the running command, or NULL. */
const char *cli_opt_val(const cli *c, const char *name);
/* A usage error: "tiletune: <msg>" and a pointer to --help; returns 2. */
int cli_usage(const cli *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A failure: "tiletune: <msg>" on stderr; returns 1. */
int cli_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Sends one request and reads its reply. 0 with an OK reply in *r;
 * otherwise the reason is printed (unreachable daemon, time-out, ERR
 * reply) and CLI_FAIL returned, *r empty. */
int cli_request(cli *c, const char *line, tt__reply *r);

/* Replaces control characters in what a daemon sent (an error text, a
 * reply's message and body; r NULL: only err) before it reaches a
 * terminal. Every reply the CLI reads goes through here. */
void cli_reply_clean(char *err, tt__reply *r);

/* As cli_request, but an ERR reply is returned too (0, r->status < 0,
 * r->code the wire code): for a command to which some ERR means
 * something else than a failure. */
int cli_request_raw(cli *c, const char *line, tt__reply *r);

/* An integer option within [min, max]; usage error (2) if malformed. */
int cli_int_opt(const cli *c, const char *name, int64_t min, int64_t max, int64_t *out);

/* Writes `data` to `path` atomically: a temporary file in the same
 * directory, fsync, rename over `path`, fsync of the directory; readers
 * (and a crash) see the old file or the whole new one. 0 or CLI_FAIL with
 * the reason printed. */
int cli_write_atomic(const char *path, const char *data, size_t len);

/* JSON: a string value as a number when it is one, else a string. */
json_t *cli_json_value(const char *s);
/* The fields of a message as an object, in order. */
json_t *cli_json_fields(const tt__msg *m);
/* Prints and frees `j`; returns 0 or CLI_FAIL. */
int cli_json_print(json_t *j);

/* Prints cells (row-major, nrows x ncols, NULL prints as "") with columns
 * padded to their widest cell; columns set in the `right` bitmask are
 * right-aligned. At most 32 columns. */
void cli_table(const char *const *cells, int nrows, int ncols, unsigned right);
/* "key value" lines, keys padded to one width. */
void cli_kv(const char *const *keys, const char *const *values, int n);

#endif
