/*
 * The tuning-table file format (docs/fleet.md): JSON Lines, one JSON
 * object per line, so a table of any size is read and checked in bounded
 * memory, line by line.
 *
 *   line 1      header  {"format":"tiletune-table","version":1,...}
 *   lines 2..   records {"kind":"best","key":{...},"config":"...",...}
 *   last line   end     {"end":"tiletune-table","records":N,"fnv1a64":"..."}
 *
 * The end line makes truncation visible (a cut file has no end line, or a
 * count that does not match) and its checksum (FNV-1a 64 of every record
 * line and its '\n') catches a flipped byte that still parses. Every line
 * is at most TT_FLEET_LINE_MAX bytes, so a record travels to the daemon as
 * one line of the protocol.
 *
 * The reader is a state machine fed one line at a time, without I/O: the
 * CLI feeds it from a file, the daemon from a socket, the fuzzer from
 * bytes. Records are validated one by one: a bad record is reported with
 * its number and reason and the others go on; a bad header, a format
 * version from the future, a truncated or corrupt file fail the whole file.
 * Nothing here prints or touches the database.
 */
#ifndef TT_TUNER_FLEET_RECORD_H
#define TT_TUNER_FLEET_RECORD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "tuner/fleet/shard.h"
#include "tuner/store/record.h"

#define TT_FLEET_FORMAT "tiletune-table"
#define TT_FLEET_VERSION 1
/* Bytes of one line, '\n' excluded: the protocol's request line limit. */
#define TT_FLEET_LINE_MAX 4096
/* Records one import may carry: bounds the daemon's memory (about 1 KiB
 * a record) for one request. A fleet table is a few thousand keys per GPU
 * model. */
#define TT_FLEET_RECORDS_MAX 65536

typedef enum tt_fleet_kind {
    TT_FLEET_BEST = 0,        /* the winner of its key: what import merges */
    TT_FLEET_MEASUREMENT = 1, /* one timing (export --all-measurements): history */
} tt_fleet_kind;

/* One record with its provenance. */
struct tt_fleet_rec {
    tt_fleet_kind kind;
    tt_record rec;                 /* key.gpu/key.rev set; status ok for a winner */
    tt_gpu_info gpu;               /* the model of rec.key.gpu: fingerprint == key.gpu */
    char shard[TT_SHARD_TEXT_MAX]; /* "i/n" of the export it came from, or "" */
};

/* The checks an importer adds to the format's (tt_fleet_plausible_check
 * in the CLI, the daemon's also checks the config on the arch of the GPU
 * the record names). Called once the record is otherwise valid, with its
 * config as written; 0 or a negative status with the reason. NULL: none
 * (export and diff read what a database holds, as it is). */
typedef struct tt_fleet_rec tt_fleet_rec;
typedef int (*tt_fleet_config_check)(const tt_fleet_rec *f, const char *config_text, char *err,
                                     size_t errlen);

typedef struct tt_fleet_header {
    int version;
    int64_t exported_at;           /* unix seconds */
    char node[TT_NAME_MAX];        /* the node that exported */
    char tiletune[32];             /* its tiletune version */
    char gpu[TT_ID_MAX];           /* "" or the --gpu filter of the export */
    char shard[TT_SHARD_TEXT_MAX]; /* "" or the --shard of the export */
    int all;                       /* 1: measurements included */
} tt_fleet_header;

/* ---- single lines ---------------------------------------------------------- */

/* A record as one line of compact JSON (no '\n'). Returns the length, or
 * TT_ERR_RANGE if it does not fit `len` or TT_FLEET_LINE_MAX. */
int tt_fleet_rec_format(const tt_fleet_rec *r, char *buf, size_t len);
/*
 * Parses and validates one record line. `now` (unix seconds) bounds
 * measured_at (a record from the future would win every "newer" merge).
 * 0, or a negative status with the reason in err: TT_ERR_CORRUPT (not
 * JSON, not an object), TT_ERR_INVAL (unknown or missing field, wrong
 * type, inconsistent values), TT_ERR_RANGE, TT_ERR_UNSUPPORTED (dtype,
 * head_dim).
 */
int tt_fleet_rec_parse(const char *line, size_t len, tt_fleet_config_check check, int64_t now,
                       tt_fleet_rec *out, char *err, size_t errlen);

int tt_fleet_header_format(const tt_fleet_header *h, char *buf, size_t len);
int tt_fleet_end_format(int64_t records, uint64_t sum, char *buf, size_t len);

/* The checksum of the end line: FNV-1a 64 over every record line and its
 * '\n', in file order. Start from TT_HASH_INIT. */
uint64_t tt_fleet_sum_line(uint64_t sum, const char *line, size_t len);

/* ---- the reader -------------------------------------------------------------- */

enum {
    TT_FLEET_LINE_HEADER = 1, /* the header was read (r->hdr) */
    TT_FLEET_LINE_RECORD = 2, /* *out holds a valid record */
    TT_FLEET_LINE_BAD = 3,    /* a bad record: err says why; go on */
    TT_FLEET_LINE_END = 4,    /* the end line matched: the file is whole */
};

typedef struct tt_fleet_reader {
    tt_fleet_config_check check;
    int64_t now;
    int state;       /* 0: header next, 1: records, 2: after the end line */
    int64_t line_no; /* lines fed so far */
    int64_t records; /* record lines seen, good or bad */
    uint64_t sum;
    tt_fleet_header hdr;
} tt_fleet_reader;

void tt_fleet_reader_init(tt_fleet_reader *r, tt_fleet_config_check check, int64_t now);
/*
 * Feeds one line (without '\n'; a trailing '\r' is dropped). Returns one of
 * TT_FLEET_LINE_* (for RECORD and BAD, the record's number is r->records),
 * or a negative status when the whole file is unusable: TT_ERR_CORRUPT
 * (not a tiletune table, truncated, checksum, data after the end),
 * TT_ERR_VERSION (a format version from the future), TT_ERR_RANGE (too
 * many records, a line over TT_FLEET_LINE_MAX). err says why.
 */
int tt_fleet_reader_line(tt_fleet_reader *r, const char *line, size_t len, tt_fleet_rec *out, char *err,
                         size_t errlen);
/* At the end of the input: 0 if the end line was read, else
 * TT_ERR_CORRUPT ("empty", "truncated"). */
int tt_fleet_reader_finish(const tt_fleet_reader *r, char *err, size_t errlen);

/*
 * Reads a table file through the reader without holding more than a line:
 * calls `on_line` for every line result (header, record, bad record; `rec`
 * is NULL but for records) and stops at the first negative status or at
 * a non-zero return of on_line. A line longer than TT_FLEET_LINE_MAX fails
 * the file (a file of junk is refused at its first long line).
 */
typedef int (*tt_fleet_line_cb)(void *ud, int what, int64_t record_no, const tt_fleet_rec *rec,
                                const char *reason);
int tt_fleet_read_stream(FILE *f, tt_fleet_reader *r, tt_fleet_line_cb on_line, void *ud, char *err,
                         size_t errlen);

/* ---- CSV ---------------------------------------------------------------------- */

/* The CSV header line and one record as a CSV row (RFC 4180 quoting),
 * both with their "\n". Returns the length or TT_ERR_RANGE. CSV is for
 * spreadsheets: import reads only JSON. */
int tt_fleet_csv_header(char *buf, size_t len);
int tt_fleet_csv_row(const tt_fleet_rec *r, char *buf, size_t len);

#endif
