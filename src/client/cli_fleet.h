/*
 * The fleet commands of `tiletune` (docs/fleet.md): export, import and
 * diff of tuning tables. CLI_FLEET_COMMANDS is spliced into the command
 * table of cli_cmds.c.
 */
#ifndef TT_CLIENT_CLI_FLEET_H
#define TT_CLIENT_CLI_FLEET_H

#include "client/cli.h"

extern const cli_opt cli_export_opts[], cli_import_opts[], cli_diff_opts[];
int cli_cmd_export(cli *c);
int cli_cmd_import(cli *c);
int cli_cmd_diff(cli *c);

#define CLI_FLEET_COMMANDS                                                                         \
    {"export", "[-o FILE]", "Write the tuning table (winners, with provenance) to FILE or stdout",    \
     "JSON Lines (default; what import reads), CSV for spreadsheets, or a\n"                          \
     "consistent SQLite snapshot of the whole database (needs -o). The file is\n"                    \
     "written atomically: readers see the old file or the whole new one.",                            \
     cli_export_opts, 0, 2, cli_cmd_export},                                                            \
    {"import", "FILE", "Merge a tuning table into the daemon's database (admin)",                      \
     "Every record is checked; bad ones are reported with their number and\n"                         \
     "skipped (--strict: nothing is imported). One transaction: all or nothing.\n"                    \
     "Policies: faster (the better time; near-ties by config text), newer,\n"                          \
     "fill (only keys with no winner). Importing a file twice changes nothing.",                      \
     cli_import_opts, 1, 1, cli_cmd_import},                                                            \
    {"diff", "A B", "Compare two tuning tables: files, or @live for the daemon's",                     \
     "Per key: whether the config differs and how TFLOP/s changed (B against A),\n"                   \
     "then a summary line. Exit status 0 whether or not they differ.",                                \
     cli_diff_opts, 2, 2, cli_cmd_diff}

#endif
