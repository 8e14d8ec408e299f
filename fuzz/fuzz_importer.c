/*
 * libFuzzer target of the importer: the bytes are a table file, fed line
 * by line to the reader that `tiletune import` and the daemon's IMPORT use
 * (src/tuner/fleet_record.c). Besides crashes and sanitizer findings it
 * checks two properties on every record the reader accepts:
 *   - it writes back as one line within the protocol's limit, and
 *   - that line parses to the same record (same rank under every merge
 *     policy, same text when written again): import, export and the wire
 *     agree on what a record is.
 * Run: fuzz/run.sh [SECONDS]; corpus: fuzz/corpus/importer/.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tuner/fleet/merge.h"
#include "tuner/fleet/record.h"

/* A fixed "now", so that a finding replays the same way later. */
#define NOW 1800000000LL

static void check_record(const tt_fleet_rec *a) {
    static char line[TT_FLEET_LINE_MAX + 1], again[TT_FLEET_LINE_MAX + 1];
    char err[512];
    tt_fleet_rec b;
    int n = tt_fleet_rec_format(a, line, sizeof line);
    if (n <= 0) {
        fprintf(stderr, "an accepted record does not write back (%d)\n", n);
        abort();
    }
    if (tt_fleet_rec_parse(line, (size_t)n, NULL, NOW, &b, err, sizeof err) != 0) {
        fprintf(stderr, "a written record does not parse: %s\n%s\n", err, line);
        abort();
    }
    for (int p = TT_POLICY_FASTER; p <= TT_POLICY_FILL; p++)
        if (tt_fleet_better(&a->rec, &b.rec, (tt_fleet_policy)p) != 0) {
            fprintf(stderr, "a record changed in a round trip:\n%s\n", line);
            abort();
        }
    if (tt_fleet_rec_format(&b, again, sizeof again) != n || memcmp(line, again, (size_t)n) != 0) {
        fprintf(stderr, "a record writes differently after a round trip:\n%s\n%s\n", line, again);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    tt_fleet_reader r;
    tt_fleet_rec rec;
    char err[512];
    tt_fleet_reader_init(&r, NULL, NOW);
    const char *p = (const char *)data, *end = p + size;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
        int what = tt_fleet_reader_line(&r, p, len, &rec, err, sizeof err);
        if (what < 0) return 0;
        if (what == TT_FLEET_LINE_RECORD) check_record(&rec);
        p += len + (nl ? 1 : 0);
    }
    tt_fleet_reader_finish(&r, err, sizeof err);
    return 0;
}
