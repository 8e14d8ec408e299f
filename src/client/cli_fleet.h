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

/* clang-format off */
#define CLI_FLEET_COMMANDS                                                                         \
    {"export", "", "Write the tuning table (winners, with provenance) to FILE or stdout",              \
     "JSON Lines (jsonl, the default; what import reads), CSV for spreadsheets, or a\n"               \
     "consistent SQLite snapshot of the whole database (needs -o). The file is\n"                    \
     "written atomically: readers see the old file or the whole new one.",                            \
     cli_export_opts, 0, 0, cli_cmd_export},                                                            \
    {"import", "FILE...", "Merge tuning tables into the daemon's database (admin)",                   \
     "Every file is read and checked before any is sent; bad records are\n"                          \
     "reported with their number and skipped (--strict: one bad record in any\n"                     \
     "file imports nothing from any). One transaction a file. Policies: faster\n"                     \
     "(the better speed per FLOP; near-ties by config text), newer, fill (only\n"                     \
     "keys with no winner). Importing a file twice changes nothing.",                                   \
     cli_import_opts, 1, 4096, cli_cmd_import},                                                            \
    {"diff", "A B", "Compare two tuning tables: files, or @live for the daemon's",                     \
     "Per key: whether the config differs (both shown) and how TFLOP/s changed\n"                   \
     "(B against A), then a summary line. Keys match across kernel revisions\n"                      \
     "unless --by-rev. Exit status 0: same, 1: they differ (as diff(1)).",                             \
     cli_diff_opts, 2, 2, cli_cmd_diff}
/* clang-format on */

#endif
