/*
 * The fleet verbs of the daemon (docs/protocol.md, "Fleet tables"):
 *
 *   IMPORT policy=faster|newer|fill dry_run=0|1 strict=0|1 lines=N  (admin)
 *     followed by N body lines, one table record each (compact JSON,
 *     src/tuner/fleet/record.h). The daemon validates every record again,
 *     merges all of them in one store transaction and updates the
 *     in-memory index for the keys whose winner changed.
 *   EXPORT [gpu=HEX] [rev=HEX] [all=1] [format=json|sqlite]
 *     the winners (and with all=1 every measurement) as record lines, or a
 *     consistent SQLite snapshot in base64 lines.
 *
 * While an IMPORT body is arriving, the connection's lines go to
 * tt_handle_import_line instead of being parsed as requests; other
 * connections are served meanwhile. The merge runs when the last body line
 * has arrived.
 */
#ifndef TT_TUNER_HANDLERS_FLEET_H
#define TT_TUNER_HANDLERS_FLEET_H

#include <stddef.h>

#include "tuner/daemon/buf.h"
#include "tuner/daemon/daemon.h"
#include "common/proto.h"
#include "tuner/fleet/record.h"

/* IMPORT's check of a record: plausible (tt_fleet_plausible), and its
 * config legal on the GPU it names: the kernels' rule (tt__variant_check)
 * at that compute capability's limits, plus the record's registers and
 * shared memory. */
int tt_fleet_daemon_config_rule(const tt_fleet_rec *f, const char *config_text, char *err, size_t errlen);

/* The state of an IMPORT whose body is arriving; owned by its connection. */
typedef struct tt_fleet_body tt_fleet_body;
void tt_fleet_body_free(tt_fleet_body *b); /* NULL is a no-op */

/* IMPORT's request line. Returns TT_HANDLE_OK or TT_HANDLE_CLOSE (no
 * usable lines=N: the body cannot be framed). */
int tt_handle_import(tt_daemon *d, tt_conn *c, const tt__msg *m, tt_buf *out);
/* One body line of the IMPORT in progress on `c`. */
int tt_handle_import_line(tt_daemon *d, tt_conn *c, const char *line, size_t len, tt_buf *out);
void tt_handle_export(tt_daemon *d, const tt__msg *m, tt_buf *out);

/* What identifies the table a node serves, for STATUS and STATS: the
 * checksum of every winner (tt_fleet_table_sum_add, the same for the same
 * table on any node and in `tiletune export`'s report), how many of this
 * GPU's keys have only a winner of another kernel revision, and when an
 * IMPORT last changed the database (0: not since the daemon started). */
typedef struct tt_fleet_ident {
    char checksum[17];
    int64_t stale;
    int64_t last_import_at;
} tt_fleet_ident;
void tt_fleet_table_ident(tt_daemon *d, tt_fleet_ident *out);

#endif
