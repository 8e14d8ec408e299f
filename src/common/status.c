/* Status codes: tt__fail, and the names of the public enums (tt_strerror,
 * tt_match_name). */
#include <stdarg.h>
#include <stdio.h>

#include "common/fail.h"
#include "tiletune.h"

int tt__fail(int code, char *err, size_t errlen, const char *fmt, ...) {
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}

const char *tt_strerror(int code) {
    switch (code) {
    case TT_OK: return "success";
    case TT_FALLBACK: return "daemon not reachable: built-in default config";
    case TT_ERR_INVAL: return "invalid argument";
    case TT_ERR_NOMEM: return "out of memory";
    case TT_ERR_IO: return "input/output error";
    case TT_ERR_PROTO: return "protocol error";
    case TT_ERR_TIMEOUT: return "timed out";
    case TT_ERR_NODAEMON: return "daemon not reachable";
    case TT_ERR_UNSUPPORTED: return "not supported";
    case TT_ERR_NOGPU: return "no usable GPU or CUDA driver";
    case TT_ERR_CUDA: return "CUDA driver error";
    case TT_ERR_COMPILE: return "kernel compilation failed";
    case TT_ERR_PERM: return "permission denied";
    case TT_ERR_BUSY: return "daemon busy";
    case TT_ERR_NOTFOUND: return "not found";
    case TT_ERR_DB: return "tuning database error";
    case TT_ERR_RANGE: return "value out of range";
    case TT_ERR_CORRUPT: return "corrupt data";
    case TT_ERR_VERSION: return "made by a newer version";
    case TT_ERR_REMOTE: return "daemon reported an error";
    }
    return "unknown error";
}

const char *tt_match_name(tt_match m) {
    switch (m) {
    case TT_MATCH_EXACT: return "exact";
    case TT_MATCH_NEAREST: return "nearest";
    case TT_MATCH_DEFAULT: return "default";
    }
    return "unknown";
}
