/* Internal view of the knob list (knobs.def): lets the store, the wire
 * format and the kernel compiler walk the knobs without naming them. */
#ifndef TT_COMMON_CONFIG_H
#define TT_COMMON_CONFIG_H

#include "tiletune.h"

typedef struct tt__knob {
    const char *name;  /* field, text key and database column */
    const char *macro; /* -D macro of the kernel source */
    int min, max;
    const char *names; /* NULL, or "a|b|c" for values min.. */
    size_t offset;     /* of the int32_t field in tt_config */
} tt__knob;

int tt__knob_count(void);
const tt__knob *tt__knob_at(int i);
const tt__knob *tt__knob_find(const char *name);
int32_t tt__knob_get(const tt__knob *k, const tt_config *cfg);
void tt__knob_set(const tt__knob *k, tt_config *cfg, int32_t v);
/* Parses a knob's value: an integer or one of its symbolic names.
 * Returns 0 or TT_ERR_INVAL / TT_ERR_RANGE. */
int tt__knob_parse_value(const tt__knob *k, const char *text, int32_t *out);

/* 0 if every knob of `cfg` is within its range, else TT_ERR_RANGE and a
 * message naming the knob in err (may be NULL). */
int tt__config_check_ranges(const tt_config *cfg, char *err, size_t errlen);

#endif
