#include "common/config.h"

#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const tt__knob knobs[] = {
#define TT_KNOB(name, macro, min, max, names) {#name, #macro, min, max, names, offsetof(tt_config, name)},
#include "knobs.def"
#undef TT_KNOB
};

/* Every knob is an int32_t field of tt_config and the list fits the struct:
 * a knob added to knobs.def without its field fails to compile here. */
#define TT_KNOB(name, macro, min, max, names)                                             \
    _Static_assert(sizeof(((tt_config *)0)->name) == sizeof(int32_t), #name " is int32"); \
    _Static_assert(offsetof(tt_config, name) < offsetof(tt_config, reserved), #name " lies before reserved");
#include "knobs.def"
#undef TT_KNOB
_Static_assert(sizeof(knobs) / sizeof(knobs[0]) * sizeof(int32_t) == offsetof(tt_config, reserved),
               "tt_config has a field that knobs.def does not list");

int tt__knob_count(void) { return (int)(sizeof(knobs) / sizeof(knobs[0])); }

/* The knobs of the first release: every text names them. A knob added
 * later is written only when it is not 0 (its neutral value) and read as 0
 * when absent, so the texts of existing configs (the wire, the database,
 * exported tables) stay as they were. */
#define KNOBS_REQUIRED 7

static int knob_optional(const tt__knob *k) { return k - knobs >= KNOBS_REQUIRED; }

const tt__knob *tt__knob_at(int i) {
    if (i < 0 || i >= tt__knob_count()) return NULL;
    return &knobs[i];
}

const tt__knob *tt__knob_find(const char *name) {
    for (int i = 0; i < tt__knob_count(); i++)
        if (strcmp(knobs[i].name, name) == 0) return &knobs[i];
    return NULL;
}

int32_t tt__knob_get(const tt__knob *k, const tt_config *cfg) {
    int32_t v;
    memcpy(&v, (const char *)cfg + k->offset, sizeof v);
    return v;
}

void tt__knob_set(const tt__knob *k, tt_config *cfg, int32_t v) {
    memcpy((char *)cfg + k->offset, &v, sizeof v);
}

/* The i-th symbolic name of a knob, as a pointer into `names` and a length. */
static int symbolic_name(const tt__knob *k, int32_t v, const char **s, size_t *n) {
    if (!k->names || v < k->min || v > k->max) return -1;
    const char *p = k->names;
    for (int32_t i = k->min; i < v; i++) {
        p = strchr(p, '|');
        if (!p) return -1;
        p++;
    }
    const char *end = strchr(p, '|');
    *s = p;
    *n = end ? (size_t)(end - p) : strlen(p);
    return 0;
}

int tt__knob_parse_value(const tt__knob *k, const char *text, int32_t *out) {
    if (!text || !*text) return TT_ERR_INVAL;
    if (k->names) {
        for (int32_t v = k->min; v <= k->max; v++) {
            const char *s;
            size_t n;
            if (symbolic_name(k, v, &s, &n) == 0 && strlen(text) == n && memcmp(text, s, n) == 0) {
                *out = v;
                return 0;
            }
        }
    }
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (*end != '\0' || end == text || text[0] == '+' || text[0] == ' ') return TT_ERR_INVAL;
    if (errno == ERANGE || v < k->min || v > k->max) return TT_ERR_RANGE;
    *out = (int32_t)v;
    return 0;
}

int tt__config_check_ranges(const tt_config *cfg, char *err, size_t errlen) {
    for (int i = 0; i < tt__knob_count(); i++) {
        int32_t v = tt__knob_get(&knobs[i], cfg);
        if (v < knobs[i].min || v > knobs[i].max) {
            if (err && errlen)
                snprintf(err, errlen, "%s=%d is out of range %d..%d", knobs[i].name, (int)v, knobs[i].min,
                         knobs[i].max);
            return TT_ERR_RANGE;
        }
    }
    return 0;
}

/* Appends without snprintf: the daemon formats a config into every LOOKUP
 * reply, and seven snprintf calls were most of that reply's user time. */
static int put(char *buf, size_t len, size_t *used, const char *s, size_t n) {
    if (*used + n >= len) return -1;
    memcpy(buf + *used, s, n);
    *used += n;
    return 0;
}

int tt_config_format(const tt_config *cfg, char *buf, size_t len) {
    if (!cfg || !buf) return TT_ERR_INVAL;
    if (tt__config_check_ranges(cfg, NULL, 0) < 0) return TT_ERR_RANGE;
    /* Built here and copied out whole: a buffer too short for the text is
     * left as it was (tiletune.h: out-parameters only on success), not
     * filled with a prefix and no NUL. */
    char text[TT_CONFIG_TEXT_MAX];
    size_t used = 0, cap = len < sizeof text ? len : sizeof text;
    for (int i = 0; i < tt__knob_count(); i++) {
        const tt__knob *k = &knobs[i];
        int32_t v = tt__knob_get(k, cfg);
        const char *s;
        size_t n;
        char num[16];
        if (knob_optional(k) && v == 0) continue;
        if (symbolic_name(k, v, &s, &n) != 0) {
            char *p = num + sizeof num;
            uint32_t u = v < 0 ? (uint32_t)(-(int64_t)v) : (uint32_t)v;
            do {
                *--p = (char)('0' + u % 10);
            } while ((u /= 10));
            if (v < 0) *--p = '-';
            s = p;
            n = (size_t)(num + sizeof num - p);
        }
        if ((used && put(text, cap, &used, ",", 1) < 0) ||
            put(text, cap, &used, k->name, strlen(k->name)) < 0 || put(text, cap, &used, "=", 1) < 0 ||
            put(text, cap, &used, s, n) < 0)
            return TT_ERR_RANGE;
    }
    memcpy(buf, text, used);
    buf[used] = '\0';
    return (int)used;
}

int tt_config_parse(const char *text, tt_config *out) {
    if (!text || !out) return TT_ERR_INVAL;
    size_t tlen = strlen(text);
    if (tlen == 0 || tlen >= TT_CONFIG_TEXT_MAX * 2) return TT_ERR_INVAL;
    tt_config cfg;
    memset(&cfg, 0, sizeof cfg);
    unsigned seen = 0;
    char item[TT_CONFIG_TEXT_MAX * 2];
    const char *p = text;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        memcpy(item, p, n);
        item[n] = '\0';
        char *eq = strchr(item, '=');
        if (!eq) return TT_ERR_INVAL;
        *eq = '\0';
        const tt__knob *k = tt__knob_find(item);
        if (!k) return TT_ERR_INVAL;
        unsigned bit = 1u << (k - knobs);
        if (seen & bit) return TT_ERR_INVAL;
        seen |= bit;
        int32_t v;
        int rc = tt__knob_parse_value(k, eq + 1, &v);
        if (rc < 0) return rc;
        tt__knob_set(k, &cfg, v);
        if (!comma) break;
        p = comma + 1;
    }
    if ((seen & ((1u << KNOBS_REQUIRED) - 1)) != (1u << KNOBS_REQUIRED) - 1) return TT_ERR_INVAL;
    *out = cfg;
    return 0;
}

int tt_config_equal(const tt_config *a, const tt_config *b) {
    if (!a || !b) return 0;
    for (int i = 0; i < tt__knob_count(); i++)
        if (tt__knob_get(&knobs[i], a) != tt__knob_get(&knobs[i], b)) return 0;
    return 1;
}
