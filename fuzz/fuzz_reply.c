/*
 * libFuzzer target of the client's reply parser: the bytes are what a
 * daemon (or whatever listens on the socket) sends back, cut into lines
 * and read by the parsers libtiletune and the CLI use (tt__reply_parse,
 * the ERR split, tt__lookup_reply_parse, the CLI's tt__sanitize_text).
 * Besides crashes and sanitizer findings it checks that a LOOKUP answer
 * the client accepts is one the library may hand out: a config that
 * writes and parses back the same, seqlens in range, tflops a non-negative number, and
 * that sanitised text has no control character left.
 * Run: fuzz/run.sh SECONDS reply; corpus: fuzz/corpus/reply/.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/conn.h"
#include "common/key.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *copy = malloc(size + 1);
    if (!copy) return 0;
    memcpy(copy, data, size);
    copy[size] = '\0';
    for (char *line = copy, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        char *dup = strdup(line);
        if (!dup) break;
        tt__reply r;
        if (tt__reply_parse(dup, &r) == 0 && r.status == 0) {
            tt_lookup_result res;
            if (tt__lookup_reply_parse(&r.msg, &res) == 0) {
                char text[TT_CONFIG_TEXT_MAX];
                tt_config again;
                if (tt_config_format(&res.config, text, sizeof text) < 0 ||
                    tt_config_parse(text, &again) < 0 || !tt_config_equal(&res.config, &again) ||
                    res.seqlen_q < 1 || res.seqlen_q > TT_SEQLEN_MAX || res.seqlen_k < 1 ||
                    res.seqlen_k > TT_SEQLEN_MAX || !(res.tflops >= 0) || (int)res.match < 0 ||
                    (int)res.match > 2) {
                    fprintf(stderr, "an implausible LOOKUP reply was accepted: %s\n", line);
                    abort();
                }
            }
        }
        free(dup);
        tt__sanitize_text(line);
        for (unsigned char *p = (unsigned char *)line; *p; p++)
            if (*p < 0x20 || *p == 0x7f || (p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f)) {
                fprintf(stderr, "a control character survived sanitising\n");
                abort();
            }
    }
    free(copy);
    return 0;
}
