/* The one way library code reports an error: a message into the caller's
 * buffer (never printed), and the status code back. */
#ifndef TT_COMMON_FAIL_H
#define TT_COMMON_FAIL_H

#include <stddef.h>

/* snprintf into err when err is non-NULL and errlen > 0; returns `code`. */
int tt__fail(int code, char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#endif
